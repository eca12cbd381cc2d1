//===- hsnn/Layer.h - Activation layers and losses: the public API -*- C++ -*-===//
//
// An ActivationLayer holds one formula per node and runs
//   forward   a     = f_node(z)
//   backward  delta = err * f_node'(z)
//   fused     a = f_node(z) and dfdz = f_node'(z) in one pass
// over a batch laid out either (nodes x batch), each node's batch contiguous
// (the seed's contract), or (batch x nodes), as frameworks store activations.
// A Loss holds one formula in y_pred and y_true.
//
// Constants are read at run time from a per-node params array, so changing
// one needs no recompile. All calls return errors as values; the objects are
// values (a copy owns its constants) and safe to run from many threads.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Error.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hsnn {

class DeviceBuffer;

enum class DType { F32, F64 };
enum class Layout {
  NodesMajor, ///< (nodes x batch): element (n, b) at n*batch + b.
  BatchMajor, ///< (batch x nodes): element (b, n) at b*nodes + n.
};
enum class Reduction {
  Mean, ///< Loss is the mean over elements; the gradient is scaled by 1/N.
  Sum,  ///< Loss is the sum; the gradient is unscaled.
  None, ///< Per-element losses (forwardElements); the gradient is unscaled.
};
/// Which engine runs the kernels. Auto picks the best one available.
enum class Method {
  Auto,      ///< The best available: cuda > cpu_jit > cpu_interp.
  CpuJit,    ///< LLVM ORC JIT for the host CPU, TBB-parallel (the seed's CPU_JIT, CPU_CPP, CPU_PYTHON).
  CpuInterp, ///< The built-in interpreter (always available).
  Cuda,      ///< NVIDIA GPU through NVPTX and the CUDA driver.
};

std::string_view to_string(DType);
std::string_view to_string(Layout);
std::string_view to_string(Reduction);
std::string_view to_string(Method);

/// How far a compile is: `done` of `total` kernels built (cache hits
/// included). Called from the compiling threads, one call at a time, with
/// `done` only growing; it must not call back into the object being built.
using CompileProgress = std::function<void(size_t done, size_t total)>;

/// One node of a layer: a formula (or a built-in name) and its constants.
struct NodeSpec {
  std::string formula;
  std::map<std::string, double> constants;
};

struct LayerOptions {
  Method method = Method::Auto;
  DType dtype = DType::F32;
  Layout layout = Layout::NodesMajor;
  unsigned threads = 0; ///< 0: the runtime's thread setting.
  /// JIT optimisation: 0 none; 1 vectorized, fast code generation (about a
  /// third of the compile time, code 5-20% slower); 2, 3 full code generation.
  int optLevel = 3;
  bool fastMath = false; ///< Opt-in: lets the JIT reassociate and assume no NaN/inf.
  /// Compile constants into the code as literals (cpu_jit): a little faster,
  /// but nodes share code only with equal constants, and setConstant is an
  /// error (compile a new layer instead).
  bool bakeConstants = false;
  int gpuId = 0; ///< Device for Method::Cuda.
  /// Tiered compilation for cpu_jit (not in strict mode): compile() returns
  /// once the formulas are parsed and differentiated (with the JIT's code
  /// at once where the cache holds it linked), calls run on the
  /// interpreter, and the JIT's code compiles on a background thread once
  /// it pays (CompileInfo::compileStarted) and takes over at the first call
  /// after it is ready. method() and compileInfo() say which tier runs;
  /// waitForCompile() starts the compile if it waits and waits for it.
  bool tiered = false;
  /// Told as the JIT's kernels are built (a layer of thousands of distinct
  /// formulas takes seconds): for a progress bar.
  CompileProgress progress = nullptr;
};

/// The options of Loss::compile: LayerOptions' fields but `layout`, with
/// `reduction` in its place. Two structs, not one shared base or member:
/// C++20 designated initializers cannot name a base's fields (so
/// `{.method = m, .layout = l}` would stop compiling), a shared member would
/// make every call spell `{.compile = {...}}`, and a field list macro (an
/// X-macro .def) would hide the fields and their documentation from readers
/// and the API reference. The engines read one internal request, which a
/// template copies from either (LayerState.h's EngineRequest::from): a field
/// the engines use is read from both, so one left out of either fails to
/// build there.
struct LossOptions {
  Method method = Method::Auto;
  DType dtype = DType::F32;
  Reduction reduction = Reduction::Mean;
  unsigned threads = 0;
  int optLevel = 3;
  bool fastMath = false;
  bool bakeConstants = false;
  int gpuId = 0;
  bool tiered = false; ///< As LayerOptions::tiered.
  CompileProgress progress = nullptr; ///< As LayerOptions::progress.
};

