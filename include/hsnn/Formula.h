//===- hsnn/Formula.h - Parse, simplify, differentiate, print ---*- C++ -*-===//
//
// The symbolic front end: formula text in SymPy syntax to a simplified
// expression and its derivative, with diagnostics that point at the column.
// Formula text is only ever parsed; nothing in it is executed.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Error.h"
#include "hsnn/Expr.h"

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace hsnn {

/// Activation formulas use `num` (aliases `x`, `z`); loss formulas use
/// `y_pred` and `y_true`.
enum class FormulaMode { Activation, Loss };

/// Limits that keep hostile input from exhausting the stack or memory.
inline constexpr size_t kMaxFormulaLength = 4096;
inline constexpr unsigned kMaxNesting = 128;  ///< Parentheses/calls/unary.
inline constexpr unsigned kMaxDepth = 512;    ///< Expression tree depth.

/// One problem in one formula.
struct Diagnostic {
  int node = -1;       ///< Node index in a layer, -1 for a lone formula.
  size_t column = 0;   ///< 1-based byte column of the cause; 0: whole formula.
  size_t length = 1;   ///< Columns to underline.
  std::string message; ///< The cause, e.g. "unknown function 'tanhh'; did you mean 'tanh'?".
  std::string formula; ///< The text it refers to.
  bool warning = false; ///< Reported, but compile goes on.

  /// "node 3: error: <message>" (or "warning:") then the formula and a caret line.
  std::string render() const;
};

/// Joins several diagnostics (all nodes of a layer) into one message. Those
/// that differ only in their node are one block, naming the nodes: "nodes
/// 1, 9, 17, ... (32 nodes): error: ..." and the caret once.
std::string renderDiagnostics(const std::vector<Diagnostic> &diags);
/// An InvalidFormula error of that message, naming the nodes (Error::nodes).
Error toError(const std::vector<Diagnostic> &diags);

/// Where a built-in's constant is valid: above `lower` (or at it, when not
/// strict). huber's delta must be > 0: a negative one gave negative losses.
struct ConstantDomain {
  double lower = 0;
  bool strict = true;
  std::string builtin; ///< Which built-in asks, for the message.
};

/// A parsed, simplified formula.
struct Formula {
  Expr expr = nullptr;
  FormulaMode mode = FormulaMode::Activation;
  /// Names of the user constants it reads, sorted; this is also the order
  /// of the node's slice of a layer's params array.
  std::vector<std::string> constants;
  /// Defaults for constants introduced by built-ins (huber's delta, ...).
  std::map<std::string, double> defaults;
  /// Valid ranges of constants introduced by built-ins.
  std::map<std::string, ConstantDomain> domains;
  /// Column of each constant's first use, for diagnostics.
  std::map<std::string, size_t> firstUse;
  std::string text;
  /// The activation variable as the text spells it (num, x or z), for printing.
  std::string variable = "num";
};

struct ParseOptions {
  FormulaMode mode = FormulaMode::Activation;
  int node = -1;          ///< Only used to label diagnostics.
  bool simplify = true;   ///< Apply simplify() to the result.
  /// A population's input variables (Population.h): name i is Variable(i),
  /// in place of the mode's own (num, x, z; y_pred, y_true). Empty: the mode's.
  std::span<const std::string> variables{};
  /// Every number written becomes a constant: _c0, _c1, ... in the order
  /// written, the number its default (Formula::defaults), as symbolic
  /// regression fits them.
  bool literalsAsConstants = false;
};

/// Parses one formula; on failure returns the first diagnostic.
std::variant<Formula, Diagnostic> parseFormulaDetailed(ExprContext &ctx, std::string_view text,
                                                        const ParseOptions &options = {});
/// As parseFormulaDetailed, the diagnostic rendered into an Error.
Expected<Formula> parseFormula(ExprContext &ctx, std::string_view text, const ParseOptions &options = {});

/// Checks a node's constant values against what its formula needs and
/// returns them in the order of `formula.constants`. Reports missing,
/// reserved and non-finite constants. A constant given but not used (shared
/// constant dictionaries have them) goes to `unused` when it is given, and
/// is an error otherwise (strict mode).
std::variant<std::vector<double>, Diagnostic> bindConstants(const Formula &formula,
                                                           const std::map<std::string, double> &given,
                                                           int node = -1, std::vector<Diagnostic> *unused = nullptr);

/// Why `value` is not valid for constant `name` of `formula` (finite, and in
/// its built-in's domain), e.g. "constant 'delta' of huber must be > 0, got
/// -0.5"; empty when it is valid.
std::string checkConstantValue(const Formula &formula, const std::string &name, double value);

struct SimplifyOptions {
  /// Allows folds that are wrong for inf/NaN/-0 (x*0 -> 0, x-x -> 0,
  /// x+0 -> x). Off by default; hsnn never turns it on by itself.
  bool fast = false;
};

/// IEEE-safe simplification plus numerically stable rewrites:
/// log(1+exp(u)) -> softplus(u), 1/(1+exp(-u)) -> sigmoid(u),
/// v/(1+exp(-u)) -> v*sigmoid(u), log(1+u) -> log1p(u), exp(u)-1 -> expm1(u),
/// u**2 -> u*u, u**-1 -> 1/u, and the canonical sums and products of
/// lib/Expr/Collect.h. Returns the same node when nothing changes.
Expr simplify(ExprContext &ctx, Expr e, const SimplifyOptions &options = {});

/// d e / d v, simplified. The rules define every kink (docs/guide/numerics.md):
/// relu'(0) = Abs'(0) = 0, Heaviside' = sign' = floor' = ceiling' = 0,
/// Max(a,b)' = a' where a >= b else b' (Min: a <= b), with the operands in
/// canonical order (numbers first), Piecewise branch by branch.
Expr differentiate(ExprContext &ctx, Expr e, Variable v, const SimplifyOptions &options = {});
/// d e / d wrt for a leaf `wrt` of the same context: a variable, or a user
/// constant (ctx.param(name)), as trainable constants need.
Expr differentiate(ExprContext &ctx, Expr e, Expr wrt, const SimplifyOptions &options = {});

/// SymPy-syntax text that parses back to the same node.
struct PrintOptions {
  /// How the activation variable is written: the formula's own spelling
  /// (Formula::variable: num, x or z) reads back as the user wrote it.
  std::string_view variable = "num";
  /// Also the branches kernels take where a built-in's floating-point form
  /// fails at its tails (gelu'(+inf) = 1, not inf*0): printed as Piecewise.
  /// Off, the text is the function on the reals, as SymPy would write it.
  bool guards = false;
  /// The functions SymPy's parser (sympify) does not know written in its
  /// terms: sigmoid(u) as 1/(1 + exp(-u)), softplus(u) as log(1 + exp(u)),
  /// log1p(u) as log(1 + u), expm1(u) as exp(u) - 1. Off, they are hsnn's
  /// own, which hsnn reads back exactly (the same stable forms; its parser
  /// recognizes the spelled-out ones only for simple arguments).
  bool sympy = false;
  /// A population's variables (ParseOptions::variables): Variable(i) is
  /// written variables[i].
  std::span<const std::string> variables{};
};
std::string print(Expr e, const PrintOptions &options = {});

/// A named built-in (`gelu`, `huber`, ...).
struct BuiltinInfo {
  std::string_view name;
  FormulaMode mode;
  std::string_view definition; ///< The formula it stands for, for docs.
  std::vector<std::pair<std::string_view, double>> params; ///< Constants and defaults.
};
std::span<const BuiltinInfo> builtins();

/// True for names that cannot be user constants (functions, variables,
/// E, pi, tau, phi, True, False, built-ins).
bool isReservedName(std::string_view name);

} // namespace hsnn
