//===- lib/CPU/RowLaunch.h - Row kernels spread over TBB threads -*- C++ -*-===//
//
// How a batch-major layer's row kernels (one per segment of its RowPlan)
// are called: blocks of rows of one segment per task, in place. Shared by
// the cpu_jit engine and the row-shape calibration, which must time the
// kernels as layers run them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CodeGen/KernelSpec.h"
#include "Program/Launch.h"
#include "Program/RowPlan.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace hsnn::detail {

// Batch-major elements per row-kernel call: a nodes-major task's (forBlocks
// groups two 4096-element calls). Calls of 65536 gave two threads 8 tasks at
// batch 2048, which they shared unevenly: batch-major fell further behind
// nodes-major than with these.
inline constexpr size_t kRowTaskElements = 8192;

/// Runs segment g's kernel fns[g] over the batch x nodes arrays; its
/// constants start at table + tableAt[g].
template <class T>
void launchRows(const std::vector<RowSegment> &plan, const std::vector<void *> &fns, const T *table,
                const std::vector<size_t> &tableAt, size_t nodes, size_t batch, const T *z, const T *err, T *out0,
                T *out1) {
  const size_t segments = plan.size();
  if (batch == 0 || segments == 0)
    return;
  size_t rows = std::clamp<size_t>(kRowTaskElements / nodes, 1, batch), blocks = (batch + rows - 1) / rows;
  forBlocks(blocks * segments, rows * nodes / segments, [&](size_t t) {
    size_t g = t % segments;
    const RowSegment &seg = plan[g];
    size_t r0 = t / segments * rows, at = r0 * nodes + seg.first;
    auto fn = reinterpret_cast<RowKernelFn<T>>(fns[g]);
    fn(z + at, err ? err + at : nullptr, out0 + at, out1 ? out1 + at : nullptr, table + tableAt[g],
       int64_t(std::min(rows, batch - r0)), int64_t(nodes), int64_t(seg.periods), int64_t(seg.periods));
  });
}

} // namespace hsnn::detail
