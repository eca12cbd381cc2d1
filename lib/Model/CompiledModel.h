//===- lib/Model/CompiledModel.h - What compile() builds, engine-independent -*- C++ -*-===//
//
// The LLVM-free result of the front end for one layer or loss: its distinct
// formulas with their derivatives, a tape per kernel kind, the code units
// engines make one kernel set for, and the default constants with their
// per-node offsets. Built once, immutable after; ActivationLayer, Loss, every
// engine and ahead-of-time compilation read it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Program/KernelKind.h"
#include "Program/Program.h"

#include "hsnn/Formula.h"
#include "hsnn/Layer.h"

#include <array>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hsnn::detail {

/// At most this many derivation steps on top of the formulas as written:
/// each step can multiply a formula's size (gelu's tenth derivative is a
/// page), and no use we know of goes past the fourth.
inline constexpr size_t kMaxDerivationSteps = 8;

/// The derivation of the order-th derivative in the variable: `order` steps
/// "d", or an error past kMaxDerivationSteps.
Expected<std::vector<std::string>> derivativeSteps(unsigned order);

struct ModelOptions {
  DType dtype = DType::F32;
  Layout layout = Layout::NodesMajor; ///< Activations only.
  /// Units per distinct (formula, constant values) with the values as literals.
  bool bakeConstants = false;
  /// Rules users may relax turn into errors (a constant given but unused).
  bool strict = false;
  /// A derived model: the steps applied, in order, to every formula after
  /// its constants are bound ("d", "t", "c:NAME": derive() in
  /// CompiledModel.cpp). Empty: the formulas as written.
  std::vector<std::string> derivation{}; // {}: designated initializers may leave it out
};

/// One distinct formula after simplification, with a tape per kernel kind
/// of its mode (the other mode's entries stay empty).
struct FormulaGroup {
  Formula formula;
  Expr derivative = nullptr;
  std::vector<Expr> constantDerivatives; ///< d/dc per constant, in formula.constants order.
  std::array<Program, kNumKernelKinds> programs;
  /// A model from a snapshot has no expressions, only their printed forms.
  std::string printedFormula, printedDerivative;
};

/// What an engine generates one kernel set for: a distinct formula, or with
/// baked constants a distinct (formula, values) pair.
struct CodeUnit {
  std::array<const Program *, kNumKernelKinds> programs{};
};

struct CompiledModel {
  /// Parses, simplifies and differentiates every node; the errors of all
  /// nodes come back together. Warnings (unused constants, a formula that
  /// ignores its input) are appended to `warnings`.
  static Expected<std::shared_ptr<const CompiledModel>> activation(const std::vector<NodeSpec> &nodes,
                                                                   const ModelOptions &options,
                                                                   std::vector<std::string> &warnings);
  static Expected<std::shared_ptr<const CompiledModel>> loss(std::string_view formula,
                                                             const std::map<std::string, double> &constants,
                                                             const ModelOptions &options,
                                                             std::vector<std::string> &warnings);

  /// Everything activation() or loss() reads, as text to key a snapshot by.
  static std::string activationSource(const std::vector<NodeSpec> &nodes, const ModelOptions &options);
  static std::string lossSource(std::string_view formula, const std::map<std::string, double> &constants,
                                const ModelOptions &options);
  /// A model as bytes (ModelSnapshot.cpp), with the warnings its front end
  /// gave, and back: null when the bytes are not a well-formed snapshot of
  /// `numNodes` nodes (a loss: 1). Its formulas print as they did; it has no
  /// expressions.
  std::vector<char> snapshot(const std::vector<std::string> &warnings) const;
  static std::shared_ptr<const CompiledModel> fromSnapshot(std::span<const char> bytes, const ModelOptions &options,
                                                           size_t numNodes, std::vector<std::string> &warnings);
  /// A group's formula and derivative as print() writes them.
  static std::string formulaString(const FormulaGroup &g);
  static std::string derivativeString(const FormulaGroup &g);

  bool isLoss = false;
  ModelOptions options;
  std::shared_ptr<ExprContext> ctx;
  std::deque<FormulaGroup> groups; ///< deque: units point into it
  std::vector<uint32_t> nodeGroup; ///< A loss has one node.
  std::vector<double> defaultParams;
  std::vector<uint64_t> offsets; ///< Per node, into the params.
  std::vector<CodeUnit> units;
  std::vector<uint32_t> unitOf; ///< Per node.
  double parseMs = 0, diffMs = 0;
  bool snapshotted = false; ///< Read from a snapshot: no expressions.

  size_t numNodes() const { return nodeGroup.size(); }
  const FormulaGroup &group(size_t node) const { return groups[nodeGroup[node]]; }
  const std::vector<std::string> &constantNames(size_t node) const { return group(node).formula.constants; }
  /// One line for a cache entry of this model's kernels: "cpu_jit f32
  /// layer (nodes_major; forward, backward): relu, sin(num)*alpha", cut short.
  std::string describe(std::string_view engine, std::span<const KernelKind> built) const;
  /// The kinds of this model's mode, in .def order.
  std::span<const KernelKind> kinds() const {
    return isLoss ? std::span<const KernelKind>(kLossKinds) : std::span<const KernelKind>(kActivationKinds);
  }
  /// Every kind with a tape: the elementwise kinds and the constant gradient.
  std::vector<KernelKind> tapeKinds() const {
    std::vector<KernelKind> out(kinds().begin(), kinds().end());
    out.push_back(constantGradientKind(isLoss));
    return out;
  }

private:
  void planUnits();
  std::deque<Program> baked_; ///< Tapes with constants as literals (bakeConstants).
};

} // namespace hsnn::detail
