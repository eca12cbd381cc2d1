//===- lib/Program/Launch.h - Layout loops shared by every CPU engine -*- C++ -*-===//
//
// How a layer's (nodes x batch) or (batch x nodes) arrays are cut into
// contiguous runs of one node, and how those runs are spread over TBB
// threads. The interpreter and the JIT differ only in what runs a run.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <vector>

namespace hsnn::detail {

/// Below this many elements work stays on the calling thread: scheduling
/// would cost more than it saves.
inline constexpr size_t kSerialElements = 1 << 15;

/// The pool this thread's kernels spread over (ScopedParallelFor); `run`
/// null: TBB's.
ParallelFor &threadParallelFor();

template <class Body> void forBlocks(size_t tasks, size_t elementsPerTask, Body &&body) {
  if (tasks * elementsPerTask <= kSerialElements) {
    for (size_t t = 0; t < tasks; ++t)
      body(t);
    return;
  }
  size_t grain = std::max<size_t>(1, kSerialElements / 4 / std::max<size_t>(1, elementsPerTask));
  if (const ParallelFor &pool = threadParallelFor(); pool.run) {
    using B = std::remove_reference_t<Body>;
    pool.run(
        pool.pool, tasks, grain,
        [](void *ctx, size_t begin, size_t end) {
          for (size_t t = begin; t != end; ++t)
            (*static_cast<B *>(ctx))(t);
        },
        const_cast<void *>(static_cast<const void *>(std::addressof(body))));
    return;
  }
  tbb::parallel_for(tbb::blocked_range<size_t>(0, tasks, grain), [&](const tbb::blocked_range<size_t> &r) {
    for (size_t t = r.begin(); t != r.end(); ++t)
      body(t);
  });
}

/// dst[c * dstStride + r] = src[r * srcStride + c] for r < rows, c < cols:
/// square blocks are transposed in 16-byte registers (4x4 floats or 2x2
/// doubles, which every x86-64 has), the edges element by element.
/// `streamDst` walks the destination's rows in order (writing main memory
/// sequentially); otherwise the source's (reading it sequentially).
template <class T>
void transposeTile(const T *src, size_t srcStride, T *dst, size_t dstStride, size_t rows, size_t cols,
                   bool streamDst = false) {
  constexpr size_t B = 16 / sizeof(T);
  typedef T Vec __attribute__((vector_size(16)));
  size_t rb = rows - rows % B, cb = cols - cols % B;
  size_t outer = streamDst ? cb : rb, inner = streamDst ? rb : cb;
  for (size_t o = 0; o < outer; o += B)
    for (size_t in = 0; in < inner; in += B) {
      size_t r = streamDst ? in : o, c = streamDst ? o : in;
      Vec v[B];
      for (size_t i = 0; i < B; ++i)
        __builtin_memcpy(&v[i], src + (r + i) * srcStride + c, 16);
      if constexpr (B == 4) {
        Vec t0 = __builtin_shufflevector(v[0], v[1], 0, 4, 1, 5);
        Vec t1 = __builtin_shufflevector(v[0], v[1], 2, 6, 3, 7);
        Vec t2 = __builtin_shufflevector(v[2], v[3], 0, 4, 1, 5);
        Vec t3 = __builtin_shufflevector(v[2], v[3], 2, 6, 3, 7);
        v[0] = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
        v[1] = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
        v[2] = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
        v[3] = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
      } else {
        Vec t0 = __builtin_shufflevector(v[0], v[1], 0, 2);
        v[1] = __builtin_shufflevector(v[0], v[1], 1, 3);
        v[0] = t0;
      }
      for (size_t i = 0; i < B; ++i)
        __builtin_memcpy(dst + (c + i) * dstStride + r, &v[i], 16);
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
  // Batch-major: a task transposes a tile of up to `block` rows and
  // kTileNodes columns into a (columns x rows) scratch, runs the nodes-major
  // kernels on it and transposes back. Reading and writing row segments
  // keeps the memory streams sequential; bounding both sides keeps the
  // scratch in L2 whatever the shape (a tile as wide as the layer made a
  // 6 MiB call of a very wide layer allocate close to 1 GiB).
  constexpr size_t kTileNodes = 512;
  size_t rows = std::min(batch, block), cols = std::min(nodes, kTileNodes);
  size_t rowBlocks = (batch + block - 1) / block, colBlocks = (nodes + kTileNodes - 1) / kTileNodes;
  forBlocks(rowBlocks * colBlocks, rows * cols, [&](size_t t) {
    thread_local ColumnScratch<T> scratch;
    // A scratch row stride that is not a multiple of 4 KiB: power-of-two
    // strides make loads and stores alias in the store buffer.
    size_t ld = rows + 64 / sizeof(T), plane = cols * ld;
    if (scratch.buf.size() < 4 * plane)
      scratch.buf.resize(4 * plane);
    T *zc = scratch.buf.data(), *ec = zc + plane, *o0 = ec + plane, *o1 = o0 + plane;
    size_t r0 = (t / colBlocks) * block, len = std::min(block, batch - r0);
    size_t c0 = (t % colBlocks) * kTileNodes, cn = std::min(kTileNodes, nodes - c0);
    size_t at = r0 * nodes + c0;
    transposeTile<T>(z + at, nodes, zc, ld, len, cn);
    if (err)
      transposeTile<T>(err + at, nodes, ec, ld, len, cn);
    for (size_t n = 0; n < cn; ++n)
      run(c0 + n, zc + n * ld, err ? ec + n * ld : nullptr, o0 + n * ld, out1 ? o1 + n * ld : nullptr, len);
    transposeTile<T>(o0, ld, out0 + at, nodes, cn, len, /*streamDst=*/true);
    if (out1)
      transposeTile<T>(o1, ld, out1 + at, nodes, cn, len, /*streamDst=*/true);
  });
}

/// A block's sum as its rounded running sum and the sum of that running
/// sum's rounding errors, not yet added: what the host JIT's loss kernels
/// and the interpreter's blocks return, so that adding many blocks' sums
/// rounds once at the end (blocks added as rounded values drifted 8-18 ulp
/// of the exact sum over 10^7 f64 terms that cancel).
struct SumParts {
  double sum = 0, residual = 0;
};

/// A running sum in double with Neumaier's compensation: for a given
/// sequence of terms, the same bits every time.
struct CompensatedSum {
  double sum = 0, comp = 0;
  void add(double x) {
    double t = sum + x;
    comp += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
    sum = t;
  }
  void add(SumParts p) {
    add(p.sum);
    comp += p.residual;
  }
  SumParts parts() const { return {sum, comp}; }
  /// An infinite or NaN sum is already right; its compensation is NaN.
  double value() const { return std::isfinite(sum) ? sum + comp : sum; }
};

/// Calls run(i0, len) -> SumParts over blocks of `block` elements and adds
/// them compensated in an order fixed by n alone, so a reduction gives the
/// same bits on every run and thread count.
template <class RunBlock> double launchLoss(size_t n, size_t block, RunBlock &&run) {
  size_t blocks = (n + block - 1) / block;
  auto one = [&](size_t b) -> SumParts { return run(b * block, std::min(block, n - b * block)); };
  if (n <= kSerialElements) {
    CompensatedSum total;
    for (size_t b = 0; b < blocks; ++b)
      total.add(one(b));
    return total.value();
  }
  return tbb::parallel_deterministic_reduce(
             tbb::blocked_range<size_t>(0, blocks, 8), CompensatedSum{},
             [&](const tbb::blocked_range<size_t> &r, CompensatedSum acc) {
               for (size_t b = r.begin(); b != r.end(); ++b)
                 acc.add(one(b));
               return acc;
             },
             [](CompensatedSum a, const CompensatedSum &b) {
               a.add(b.parts());
               return a;
             })
      .value();
}

} // namespace hsnn::detail
