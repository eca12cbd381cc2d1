//===- lib/Runtime/ActivationLayer.cpp - Per-node formulas as one layer ---===//
#include "hsnn/Formula.h"
#include "hsnn/Layer.h"

#include "GpuLayer.h"
#include "HostKernels.h"
#include "LayerAccess.h"
#include "Program/Interpreter.h"
#include "Program/Launch.h"
#include "Program/Stopwatch.h"
#include "RunGuard.h"
#include "Warn.h"

#include "hsnn/Backend.h"
#include "hsnn/Runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <array>
#include <deque>
#include <map>
#include <mutex>
#include <fmt/format.h>
#include <unordered_map>

namespace hsnn {

using detail::ActivationKernel;
using detail::ActivationPlan;
using detail::KernelShape;
using detail::Program;
using detail::Clock;
using detail::msSince;

namespace {
// Contiguous elements per JIT call: long enough to amortise the call, short
// enough that a batch-major tile stays in L2.
constexpr size_t kJitBlock = 4096, kJitTileBytes = 1024;
} // namespace

struct ActivationLayer::Impl {
  struct Group {
    Formula formula;
    Expr derivative = nullptr;
    Program programs[3]; // indexed by ActivationKernel
  };
  std::shared_ptr<ExprContext> ctx = std::make_shared<ExprContext>();
  std::deque<Group> groups; // deque: plans point into it
  std::vector<uint32_t> nodeGroup;
  std::vector<double> params;
  std::vector<uint64_t> offsets;
  LayerOptions options;
  CompileInfo info;
  RunGuard guard;
  ActivationPlan plans[3];
  // JIT code, alive with the layer. Forward and backward kernels are built
  // by compile(); fused ones at the first fused() call (they are the
  // largest, and many users never call them).
  bool jit = false;
  std::unique_ptr<detail::GpuActivation> gpu; // Method::Cuda
  std::vector<std::shared_ptr<detail::KernelLibrary>> libraries;
  std::vector<void *> nodeKernel[3]; // per kind, per node
  std::vector<uint32_t> unitOf;      // node -> code unit
  std::vector<std::array<const Program *, 3>> unitPrograms;
  std::deque<Program> baked;
  mutable std::once_flag fusedOnce;
  mutable Error fusedError;
  mutable bool fusedCompiled = false;

  detail::LayerAccess::Activation model() const;

  void planUnits() {
    detail::UnitPlan plan = detail::planUnits(model(), options.bakeConstants, baked);
    unitPrograms = std::move(plan.programs);
    unitOf = std::move(plan.unitOf);
  }

  Error compileKinds(std::initializer_list<ActivationKernel> kinds, CompileInfo &stats) {
    std::vector<detail::KernelRequest> requests;
    for (ActivationKernel kind : kinds)
      for (size_t u = 0; u < unitPrograms.size(); ++u)
        requests.push_back({fmt::format("hsnn_layer_u{}_{}", u, detail::shapeName(KernelShape(kind))),
                            unitPrograms[u][size_t(kind)], KernelShape(kind), options.dtype});
    auto lib = detail::buildHostKernels(requests, {options.optLevel, options.fastMath}, stats);
    if (!lib)
      return lib.takeError();
    size_t i = 0;
    for (ActivationKernel kind : kinds) {
      for (size_t n = 0; n < nodeGroup.size(); ++n)
        nodeKernel[size_t(kind)].push_back((*lib)->address(requests[i + unitOf[n]].symbol));
      i += unitPrograms.size();
    }
    libraries.push_back(std::move(*lib));
    return Error::success();
  }

  Error compileGpu() {
    planUnits();
    auto g = detail::GpuActivation::create(options.gpuId, options.dtype, {options.optLevel, options.fastMath},
                                           options.layout, unitPrograms, unitOf, params,
                                           offsets, &info);
    if (!g)
      return g.takeError();
    gpu = std::move(*g);
    return Error::success();
  }

  Error compileKernels() {
    if (unitPrograms.empty())
      planUnits();
    if (Error e = compileKinds({ActivationKernel::Forward, ActivationKernel::Backward}, info))
      return e;
    jit = true;
    return Error::success();
  }

  // The fused kernels, built once on first use; a failure follows the
  // fallback policy (interpreter with a warning, or an error when strict).
  Error ensureFused() const {
    std::call_once(fusedOnce, [this] {
      auto *self = const_cast<Impl *>(this);
      CompileInfo lazy;
      if (Error e = self->compileKinds({ActivationKernel::Fused}, lazy))
        fusedError = detail::jitFailed(e);
      else
        fusedCompiled = true;
    });
    return fusedError;
  }