/// What compile() did, for inspection and benchmarks (milliseconds).
struct CompileInfo {
  Method method = Method::CpuInterp; ///< The method actually used.
  double parseMs = 0;    ///< Parse and simplify every formula.
  double diffMs = 0;     ///< Differentiate and lower to tapes.
  double emitMs = 0;     ///< Build LLVM IR.
  double optimizeMs = 0; ///< LLVM optimisation pipeline.
  double codegenMs = 0;  ///< Machine code generation.
  double loadMs = 0;     ///< Link the object into the process.
  bool cacheHit = false; ///< The object came from the disk cache.
  /// The kernels came from the cache linked into one shared object (by an
  /// earlier compile, in the background) and were loaded without LLVM.
  bool linkedFromCache = false;
  /// The front end's result (tapes, constants, printed formulas) came from
  /// the disk cache's snapshot of an earlier compile of the same formulas,
  /// so no formula was parsed (parseMs and diffMs are 0).
  bool modelFromCache = false;
  size_t objectBytes = 0;
  /// cpu_jit: the kernels' objects this compile made, and those it found in
  /// the cache. A large layer's functions are cut by their formulas, each
  /// in an object of its own, so a layer with one formula changed compiles
  /// one per kind and finds the rest.
  size_t objectsCompiled = 0, objectsFromCache = 0;
  /// Tiered (LayerOptions::tiered): the JIT's compile as estimated (ms of
  /// one core), the interpreter's time on this layer and its copies so
  /// far, and whether the compile has started. It starts once the time the
  /// JIT would have saved (0.7 of the interpreter's; 0.4 where the formulas
  /// call math functions, which the interpreter runs on the JIT's own
  /// kernels) reaches the estimate (a layer of new
  /// formulas run a few times never compiles), at once for an estimate
  /// under 50 ms, or at waitForCompile().
  double compileEstimateMs = 0, interpreterMs = 0;
  bool compileStarted = false;
  /// Batch-major cpu_jit layers: the node segments whose formulas repeat
  /// a pattern and run in place by row kernels; 0 when tiles are
  /// transposed instead (formulas scattered with no short period).
  size_t rowSegments = 0;
};

namespace detail {
struct LayerState;
}

/// Arrays are passed as sized views (std::span; a std::vector converts), so
/// a wrong size is an error, never a write past the end. An input and an
/// output may be the same array (in place); arrays that partially overlap
/// are refused.
///
/// Value semantics: a copy shares the compiled code (copying is cheap) but
/// owns its constants and its GPU, so changing a copy never changes the
/// original. Thread safety: any call may run on one object from many
/// threads at once, setConstant and setGpuId included; each kernel call
/// sees one consistent set of constants, the one current when it started.
class ActivationLayer {
public:
  /// Parses, simplifies and differentiates every node, reporting the
  /// problems of all nodes together in one Error. Warnings (a constant given
  /// but unused, a formula that ignores its input) go to the warning handler.
  static Expected<ActivationLayer> compile(const std::vector<NodeSpec> &nodes, const LayerOptions &options = {});

  ActivationLayer(const ActivationLayer &other);
  ActivationLayer &operator=(const ActivationLayer &other);
  ActivationLayer(ActivationLayer &&other) noexcept;
  ActivationLayer &operator=(ActivationLayer &&other) noexcept;
  ~ActivationLayer();

  size_t numNodes() const;
  DType dtype() const;
  Layout layout() const;
  Method method() const;
  /// Distinct formulas after simplification (nodes sharing one share code).
  size_t numDistinctFormulas() const;
  CompileInfo compileInfo() const;
  /// Tiered compilation: blocks until the background compile is done (its
  /// code runs from the next call) and returns its error, if it failed (the
  /// object keeps running on the interpreter then, as the fallback policy
  /// says). Returns at once when nothing is compiling.
  [[nodiscard]] Error waitForCompile() const;

  /// `z`, `a`, `err`, `delta`, `dfdz` each hold exactly numNodes() * batch
  /// elements in the layer's layout and dtype.
  [[nodiscard]] Error forward(std::span<const float> z, std::span<float> a, size_t batch) const;
  [[nodiscard]] Error forward(std::span<const double> z, std::span<double> a, size_t batch) const;
  [[nodiscard]] Error backward(std::span<const float> z, std::span<const float> err, std::span<float> delta,
                               size_t batch) const;
  [[nodiscard]] Error backward(std::span<const double> z, std::span<const double> err, std::span<double> delta,
                               size_t batch) const;
  [[nodiscard]] Error fused(std::span<const float> z, std::span<float> a, std::span<float> dfdz, size_t batch) const;
  [[nodiscard]] Error fused(std::span<const double> z, std::span<double> a, std::span<double> dfdz,
                            size_t batch) const;

