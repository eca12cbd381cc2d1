//===- lib/Expr/Names.h - The formula language's vocabulary -----*- C++ -*-===//
#pragma once

#include "hsnn/Expr.h"

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace hsnn::detail {

/// What a callable name means to the parser.
enum class CallKind { Op, And, Or, Not, Builtin, Rewrite };

/// SymPy functions hsnn writes with its own ops.
enum class Rewrite { Rational, Mod, Log2, Log10, Cbrt };
struct Callable {
  CallKind kind;
  Op op = Op::Number; ///< For CallKind::Op.
  Rewrite rewrite = Rewrite::Rational; ///< For CallKind::Rewrite.
};

std::optional<Callable> findCallable(std::string_view name);

/// Arguments a rewrite takes, and its expansion as SymPy defines it:
/// Rational(p, q) = p/q (integers), Mod(a, b) = a - b*floor(a/b) (the sign
/// of b), log2/log10 = log(x)/log(base), cbrt(x) = x**(1/3) (the principal
/// root: NaN for x < 0). A string is the reason the arguments are refused.
size_t rewriteArity(Rewrite r);
std::variant<Expr, std::string> expandRewrite(ExprContext &ctx, Rewrite r, std::span<const Expr> args);
/// The variables' spellings, the first of each its printed name: an
/// activation's input is num, x or z (Formula::variable keeps which), a
/// loss's y_pred and y_true.
struct VariableSpelling {
  std::string_view name;
  Variable variable;
};
inline constexpr VariableSpelling kVariableSpellings[] = {
    {"num", Variable::Num}, {"x", Variable::Num}, {"z", Variable::Num}, {"y_pred", Variable::YPred},
    {"y_true", Variable::YTrue}};
/// The variable `name` spells, if any.
std::optional<Variable> findVariable(std::string_view name);

/// Named numbers: E, e, pi, tau, phi (exact: pi is the leaf Op::Pi).
Expr findNamedNumber(ExprContext &ctx, std::string_view name);
bool isNamedNumber(std::string_view name);
/// Every name a user could have meant, for "did you mean" hints.
const std::vector<std::string> &knownNames();
/// The closest known name within a small edit distance, or "".
std::string nearestName(std::string_view name, const std::vector<std::string> &candidates);

} // namespace hsnn::detail
