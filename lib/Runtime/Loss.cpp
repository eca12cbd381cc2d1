//===- lib/Runtime/Loss.cpp - A loss formula in y_pred and y_true ---------===//
#include "hsnn/Layer.h"

#include "LayerState.h"
#include "Warn.h"

#include "hsnn/Backend.h"
#include "hsnn/Runtime.h"

#include <algorithm>
#include <fmt/format.h>

namespace hsnn {

using detail::KernelKind;
using detail::LayerState;

namespace {
constexpr const char *kWhat = "loss";
}

// Nothing thrown inside (allocation failure, a filesystem error) crosses the API.
Expected<Loss> Loss::compile(std::string_view text, const std::map<std::string, double> &constants,
                             const LossOptions &options) {
  try {
    return compileImpl(text, constants, options);
  } catch (const std::exception &e) {
    return Error(ErrorCode::Internal, fmt::format("compile failed: {}", e.what()));
  }
}

Expected<Loss> Loss::compileImpl(std::string_view text, const std::map<std::string, double> &constants,
                                 const LossOptions &options) {
  std::vector<std::string> warnings;
  detail::ModelOptions modelOptions{options.dtype, Layout::NodesMajor, options.bakeConstants, runtimeFlags().strict, {}};
  auto model = detail::lossModel(text, constants, modelOptions, warnings);
  for (const std::string &w : warnings)
    detail::warn(w);
  if (!model)
    return model.takeError();
  auto state = LayerState::create(std::move(*model), detail::EngineRequest::from(options), options.reduction);
  if (!state)
    return state.takeError();
  (*state)->source = std::make_shared<detail::ModelSource>(
      detail::ModelSource{{NodeSpec{std::string(text), constants}}, modelOptions});
  return Loss(std::move(*state));
}

Loss::Loss(std::unique_ptr<LayerState> state) : state_(std::move(state)) {}
Loss::Loss(const Loss &o) : state_(o.state_ ? std::make_unique<LayerState>(*o.state_) : nullptr) {}
Loss &Loss::operator=(const Loss &o) {
  if (this != &o)
    state_ = o.state_ ? std::make_unique<LayerState>(*o.state_) : nullptr;
  return *this;
}
Loss::Loss(Loss &&) noexcept = default;
Loss &Loss::operator=(Loss &&) noexcept = default;
Loss::~Loss() = default;

Reduction Loss::reduction() const {
  HSNN_STATE_OR(Reduction::Mean)
  return state_->reduction;
}
DType Loss::dtype() const {
  HSNN_STATE_OR(DType::F32)
  return state_->model().options.dtype;
}
Method Loss::method() const {
  HSNN_STATE_OR(Method::CpuInterp)
  return state_->compileInfo().method;
}
CompileInfo Loss::compileInfo() const {
  HSNN_STATE_OR(CompileInfo{})
  return state_->compileInfo();
}
Error Loss::waitForCompile() const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->waitForCompile();
}

Expected<double> Loss::forward(std::span<const float> yp, std::span<const float> yt) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLoss<float>(KernelKind::LossSum, yp, yt, {});
}
Expected<double> Loss::forward(std::span<const double> yp, std::span<const double> yt) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLoss<double>(KernelKind::LossSum, yp, yt, {});
}
Error Loss::forwardElements(std::span<const float> yp, std::span<const float> yt, std::span<float> out) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLoss<float>(KernelKind::LossElements, yp, yt, out).takeError();
}
Error Loss::forwardElements(std::span<const double> yp, std::span<const double> yt, std::span<double> out) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLoss<double>(KernelKind::LossElements, yp, yt, out).takeError();
}
Error Loss::gradient(std::span<const float> yp, std::span<const float> yt, std::span<float> grad) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLoss<float>(KernelKind::LossGradient, yp, yt, grad).takeError();
}
Error Loss::gradient(std::span<const double> yp, std::span<const double> yt, std::span<double> grad) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLoss<double>(KernelKind::LossGradient, yp, yt, grad).takeError();
}
Expected<double> Loss::fused(std::span<const float> yp, std::span<const float> yt, std::span<float> grad) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLoss<float>(KernelKind::LossFused, yp, yt, grad);
}
Expected<double> Loss::fused(std::span<const double> yp, std::span<const double> yt, std::span<double> grad) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLoss<double>(KernelKind::LossFused, yp, yt, grad);
}