  /// Trainable constants: for each entry of params(), the sum over its
  /// node's batch of err * df/dc (so with err = dL/da, dL/dc), in double and
  /// in a fixed order (the same bits on every run and thread count).
  /// `grads` has params().size() entries, node n's at offsets()[n]. Host
  /// arrays (a GPU layer copies them to its device and sums there); z and
  /// err as backward().
  [[nodiscard]] Error constantGradients(std::span<const float> z, std::span<const float> err,
                                        std::span<double> grads, size_t batch) const;
  [[nodiscard]] Error constantGradients(std::span<const double> z, std::span<const double> err,
                                        std::span<double> grads, size_t batch) const;
  /// Sets every constant at once (params() order), for an optimiser's step.
  [[nodiscard]] Error setParams(std::span<const double> values);

  /// The same on buffers from getBackend(): "cpu" buffers with any CPU
  /// method, "cuda:N" buffers (device memory, no copies) with Method::Cuda
  /// on device N. Each holds exactly numNodes() * batch elements of the
  /// layer's dtype.
  [[nodiscard]] Error forward(const DeviceBuffer &z, const DeviceBuffer &a, size_t batch) const;
  [[nodiscard]] Error backward(const DeviceBuffer &z, const DeviceBuffer &err, const DeviceBuffer &delta,
                               size_t batch) const;
  [[nodiscard]] Error fused(const DeviceBuffer &z, const DeviceBuffer &a, const DeviceBuffer &dfdz,
                            size_t batch) const;

  /// Moves this layer (not its copies) to GPU `id`: its code is reloaded
  /// there (recompiled, or taken from the cache, only when the device's
  /// compute capability differs) with its constants. An id outside
  /// 0..numGpus-1 is an error naming the valid range, as is moving a layer
  /// that runs on the CPU.
  [[nodiscard]] Error setGpuId(int id);
  /// The GPU the layer runs on; -1 for CPU methods.
  int gpuId() const;

  /// Changes one constant of one node; the next call sees it, no recompile.
  [[nodiscard]] Error setConstant(size_t node, std::string_view name, double value);
  Expected<double> constant(size_t node, std::string_view name) const;
  /// The constants of a node in params order (sorted by name).
  std::vector<std::string> constantNames(size_t node) const;

  /// The seed's flat layout: params()[offsets()[n] + k] is node n's k-th
  /// constant. A snapshot: later setConstant calls do not change it.
  std::vector<double> params() const;
  std::span<const uint64_t> offsets() const;

  /// Canonical text of the node's formula and of its derivative.
  std::string formula(size_t node) const;
  std::string derivative(size_t node) const;

  /// Higher derivatives. A layer over the same nodes whose formulas are
  /// this layer's differentiated `order` times with respect to num (0: the
  /// same formulas): its forward runs f^(k), backward err * f^(k+1), fused
  /// both, constantGradients sums err * d f^(k)/dc. Simplified and
  /// NaN-guarded as f' is (relu'' is 0, and NaN where z is NaN). Same
  /// options, engine and GPU, this layer's current constants; compiled when
  /// asked (from the disk cache when it can), so keep it rather than ask
  /// again per call. Changes to either layer's constants are not shared.
  /// At most 8 derivatives in all (kMaxDerivationSteps).
  Expected<ActivationLayer> derivativeLayer(unsigned order = 1) const;
  /// A layer whose node n runs sum_i t_i * df_n/dc_i over its constants c_i:
  /// the constants' Jacobian times a direction t, which a double backward
  /// through trainable constants needs. Its params are, per node, this
  /// layer's followed by the directions (named "c'" for constant c, and 0
  /// until set). Not with bakeConstants (a direction compiled in is no use).
  Expected<ActivationLayer> constantTangentLayer() const;

private:
  explicit ActivationLayer(std::unique_ptr<detail::LayerState> state);
  static Expected<ActivationLayer> compileImpl(const std::vector<NodeSpec> &nodes, const LayerOptions &options);
  std::unique_ptr<detail::LayerState> state_;
};

/// A loss over n elements: every view holds exactly n elements (n is the
/// size of y_pred). Value semantics and thread safety as ActivationLayer.
class Loss {
public:
  static Expected<Loss> compile(std::string_view formula, const std::map<std::string, double> &constants = {},
                                const LossOptions &options = {});

  Loss(const Loss &other);
  Loss &operator=(const Loss &other);
  Loss(Loss &&other) noexcept;
  Loss &operator=(Loss &&other) noexcept;
  ~Loss();

  Reduction reduction() const;
  DType dtype() const;
  Method method() const;
  CompileInfo compileInfo() const;
  /// Tiered compilation: blocks until the background compile is done (its
  /// code runs from the next call) and returns its error, if it failed (the
  /// object keeps running on the interpreter then, as the fallback policy
  /// says). Returns at once when nothing is compiling.
  [[nodiscard]] Error waitForCompile() const;

