//===- lib/Expr/Builtins.h - Named activations and losses -------*- C++ -*-===//
#pragma once

#include "hsnn/Formula.h"

namespace hsnn::detail {

struct BuiltinDef {
  BuiltinInfo info;
  /// Expands a call: activations get one operand, losses (y_pred, y_true).
  Expr (*expand)(ExprContext &ctx, std::span<const Expr> args);
  /// Where its parameter (info.params, at most one) is valid; none when the
  /// domain's builtin is empty.
  ConstantDomain domain = {};
  unsigned arity() const { return info.mode == FormulaMode::Loss ? 2 : 1; }
};

const BuiltinDef *findBuiltin(std::string_view name);
std::span<const BuiltinDef> builtinDefs();

} // namespace hsnn::detail