Expected<double> Loss::forward(const DeviceBuffer &yp, const DeviceBuffer &yt) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLoss(KernelKind::LossSum, yp, yt, nullptr);
}
Error Loss::forwardElements(const DeviceBuffer &yp, const DeviceBuffer &yt, const DeviceBuffer &out) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLoss(KernelKind::LossElements, yp, yt, &out).takeError();
}
Error Loss::gradient(const DeviceBuffer &yp, const DeviceBuffer &yt, const DeviceBuffer &grad) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLoss(KernelKind::LossGradient, yp, yt, &grad).takeError();
}
Expected<double> Loss::fused(const DeviceBuffer &yp, const DeviceBuffer &yt, const DeviceBuffer &grad) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLoss(KernelKind::LossFused, yp, yt, &grad);
}

Error Loss::forward(const DeviceBuffer &yp, const DeviceBuffer &yt, const DeviceBuffer &value) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLossValue(KernelKind::LossSum, yp, yt, nullptr, value);
}
Error Loss::fused(const DeviceBuffer &yp, const DeviceBuffer &yt, const DeviceBuffer &grad,
                  const DeviceBuffer &value) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runLossValue(KernelKind::LossFused, yp, yt, &grad, value);
}

Error Loss::constantGradients(std::span<const float> yp, std::span<const float> yt, std::span<double> grads) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->constantGradients<float>(yp, yt, grads, 0);
}
Error Loss::constantGradients(std::span<const double> yp, std::span<const double> yt, std::span<double> grads) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->constantGradients<double>(yp, yt, grads, 0);
}

Error Loss::setGpuId(int id) {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->moveTo(id);
}

int Loss::gpuId() const {
  HSNN_STATE_OR(-1)
  return state_->current().engine->gpuId();
}

namespace {
Expected<size_t> constantIndex(const LayerState &s, std::string_view name) {
  const auto &names = s.model().constantNames(0);
  auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end())
    return Error(ErrorCode::InvalidArgument,
                 names.empty() ? fmt::format("the loss has no constants (asked for '{}')", name)
                               : fmt::format("the loss has no constant '{}'; it has: {}", name, fmt::join(names, ", ")));
  return size_t(it - names.begin());
}
} // namespace

Error Loss::setConstant(std::string_view name, double value) {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  auto i = constantIndex(*state_, name);
  if (!i)
    return i.takeError();
  return state_->setParam(*i, value, fmt::format("constant '{}'", name));
}

Expected<double> Loss::constant(std::string_view name) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  auto i = constantIndex(*state_, name);
  if (!i)
    return i.takeError();
  return state_->current().params->values[*i];
}

std::vector<std::string> Loss::constantNames() const {
  HSNN_STATE_OR({})
  return state_->model().constantNames(0);
}
std::string Loss::formula() const {
  HSNN_STATE_OR({})
  return detail::CompiledModel::formulaString(state_->model().groups[0]);
}
std::string Loss::derivative() const {
  HSNN_STATE_OR({})
  return detail::CompiledModel::derivativeString(state_->model().groups[0]);
}

Expected<Loss> Loss::derivativeLoss(unsigned order) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  auto state = state_->derivative(order);
  if (!state)
    return state.takeError();
  return Loss(std::move(*state));
}

Expected<Loss> Loss::constantDerivativeLoss(std::string_view name) const {
  return derivedBy("c:" + std::string(name));
}

Expected<Loss> Loss::targetDerivativeLoss() const { return derivedBy("y"); }

Expected<Loss> Loss::derivedBy(const std::string &step) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  auto state = state_->derived(std::vector<std::string>{step});
  if (!state)
    return state.takeError();
  return Loss(std::move(*state));
}

} // namespace hsnn
