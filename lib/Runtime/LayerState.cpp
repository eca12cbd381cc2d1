//===- lib/Runtime/LayerState.cpp - Engines, constants and argument checks ===//
#include "LayerState.h"

#include "BackgroundCompile.h"
#include "CPU/HostJitEngine.h"
#include "CUDA/GpuEngine.h"
#include "FallbackPolicy.h"
#include "InterpreterKernels.h"
#include "TieredCompile.h"
#include "Warn.h"

#include "hsnn/Runtime.h"

#include "Program/Stopwatch.h"

#include <atomic>
#include <cstdlib>
#include <cmath>
#include <fmt/format.h>
#include <system_error>
#include <limits>
#include <unistd.h>

namespace hsnn::detail {
namespace {

size_t elementSize(DType d) { return d == DType::F32 ? 4 : 8; }

// One array of a call, by name, for the checks.
struct View {
  const char *name;
  const void *data;
  size_t bytes;
  bool output;
};

// An output may be an input itself (in place) or apart from every other
// array; two outputs may not share memory, and nothing may partly overlap.
Error checkOverlap(std::span<const View> views) {
  for (auto a = views.begin(); a != views.end(); ++a)
    for (auto b = a + 1; b != views.end(); ++b) {
      if (!a->bytes || !b->bytes || (!a->output && !b->output))
        continue;
      auto pa = reinterpret_cast<uintptr_t>(a->data), pb = reinterpret_cast<uintptr_t>(b->data);
      bool apart = pa + a->bytes <= pb || pb + b->bytes <= pa;
      if (apart)
        continue;
      if (pa == pb && a->bytes == b->bytes && !(a->output && b->output))
        continue; // in place
      return Error(ErrorCode::InvalidArgument,
                   a->output && b->output
                       ? fmt::format("'{}' and '{}' are both outputs and share memory", a->name, b->name)
                       : fmt::format("'{}' and '{}' partially overlap; pass the same array (in place) or separate ones",
                                     a->name, b->name));
    }
  return Error::success();
}

Error wrongSize(const char *name, size_t got, size_t want, const std::string &why) {
  return Error(ErrorCode::InvalidArgument, fmt::format("'{}' holds {} elements; {} needs exactly {}", name, got, why, want));
}

std::string constantsWhy(size_t n) { return n == 1 ? "1 constant" : fmt::format("{} constants", n); }

// Typed buffers: each on the backend the code runs on, of its dtype, of
// exactly n elements; then the overlap rules.
struct BufferArg {
  const char *name;
  const DeviceBuffer *buffer; // null when the kind does not use it
  bool output;
};
Error checkBuffers(std::span<const BufferArg> args, const std::string &where, DType dtype, size_t n,
                   const std::string &why, const char *what) {
  std::vector<View> views;
  for (const BufferArg &a : args) {
    const DeviceBuffer *b = a.buffer;
    if (!b)
      continue;
    if (b->backend() != where)
      return Error(ErrorCode::InvalidArgument, fmt::format("buffer '{}' on backend {} given to a {} that runs on {}",
                                                           a.name, b->backend(), what, where));
    if (b->dtype() != dtype)
      return Error(ErrorCode::InvalidArgument, fmt::format("buffer '{}' holds {} elements; the {} runs on {}", a.name,
                                                           to_string(b->dtype()), what, to_string(dtype)));
    if (b->count() != n)
      return wrongSize(a.name, b->count(), n, why);
    // A buffer is built by callers too (DeviceBuffer's constructor is
    // public): its byte size must not wrap, and it must have memory.
    if (n > std::numeric_limits<size_t>::max() / elementSize(dtype))
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("buffer '{}' holds {} elements, more bytes than the address space has", a.name, n));
    if (n && !b->data())
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("buffer '{}' has no memory (its data is null) but says it holds {} elements", a.name, n));
    views.push_back({a.name, b->data(), b->bytes(), a.output});
  }
  return checkOverlap(views);
}

std::string memorySpace(const Engine &e) { return e.gpuId() >= 0 ? fmt::format("cuda:{}", e.gpuId()) : "cpu"; }

} // namespace

CacheConfig cacheConfig() {
  RuntimeFlags flags = runtimeFlags();
  return {flags.useKernelCache, kernelCacheDir(), [](std::string_view m) { warn(m); }};
}

namespace {

template <class T> constexpr DType dtypeOf() { return std::is_same_v<T, float> ? DType::F32 : DType::F64; }

} // namespace

