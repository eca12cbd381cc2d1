//===- tools/hsnn-jit/PopulationBench.h - Scoring many new formulas -*- C++ -*-===//
#pragma once

#include "BenchCommon.h"

#include <string>
#include <vector>

namespace hsnn::cli {

/// One row of the population workload's table (PopulationBench.cpp).
struct PopulationRow {
  std::string ops, dtype;
  size_t formulas = 0, rows = 0;
  double nodes = 0;         ///< Sum of the formulas' sizes (tree nodes).
  double prepareMs = 0;     ///< Population::create of new formulas.
  double scoreMs = 0;       ///< fitness (mse), median.
  double firstMs = 0;       ///< create + fitness, new formulas.
  double gradientMs = 0;    ///< constantGradients (numbers as constants), median.
  double layerMs = 0;       ///< The same formulas' cpu_jit layer, one forward; 0: not measured.
  double layerCompileMs = 0;
  double interpMs = 0;      ///< A cpu_interp layer's forward; 0: not measured.
  double copyGBs = 0;       ///< Bandwidth reference, measured beside the row.
};

/// N in {1000, 10^4} random formulas of 1-64 nodes, + - * / alone and with
/// exp/log/sin/cos, over 100 to 10^5 rows (fewer with --reps under 10).
Error runPopulationBench(const BenchOptions &o, std::vector<PopulationRow> &rows);
void printPopulationBench(const std::vector<PopulationRow> &rows);

} // namespace hsnn::cli
