//===- hsnn/Population.h - Many new formulas, scored at once ----*- C++ -*-===//
//
// The loop of a formula search (neuroevolution, symbolic regression, grid
// search): every generation brings formulas never seen before, each scored
// against the same data. A Population prepares its formulas without LLVM
// (parse, simplify, bytecode: no derivative unless one is asked for, no
// disk) and runs them on one interpreter over (formula, row-block) tiles,
// the loss reduced inside the tile. The interpreter's op kernels are the
// compiled layers' own (hsnn's math library at the host's vector width,
// compiled once per host): a formula's values have the bits of the same
// formula in a cpu_jit layer.
//
// A formula that does not parse, or names neither a variable nor a given
// constant, does not fail the population: its diagnostic is in errors(), its
// values and score are NaN, the others are evaluated. Domain errors are
// IEEE's (NaN, inf), never an error.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Error.h"
#include "hsnn/Formula.h"
#include "hsnn/Layer.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hsnn {

struct PopulationOptions {
  /// The input variables' names: column j of X is variables[j].
  std::vector<std::string> variables{"num"};
  DType dtype = DType::F32;
  /// Every number written in a formula becomes a constant (_c0, _c1, ...
  /// in the order written, the number its initial value), as symbolic
  /// regression fits them.
  bool literalsAsConstants = false;
  /// Where evaluate and fitness run: Auto and CpuInterp on the CPU's
  /// interpreter; Cuda on GPU `gpuId`, every formula in one launch (host
  /// arrays are copied there and back; the interpreter kernel is built once
  /// per device, dtype and loss, and cached). Gradients run on the CPU.
  Method method = Method::Auto;
  int gpuId = 0;
};

/// One formula and its constants, as layers take them.
struct PopulationMember {
  std::string formula;
  std::map<std::string, double> constants{};
};

/// How X is laid out: rows x variables.
enum class DataLayout {
  RowMajor, ///< X[r * variables + j] (NumPy's C order, PySR's rows).
  ColMajor, ///< X[j * rows + r] (Fortran order): read without a copy.
};

/// The data a population is scored on. `weights` (optional, one per row)
/// weigh each row's loss; a mean is then divided by their sum.
template <class T> struct PopulationData {
  std::span<const T> x;
  size_t rows = 0;
  DataLayout layout = DataLayout::RowMajor;
  std::span<const T> y{};
  std::span<const T> weights{};
};

/// What a fitness is measured by: a built-in loss (mse, mae, huber, bce, ...)
/// or a formula in y_pred and y_true, its constants, and the reduction
/// (Mean or Sum).
struct PopulationLoss {
  std::string formula = "mse";
  std::map<std::string, double> constants{};
  Reduction reduction = Reduction::Mean;
};

/// A population given as arrays, as GPU genetic-programming systems encode
/// trees: formula i is codes[offsets[i] .. offsets[i+1]), a tree in prefix
/// (operator before its operands) or postfix order. A code is an op's
/// number (hsnn::Op, the order of Ops.def, which only ever grows): Number
/// (0) is a literal whose value is values[k], Var (1) is variable
/// values[k] (an integer index into the variables), Param (2) a constant
/// whose initial value is values[k]; any other op takes its arity's
/// operands (Piecewise and conditions cannot be encoded). A tree that is
/// not well formed is that formula's error.
struct PopulationArrays {
  std::span<const int32_t> codes;
  std::span<const double> values;
  std::span<const int64_t> offsets; ///< size N + 1, starting at 0
  bool postfix = false;
};

/// The formulas, checked and lowered; cheap to copy (shared, immutable
/// programs); constants are per copy.
class Population {
public:
  /// Prepares every member; fails only on options that are wrong for all
  /// (a variable name that is not an identifier, or is reserved). A bad
  /// member is reported in errors().
  static Expected<Population> create(std::span<const PopulationMember> members, const PopulationOptions &options = {});
  static Expected<Population> create(std::span<const std::string> formulas, const PopulationOptions &options = {});
  static Expected<Population> fromArrays(const PopulationArrays &arrays, const PopulationOptions &options = {});

  Population(const Population &);
  Population(Population &&) noexcept;
  Population &operator=(const Population &);
  Population &operator=(Population &&) noexcept;
  ~Population();

  size_t size() const;
  const PopulationOptions &options() const;
  /// The formulas that could not be used, in order (Diagnostic::node is the
  /// index; render() gives the caret line).
  const std::vector<Diagnostic> &errors() const;
  bool valid(size_t i) const;
  /// Formula i as simplified (SymPy syntax), "" for an invalid one.
  std::string simplified(size_t i) const;

  /// Formula i's constants: names (sorted) and current values.
  const std::vector<std::string> &constantNames(size_t i) const;
  std::span<const double> constants(size_t i) const;
  /// All formulas' constants, formula i's at constantOffset(i).
  std::span<const double> allConstants() const;
  size_t constantOffset(size_t i) const;
  /// Replaces all constants at once (size allConstants().size(); finite).
  Error setConstants(std::span<const double> values);

  /// out (N x rows, formula-major) = each formula at each row.
  Error evaluate(const PopulationData<float> &data, std::span<float> out) const;
  Error evaluate(const PopulationData<double> &data, std::span<double> out) const;

  /// scores[i] = the loss of formula i's values against data.y, reduced;
  /// no N x rows array is made. NaN for an invalid formula.
  Error fitness(const PopulationData<float> &data, std::span<double> scores, const PopulationLoss &loss = {}) const;
  Error fitness(const PopulationData<double> &data, std::span<double> scores, const PopulationLoss &loss = {}) const;

  /// The scores and each formula's gradient of its score with respect to
  /// its constants (gradients laid out as allConstants()), for constant
  /// fitting. The derivatives are taken at the first call and kept.
  Error constantGradients(const PopulationData<float> &data, std::span<double> scores, std::span<double> gradients,
                          const PopulationLoss &loss = {}) const;
  Error constantGradients(const PopulationData<double> &data, std::span<double> scores, std::span<double> gradients,
                          const PopulationLoss &loss = {}) const;

  /// d formula / d variable at each row: out is N x variables x rows. The
  /// derivatives are taken at the first call and kept.
  Error variableGradients(const PopulationData<float> &data, std::span<float> out) const;
  Error variableGradients(const PopulationData<double> &data, std::span<double> out) const;

  struct Impl;
  /// The prepared formulas (lib/Runtime/PopulationImpl.h): for the engine's
  /// own code and tests.
  const Impl &impl() const { return *impl_; }

private:
  explicit Population(std::shared_ptr<Impl> impl, std::vector<double> constants);
  std::shared_ptr<Impl> impl_;
  std::vector<double> constants_;
};

/// The op codes of PopulationArrays by name ("add", "sin", "Piecewise":
/// the printer's spelling, infix ops by name: add sub mul div pow neg), for
/// bindings that build arrays.
std::vector<std::pair<std::string, int>> populationOpCodes();

} // namespace hsnn