Error movedFrom(const char *what) {
  return Error(ErrorCode::InvalidArgument, fmt::format("this {} was moved from; use the object it was moved to", what));
}

Expected<std::unique_ptr<LayerState>> LayerState::create(std::shared_ptr<const CompiledModel> model,
                                                         const EngineRequest &request, Reduction reduction) {
  auto s = std::make_unique<LayerState>();
  s->what = model->isLoss ? "loss" : "layer";
  s->model_ = model;
  s->request = request;
  s->reduction = reduction;
  if (Error e = s->guard.configure(request.threads))
    return e;
  auto method = checkedMethod(request.method, request.optLevel, request.gpuId);
  if (!method)
    return method.takeError();
  CompileInfo &info = s->info_;
  info.parseMs = model->parseMs;
  info.diffMs = model->diffMs;
  info.modelFromCache = model->snapshotted;

  // Not with baked constants: constants set while the interpreter runs would be lost.
  if (request.tiered && *method == Method::CpuJit && !runtimeFlags().strict && !request.bakeConstants) {
    if (std::shared_ptr<const Engine> linked = linkedInCache(model, request, info)) {
      if (Error e = s->install(std::move(linked)))
        return e;
      return s;
    }
    // The interpreter serves calls while the JIT compiles.
    if (Error e = s->startTiered(model, request))
      return e;
    return s;
  }
  auto engine = compileEngine(model, request, *method, info);
  if (!engine)
    return engine.takeError();
  if (Error e = s->install(std::move(*engine)))
    return e;
  return s;
}

std::shared_ptr<const Engine> LayerState::linkedInCache(const std::shared_ptr<const CompiledModel> &model,
                                                        const EngineRequest &request, CompileInfo &info) {
  if (!runtimeFlags().useKernelCache)
    return nullptr;
  // Kernels linked in the cache load at once, without LLVM.
  CompileInfo hitInfo = info;
  auto linked = makeHostJitEngine(model, {{request.optLevel, request.fastMath}, cacheConfig(), jitFailed, {}, true},
                                  hitInfo);
  if (!linked) {
    (void)linked.takeError(); // the compile will meet it again, and report it
    return nullptr;
  }
  if (*linked) {
    info = hitInfo;
    info.method = Method::CpuJit;
  }
  return std::move(*linked);
}

Expected<std::shared_ptr<const Engine>> LayerState::compileEngine(const std::shared_ptr<const CompiledModel> &model,
                                                                  const EngineRequest &request, Method method,
                                                                  CompileInfo &info) {
  std::shared_ptr<const Engine> engine;
  auto keep = [&](Expected<std::shared_ptr<const Engine>> e) -> Error {
    if (!e)
      return e.takeError();
    engine = std::move(*e);
    return Error::success();
  };
  auto used = compileForMethod(
      method,
      [&] {
        return keep(makeGpuEngine(model, request.gpuId, {request.optLevel, request.fastMath, cacheConfig()}, info));
      },
      [&] {
        return keep(
            makeHostJitEngine(model, {{request.optLevel, request.fastMath}, cacheConfig(), jitFailed, request.progress}, info));
      });
  if (!used)
    return used.takeError();
  if (*used == Method::CpuInterp) {
    prepareOpKernels(model->options.dtype);
    engine = makeInterpreterEngine(model);
  }
  info.method = *used;
  return engine;
}

Error LayerState::install(std::shared_ptr<const Engine> engine) {
  auto params = engine->makeParams(model_->defaultParams);
  if (!params)
    return params.takeError();
  current_ = {std::move(engine), std::move(*params)};
  return Error::success();
}

LayerState::LayerState(const LayerState &o)
    : model_(o.model_), source(o.source), what(o.what), request(o.request), reduction(o.reduction), guard(o.guard) {
  current_ = o.current();
  std::lock_guard lock(o.mutex_);
  info_ = o.info_;
  pending_ = o.pending_;
}

LayerState::Current LayerState::current() const {
  std::lock_guard lock(mutex_);
  if (pending_ && pending_->ready.load(std::memory_order_acquire))
    adoptPending();
  Current c = current_;
  if (pending_ && pending_->waiting())
    c.waitingTier = pending_;
  return c;
}

template <class F> auto LayerState::timed(const Current &c, F &&call) const {
  if (!c.waitingTier)
    return call();
  auto t0 = Clock::now();
  auto result = call();
  c.waitingTier->interpreted(c.waitingTier, msSince(t0));
  return result;
}