  template <class T>
  void runJit(ActivationKernel kind, const T *z, const T *err, T *out0, T *out1, size_t batch) const {
    const auto &fns = nodeKernel[size_t(kind)];
    // Batch-major tiles of 256 f32 or 128 f64 rows: measured best on bench W1.
    size_t block = options.layout == Layout::NodesMajor ? kJitBlock : kJitTileBytes / sizeof(T);
    detail::launchActivation<T>(options.layout, nodeGroup.size(), batch, z, err, out0, out1, block,
                                [&](size_t n, const T *zIn, const T *errIn, T *o0, T *o1, size_t len) {
                                  auto fn = reinterpret_cast<detail::ActivationFn<T>>(fns[n]);
                                  detail::runPadded<T>(fn, zIn, errIn, o0, o1, params.data() + offsets[n], len);
                                });
  }

  template <class T> Error run(ActivationKernel kind, const T *z, const T *err, T *out0, T *out1, size_t batch) const {
    constexpr DType want = std::is_same_v<T, float> ? DType::F32 : DType::F64;
    if (options.dtype != want)
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("layer was compiled for {}, called with {} arrays", to_string(options.dtype), to_string(want)));
    if (Error e = guard.checkSize(nodeGroup.size(), batch))
      return e;
    if (batch && (!z || !out0 || (kind == ActivationKernel::Backward && !err) || (kind == ActivationKernel::Fused && !out1)))
      return Error(ErrorCode::InvalidArgument, "null array pointer with a non-empty batch");
    if (gpu)
      return gpu->runHost(int(kind), z, err, out0, out1, batch);
    if (jit && kind == ActivationKernel::Fused)
      if (Error e = ensureFused())
        return e;
    if (jit && (kind != ActivationKernel::Fused || fusedCompiled))
      return guard.run([&] { runJit<T>(kind, z, err, out0, out1, batch); });
    return guard.run([&] { detail::interpretActivation<T>(plans[size_t(kind)], kind, z, err, out0, out1, batch); });
  }

  Expected<size_t> constantIndex(size_t node, std::string_view name) const {
    if (node >= nodeGroup.size())
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("node {} is out of range; the layer has {} nodes", node, nodeGroup.size()));
    const auto &names = groups[nodeGroup[node]].formula.constants;
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end())
      return Error(ErrorCode::InvalidArgument,
                   names.empty() ? fmt::format("node {} has no constants (asked for '{}')", node, name)
                                 : fmt::format("node {} has no constant '{}'; it has: {}", node, name, fmt::join(names, ", ")));
    return size_t(offsets[node] + (it - names.begin()));
  }
};

// Nothing thrown inside (allocation failure, a filesystem error) crosses the API.
Expected<ActivationLayer> ActivationLayer::compile(const std::vector<NodeSpec> &nodes, const LayerOptions &options) {
  try {
    return compileImpl(nodes, options);
  } catch (const std::exception &e) {
    return Error(ErrorCode::Internal, fmt::format("compile failed: {}", e.what()));
  }
}

Expected<ActivationLayer> ActivationLayer::compileImpl(const std::vector<NodeSpec> &nodes, const LayerOptions &options) {
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  if (nodes.empty())
    return Error(ErrorCode::InvalidArgument, "a layer needs at least one node");
  if (Error e = impl->guard.configure(options.threads))
    return e;
  auto method = detail::checkedMethod(options.method, options.optLevel, options.gpuId);
  if (!method)
    return method.takeError();

  auto t0 = Clock::now();
  std::vector<Diagnostic> diags;
  std::unordered_map<Expr, uint32_t> groupOf;
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto parsed = parseFormulaDetailed(*impl->ctx, nodes[i].formula, {FormulaMode::Activation, int(i)});
    if (auto *d = std::get_if<Diagnostic>(&parsed)) {
      diags.push_back(std::move(*d));
      continue;
    }
    Formula &f = std::get<Formula>(parsed);
    auto bound = bindConstants(f, nodes[i].constants, int(i));
    if (auto *d = std::get_if<Diagnostic>(&bound)) {
      diags.push_back(std::move(*d));
      continue;
    }
    auto [it, fresh] = groupOf.try_emplace(f.expr, uint32_t(impl->groups.size()));
    if (fresh) {
      Impl::Group g;
      g.formula = std::move(f);
      impl->groups.push_back(std::move(g));
    }
    impl->nodeGroup.push_back(it->second);
    impl->offsets.push_back(impl->params.size());
    auto &values = std::get<std::vector<double>>(bound);
    impl->params.insert(impl->params.end(), values.begin(), values.end());
  }
  if (!diags.empty())
    return toError(diags);
  impl->info.parseMs = msSince(t0);

  auto t1 = Clock::now();
  for (Impl::Group &g : impl->groups) {
    g.derivative = differentiate(*impl->ctx, g.formula.expr, Variable::Num);
    Expr both[] = {g.formula.expr, g.derivative};
    g.programs[size_t(ActivationKernel::Forward)] = Program::lower({both, 1}, g.formula.constants);
    g.programs[size_t(ActivationKernel::Backward)] = Program::lower({both + 1, 1}, g.formula.constants);
    g.programs[size_t(ActivationKernel::Fused)] = Program::lower(both, g.formula.constants);
  }
  for (size_t k = 0; k < 3; ++k) {
    ActivationPlan &plan = impl->plans[k];
    for (uint32_t g : impl->nodeGroup)
      plan.nodeProgram.push_back(&impl->groups[g].programs[k]);
    plan.params = impl->params.data();
    plan.offsets = impl->offsets.data();
    plan.layout = options.layout;
  }
  impl->info.diffMs = msSince(t1);

  auto used = detail::compileForMethod(
      *method, [&] { return impl->compileGpu(); }, [&] { return impl->compileKernels(); });
  if (!used)
    return used.takeError();
  impl->info.method = *used;
  return ActivationLayer(std::move(impl));
}

