//===- lib/Program/RowPlan.h - Batch-major layers cut into periodic segments -*- C++ -*-===//
//
// A batch-major layer keeps each row's nodes side by side, so a vector of
// one node's elements would be a strided gather. But real layers repeat a
// short pattern of formulas (node j runs formula j % 8; or blocks of one
// formula): within such a segment a row is periods of P nodes, and a row
// kernel loads P vectors, separates them into one vector per slot with
// register shuffles and interleaves the results back, with no transposes
// through memory. This plans the segments; layers with no such structure
// keep the tile transposes. LLVM-free.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace hsnn::detail {

/// Nodes [first, first + periods * slots.size()) of a layer: node
/// first + q*P + s runs unit slots[s].
struct RowSegment {
  size_t first = 0, periods = 0;
  std::vector<uint32_t> slots;
};

/// Longest period a row kernel handles: P loaded vectors per step.
inline constexpr size_t kMaxRowPeriod = 16;

/// Cuts nodes 0..N-1 (node n runs unitOf[n]) into segments, greedily: at
/// each position the period (1..kMaxRowPeriod, smallest first) covering the
/// most nodes with at least `lanes` periods, else a run of one unit. None
/// when the vectors would be less than half full (scattered formulas):
/// the caller transposes tiles instead.
inline std::optional<std::vector<RowSegment>> planRowSegments(std::span<const uint32_t> unitOf, size_t lanes) {
  const size_t n = unitOf.size();
  std::vector<RowSegment> plan;
  size_t computed = 0; // elements the vectors compute per row, tails included
  for (size_t a = 0; a < n;) {
    size_t bestP = 0, bestLen = 0;
    for (size_t p = 1; p <= kMaxRowPeriod && a + p <= n; ++p) {
      size_t len = p;
      while (a + len < n && unitOf[a + len] == unitOf[a + (len - p)])
        ++len;
      len -= len % p;
      if (len / p >= lanes && len > bestLen)
        bestP = p, bestLen = len;
    }
    if (bestP == 0) { // no period fills a vector: a run of one unit
      bestP = 1;
      while (a + bestLen < n && unitOf[a + bestLen] == unitOf[a])
        ++bestLen;
    }
    RowSegment seg{a, bestLen / bestP, std::vector<uint32_t>(unitOf.begin() + a, unitOf.begin() + a + bestP)};
    computed += (seg.periods + lanes - 1) / lanes * lanes * bestP;
    plan.push_back(std::move(seg));
    a += bestLen;
  }
  if (n == 0 || 2 * n < computed)
    return std::nullopt;
  return plan;
}

} // namespace hsnn::detail
