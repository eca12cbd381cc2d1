//===- lib/CPU/RowCalibration.h - Row kernel shapes measured on the host -*- C++ -*-===//
//
// Which row-kernel shape (RowShape.h) is fastest depends on the machine:
// on a Zen 4 prefetching 4 KiB ahead made W2's batch-major backward slower
// than its nodes-major one in one week's measurements, and no prefetch
// faster; an Intel VM wanted one block a pass, the Zen 4 four. Rather than
// a table by CPU name that each new machine would need measured by hand,
// the cpu_jit engine times the candidate shapes on the host once, on a
// probe layer, and stores the winner in the disk cache under the host's
// identity. Only a compile that builds row kernels asks for it; a cache
// hit never does.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Cache/ObjectCache.h"
#include "CodeGen/RowShape.h"
#include "hsnn/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace hsnn::detail {

/// The shapes a calibration times: 1 and 4 blocks a pass, each with no
/// prefetch and with 4 KiB ahead (the distance measured best of 1-8 KiB
/// where prefetching paid). Two blocks a pass was never the fastest in
/// measurements on Zen 4 and an Intel VM, and each candidate costs a
/// compile.
std::vector<RowShape> candidateRowShapes();

struct RowCalibration {
  RowShape best;
  /// Per candidate, in candidateRowShapes() order: the probe's forward +
  /// backward time in ms (median of the rounds).
  std::vector<std::pair<RowShape, double>> timings;
  double compileMs = 0, measureMs = 0;
};

/// Compiles the probe layer's row kernels (W1 of `hsnn-jit bench`: relu,
/// sigmoid, tanh, gelu, silu, softplus, sin(num), 0.5*num+0.1 repeated, f32,
/// 16384 x 256) in every candidate shape and times their forward and
/// backward calls alternating, on TBB's threads as layers run.
Expected<RowCalibration> calibrateRowShapes();

/// HSNN_ROW_SHAPE ("BxP", e.g. 4x0): a fixed shape for every row kernel
/// this process compiles (reproducible builds, measurements), which then
/// also keys the cache. Nullopt when unset; an error when malformed.
Expected<std::optional<RowShape>> rowShapeOverride();

struct RowShapeChoice {
  RowShape shape;
  std::string timings; ///< Measured: "SHAPE MS\n" per candidate; else empty.
  bool measured = false; ///< False: fixedRowShape, the host could not be measured.
};

/// The host's shape: as stored in the cache at `config` by an earlier
/// calibration on this host (same CPU, features, hsnn and LLVM), else
/// calibrated now and stored. If calibrating fails, fixedRowShape(cpu),
/// with a warning, not stored.
RowShapeChoice loadOrCalibrateRowShape(const CacheConfig &config);
/// loadOrCalibrateRowShape once per process (with no cache, that is a
/// calibration per process).
RowShape hostRowShape(const CacheConfig &config);
/// What hostRowShape chose in this process, if it has been asked.
std::optional<RowShapeChoice> processRowShape();

/// What hostRowShape would read, without measuring: the stored shape and
/// the entry's text (the shape, then a line per candidate: shape and ms),
/// or nullopt.
std::optional<std::pair<RowShape, std::string>> storedRowShape(const CacheConfig &config);

} // namespace hsnn::detail