size_t ActivationLayer::numNodes() const { return impl_->nodeGroup.size(); }
DType ActivationLayer::dtype() const { return impl_->options.dtype; }
Layout ActivationLayer::layout() const { return impl_->options.layout; }
Method ActivationLayer::method() const { return impl_->info.method; }
const CompileInfo &ActivationLayer::compileInfo() const { return impl_->info; }
size_t ActivationLayer::numDistinctFormulas() const { return impl_->groups.size(); }

Error ActivationLayer::forward(const float *z, float *a, size_t batch) const {
  return impl_->run<float>(ActivationKernel::Forward, z, nullptr, a, nullptr, batch);
}
Error ActivationLayer::forward(const double *z, double *a, size_t batch) const {
  return impl_->run<double>(ActivationKernel::Forward, z, nullptr, a, nullptr, batch);
}
Error ActivationLayer::backward(const float *z, const float *err, float *delta, size_t batch) const {
  return impl_->run<float>(ActivationKernel::Backward, z, err, delta, nullptr, batch);
}
Error ActivationLayer::backward(const double *z, const double *err, double *delta, size_t batch) const {
  return impl_->run<double>(ActivationKernel::Backward, z, err, delta, nullptr, batch);
}
Error ActivationLayer::fused(const float *z, float *a, float *dfdz, size_t batch) const {
  return impl_->run<float>(ActivationKernel::Fused, z, nullptr, a, dfdz, batch);
}
Error ActivationLayer::fused(const double *z, double *a, double *dfdz, size_t batch) const {
  return impl_->run<double>(ActivationKernel::Fused, z, nullptr, a, dfdz, batch);
}

namespace {
// Checks device buffers against the layer and runs on them.
Error runBuffers(const ActivationLayer::Impl &impl, ActivationKernel kind, const DeviceBuffer &z, const DeviceBuffer *err,
                 const DeviceBuffer &o0, const DeviceBuffer *o1, size_t batch);
} // namespace

Error ActivationLayer::forward(const DeviceBuffer &z, const DeviceBuffer &a, size_t batch) const {
  return runBuffers(*impl_, ActivationKernel::Forward, z, nullptr, a, nullptr, batch);
}
Error ActivationLayer::backward(const DeviceBuffer &z, const DeviceBuffer &err, const DeviceBuffer &delta,
                                size_t batch) const {
  return runBuffers(*impl_, ActivationKernel::Backward, z, &err, delta, nullptr, batch);
}
Error ActivationLayer::fused(const DeviceBuffer &z, const DeviceBuffer &a, const DeviceBuffer &dfdz, size_t batch) const {
  return runBuffers(*impl_, ActivationKernel::Fused, z, nullptr, a, &dfdz, batch);
}

