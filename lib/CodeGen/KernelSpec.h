//===- lib/CodeGen/KernelSpec.h - What a compiled kernel is and does -*- C++ -*-===//
//
// The contract between the runtime and every code generator (host JIT, and
// later NVPTX and ahead-of-time objects): which kernels exist, their C ABI,
// and which Program roots each one evaluates. LLVM-free.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Program/KernelKind.h"
#include "Program/Launch.h"
#include "Program/Program.h"

#include "hsnn/Layer.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hsnn::detail {

/// Over n contiguous elements:
///   Forward:  out0[i] = f(z[i])
///   Backward: out0[i] = err[i] * f'(z[i])
///   Fused:    out0[i] = f(z[i]), out1[i] = f'(z[i])
/// `params` points at the node's constants (sorted by name).
template <class T>
using ActivationFn = void (*)(const T *z, const T *err, T *out0, T *out1, const double *params, int64_t n);
/// The same for one of several tapes compiled into one function (a request
/// with `units`): `unit` picks the tape.
template <class T>
using MultiActivationFn = void (*)(const T *z, const T *err, T *out0, T *out1, const double *params, int64_t n,
                                   int64_t unit);

/// Over n contiguous elements, returning the sum of the losses in double
/// (the summing kinds; 0 otherwise) as its unadded parts (host JIT kernels:
/// EmitOptions::sumParts; ahead-of-time ones return their sum, a double):
///   LossElements: out[i] = l(yp[i], yt[i])
///   LossGradient: out[i] = scale * g(yp[i], yt[i])
///   LossFused:    out[i] = scale * g(yp[i], yt[i])
template <class T>
using LossFn = SumParts (*)(const T *yPred, const T *yTrue, T *out, const double *params, int64_t n, T scale);

/// A batch-major row kernel (RowPlan.h) over `rows` rows of a segment of
/// periods of P nodes: element (r, q, s) is at [r*ld + q*P + s], node (q, s)
/// runs slot s's tape (the activation kind's semantics above). Its constant
/// j is constants[(base_s + j) * stride + q] (rowConstantRows gives the
/// base_s; stride >= periods, so a run of a segment's periods can use the
/// segment's table), converted to T: each lane's constants are one vector
/// load.
template <class T>
using RowKernelFn = void (*)(const T *z, const T *err, T *out0, T *out1, const T *constants, int64_t rows,
                             int64_t ld, int64_t periods, int64_t stride);

/// Entries past a row kernel's constants table that its loads may touch (a
/// vector of any width; those lanes are never stored): zeros.
inline constexpr size_t kRowTablePadding = 64;

/// The first row of each slot's constants in a row kernel's table, and the
/// total (last entry): slot s's tape reads constants 0 .. (highest index it
/// uses) of its node.
inline std::vector<size_t> rowConstantRows(const std::vector<const Program *> &slots) {
  std::vector<size_t> rows{0};
  for (const Program *p : slots) {
    size_t k = 0;
    for (const Instr &in : p->code)
      if (in.op == Op::Param)
        k = std::max<size_t>(k, in.param + 1);
    rows.push_back(rows.back() + k);
  }
  return rows;
}

/// One kernel to generate: its symbol, the tape, and its kind and type.
struct KernelRequest {
  std::string symbol;
  const Program *program = nullptr;
  KernelKind kind = KernelKind::Forward;
  DType dtype = DType::F32;
  /// Activation kernels only: element i is at [i * stride] (an extra i64
  /// stride argument after n), for batch-major columns in AOT code.
  bool strided = false;
  /// Activation kinds: a row kernel (RowKernelFn) whose slot s runs
  /// rowSlots[s]; `program` is then rowSlots[0].
  std::vector<const Program *> rowSlots{};
  /// Elementwise activation kinds, contiguous: one function for these
  /// tapes (MultiActivationFn), its loop around a switch on `unit`: code
  /// generation's cost here is mostly per function, most of it the loop,
  /// so a layer of many formulas compiles much faster. `program` is units[0].
  std::vector<const Program *> units{};
};

/// A layer's GPU kernel of one activation kind: one launch runs every node.
///   void SYMBOL(const T *z, const T *err, T *out0, T *out1, const double *params,
///               const uint32_t *unitOf, const uint64_t *offsets,
///               int64_t batch, int64_t nodes, int64_t firstNode)
/// unitOf[node] picks the node's program from `units`, offsets[node] its
/// constants in params. Nodes-major: node = firstNode + blockIdx.y, and the
/// x threads stride over its batch elements (the unit is uniform per block).
/// Batch-major: blocks of exactly kBatchMajorBlock threads walk tiles of
/// kBatchMajorTileRows rows x kBatchMajorTileNodes nodes along a 1-D grid
/// (firstNode unused): a warp computes one node at a time.
inline constexpr unsigned kBatchMajorTileRows = 64, kBatchMajorTileNodes = 32, kBatchMajorBlock = 256;
struct GpuLayerKernel {
  std::string symbol;
  KernelKind kind = KernelKind::Forward;
  DType dtype = DType::F32;
  Layout layout = Layout::NodesMajor;
  std::vector<const Program *> units;
};

