//===- lib/Runtime/ActivationLayer.cpp - Per-node formulas as one layer ---===//
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
constexpr const char *kWhat = "layer";

Expected<size_t> constantIndex(const LayerState &s, size_t node, std::string_view name) {
  const detail::CompiledModel &m = s.model();
  if (node >= m.numNodes())
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("node {} is out of range; the layer has {} nodes", node, m.numNodes()));
  const auto &names = m.constantNames(node);
  auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end())
    return Error(ErrorCode::InvalidArgument,
                 names.empty() ? fmt::format("node {} has no constants (asked for '{}')", node, name)
                               : fmt::format("node {} has no constant '{}'; it has: {}", node, name, fmt::join(names, ", ")));
  return size_t(m.offsets[node] + uint64_t(it - names.begin()));
}
} // namespace

// Nothing thrown inside (allocation failure, a filesystem error) crosses the API.
Expected<ActivationLayer> ActivationLayer::compile(const std::vector<NodeSpec> &nodes, const LayerOptions &options) {
  try {
    return compileImpl(nodes, options);
  } catch (const std::exception &e) {
    return Error(ErrorCode::Internal, fmt::format("compile failed: {}", e.what()));
  }
}

Expected<ActivationLayer> ActivationLayer::compileImpl(const std::vector<NodeSpec> &nodes, const LayerOptions &options) {
  std::vector<std::string> warnings;
  detail::ModelOptions modelOptions{options.dtype, options.layout, options.bakeConstants, runtimeFlags().strict, {}};
  auto model = detail::activationModel(nodes, modelOptions, warnings);
  for (const std::string &w : warnings)
    detail::warn(w);
  if (!model)
    return model.takeError();
  auto state = LayerState::create(std::move(*model), detail::EngineRequest::from(options), Reduction::Mean);
  if (!state)
    return state.takeError();
  (*state)->source = std::make_shared<detail::ModelSource>(detail::ModelSource{nodes, modelOptions});
  return ActivationLayer(std::move(*state));
}

Expected<ActivationLayer> ActivationLayer::derivativeLayer(unsigned order) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  auto state = state_->derivative(order);
  if (!state)
    return state.takeError();
  return ActivationLayer(std::move(*state));
}

Expected<ActivationLayer> ActivationLayer::constantTangentLayer() const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  if (state_->request.bakeConstants)
    return Error(ErrorCode::InvalidArgument,
                 "a constant tangent layer needs constants set at run time; this layer compiles them in (bakeConstants)");
  auto state = state_->derived(std::vector<std::string>{"t"});
  if (!state)
    return state.takeError();
  return ActivationLayer(std::move(*state));
}

ActivationLayer::ActivationLayer(std::unique_ptr<LayerState> state) : state_(std::move(state)) {}
ActivationLayer::ActivationLayer(const ActivationLayer &o)
    : state_(o.state_ ? std::make_unique<LayerState>(*o.state_) : nullptr) {}
ActivationLayer &ActivationLayer::operator=(const ActivationLayer &o) {
  if (this != &o)
    state_ = o.state_ ? std::make_unique<LayerState>(*o.state_) : nullptr;
  return *this;
}
ActivationLayer::ActivationLayer(ActivationLayer &&) noexcept = default;
ActivationLayer &ActivationLayer::operator=(ActivationLayer &&) noexcept = default;
ActivationLayer::~ActivationLayer() = default;

size_t ActivationLayer::numNodes() const {
  HSNN_STATE_OR(0)
  return state_->model().numNodes();
}
DType ActivationLayer::dtype() const {
  HSNN_STATE_OR(DType::F32)
  return state_->model().options.dtype;
}
Layout ActivationLayer::layout() const {
  HSNN_STATE_OR(Layout::NodesMajor)
  return state_->model().options.layout;
}
Method ActivationLayer::method() const {
  HSNN_STATE_OR(Method::CpuInterp)
  return state_->compileInfo().method;
}
size_t ActivationLayer::numDistinctFormulas() const {
  HSNN_STATE_OR(0)
  return state_->model().groups.size();
}
CompileInfo ActivationLayer::compileInfo() const {
  HSNN_STATE_OR(CompileInfo{})
  return state_->compileInfo();
}
Error ActivationLayer::waitForCompile() const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->waitForCompile();
}