void LayerState::adoptPending() const {
  std::shared_ptr<PendingTier> p = std::move(pending_);
  if (!p->engine)
    return; // the JIT failed (and said so): the interpreter stays
  // The constants as they are now: setConstant may have run meanwhile.
  auto params = p->engine->makeParams(current_.params->values);
  if (!params)
    return;
  current_ = {p->engine, std::move(*params)};
  info_ = p->info;
  info_.compileEstimateMs = p->estimateMs;
  info_.interpreterMs = double(p->interpreterUs.load(std::memory_order_relaxed)) / 1000;
  info_.compileStarted = true;
}

CompileInfo LayerState::compileInfo() const {
  (void)current();
  std::lock_guard lock(mutex_);
  CompileInfo i = info_;
  if (pending_) {
    i.compileEstimateMs = pending_->estimateMs;
    i.interpreterMs = double(pending_->interpreterUs.load(std::memory_order_relaxed)) / 1000;
    i.compileStarted = !pending_->waiting();
  }
  return i;
}

Error LayerState::waitForCompile() const {
  std::shared_ptr<PendingTier> p;
  {
    std::lock_guard lock(mutex_);
    p = pending_;
  }
  if (!p)
    return Error::success();
  p->start(p);
  waitForBackgroundResult([&] { return p->ready.load(std::memory_order_acquire); });
  (void)current();
  return p->error;
}

Error LayerState::setParam(size_t index, double value, std::string_view name) {
  if (!std::isfinite(value))
    return Error(ErrorCode::InvalidArgument, fmt::format("{} must be finite, got {}", name, value));
  if (std::string why = checkParam(index, value); !why.empty())
    return Error(ErrorCode::InvalidArgument, why);
  return replaceParams([&](std::vector<double> &values) { values[index] = value; });
}

Expected<std::unique_ptr<LayerState>> LayerState::derived(std::span<const std::string> steps) const {
  if (!source)
    return Error(ErrorCode::Internal, fmt::format("this {} keeps no source to differentiate", what));
  auto derivedSource = std::make_shared<ModelSource>(*source);
  std::vector<std::string> &derivation = derivedSource->options.derivation;
  derivation.insert(derivation.end(), steps.begin(), steps.end());
  if (derivation.size() > kMaxDerivationSteps)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("{} derivatives taken in all; at most {} are supported", derivation.size(),
                             kMaxDerivationSteps));
  // The front end's warnings (unused constants) were given when this object
  // was compiled; its derivatives would only repeat them.
  std::vector<std::string> warnings;
  const NodeSpec &first = derivedSource->nodes.front();
  auto model = model_->isLoss ? lossModel(first.formula, first.constants, derivedSource->options, warnings)
                              : activationModel(derivedSource->nodes, derivedSource->options, warnings);
  if (!model)
    return model.takeError();
  Current now = current();
  EngineRequest onDevice = request;
  if (int gpu = now.engine->gpuId(); gpu >= 0)
    onDevice.gpuId = gpu;
  auto state = create(*model, onDevice, reduction);
  if (!state)
    return state.takeError();
  (*state)->source = std::move(derivedSource);
  // Node n's constants keep their place at the front of its slice; a
  // tangent step's directions follow them, at their defaults (0).
  const CompiledModel &dm = **model;
  std::vector<double> values = dm.defaultParams;
  for (size_t n = 0; n < model_->numNodes(); ++n) {
    auto from = now.params->values.begin() + std::ptrdiff_t(model_->offsets[n]);
    std::copy(from, from + std::ptrdiff_t(model_->constantNames(n).size()),
              values.begin() + std::ptrdiff_t(dm.offsets[n]));
  }
  if (!request.bakeConstants) // baked: the values are the defaults, compiled in
    if (Error e = (*state)->setParams(values))
      return e;
  return state;
}

Expected<std::unique_ptr<LayerState>> LayerState::derivative(unsigned order) const {
  auto steps = derivativeSteps(order);
  if (!steps)
    return steps.takeError();
  return derived(*steps);
}

Error LayerState::setParams(std::span<const double> values) {
  const CompiledModel &m = model();
  if (values.size() != m.defaultParams.size())
    return wrongSize("params", values.size(), m.defaultParams.size(), constantsWhy(m.defaultParams.size()));
  for (size_t i = 0; i < values.size(); ++i)
    if (std::string why = checkParam(i, values[i]); !why.empty())
      return Error(ErrorCode::InvalidArgument, fmt::format("params[{}]: {}", i, why));
  return replaceParams([&](std::vector<double> &v) { v.assign(values.begin(), values.end()); });
}

