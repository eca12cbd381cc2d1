//===- lib/Model/RowKernels.h - A batch-major layer's row kernels -*- C++ -*-===//
//
// What the host JIT and the ahead-of-time compiler both build for a
// batch-major layer with a row plan (Program/RowPlan.h): one row kernel
// per distinct slot pattern and kind, and the layout of the constants
// table the kernels read (KernelSpec.h's RowKernelFn), as the params index
// of each entry, so a caller fills it with one gather per call.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CodeGen/KernelSpec.h"
#include "Model/CompiledModel.h"
#include "Program/RowPlan.h"

#include <fmt/format.h>
#include <map>

namespace hsnn::detail {

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
      set.requests.push_back({fmt::format("{}_row{}_{}", prefix, it->second, kindName(kind)), programs[0], kind,
                              m.options.dtype, false, std::move(programs)});
  }
  return set;
}

} // namespace hsnn::detail
