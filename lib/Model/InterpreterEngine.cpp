//===- lib/Model/InterpreterEngine.cpp - The model run by the block interpreter ===//
#include "Engine.h"

#include "Program/Interpreter.h"

#include <fmt/format.h>

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
  explicit InterpreterEngine(std::shared_ptr<const CompiledModel> m) : Engine(std::move(m)) {
    for (KernelKind k : model().tapeKinds())
      for (size_t n = 0; n < model().numNodes(); ++n)
        nodeProgram_[size_t(k)].push_back(&model().group(n).programs[size_t(k)]);
  }

  Method method() const override { return Method::CpuInterp; }

  Error runActivation(KernelKind kind, const ActivationArgs &a, const ParamSet &params) const override {
    ActivationPlan plan{nodeProgram_[size_t(kind)], params.values.data(), model().offsets.data(), model().options.layout};
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
    const Program &p = *nodeProgram_[size_t(kind)][0];
    if (kind == KernelKind::LossConstantGradient) {
      auto *grads = static_cast<double *>(a.out);
      if (model().options.dtype == DType::F32)
        interpretLossConstantGradient<float>(p, params.values.data(), static_cast<const float *>(a.yPred),
                                             static_cast<const float *>(a.yTrue), a.scale, a.n, grads);
      else
        interpretLossConstantGradient<double>(p, params.values.data(), static_cast<const double *>(a.yPred),
                                              static_cast<const double *>(a.yTrue), a.scale, a.n, grads);
      return 0.0;
    }
    if (model().options.dtype == DType::F32)
      return interpretLoss<float>(p, kind, params.values.data(), static_cast<const float *>(a.yPred),
                                  static_cast<const float *>(a.yTrue), static_cast<float *>(a.out), float(a.scale), a.n);
    return interpretLoss<double>(p, kind, params.values.data(), static_cast<const double *>(a.yPred),
                                 static_cast<const double *>(a.yTrue), static_cast<double *>(a.out), a.scale, a.n);
  }

private:
  std::vector<const Program *> nodeProgram_[kNumKernelKinds];
};

} // namespace

std::shared_ptr<const Engine> makeInterpreterEngine(std::shared_ptr<const CompiledModel> model) {
  return std::make_shared<InterpreterEngine>(std::move(model));
}

} // namespace hsnn::detail