std::string LayerState::checkParam(size_t index, double value) const {
  // Node n owns params [offsets[n], offsets[n + 1]).
  const CompiledModel &m = model();
  size_t node = size_t(std::upper_bound(m.offsets.begin(), m.offsets.end(), uint64_t(index)) - m.offsets.begin()) - 1;
  const Formula &f = m.group(node).formula;
  std::string why = checkConstantValue(f, f.constants[index - m.offsets[node]], value);
  return why.empty() || m.isLoss ? why : fmt::format("node {}: {}", node, why);
}

Error LayerState::replaceParams(const std::function<void(std::vector<double> &)> &change) {
  std::lock_guard write(writeMutex_);
  Current c = current();
  if (request.bakeConstants && c.engine->method() != Method::CpuInterp)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("constants are baked into this {0}'s code (bakeConstants); compile a new {0} to change them",
                             what));
  std::vector<double> values = c.params->values;
  change(values);
  auto params = c.engine->makeParams(values);
  if (!params)
    return params.takeError();
  std::lock_guard lock(mutex_);
  if (current_.engine != c.engine) { // a background compile was adopted meanwhile (CPU: cheap)
    params = current_.engine->makeParams(std::move(values));
    if (!params)
      return params.takeError();
  }
  current_.params = std::move(*params);
  return Error::success();
}

Error LayerState::moveTo(int id) {
  if (Error e = checkGpuId(Method::Cuda, id))
    return e;
  std::lock_guard write(writeMutex_);
  Current c = current();
  if (c.engine->gpuId() < 0)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("this {} runs on the CPU ({}); compile it with method cuda to run it on a GPU", what,
                             to_string(c.engine->method())));
  if (c.engine->gpuId() == id)
    return Error::success();
  CompileInfo info = compileInfo();
  auto engine = c.engine->moveTo(id, &info);
  if (!engine)
    return engine.takeError();
  auto params = (*engine)->makeParams(c.params->values);
  if (!params)
    return params.takeError();
  std::lock_guard lock(mutex_);
  current_ = {std::move(*engine), std::move(*params)};
  info_ = info;
  return Error::success();
}

Error LayerState::checkedRunActivation(KernelKind kind, const ActivationArgs &args) const {
  Current c = current();
  return timed(c, [&] { return guard.run([&] { return c.engine->runActivation(kind, args, *c.params); }); });
}

template <class T>
Error LayerState::runActivation(KernelKind kind, std::span<const T> z, std::span<const T> err, std::span<T> out0,
                                std::span<T> out1, size_t batch) const {
  const CompiledModel &m = model();
  if (m.options.dtype != dtypeOf<T>())
    return Error(ErrorCode::InvalidArgument, fmt::format("layer was compiled for {}, called with {} arrays",
                                                         to_string(m.options.dtype), to_string(dtypeOf<T>())));
  size_t nodes = m.numNodes();
  if (batch && nodes > std::numeric_limits<size_t>::max() / sizeof(T) / batch)
    return Error(ErrorCode::InvalidArgument, fmt::format("{} nodes x batch {} overflows the address space", nodes, batch));
  size_t n = nodes * batch;
  std::string why = fmt::format("{} nodes x batch {}", nodes, batch);
  const KernelKindInfo &k = kindInfo(kind);
  const char *names[2][2] = {{"z", kind == KernelKind::Backward ? "err" : ""},
                             {kind == KernelKind::Backward ? "delta" : "a", "dfdz"}};
  if (z.size() != n)
    return wrongSize(names[0][0], z.size(), n, why);
  if (k.inputs > 1 && err.size() != n)
    return wrongSize(names[0][1], err.size(), n, why);
  if (out0.size() != n)
    return wrongSize(names[1][0], out0.size(), n, why);
  if (k.outputs > 1 && out1.size() != n)
    return wrongSize(names[1][1], out1.size(), n, why);
  const View views[] = {{names[0][0], z.data(), z.size_bytes(), false},
                        {names[0][1], err.data(), err.size_bytes(), false},
                        {names[1][0], out0.data(), out0.size_bytes(), true},
                        {names[1][1], out1.data(), out1.size_bytes(), true}};
  if (Error e = checkOverlap(views))
    return e;
  if (n == 0)
    return Error::success();
  return checkedRunActivation(kind, {z.data(), k.inputs > 1 ? err.data() : nullptr, out0.data(),
                                     k.outputs > 1 ? out1.data() : nullptr, batch, false});
}

