//===- lib/CUDA/GpuPopulation.h - Populations run on an NVIDIA GPU -*- C++ -*-===//
//
// A population's formulas in one launch (KernelSpec.h's
// GpuPopulationKernel): the interpreter kernel is made once per device,
// dtype and loss (the same loss every generation of a search) and kept for
// the process; each call uploads the population's code (Program/DeviceCode.h)
// and data, runs, and brings back values or scores. Scores are added on the
// device in a fixed order: the same bits on every run.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "GpuEngine.h"

#include "Program/DeviceCode.h"

#include <memory>

namespace hsnn::detail {

/// The data of a call, host arrays of the population's dtype: variable j of
/// row r at x[r * rowStride + j * varStride].
struct GpuPopulationData {
  const void *x = nullptr;
  size_t xElements = 0, rows = 0;
  int64_t rowStride = 0, varStride = 0;
  const void *y = nullptr;       ///< Scores: the targets (rows).
  const void *weights = nullptr; ///< Scores: per-row weights, or null.
};

class GpuPopulation {
public:
  /// The interpreter for `device` and `dtype` (with `loss`, a tape in y_pred
  /// and y_true, its scores too), built or taken from the cache at its first
  /// request in the process.
  static Expected<std::shared_ptr<const GpuPopulation>> get(int device, DType dtype, const Program *loss,
                                                            const GpuBuildOptions &options);
  virtual ~GpuPopulation() = default;

  /// out[f * rows + r]: formula f's value at row r.
  virtual Error evaluate(const DeviceCode &code, const GpuPopulationData &data, void *out) const = 0;
  /// sums[f]: formula f's loss summed over the rows (times the weights), in
  /// double; lossParams are the loss's constants.
  virtual Error lossSums(const DeviceCode &code, const GpuPopulationData &data, const std::vector<double> &lossParams,
                         double *sums) const = 0;
};

} // namespace hsnn::detail