/// A population's interpreter (Program/DeviceCode.h), made once per device
/// and dtype (and loss): one launch runs every formula of a DeviceCode.
///   void SYMBOL(const T *x, int64_t rowStride, int64_t varStride,
///               const uint32_t *steps, const uint64_t *stepStart,
///               const double *scalars, const uint64_t *scalarStart,
///               const uint32_t *outputs, int64_t rows, int64_t firstFormula,
///               T *values, const T *y, const T *weights,
///               const double *lossParams, double *partials)
/// Formula f = firstFormula + blockIdx.y; the x threads stride over the
/// rows; variable j of row r is x[r * rowStride + j * varStride]. Without a
/// loss: values[f * rows + r] = the formula's value (y .. partials unused).
/// With one: each warp leaves the sum over its rows of loss(value, y[r])
/// (times weights[r] where weights is not null) in double at
/// partials[f * warps + warp], warps = gridDim.x * blockDim.x / 32, added
/// across the warp in a fixed tree; `sumKernel` adds a formula's partials
/// (a segment each). values is unused.
struct GpuPopulationKernel {
  std::string symbol;
  DType dtype = DType::F32;
  /// The loss (y_pred, y_true; its constants from lossParams), or null.
  const Program *loss = nullptr;
};

/// What one PTX module holds. Loss kernels (KernelRequest, loss kinds):
///   void SYMBOL(const T *yp, const T *yt, T *out, const double *params,
///               int64_t n, T scale, double *partials)
/// The summing kinds leave one partial sum per warp, in
/// partials[global thread / 32], each added across its warp in a fixed tree
/// order; `sumKernel`,
///   void SUM(const double *partials, int64_t count, double *result)
/// launched with a block of sumKernelThreads(count) threads per segment
/// (blockIdx.x; segment s adds partials[s*count .. s*count + count)), adds
/// those in an order fixed by count alone: the same input gives the same bits.
/// `valueKernel`, SUM's twin for a loss whose value stays on the device,
///   void VALUE(const double *partials, int64_t count, T *value, double divisor)
/// (one block of sumKernelThreads(count)) adds them in the same order and
/// stores T(sum / divisor) at value[0]: the bits the host gets from SUM's
/// sum divided by n (mean) or 1 and converted.
struct GpuModuleSpec {
  std::vector<GpuLayerKernel> layers;
  std::vector<KernelRequest> losses;
  std::vector<GpuPopulationKernel> populations;
  std::string sumKernel;   ///< Empty: none.
  std::string valueKernel; ///< Empty: none.
  DType valueType = DType::F32;
};

/// The block size SUM is launched with for `count` partials a segment: a
/// thread for every partial up to 1024 (whole warps). One warp, as before,
/// added a loss's ~8000 partials (an H200 full of blocks) one dependent load
/// after another, ~260 loads at L2 latency: as long as the loss kernel
/// itself over 2^24 floats.
inline constexpr unsigned sumKernelThreads(uint64_t count) {
  return unsigned(count >= 1024 ? 1024 : count <= 32 ? 32 : (count + 31) / 32 * 32);
}

/// Ahead-of-time entry points of a layer (see hsnn/AOT.h for the C ABI).
struct LayerEntryPoints {
  std::string name;
  DType dtype = DType::F32;
  Layout layout = Layout::NodesMajor;
  std::vector<uint64_t> offsets;            ///< Per node, into params.
  std::vector<double> defaultParams;        ///< The spec's constant values.
  std::vector<std::string> nodeKernel[3];   ///< Kernel symbol per node, per activation kind.
  /// Per activation kind, per node: its case in a kernel of several
  /// formulas (KernelRequest::units); empty: single-formula kernels.
  std::vector<int64_t> nodeCase[3];
  std::vector<std::string> constantKernel;  ///< Per node, its ConstantGradient kernel (empty: none).
  /// Batch-major layers with a row plan (RowPlan.h): the entry points run
  /// the whole periods of these segments through row kernels, filling the
  /// constants table (entry i = params[rowTableSource[kind][i]]) at each
  /// call, and the other nodes through the per-node kernels.
  struct RowSegmentEntry {
    uint64_t first = 0, periods = 0, slots = 1; ///< Nodes first .. first + periods * slots.
    std::string kernel[3];  ///< Per activation kind.
    uint64_t tableAt[3] = {}; ///< Per activation kind: its first table entry.
  };
  std::vector<RowSegmentEntry> rowSegments;
  std::vector<uint64_t> rowTableSource[3];
};

} // namespace hsnn::detail