Error LayerState::runActivation(KernelKind kind, const DeviceBuffer &z, const DeviceBuffer *err,
                                const DeviceBuffer &out0, const DeviceBuffer *out1, size_t batch) const {
  const CompiledModel &m = model();
  size_t nodes = m.numNodes(), es = elementSize(m.options.dtype);
  if (batch && nodes > std::numeric_limits<size_t>::max() / es / batch)
    return Error(ErrorCode::InvalidArgument, fmt::format("{} nodes x batch {} overflows the address space", nodes, batch));
  size_t n = nodes * batch;
  std::string where = memorySpace(*current().engine);
  const BufferArg args[] = {{"z", &z, false},
                            {"err", err, false},
                            {kind == KernelKind::Backward ? "delta" : "a", &out0, true},
                            {"dfdz", out1, true}};
  if (Error e = checkBuffers(args, where, m.options.dtype, n, fmt::format("{} nodes x batch {}", nodes, batch), "layer"))
    return e;
  if (n == 0)
    return Error::success();
  return checkedRunActivation(kind, {z.data(), err ? err->data() : nullptr, out0.data(), out1 ? out1->data() : nullptr,
                                     batch, where != "cpu"});
}

Expected<double> LayerState::checkedRunLoss(KernelKind kind, LossArgs args) const {
  const KernelKindInfo &k = kindInfo(kind);
  if (k.summing && kind == KernelKind::LossSum && reduction == Reduction::None)
    return Error(ErrorCode::InvalidArgument, "reduction is none: use forwardElements for per-element losses");
  if (k.summing && reduction == Reduction::Mean && args.n == 0)
    return Error(ErrorCode::InvalidArgument, "the mean of zero elements is undefined");
  args.scale = k.scaled && reduction == Reduction::Mean ? 1.0 / double(args.n) : 1.0;
  if (args.n == 0 && !args.value)
    return 0.0;
  Current c = current();
  auto sum = timed(c, [&] { return guard.run([&] { return c.engine->runLoss(kind, args, *c.params); }); });
  if (!sum || !k.summing)
    return sum;
  if (reduction == Reduction::None)
    return 0.0; // fused with no reduction returns no loss
  return reduction == Reduction::Mean ? *sum / double(args.n) : *sum;
}

template <class T>
Expected<double> LayerState::runLoss(KernelKind kind, std::span<const T> yPred, std::span<const T> yTrue,
                                     std::span<T> out) const {
  DType want = model().options.dtype;
  if (want != dtypeOf<T>())
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("loss was compiled for {}, called with {} arrays", to_string(want), to_string(dtypeOf<T>())));
  size_t n = yPred.size();
  const char *outName = kind == KernelKind::LossElements ? "out" : "grad";
  std::string why = fmt::format("y_pred of {} elements", n);
  if (yTrue.size() != n)
    return wrongSize("y_true", yTrue.size(), n, why);
  if (kindInfo(kind).outputs && out.size() != n)
    return wrongSize(outName, out.size(), n, why);
  const View views[] = {{"y_pred", yPred.data(), yPred.size_bytes(), false},
                        {"y_true", yTrue.data(), yTrue.size_bytes(), false},
                        {outName, out.data(), out.size_bytes(), true}};
  if (Error e = checkOverlap(views))
    return e;
  return checkedRunLoss(kind, {yPred.data(), yTrue.data(), kindInfo(kind).outputs ? out.data() : nullptr, n, 1, false});
}

Expected<double> LayerState::runLoss(KernelKind kind, const DeviceBuffer &yPred, const DeviceBuffer &yTrue,
                                     const DeviceBuffer *out) const {
  DType want = model().options.dtype;
  std::string where = memorySpace(*current().engine);
  size_t n = yPred.count();
  const BufferArg args[] = {
      {"y_pred", &yPred, false}, {"y_true", &yTrue, false}, {kind == KernelKind::LossElements ? "out" : "grad", out, true}};
  if (Error e = checkBuffers(args, where, want, n, fmt::format("y_pred of {} elements", n), "loss"))
    return e;
  return checkedRunLoss(kind, {yPred.data(), yTrue.data(), out ? out->data() : nullptr, n, 1, where != "cpu"});
}

