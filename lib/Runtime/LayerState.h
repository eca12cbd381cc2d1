//===- lib/Runtime/LayerState.h - What a layer or loss object holds -*- C++ -*-===//
//
// The facades' shared machinery: the compiled model and the engine (shared
// by copies), this object's constants (its own), the fallback policy at
// compile time, and the checks every call makes of its arrays before an
// engine sees them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Cache/ObjectCache.h"
#include "Model/Engine.h"
#include "RunGuard.h"

#include "hsnn/Backend.h"
#include "hsnn/Layer.h"

#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>

namespace hsnn::detail {

/// The disk cache as the runtime flags set it, warnings to the handler.
CacheConfig cacheConfig();

/// The front end's model of an activation layer or a loss, from the disk
/// cache's snapshot of an earlier compile of the same formulas when there is
/// one (ModelCache.cpp); warnings are appended either way.
Expected<std::shared_ptr<const CompiledModel>> activationModel(const std::vector<NodeSpec> &nodes,
                                                               const ModelOptions &options,
                                                               std::vector<std::string> &warnings);
Expected<std::shared_ptr<const CompiledModel>> lossModel(std::string_view formula,
                                                         const std::map<std::string, double> &constants,
                                                         const ModelOptions &options, std::vector<std::string> &warnings);

/// The options ActivationLayer and Loss have in common, read once.
struct EngineRequest {
  Method method = Method::Auto;
  DType dtype = DType::F32;
  unsigned threads = 0;
  int optLevel = 3;
  bool fastMath = false;
  bool bakeConstants = false;
  int gpuId = 0;
  bool tiered = false;
  CompileProgress progress = nullptr;
  template <class Options> static EngineRequest from(const Options &o) {
    return {o.method, o.dtype, o.threads, o.optLevel, o.fastMath, o.bakeConstants, o.gpuId, o.tiered, o.progress};
  }
};

/// What a model was built from, kept so that a derived model (a
/// derivative of every formula) can be built from it with more steps.
struct ModelSource {
  std::vector<NodeSpec> nodes; ///< A loss: one, its formula and constants.
  ModelOptions options;
};

struct LayerState {
private:
  struct PendingTier;

public:
  /// The engine and the constants one call runs with. Replaced whole, never
  /// changed in place, so a call that took them keeps a consistent pair.
  struct Current {
    std::shared_ptr<const Engine> engine;
    std::shared_ptr<const ParamSet> params;
    /// Tiered: the compile that waits for the interpreter's time to pay.
    std::shared_ptr<PendingTier> waitingTier{};
  };

  /// Builds the engine for `model` by the fallback policy (cuda > cpu_jit >
  /// cpu_interp with warnings, errors in strict mode).
  static Expected<std::unique_ptr<LayerState>> create(std::shared_ptr<const CompiledModel> model,
                                                      const EngineRequest &request, Reduction reduction);
  LayerState() = default;
  LayerState(const LayerState &other);

  /// The current pair; a background compile that has finished is adopted first.
  Current current() const;
  /// Which method runs now and where compile time went.
  CompileInfo compileInfo() const;
  /// Waits for a background compile (tiered) and adopts its engine.
  Error waitForCompile() const;
  const CompiledModel &model() const { return *model_; }

  /// Sets the constant at params index `index` (`name` says which, for
  /// errors); the next call sees it.
  Error setParam(size_t index, double value, std::string_view name);
  /// Replaces every constant at once (params order), each checked finite.
  Error setParams(std::span<const double> values);
  /// Moves this object's code to GPU `id`.
  Error moveTo(int id);
  /// A new state whose model applies `steps` (CompiledModel's derivation
  /// steps) after this one's, with this object's engine request, GPU and
  /// current constants (new tangent constants 0).
  Expected<std::unique_ptr<LayerState>> derived(std::span<const std::string> steps) const;
  /// derived() with `order` steps "d": the order-th derivative in the variable.
  Expected<std::unique_ptr<LayerState>> derivative(unsigned order) const;