namespace {
Error runBuffers(const ActivationLayer::Impl &impl, ActivationKernel kind, const DeviceBuffer &z, const DeviceBuffer *err,
                 const DeviceBuffer &o0, const DeviceBuffer *o1, size_t batch) {
  size_t es = impl.options.dtype == DType::F32 ? 4 : 8;
  if (Error e = RunGuard::checkSize(impl.nodeGroup.size(), batch))
    return e;
  size_t need = impl.nodeGroup.size() * batch * es;
  std::string where = impl.gpu ? fmt::format("cuda:{}", impl.gpu->device()) : "cpu";
  for (const DeviceBuffer *b : {&z, err, &o0, o1}) {
    if (!b)
      continue;
    if (b->backend() != where)
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("buffer on backend {} given to a layer that runs on {}", b->backend(), where));
    if (b->bytes() < need)
      return Error(ErrorCode::InvalidArgument, fmt::format("buffer of {} bytes is smaller than the {} bytes of {} x {} {}",
                                                           b->bytes(), need, impl.nodeGroup.size(), batch,
                                                           to_string(impl.options.dtype)));
  }
  auto ptr = [](const DeviceBuffer *b) { return b ? b->data() : nullptr; };
  if (impl.gpu)
    return impl.gpu->run(int(kind), reinterpret_cast<detail::CUdeviceptr>(z.data()),
                         reinterpret_cast<detail::CUdeviceptr>(ptr(err)), reinterpret_cast<detail::CUdeviceptr>(o0.data()),
                         reinterpret_cast<detail::CUdeviceptr>(ptr(o1)), batch);
  if (impl.options.dtype == DType::F32)
    return impl.run<float>(kind, static_cast<const float *>(z.data()), static_cast<const float *>(ptr(err)),
                           static_cast<float *>(o0.data()), static_cast<float *>(ptr(o1)), batch);
  return impl.run<double>(kind, static_cast<const double *>(z.data()), static_cast<const double *>(ptr(err)),
                          static_cast<double *>(o0.data()), static_cast<double *>(ptr(o1)), batch);
}
} // namespace

Error ActivationLayer::setGpuId(int id) {
  return detail::moveGpuCode(impl_->gpu.get(), id, impl_->params, impl_->info, "layer");
}

int ActivationLayer::gpuId() const { return impl_->gpu ? impl_->gpu->device() : -1; }

Error ActivationLayer::setConstant(size_t node, std::string_view name, double value) {
  auto index = impl_->constantIndex(node, name);
  if (!index)
    return index.takeError();
  if ((impl_->jit || impl_->gpu) && impl_->options.bakeConstants)
    return Error(ErrorCode::InvalidArgument,
                 "constants are baked into this layer's code (bakeConstants); compile a new layer to change them");
  if (!std::isfinite(value))
    return Error(ErrorCode::InvalidArgument, fmt::format("constant '{}' of node {} must be finite, got {}", name, node, value));
  impl_->params[*index] = value;
  if (impl_->gpu)
    return impl_->gpu->uploadParams(impl_->params);
  return Error::success();
}

Expected<double> ActivationLayer::constant(size_t node, std::string_view name) const {
  auto index = impl_->constantIndex(node, name);
  if (!index)
    return index.takeError();
  return impl_->params[*index];
}

std::vector<std::string> ActivationLayer::constantNames(size_t node) const {
  if (node >= numNodes())
    return {};
  return impl_->groups[impl_->nodeGroup[node]].formula.constants;
}

std::span<const double> ActivationLayer::params() const { return impl_->params; }
std::span<const uint64_t> ActivationLayer::offsets() const { return impl_->offsets; }

std::string ActivationLayer::formula(size_t node) const {
  return node < numNodes() ? print(impl_->groups[impl_->nodeGroup[node]].formula.expr) : std::string();
}
std::string ActivationLayer::derivative(size_t node) const {
  return node < numNodes() ? print(impl_->groups[impl_->nodeGroup[node]].derivative) : std::string();
}

detail::LayerAccess::Activation ActivationLayer::Impl::model() const {
  detail::LayerAccess::Activation a;
  for (const auto &g : groups) {
    a.groupPrograms.push_back({&g.programs[0], &g.programs[1], &g.programs[2]});
    a.groupConstants.push_back(g.formula.constants);
  }
  a.nodeGroup = nodeGroup;
  a.params = params;
  a.offsets = offsets;
  return a;
}

} // namespace hsnn

namespace hsnn::detail {
LayerAccess::Activation LayerAccess::activation(const ActivationLayer &layer) { return layer.impl_->model(); }

UnitPlan planUnits(const LayerAccess::Activation &model, bool bakeConstants, std::deque<Program> &baked) {
  UnitPlan plan;
  std::map<std::pair<uint32_t, std::vector<double>>, uint32_t> index;
  for (size_t n = 0; n < model.nodeGroup.size(); ++n) {
    uint32_t g = model.nodeGroup[n];
    std::vector<double> values;
    if (bakeConstants) {
      auto first = model.params.begin() + std::ptrdiff_t(model.offsets[n]);
      values.assign(first, first + std::ptrdiff_t(model.groupConstants[g].size()));
    }
    auto [it, fresh] = index.try_emplace({g, values}, uint32_t(plan.programs.size()));
    if (fresh) {
      std::array<const Program *, 3> programs = model.groupPrograms[g];
      if (bakeConstants)
        for (const Program *&p : programs)
          p = &baked.emplace_back(p->withConstants(values.data()));
      plan.programs.push_back(programs);
    }
    plan.unitOf.push_back(it->second);
  }
  return plan;
}
} // namespace hsnn::detail
