//===- lib/Program/Launch.h - Layout loops shared by every CPU engine -*- C++ -*-===//
//
// How a layer's (nodes x batch) or (batch x nodes) arrays are cut into
// contiguous runs of one node, and how those runs are spread over TBB
// threads. The interpreter and the JIT differ only in what runs a run.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Layer.h"

#include <algorithm>
#include <cstddef>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <vector>

namespace hsnn::detail {

/// Below this many elements work stays on the calling thread: scheduling
/// would cost more than it saves.
inline constexpr size_t kSerialElements = 1 << 15;

template <class Body> void forBlocks(size_t tasks, size_t elementsPerTask, Body &&body) {
  if (tasks * elementsPerTask <= kSerialElements) {
    for (size_t t = 0; t < tasks; ++t)
      body(t);
    return;
  }
  size_t grain = std::max<size_t>(1, kSerialElements / 4 / std::max<size_t>(1, elementsPerTask));
  tbb::parallel_for(tbb::blocked_range<size_t>(0, tasks, grain), [&](const tbb::blocked_range<size_t> &r) {
    for (size_t t = r.begin(); t != r.end(); ++t)
      body(t);
  });
}

template <class T> struct ColumnScratch {
  std::vector<T> buf;
};

/// Calls run(node, z, err, out0, out1, len) on contiguous runs of at most
/// `block` elements of one node. err/out1 may be null when unused.
template <class T, class RunNode>
void launchActivation(Layout layout, size_t nodes, size_t batch, const T *z, const T *err, T *out0, T *out1, size_t block,
                      RunNode &&run) {
  if (nodes == 0 || batch == 0)
    return;
  if (layout == Layout::NodesMajor) {
    size_t perNode = (batch + block - 1) / block;
    forBlocks(nodes * perNode, std::min(batch, block), [&](size_t t) {
      size_t n = t / perNode, b0 = (t % perNode) * block, len = std::min(block, batch - b0);
      size_t at = n * batch + b0;
      run(n, z + at, err ? err + at : nullptr, out0 + at, out1 ? out1 + at : nullptr, len);
    });
    return;
  }
  // Batch-major: a task takes a tile of rows and moves it through the
  // kernels kColumns nodes at a time: each row segment read or written is
  // contiguous (whole cache lines), and each node's run is contiguous in
  // the scratch buffer, so the kernels are the nodes-major ones.
  constexpr size_t kColumns = 16;
  size_t rowBlocks = (batch + block - 1) / block;
  forBlocks(rowBlocks, std::min(batch, block) * nodes, [&](size_t t) {
    thread_local ColumnScratch<T> scratch;
    scratch.buf.resize(4 * kColumns * block);
    T *zc = scratch.buf.data(), *ec = zc + kColumns * block, *o0 = ec + kColumns * block, *o1 = o0 + kColumns * block;
    size_t r0 = t * block, len = std::min(block, batch - r0);
    for (size_t n0 = 0; n0 < nodes; n0 += kColumns) {
      size_t w = std::min(kColumns, nodes - n0);
      for (size_t r = 0; r < len; ++r) {
        const T *row = z + (r0 + r) * nodes + n0;
        for (size_t c = 0; c < w; ++c)
          zc[c * block + r] = row[c];
      }
      if (err)
        for (size_t r = 0; r < len; ++r) {
          const T *row = err + (r0 + r) * nodes + n0;
          for (size_t c = 0; c < w; ++c)
            ec[c * block + r] = row[c];
        }
      for (size_t c = 0; c < w; ++c)
        run(n0 + c, zc + c * block, err ? ec + c * block : nullptr, o0 + c * block, out1 ? o1 + c * block : nullptr, len);
      for (size_t r = 0; r < len; ++r) {
        T *row = out0 + (r0 + r) * nodes + n0;
        for (size_t c = 0; c < w; ++c)
          row[c] = o0[c * block + r];
      }
      if (out1)
        for (size_t r = 0; r < len; ++r) {
          T *row = out1 + (r0 + r) * nodes + n0;
          for (size_t c = 0; c < w; ++c)
            row[c] = o1[c * block + r];
        }
    }
  });
}

/// Calls run(i0, len) -> partial sum over blocks of `block` elements and
/// adds the partial sums in an order fixed by n alone, so a reduction gives
/// the same bits on every run and thread count.
template <class RunBlock> double launchLoss(size_t n, size_t block, RunBlock &&run) {
  size_t blocks = (n + block - 1) / block;
  auto one = [&](size_t b) { return run(b * block, std::min(block, n - b * block)); };
  if (n <= kSerialElements) {
    double total = 0;
    for (size_t b = 0; b < blocks; ++b)
      total += one(b);
    return total;
  }
  return tbb::parallel_deterministic_reduce(
      tbb::blocked_range<size_t>(0, blocks, 8), 0.0,
      [&](const tbb::blocked_range<size_t> &r, double acc) {
        for (size_t b = r.begin(); b != r.end(); ++b)
          acc += one(b);
        return acc;
      },
      [](double a, double b) { return a + b; });
}

} // namespace hsnn::detail
