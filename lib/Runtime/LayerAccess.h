//===- lib/Runtime/LayerAccess.h - Compiled models for other code generators -*- C++ -*-===//
#pragma once

#include "Program/Program.h"

#include "hsnn/Layer.h"

#include <array>
#include <deque>
#include <string>
#include <vector>

namespace hsnn::detail {

/// Read access to what compile() built, for ahead-of-time compilation.
struct LayerAccess {
  struct Activation {
    std::vector<std::array<const Program *, 3>> groupPrograms; ///< By ActivationKernel kind.
    std::vector<std::vector<std::string>> groupConstants;
    std::vector<uint32_t> nodeGroup;
    std::vector<double> params;
    std::vector<uint64_t> offsets;
  };
  struct LossModel {
    std::array<const Program *, 4> programs; ///< By LossKernel.
    std::vector<std::string> constants;
    std::vector<double> params;
  };
  static Activation activation(const ActivationLayer &layer);
  static LossModel loss(const Loss &loss);
};

/// A layer's code units: one per distinct formula, or with baked constants
/// one per distinct (formula, constant values). What the JIT, the GPU
/// engine and ahead-of-time compilation each make one kernel set for.
struct UnitPlan {
  std::vector<std::array<const Program *, 3>> programs; ///< Per unit, by ActivationKernel kind.
  std::vector<uint32_t> unitOf;                        ///< Per node.
};
/// Baked programs are added to `baked`, which must outlive the plan.
UnitPlan planUnits(const LayerAccess::Activation &model, bool bakeConstants, std::deque<Program> &baked);

} // namespace hsnn::detail