  /// The reduced loss (Mean or Sum), accumulated in double in a fixed order:
  /// the same input gives the same bits on every run and thread count.
  Expected<double> forward(std::span<const float> yPred, std::span<const float> yTrue) const;
  Expected<double> forward(std::span<const double> yPred, std::span<const double> yTrue) const;
  /// Per-element losses, whatever the reduction.
  [[nodiscard]] Error forwardElements(std::span<const float> yPred, std::span<const float> yTrue,
                                      std::span<float> out) const;
  [[nodiscard]] Error forwardElements(std::span<const double> yPred, std::span<const double> yTrue,
                                      std::span<double> out) const;
  /// d loss / d y_pred per element (scaled by 1/n for Mean).
  [[nodiscard]] Error gradient(std::span<const float> yPred, std::span<const float> yTrue,
                               std::span<float> grad) const;
  [[nodiscard]] Error gradient(std::span<const double> yPred, std::span<const double> yTrue,
                               std::span<double> grad) const;
  /// Loss and gradient in one pass; returns the reduced loss (0 for None).
  Expected<double> fused(std::span<const float> yPred, std::span<const float> yTrue, std::span<float> grad) const;
  Expected<double> fused(std::span<const double> yPred, std::span<const double> yTrue, std::span<double> grad) const;
  /// Trainable constants: d(loss)/dc for each constant (constantNames()
  /// order), reduced as the loss is (mean: divided by n; none: summed).
  [[nodiscard]] Error constantGradients(std::span<const float> yPred, std::span<const float> yTrue,
                                        std::span<double> grads) const;
  [[nodiscard]] Error constantGradients(std::span<const double> yPred, std::span<const double> yTrue,
                                        std::span<double> grads) const;

  /// The same on buffers from getBackend() ("cpu" buffers with CPU methods,
  /// "cuda:N" device memory with Method::Cuda), each of the loss's dtype and
  /// as many elements as yPred.
  Expected<double> forward(const DeviceBuffer &yPred, const DeviceBuffer &yTrue) const;
  [[nodiscard]] Error forwardElements(const DeviceBuffer &yPred, const DeviceBuffer &yTrue,
                                      const DeviceBuffer &out) const;
  [[nodiscard]] Error gradient(const DeviceBuffer &yPred, const DeviceBuffer &yTrue, const DeviceBuffer &grad) const;
  Expected<double> fused(const DeviceBuffer &yPred, const DeviceBuffer &yTrue, const DeviceBuffer &grad) const;
  /// forward and fused with the reduced loss left in `value` (a buffer of
  /// one element of the loss's dtype, in the same memory) instead of
  /// returned: with Method::Cuda nothing waits for the device (the caller's
  /// StreamScope orders the work, as for the layers' buffer calls), so a
  /// training step stays on its stream. The value has the bits the
  /// returning overloads give, converted to the dtype. Reduction::None has
  /// no reduced loss: an error.
  [[nodiscard]] Error forward(const DeviceBuffer &yPred, const DeviceBuffer &yTrue, const DeviceBuffer &value) const;
  [[nodiscard]] Error fused(const DeviceBuffer &yPred, const DeviceBuffer &yTrue, const DeviceBuffer &grad,
                            const DeviceBuffer &value) const;

  /// As ActivationLayer::setGpuId.
  [[nodiscard]] Error setGpuId(int id);
  int gpuId() const;

  [[nodiscard]] Error setConstant(std::string_view name, double value);
  Expected<double> constant(std::string_view name) const;
  /// The loss's constants in params order (sorted by name).
  std::vector<std::string> constantNames() const;
  std::string formula() const;
  std::string derivative() const;

  /// Higher derivatives: a loss whose formula is this one's differentiated
  /// `order` times with respect to y_pred (forwardElements gives
  /// d^k l/dy_pred^k per element, gradient the next one), with this loss's
  /// options and current constants; as ActivationLayer::derivativeLayer.
  Expected<Loss> derivativeLoss(unsigned order = 1) const;
  /// A loss whose formula is dl/d(constant `name`): per element with
  /// forwardElements, differentiable again as any loss.
  Expected<Loss> constantDerivativeLoss(std::string_view name) const;
  /// A loss whose formula is dl/dy_true: per element with forwardElements,
  /// differentiable again as any loss (a target computed by the model, as
  /// in distillation or a physics residual, gets its gradient from it).
  Expected<Loss> targetDerivativeLoss() const;

private:
  explicit Loss(std::unique_ptr<detail::LayerState> state);
  // This loss differentiated by one derivation step (CompiledModel.cpp).
  Expected<Loss> derivedBy(const std::string &step) const;
  static Expected<Loss> compileImpl(std::string_view formula, const std::map<std::string, double> &constants,
                                    const LossOptions &options);
  std::unique_ptr<detail::LayerState> state_;
};

} // namespace hsnn