  /// Checks and runs an activation kernel on host arrays.
  template <class T>
  Error runActivation(KernelKind kind, std::span<const T> z, std::span<const T> err, std::span<T> out0,
                      std::span<T> out1, size_t batch) const;
  Error runActivation(KernelKind kind, const DeviceBuffer &z, const DeviceBuffer *err, const DeviceBuffer &out0,
                      const DeviceBuffer *out1, size_t batch) const;
  /// Checks and runs a loss kernel; returns the reduced loss where the kind sums.
  template <class T>
  Expected<double> runLoss(KernelKind kind, std::span<const T> yPred, std::span<const T> yTrue,
                           std::span<T> out) const;
  Expected<double> runLoss(KernelKind kind, const DeviceBuffer &yPred, const DeviceBuffer &yTrue,
                           const DeviceBuffer *out) const;
  /// The same for LossSum and LossFused with the reduced loss left in
  /// `value` (one element): on a GPU queued, nothing waited for.
  Error runLossValue(KernelKind kind, const DeviceBuffer &yPred, const DeviceBuffer &yTrue, const DeviceBuffer *grad,
                     const DeviceBuffer &value) const;
  /// Trainable constants: grads (one per params entry) = the sum over the
  /// elements of err * df/dc (a layer: a = z, b = err) or of scale * dl/dc
  /// (a loss: a = y_pred, b = y_true; scale 1/n for a mean). Host arrays.
  template <class T>
  Error constantGradients(std::span<const T> a, std::span<const T> b, std::span<double> grads, size_t batch) const;

  std::shared_ptr<const CompiledModel> model_;
  std::shared_ptr<const ModelSource> source;
  const char *what = "layer"; ///< "layer" or "loss", for messages
  EngineRequest request;
  Reduction reduction = Reduction::Mean;
  RunGuard guard;

private:
  Error replaceParams(const std::function<void(std::vector<double> &)> &change);
  /// Why params[index] cannot be `value` (not finite, outside its built-in's domain), or "".
  std::string checkParam(size_t index, double value) const;
  Error checkedRunActivation(KernelKind kind, const ActivationArgs &args) const;
  Expected<double> checkedRunLoss(KernelKind kind, LossArgs args) const;

  /// Tiered: the host JIT's kernels where the cache holds them linked (its
  /// figures into info), else null: loaded without LLVM.
  static std::shared_ptr<const Engine> linkedInCache(const std::shared_ptr<const CompiledModel> &model,
                                                     const EngineRequest &request, CompileInfo &info);
  /// The engine of `method`, compiled (or from the cache), falling back as
  /// the policy says (FallbackPolicy.h) down to the interpreter.
  static Expected<std::shared_ptr<const Engine>> compileEngine(const std::shared_ptr<const CompiledModel> &model,
                                                               const EngineRequest &request, Method method,
                                                               CompileInfo &info);
  /// Runs on `engine`, with the model's default constants.
  Error install(std::shared_ptr<const Engine> engine);
  /// Tiered: the interpreter serves calls; the JIT's compile starts when
  /// the cost model says (PendingTier).
  Error startTiered(std::shared_ptr<const CompiledModel> model, const EngineRequest &request);
  /// call(), timed for a compile that waits (Current::waitingTier).
  template <class F> auto timed(const Current &c, F &&call) const;
  void adoptPending() const; // mutex_ held

  mutable std::mutex mutex_;      // guards current_, info_, pending_
  mutable std::mutex writeMutex_; // orders writers (setParam, moveTo)
  mutable Current current_;
  mutable CompileInfo info_;
  /// Tiered: the JIT compiling in the background, shared with copies (each
  /// adopts it at its next call once it is ready).
  mutable std::shared_ptr<PendingTier> pending_;
};

/// The name of a moved-from object's use, as an Error.
Error movedFrom(const char *what);

/// In a facade's member: returns `fallback` when the object was moved from.
#define HSNN_STATE_OR(fallback)                                                                                      \
  if (!state_)                                                                                                       \
    return fallback;

} // namespace hsnn::detail