template <class T> static std::span<const T> none() { return {}; }

Error ActivationLayer::forward(std::span<const float> z, std::span<float> a, size_t batch) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runActivation<float>(KernelKind::Forward, z, none<float>(), a, {}, batch);
}
Error ActivationLayer::forward(std::span<const double> z, std::span<double> a, size_t batch) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runActivation<double>(KernelKind::Forward, z, none<double>(), a, {}, batch);
}
Error ActivationLayer::backward(std::span<const float> z, std::span<const float> err, std::span<float> delta,
                                size_t batch) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runActivation<float>(KernelKind::Backward, z, err, delta, {}, batch);
}
Error ActivationLayer::backward(std::span<const double> z, std::span<const double> err, std::span<double> delta,
                                size_t batch) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runActivation<double>(KernelKind::Backward, z, err, delta, {}, batch);
}
Error ActivationLayer::fused(std::span<const float> z, std::span<float> a, std::span<float> dfdz, size_t batch) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runActivation<float>(KernelKind::Fused, z, none<float>(), a, dfdz, batch);
}
Error ActivationLayer::fused(std::span<const double> z, std::span<double> a, std::span<double> dfdz,
                             size_t batch) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runActivation<double>(KernelKind::Fused, z, none<double>(), a, dfdz, batch);
}

Error ActivationLayer::forward(const DeviceBuffer &z, const DeviceBuffer &a, size_t batch) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runActivation(KernelKind::Forward, z, nullptr, a, nullptr, batch);
}
Error ActivationLayer::backward(const DeviceBuffer &z, const DeviceBuffer &err, const DeviceBuffer &delta,
                                size_t batch) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runActivation(KernelKind::Backward, z, &err, delta, nullptr, batch);
}
Error ActivationLayer::fused(const DeviceBuffer &z, const DeviceBuffer &a, const DeviceBuffer &dfdz, size_t batch) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->runActivation(KernelKind::Fused, z, nullptr, a, &dfdz, batch);
}

Error ActivationLayer::constantGradients(std::span<const float> z, std::span<const float> err, std::span<double> grads,
                                         size_t batch) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->constantGradients<float>(z, err, grads, batch);
}
Error ActivationLayer::constantGradients(std::span<const double> z, std::span<const double> err,
                                         std::span<double> grads, size_t batch) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->constantGradients<double>(z, err, grads, batch);
}
Error ActivationLayer::setParams(std::span<const double> values) {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->setParams(values);
}

Error ActivationLayer::setGpuId(int id) {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  return state_->moveTo(id);
}

int ActivationLayer::gpuId() const {
  HSNN_STATE_OR(-1)
  return state_->current().engine->gpuId();
}

Error ActivationLayer::setConstant(size_t node, std::string_view name, double value) {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  auto index = constantIndex(*state_, node, name);
  if (!index)
    return index.takeError();
  return state_->setParam(*index, value, fmt::format("constant '{}' of node {}", name, node));
}

Expected<double> ActivationLayer::constant(size_t node, std::string_view name) const {
  HSNN_STATE_OR(detail::movedFrom(kWhat))
  auto index = constantIndex(*state_, node, name);
  if (!index)
    return index.takeError();
  return state_->current().params->values[*index];
}

std::vector<std::string> ActivationLayer::constantNames(size_t node) const {
  if (!state_ || node >= numNodes())
    return {};
  return state_->model().constantNames(node);
}

std::vector<double> ActivationLayer::params() const {
  HSNN_STATE_OR({})
  return state_->current().params->values;
}
std::span<const uint64_t> ActivationLayer::offsets() const {
  HSNN_STATE_OR({})
  return state_->model().offsets;
}

std::string ActivationLayer::formula(size_t node) const {
  if (node >= numNodes())
    return std::string();
  const detail::FormulaGroup &g = state_->model().group(node);
  return detail::CompiledModel::formulaString(g);
}
std::string ActivationLayer::derivative(size_t node) const {
  if (node >= numNodes())
    return std::string();
  const detail::FormulaGroup &g = state_->model().group(node);
  return detail::CompiledModel::derivativeString(g);
}

} // namespace hsnn
