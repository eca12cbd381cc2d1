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

/// dst[c * dstStride + r] = src[r * srcStride + c] for r < rows, c < cols:
/// square blocks are transposed in registers (8x8 floats or 4x4 doubles as
/// 32-byte vectors), the edges element by element.
template <class T>
void transposeTile(const T *src, size_t srcStride, T *dst, size_t dstStride, size_t rows, size_t cols) {
  constexpr size_t B = 32 / sizeof(T);
  typedef T Vec __attribute__((vector_size(32)));
  size_t rb = rows - rows % B, cb = cols - cols % B;
  for (size_t r = 0; r < rb; r += B)
    for (size_t c = 0; c < cb; c += B) {
      Vec v[B];
      for (size_t i = 0; i < B; ++i)
        __builtin_memcpy(&v[i], src + (r + i) * srcStride + c, 32);
      if constexpr (B == 8) {
        Vec t0 = __builtin_shufflevector(v[0], v[1], 0, 8, 1, 9, 4, 12, 5, 13);
        Vec t1 = __builtin_shufflevector(v[0], v[1], 2, 10, 3, 11, 6, 14, 7, 15);
        Vec t2 = __builtin_shufflevector(v[2], v[3], 0, 8, 1, 9, 4, 12, 5, 13);
        Vec t3 = __builtin_shufflevector(v[2], v[3], 2, 10, 3, 11, 6, 14, 7, 15);
        Vec t4 = __builtin_shufflevector(v[4], v[5], 0, 8, 1, 9, 4, 12, 5, 13);
        Vec t5 = __builtin_shufflevector(v[4], v[5], 2, 10, 3, 11, 6, 14, 7, 15);
        Vec t6 = __builtin_shufflevector(v[6], v[7], 0, 8, 1, 9, 4, 12, 5, 13);
        Vec t7 = __builtin_shufflevector(v[6], v[7], 2, 10, 3, 11, 6, 14, 7, 15);
        Vec u0 = __builtin_shufflevector(t0, t2, 0, 1, 8, 9, 4, 5, 12, 13);
        Vec u1 = __builtin_shufflevector(t0, t2, 2, 3, 10, 11, 6, 7, 14, 15);
        Vec u2 = __builtin_shufflevector(t1, t3, 0, 1, 8, 9, 4, 5, 12, 13);
        Vec u3 = __builtin_shufflevector(t1, t3, 2, 3, 10, 11, 6, 7, 14, 15);
        Vec u4 = __builtin_shufflevector(t4, t6, 0, 1, 8, 9, 4, 5, 12, 13);
        Vec u5 = __builtin_shufflevector(t4, t6, 2, 3, 10, 11, 6, 7, 14, 15);
        Vec u6 = __builtin_shufflevector(t5, t7, 0, 1, 8, 9, 4, 5, 12, 13);
        Vec u7 = __builtin_shufflevector(t5, t7, 2, 3, 10, 11, 6, 7, 14, 15);
        v[0] = __builtin_shufflevector(u0, u4, 0, 1, 2, 3, 8, 9, 10, 11);
        v[4] = __builtin_shufflevector(u0, u4, 4, 5, 6, 7, 12, 13, 14, 15);
        v[1] = __builtin_shufflevector(u1, u5, 0, 1, 2, 3, 8, 9, 10, 11);
        v[5] = __builtin_shufflevector(u1, u5, 4, 5, 6, 7, 12, 13, 14, 15);
        v[2] = __builtin_shufflevector(u2, u6, 0, 1, 2, 3, 8, 9, 10, 11);
        v[6] = __builtin_shufflevector(u2, u6, 4, 5, 6, 7, 12, 13, 14, 15);
        v[3] = __builtin_shufflevector(u3, u7, 0, 1, 2, 3, 8, 9, 10, 11);
        v[7] = __builtin_shufflevector(u3, u7, 4, 5, 6, 7, 12, 13, 14, 15);
      } else {
        Vec t0 = __builtin_shufflevector(v[0], v[1], 0, 4, 2, 6);
        Vec t1 = __builtin_shufflevector(v[0], v[1], 1, 5, 3, 7);
        Vec t2 = __builtin_shufflevector(v[2], v[3], 0, 4, 2, 6);
        Vec t3 = __builtin_shufflevector(v[2], v[3], 1, 5, 3, 7);
        v[0] = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
        v[2] = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
        v[1] = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
        v[3] = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
      }
      for (size_t i = 0; i < B; ++i)
        __builtin_memcpy(dst + (c + i) * dstStride + r, &v[i], 32);
    }
  // Edges: the rows past the last full block, and the columns past it.
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = r < rb ? cb : 0; c < cols; ++c)
      dst[c * dstStride + r] = src[r * srcStride + c];
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
      // rows (stride `nodes`) -> columns (stride `block`)
      transposeTile<T>(z + r0 * nodes + n0, nodes, zc, block, len, w);
      if (err)
        transposeTile<T>(err + r0 * nodes + n0, nodes, ec, block, len, w);
      for (size_t c = 0; c < w; ++c)
        run(n0 + c, zc + c * block, err ? ec + c * block : nullptr, o0 + c * block, out1 ? o1 + c * block : nullptr, len);
      // columns -> rows
      transposeTile<T>(o0, block, out0 + r0 * nodes + n0, nodes, w, len);
      if (out1)
        transposeTile<T>(o1, block, out1 + r0 * nodes + n0, nodes, w, len);
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
