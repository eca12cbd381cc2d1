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
// cheap to copy (shared state) and safe to run from many threads at once.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Error.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hsnn {

namespace detail {
struct LayerAccess;
}
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
  CpuJit,    ///< LLVM ORC JIT for the host CPU, TBB-parallel.
  CpuInterp, ///< The built-in interpreter (the seed's CPU_PYTHON / CPU_CPP role).
  Cuda,      ///< NVIDIA GPU through NVPTX and the CUDA driver.
};

std::string_view to_string(DType);
std::string_view to_string(Layout);
std::string_view to_string(Reduction);
std::string_view to_string(Method);

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
};

struct LossOptions {
  Method method = Method::Auto;
  DType dtype = DType::F32;
  Reduction reduction = Reduction::Mean;
  unsigned threads = 0;
  int optLevel = 3;
  bool fastMath = false;
  bool bakeConstants = false;
  int gpuId = 0;
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
  size_t objectBytes = 0;
};

class ActivationLayer {
public:
  /// Parses, simplifies and differentiates every node, reporting the
  /// problems of all nodes together in one Error.
  static Expected<ActivationLayer> compile(const std::vector<NodeSpec> &nodes, const LayerOptions &options = {});

  size_t numNodes() const;
  DType dtype() const;
  Layout layout() const;
  Method method() const;
  /// Distinct formulas after simplification (nodes sharing one share code).
  size_t numDistinctFormulas() const;
  const CompileInfo &compileInfo() const;

  /// `z`, `a`, `err`, `delta`, `dfdz` each hold numNodes() * batch elements
  /// in the layer's layout. The pointer type must match the layer's dtype.
  Error forward(const float *z, float *a, size_t batch) const;
  Error forward(const double *z, double *a, size_t batch) const;
  Error backward(const float *z, const float *err, float *delta, size_t batch) const;
  Error backward(const double *z, const double *err, double *delta, size_t batch) const;
  Error fused(const float *z, float *a, float *dfdz, size_t batch) const;
  Error fused(const double *z, double *a, double *dfdz, size_t batch) const;

  /// The same on buffers from getBackend(): "cpu" buffers with any CPU
  /// method, "cuda:N" buffers (device memory, no copies) with Method::Cuda
  /// on device N. Buffers must hold numNodes() * batch elements.
  Error forward(const DeviceBuffer &z, const DeviceBuffer &a, size_t batch) const;
  Error backward(const DeviceBuffer &z, const DeviceBuffer &err, const DeviceBuffer &delta, size_t batch) const;
  Error fused(const DeviceBuffer &z, const DeviceBuffer &a, const DeviceBuffer &dfdz, size_t batch) const;

  /// Moves a layer compiled with Method::Cuda to GPU `id`: its code is
  /// reloaded there (recompiled, or taken from the cache, only when the
  /// device's compute capability differs) with its constants. An id outside
  /// 0..numGpus-1 is an error naming the valid range, as is moving a layer
  /// that runs on the CPU. Not while another thread runs the layer.
  Error setGpuId(int id);
  /// The GPU the layer runs on; -1 for CPU methods.
  int gpuId() const;

  /// Changes one constant of one node; the next run sees it, no recompile.
  Error setConstant(size_t node, std::string_view name, double value);
  Expected<double> constant(size_t node, std::string_view name) const;
  /// The constants of a node in params order (sorted by name).
  std::vector<std::string> constantNames(size_t node) const;

  /// The seed's flat layout: params()[offsets()[n] + k] is node n's k-th constant.
  std::span<const double> params() const;
  std::span<const uint64_t> offsets() const;

  /// Canonical text of the node's formula and of its derivative.
  std::string formula(size_t node) const;
  std::string derivative(size_t node) const;

  struct Impl;

private:
  friend struct detail::LayerAccess;
  explicit ActivationLayer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  static Expected<ActivationLayer> compileImpl(const std::vector<NodeSpec> &nodes, const LayerOptions &options);
  std::shared_ptr<Impl> impl_;
};

class Loss {
public:
  static Expected<Loss> compile(std::string_view formula, const std::map<std::string, double> &constants = {},
                                const LossOptions &options = {});

  Reduction reduction() const;
  DType dtype() const;
  Method method() const;
  const CompileInfo &compileInfo() const;

  /// The reduced loss (Mean or Sum), accumulated in double in a fixed order:
  /// the same input gives the same bits on every run and thread count.
  Expected<double> forward(const float *y_pred, const float *y_true, size_t n) const;
  Expected<double> forward(const double *y_pred, const double *y_true, size_t n) const;
  /// Per-element losses, whatever the reduction.
  Error forwardElements(const float *y_pred, const float *y_true, float *out, size_t n) const;
  Error forwardElements(const double *y_pred, const double *y_true, double *out, size_t n) const;
  /// d loss / d y_pred per element (scaled by 1/n for Mean).
  Error gradient(const float *y_pred, const float *y_true, float *grad, size_t n) const;
  Error gradient(const double *y_pred, const double *y_true, double *grad, size_t n) const;
  /// Loss and gradient in one pass; returns the reduced loss (0 for None).
  Expected<double> fused(const float *y_pred, const float *y_true, float *grad, size_t n) const;
  Expected<double> fused(const double *y_pred, const double *y_true, double *grad, size_t n) const;

  /// The same on buffers from getBackend() ("cpu" buffers with CPU methods,
  /// "cuda:N" device memory with Method::Cuda); each holds n elements.
  Expected<double> forward(const DeviceBuffer &yPred, const DeviceBuffer &yTrue, size_t n) const;
  Error gradient(const DeviceBuffer &yPred, const DeviceBuffer &yTrue, const DeviceBuffer &grad, size_t n) const;
  Expected<double> fused(const DeviceBuffer &yPred, const DeviceBuffer &yTrue, const DeviceBuffer &grad, size_t n) const;

  /// As ActivationLayer::setGpuId.
  Error setGpuId(int id);
  int gpuId() const;

  Error setConstant(std::string_view name, double value);
  Expected<double> constant(std::string_view name) const;
  std::string formula() const;
  std::string derivative() const;

  struct Impl;

private:
  friend struct detail::LayerAccess;
  explicit Loss(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  static Expected<Loss> compileImpl(std::string_view formula, const std::map<std::string, double> &constants,
                                    const LossOptions &options);
  std::shared_ptr<Impl> impl_;
};

} // namespace hsnn
