//===- tools/hsnn-jit/CompileScaling.h - How compile time grows -*- C++ -*-===//
#pragma once

#include "BenchCommon.h"

#include <string>
#include <vector>

namespace hsnn::cli {

/// One row of the compile workload's table (CompileScaling.cpp).
struct CompileScalingRow {
  std::string what;
  size_t formulas = 0;
  double jitMs = 0;    ///< cpu_jit: compile + one forward pass.
  double interpMs = 0; ///< cpu_interp: the same; 0: not measured.
  double codegenMs = 0;
  size_t objectBytes = 0;
};

/// Layers of distinct formulas: math calls per formula, formula counts, one
/// formula changed in a layer of 1000 (formulas 100 a row with --reps of 10
/// or more, else 20).
Error runCompileScaling(const BenchOptions &o, std::vector<CompileScalingRow> &rows);
void printCompileScaling(const std::vector<CompileScalingRow> &rows);

} // namespace hsnn::cli
