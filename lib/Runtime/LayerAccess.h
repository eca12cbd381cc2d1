//===- lib/Runtime/LayerAccess.h - Compiled models for other code generators -*- C++ -*-===//
#pragma once

#include "Program/Program.h"

#include "hsnn/Layer.h"

#include <array>
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

} // namespace hsnn::detail
