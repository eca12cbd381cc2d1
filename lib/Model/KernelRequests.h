//===- lib/Model/KernelRequests.h - A layer's kernels, as requests -*- C++ -*-===//
//
// What the host JIT and the ahead-of-time compiler both build for a layer:
// - elementwise kernels with several formulas per function (a switch in
//   the loop): code generation costs ~1.5 ms per function whatever its size;
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
#include <map>
#include <string>
#include <string_view>

namespace hsnn::detail {

/// Up to kMaxUnitsPerKernel formulas per function, in at least
/// kMultiKernels functions per kind (parallel code generation): the W1
/// layer's cold compile went from 25 to 15 ms, 2000 formulas from 5.3 to
/// 0.9 s.
inline constexpr size_t kMultiKernels = 2, kMaxUnitsPerKernel = 64;

struct MultiKernelSet {
  std::vector<KernelRequest> requests;
  std::vector<size_t> requestOf; ///< Per unit.
  std::vector<int64_t> caseOf;   ///< Per unit: its case in its request.
};

/// PREFIX + TAG + index + "_" + kind ("layer_u3_forward"): a compile's
/// cache hit builds these, and fmt's formatting code, cold in a fresh
/// process, measured a tenth of such a hit.
inline std::string kernelSymbol(std::string_view prefix, std::string_view tag, size_t index, KernelKind kind) {
  std::string s(prefix);
  s += tag;
  s += std::to_string(index);
  s += '_';
  s += kindName(kind);
  return s;
}

/// The kind's kernels for every unit of `m`, named PREFIX_u<first unit>_<kind>;
/// `strided` as KernelRequest::strided.
inline MultiKernelSet multiUnitKernels(const CompiledModel &m, KernelKind kind, const std::string &prefix,
                                       bool strided = false) {
  MultiKernelSet set;
  size_t per = std::clamp<size_t>((m.units.size() + kMultiKernels - 1) / kMultiKernels, 1, kMaxUnitsPerKernel);
  for (size_t u0 = 0; u0 < m.units.size(); u0 += per) {
    KernelRequest r{kernelSymbol(prefix, "_u", u0, kind), m.units[u0].programs[size_t(kind)], kind,
                    m.options.dtype, strided};
    for (size_t u = u0; u < std::min(u0 + per, m.units.size()); ++u) {
      set.caseOf.push_back(int64_t(r.units.size()));
      set.requestOf.push_back(set.requests.size());
      r.units.push_back(m.units[u].programs[size_t(kind)]);
    }
    set.requests.push_back(std::move(r));
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
