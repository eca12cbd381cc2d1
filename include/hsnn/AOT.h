//===- hsnn/AOT.h - Ahead-of-time compilation to objects and C headers -*- C++ -*-===//
//
// A layer or loss compiled to an object file that needs neither LLVM, TBB
// nor hsnn at link time (only libm, and libmvec when vector math was used:
// link with -lmvec -lm), plus a C header declaring its entry points.
//
// C ABI of a layer NAME with element type T (float or double):
//   void NAME_forward (const T *z, T *a, int64_t batch, const double *params);
//   void NAME_backward(const T *z, const T *err, T *delta, int64_t batch, const double *params);
//   void NAME_fused   (const T *z, T *a, T *dfdz, int64_t batch, const double *params);
//   void NAME_constant_gradient(const T *z, const T *err, double *grads, int64_t batch, const double *params);
//     (trainable constants: grads[i] = sum over node n's batch of err * da/dparams[i], i from NAME_param_offsets[n])
// and NAME_forward_range(..., int64_t node_begin, int64_t node_end) etc. for
// nodes [node_begin, node_end), so the application can parallelise with
// whatever it uses. Arrays hold nodes * batch elements in the layer's
// layout; params is NAME_default_params or a copy with changed values
// (node n's constants at NAME_param_offsets[n], sorted by name).
//
// A loss NAME exports the kernels of KernelSpec's LossFn ABI:
//   double NAME_sum     (const T *yp, const T *yt, T *unused, const double *params, int64_t n, T scale);
//   double NAME_elements(..., T *out, ...), NAME_gradient(..., T *grad, ..., T scale), NAME_fused(...),
//   NAME_constant_gradient(..., double *grads, ..., double scale) (grads[j] = scale * sum of dl/dparams[j])
// where the mean loss is NAME_sum(...)/n and its gradient uses scale = 1/n.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Error.h"
#include "hsnn/Layer.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace hsnn {

enum class AotOutput { Object, Assembly, LLVMIR };

struct AotOptions {
  AotOutput output = AotOutput::Object;
  // {} on the members without a value: a designated initializer that leaves
  // them out ({.triple = ...}) is then not a -Wmissing-field-initializers.
  std::string triple{};   ///< Default: the host's.
  std::string cpu{};      ///< Default: the host CPU for the host triple, else "generic".
  std::string features{}; ///< Extra target features, e.g. "+avx2".
  /// Batch-major row kernels' shape, "BxP": B blocks a pass (1, 2, 4), P
  /// bytes prefetched ahead (0-65536, a multiple of 64). Empty: the shape
  /// measured best on machines of `cpu`'s kind. Speed only: every shape
  /// gives the same bits.
  std::string rowShape{};
  int optLevel = 3;
  bool bakeConstants = false;
  /// Compile the formulas differentiated this many times (d/dnum, or
  /// d/dy_pred for a loss; at most 8): NAME_forward then computes f^(K),
  /// NAME_backward err * f^(K+1), NAME_constant_gradient sums err * d f^(K)/dc.
  unsigned order = 0;
  /// Losses: the reduction of the header's NAME_loss and NAME_loss_gradient
  /// (mean divides by n and scales the gradient by 1/n; sum does neither).
  Reduction reduction = Reduction::Mean;
  /// Told as machine code is generated, in functions (done, total): a layer
  /// of thousands of distinct formulas takes seconds. Called on the
  /// compiling thread.
  std::function<void(size_t done, size_t total)> progress{};
};

struct AotArtifact {
  std::vector<char> bytes; ///< The object, assembly or IR.
  std::string header;      ///< The C header declaring the entry points.
};

Expected<AotArtifact> compileLayerAot(const std::string &name, const std::vector<NodeSpec> &nodes, DType dtype,
                                      Layout layout, const AotOptions &options = {});
Expected<AotArtifact> compileLossAot(const std::string &name, const std::string &formula,
                                     const std::map<std::string, double> &constants, DType dtype,
                                     const AotOptions &options = {});

/// PTX for an NVIDIA GPU (`arch` = sm_XY), needing no GPU. A layer is six
/// kernels, each one launch for the whole layer whatever its formulas:
/// NAME_{forward,backward,fused}_{nodes_major,batch_major}, taking (z,
/// err or null, out0, out1 or null, params, unit_of, param_offsets, batch,
/// nodes, first_node); nodes_major launches grid.y = nodes (65535 at most
/// per launch), batch_major a 1-D grid over batch * nodes. The PTX's
/// header comment gives the ABI, unit_of (which formula each node runs),
/// the param offsets and defaults. A loss is NAME_elements/_sum/_gradient/
/// _fused (partial sums per thread in an extra double* argument).
/// `order` as AotOptions::order.
Expected<std::string> compileLayerPtx(const std::string &name, const std::vector<NodeSpec> &nodes, DType dtype,
                                      const std::string &arch, int optLevel = 3, unsigned order = 0);
Expected<std::string> compileLossPtx(const std::string &name, const std::string &formula,
                                     const std::map<std::string, double> &constants, DType dtype,
                                     const std::string &arch, int optLevel = 3, unsigned order = 0);

} // namespace hsnn