Error LayerState::runLossValue(KernelKind kind, const DeviceBuffer &yPred, const DeviceBuffer &yTrue,
                               const DeviceBuffer *grad, const DeviceBuffer &value) const {
  if (reduction == Reduction::None)
    return Error(ErrorCode::InvalidArgument, "reduction is none: there is no reduced loss to leave in 'value'");
  DType want = model().options.dtype;
  std::string where = memorySpace(*current().engine);
  size_t n = yPred.count();
  const BufferArg args[] = {{"y_pred", &yPred, false}, {"y_true", &yTrue, false}, {"grad", grad, true}};
  if (Error e = checkBuffers(args, where, want, n, fmt::format("y_pred of {} elements", n), "loss"))
    return e;
  const BufferArg valueArg[] = {{"value", &value, true}};
  if (Error e = checkBuffers(valueArg, where, want, 1, "the reduced loss", "loss"))
    return e;
  std::vector<View> views = {{"value", value.data(), value.bytes(), true}, {"y_pred", yPred.data(), yPred.bytes(), false},
                             {"y_true", yTrue.data(), yTrue.bytes(), false}};
  if (grad)
    views.push_back({"grad", grad->data(), grad->bytes(), true});
  if (Error e = checkOverlap(views))
    return e;
  if (where == "cpu") { // host memory: the value as the returning overloads give it
    auto v = runLoss(kind, yPred, yTrue, grad);
    if (!v)
      return v.takeError();
    if (want == DType::F32)
      *static_cast<float *>(value.data()) = float(*v);
    else
      *static_cast<double *>(value.data()) = *v;
    return Error::success();
  }
  LossArgs a{yPred.data(), yTrue.data(), grad ? grad->data() : nullptr, n, 1, true};
  a.value = value.data();
  a.divisor = reduction == Reduction::Mean ? double(n) : 1.0;
  return checkedRunLoss(kind, a).takeError();
}

template <class T>
Error LayerState::constantGradients(std::span<const T> a, std::span<const T> b, std::span<double> grads,
                                    size_t batch) const {
  const CompiledModel &m = model();
  if (m.options.dtype != dtypeOf<T>())
    return Error(ErrorCode::InvalidArgument, fmt::format("{} was compiled for {}, called with {} arrays", what,
                                                         to_string(m.options.dtype), to_string(dtypeOf<T>())));
  size_t n = m.isLoss ? a.size() : m.numNodes() * batch;
  if (!m.isLoss && batch && m.numNodes() > std::numeric_limits<size_t>::max() / sizeof(T) / batch)
    return Error(ErrorCode::InvalidArgument, fmt::format("{} nodes x batch {} overflows the address space", m.numNodes(), batch));
  std::string why = m.isLoss ? fmt::format("y_pred of {} elements", n) : fmt::format("{} nodes x batch {}", m.numNodes(), batch);
  const char *names[2] = {m.isLoss ? "y_pred" : "z", m.isLoss ? "y_true" : "err"};
  if (a.size() != n)
    return wrongSize(names[0], a.size(), n, why);
  if (b.size() != n)
    return wrongSize(names[1], b.size(), n, why);
  if (grads.size() != m.defaultParams.size())
    return wrongSize("grads", grads.size(), m.defaultParams.size(), constantsWhy(m.defaultParams.size()));
  std::fill(grads.begin(), grads.end(), 0.0);
  if (n == 0)
    return Error::success();
  Current c = current();
  const std::shared_ptr<const Engine> &engine = c.engine;
  KernelKind kind = constantGradientKind(m.isLoss);
  if (m.isLoss) {
    double scale = reduction == Reduction::Mean ? 1.0 / double(n) : 1.0;
    Expected<double> r = guard.run([&] { return engine->runLoss(kind, {a.data(), b.data(), grads.data(), n, scale, false}, *c.params); });
    return r ? Error::success() : r.takeError();
  }
  return guard.run([&] { return engine->runActivation(kind, {a.data(), b.data(), grads.data(), nullptr, batch, false}, *c.params); });
}

#define INSTANTIATE(T)                                                                                               \
  template Error LayerState::constantGradients<T>(std::span<const T>, std::span<const T>, std::span<double>, size_t) \
      const;                                                                                                         \
  template Error LayerState::runActivation<T>(KernelKind, std::span<const T>, std::span<const T>, std::span<T>,     \
                                              std::span<T>, size_t) const;                                          \
  template Expected<double> LayerState::runLoss<T>(KernelKind, std::span<const T>, std::span<const T>, std::span<T>) \
      const;
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

} // namespace hsnn::detail
