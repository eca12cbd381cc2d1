//===- lib/Model/InterpreterEngine.cpp - The model run by the block interpreter ===//
#include "Engine.h"

#include "Program/Interpreter.h"

#include <deque>
#include <fmt/format.h>
#include <map>

namespace hsnn::detail {

Expected<std::shared_ptr<const ParamSet>> Engine::makeParams(std::vector<double> values) const {
  auto p = std::make_shared<ParamSet>();
  p->values = std::move(values);
  return std::shared_ptr<const ParamSet>(std::move(p));
}

Expected<std::shared_ptr<const Engine>> Engine::moveTo(int, CompileInfo *) const {
  return Error(ErrorCode::InvalidArgument, fmt::format("this code runs on the CPU ({})", to_string(method())));
}

namespace {

class InterpreterEngine final : public Engine {
public:
  // The op kernels installed now serve this engine for its life (so its
  // results never change bits between calls); a node's code is its group's.
  explicit InterpreterEngine(std::shared_ptr<const CompiledModel> m)
      : Engine(std::move(m)), kernels32_(installedOpKernels<float>()), kernels64_(installedOpKernels<double>()) {
    for (KernelKind k : model().tapeKinds()) {
      std::map<const Program *, const BlockCode *> made;
      for (size_t n = 0; n < model().numNodes(); ++n) {
        const Program *p = &model().group(n).programs[size_t(k)];
        auto [it, fresh] = made.emplace(p, nullptr);
        if (fresh)
          it->second = &codes_.emplace_back(BlockCode::from(*p));
        nodeCode_[size_t(k)].push_back(it->second);
      }
    }
  }

  Method method() const override { return Method::CpuInterp; }

  Error runActivation(KernelKind kind, const ActivationArgs &a, const ParamSet &params) const override {
    ActivationPlan plan{nodeCode_[size_t(kind)], params.values.data(), model().offsets.data(), model().options.layout,
                        kernels32_, kernels64_};
    if (kind == KernelKind::ConstantGradient) {
      if (model().options.dtype == DType::F32)
        interpretConstantGradient<float>(plan, static_cast<const float *>(a.z), static_cast<const float *>(a.err),
                                         static_cast<double *>(a.out0), a.batch);
      else
        interpretConstantGradient<double>(plan, static_cast<const double *>(a.z), static_cast<const double *>(a.err),
                                          static_cast<double *>(a.out0), a.batch);
      return Error::success();
    }
    if (model().options.dtype == DType::F32)
      interpretActivation<float>(plan, kind, static_cast<const float *>(a.z), static_cast<const float *>(a.err),
                                 static_cast<float *>(a.out0), static_cast<float *>(a.out1), a.batch);
    else
      interpretActivation<double>(plan, kind, static_cast<const double *>(a.z), static_cast<const double *>(a.err),
                                  static_cast<double *>(a.out0), static_cast<double *>(a.out1), a.batch);
    return Error::success();
  }

  Expected<double> runLoss(KernelKind kind, const LossArgs &a, const ParamSet &params) const override {
    ActivationPlan plan{{nodeCode_[size_t(kind)][0]}, params.values.data(), nullptr, Layout::NodesMajor, kernels32_,
                        kernels64_};
    if (kind == KernelKind::LossConstantGradient) {
      auto *grads = static_cast<double *>(a.out);
      if (model().options.dtype == DType::F32)
        interpretLossConstantGradient<float>(plan, static_cast<const float *>(a.yPred),
                                             static_cast<const float *>(a.yTrue), a.scale, a.n, grads);
      else
        interpretLossConstantGradient<double>(plan, static_cast<const double *>(a.yPred),
                                              static_cast<const double *>(a.yTrue), a.scale, a.n, grads);
      return 0.0;
    }
    if (model().options.dtype == DType::F32)
      return interpretLoss<float>(plan, kind, static_cast<const float *>(a.yPred), static_cast<const float *>(a.yTrue),
                                  static_cast<float *>(a.out), float(a.scale), a.n);
    return interpretLoss<double>(plan, kind, static_cast<const double *>(a.yPred), static_cast<const double *>(a.yTrue),
                                 static_cast<double *>(a.out), a.scale, a.n);
  }

private:
  const OpKernels<float> *kernels32_;
  const OpKernels<double> *kernels64_;
  std::deque<BlockCode> codes_; // deque: codes never move
  std::vector<const BlockCode *> nodeCode_[kNumKernelKinds];
};

} // namespace

std::shared_ptr<const Engine> makeInterpreterEngine(std::shared_ptr<const CompiledModel> model) {
  return std::make_shared<InterpreterEngine>(std::move(model));
}

} // namespace hsnn::detail
