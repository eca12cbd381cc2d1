//===- lib/Model/KernelRequests.h - A layer's kernels, as requests -*- C++ -*-===//
//
// What the host JIT and the ahead-of-time compiler both build for a layer:
// - elementwise kernels with several formulas per function (a switch in
//   the loop): code generation's cost is mostly per function, whatever
//   its size;
// - for a batch-major layer with a row plan (Program/RowPlan.h), one row
//   kernel per distinct slot pattern and kind, and the layout of the
//   constants table the kernels read (KernelSpec.h's RowKernelFn), as the
//   params index of each entry, so a caller fills it with one gather per call.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CodeGen/KernelSpec.h"
#include "Model/CompiledModel.h"
#include "Program/RowPlan.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>

namespace hsnn::detail {

/// Up to kMaxUnitsPerKernel formulas per function, in at least
/// kMultiKernels functions per kind (parallel code generation): the W1
/// layer's cold compile and that of 2000 formulas measured much shorter so
/// (the DEVLOG has the runs).
inline constexpr size_t kMultiKernels = 2, kMaxUnitsPerKernel = 64;

struct MultiKernelSet {
  std::vector<KernelRequest> requests;
  std::vector<size_t> requestOf; ///< Per unit.
  std::vector<int64_t> caseOf;   ///< Per unit: its case in its request.
};

/// PREFIX + TAG + index + "_" + kind ("layer_u3_forward"): a compile's
/// cache hit builds these, and fmt's formatting code, cold in a fresh
/// process, measured a noticeable share of such a hit.
inline std::string kernelSymbol(std::string_view prefix, std::string_view tag, size_t index, KernelKind kind) {
  std::string s(prefix);
  s += tag;
  s += std::to_string(index);
  s += '_';
  s += kindName(kind);
  return s;
}

namespace kernel_split {
// FNV-1a: a hash that is the same in every process and build, for names
// and cuts that cache keys depend on.
inline uint64_t stableHash(std::string_view bytes, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : bytes)
    h = (h ^ c) * 0x100000001b3ull;
  return h;
}
// Content-defined cuts (large layers): a function ends after a unit whose
// tape hashes to 0 mod kCutEvery once it holds kMinUnits, or at
// kMaxUnitsPerKernel. A formula added, removed or changed moves only the
// cuts around it, so the other functions keep their tapes, names and
// cache keys: a layer of 1000 formulas with one changed recompiles one
// function per kind.
inline constexpr size_t kMinUnits = 16, kCutEvery = 32;
} // namespace kernel_split

/// The kind's kernels for every unit of `m`; `strided` as KernelRequest::strided.
/// Up to 2 kMaxUnitsPerKernel units: split evenly in kMultiKernels
/// functions named PREFIX_u<first unit>_<kind>; more: cut by content
/// (kernel_split) and named PREFIX_f<hash of the tapes>_<kind>.
inline MultiKernelSet multiUnitKernels(const CompiledModel &m, KernelKind kind, const std::string &prefix,
                                       bool strided = false) {
  using namespace kernel_split;
  MultiKernelSet set;
  const size_t n = m.units.size();
  const bool byContent = n > 2 * kMaxUnitsPerKernel;
  std::vector<uint64_t> hash(n);
  if (byContent)
    for (size_t u = 0; u < n; ++u)
      hash[u] = stableHash(m.units[u].programs[size_t(kind)]->fingerprint());
  size_t per = std::clamp<size_t>((n + kMultiKernels - 1) / kMultiKernels, 1, kMaxUnitsPerKernel);
  std::map<std::string, size_t> named;
  for (size_t u0 = 0; u0 < n;) {
    size_t end = std::min(u0 + per, n);
    if (byContent) {
      end = u0 + 1;
      while (end < n && end - u0 < kMaxUnitsPerKernel && !(end - u0 >= kMinUnits && hash[end - 1] % kCutEvery == 0))
        ++end;
    }
    std::string symbol = kernelSymbol(prefix, "_u", u0, kind);
    if (byContent) {
      uint64_t h = stableHash(kindName(kind));
      for (size_t u = u0; u < end; ++u)
        h = stableHash(std::string_view(reinterpret_cast<const char *>(&hash[u]), sizeof hash[u]), h);
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
      size_t same = named[hex]++; // two functions of one hash: never met, but names must differ
      symbol = prefix + "_f" + hex + (same ? "x" + std::to_string(same) : "") + "_" + std::string(kindName(kind));
    }
    KernelRequest r{symbol, m.units[u0].programs[size_t(kind)], kind, m.options.dtype, strided};
    for (size_t u = u0; u < end; ++u) {
      set.caseOf.push_back(int64_t(r.units.size()));
      set.requestOf.push_back(set.requests.size());
      r.units.push_back(m.units[u].programs[size_t(kind)]);
    }
    set.requests.push_back(std::move(r));
    u0 = end;
  }
  return set;
}

struct RowKernelSet {
  std::vector<KernelRequest> requests; ///< One per distinct slot pattern.
  std::vector<size_t> requestOf;       ///< Per segment.
  std::vector<size_t> tableAt;         ///< Per segment: its first table entry.
  std::vector<uint64_t> tableSource;   ///< Per table entry: its index into the params.
};

/// Kernels named PREFIX_row<i>_<kind>.
inline RowKernelSet rowKernels(const std::vector<RowSegment> &plan, const CompiledModel &m, KernelKind kind,
                               const std::string &prefix) {
  RowKernelSet set;
  std::map<std::vector<uint32_t>, size_t> seen;
  for (const RowSegment &seg : plan) {
    std::vector<const Program *> programs;
    for (uint32_t u : seg.slots)
      programs.push_back(m.units[u].programs[size_t(kind)]);
    // Slot s's constant j of period q at (rows[s] + j) * periods + q.
    std::vector<size_t> rows = rowConstantRows(programs);
    set.tableAt.push_back(set.tableSource.size());
    const size_t P = seg.slots.size();
    for (size_t s = 0; s < P; ++s)
      for (size_t j = 0; j < rows[s + 1] - rows[s]; ++j)
        for (size_t q = 0; q < seg.periods; ++q)
          set.tableSource.push_back(m.offsets[seg.first + q * P + s] + j);
    auto [it, fresh] = seen.try_emplace(seg.slots, set.requests.size());
    set.requestOf.push_back(it->second);
    if (fresh)
      set.requests.push_back({kernelSymbol(prefix, "_row", it->second, kind), programs[0], kind,
                              m.options.dtype, false, std::move(programs)});
  }
  return set;
}

} // namespace hsnn::detail
