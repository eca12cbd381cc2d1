//===- lib/Expr/OpTable.h - Per-op evaluation and derivative rules -*- C++ -*-===//
//
// The behavioural half of the op table (the static half is hsnn/Ops.def):
// how each op evaluates over a block of elements in f32 and f64, and its
// derivative rule. The interpreter, the constant folder and the
// differentiator all dispatch through here and nowhere else.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Expr.h"

#include <cstddef>
#include <span>

namespace hsnn::detail {

/// Evaluates an op over n elements: out[i] = op(args[0][i], args[1][i], ...).
/// Truth values are 1 and 0. Piecewise takes its args in node order.
template <class T> using BlockEval = void (*)(T *out, const T *const *args, unsigned nargs, size_t n);

/// Derivative of node `e` given the derivatives of its operands; a null
/// operand derivative (and a null result) means "identically zero", which is
/// how d/dx(constant) terms vanish without an IEEE-unsafe x*0 fold.
using DiffRule = Expr (*)(ExprContext &ctx, Expr e, std::span<const Expr> dargs);

struct OpImpl {
  BlockEval<float> eval32;
  BlockEval<double> eval64;
  DiffRule diff; ///< Null for leaves and truth-valued ops.
};

const OpImpl &opImpl(Op op);

template <class T> BlockEval<T> blockEval(Op op);
template <> inline BlockEval<float> blockEval<float>(Op op) { return opImpl(op).eval32; }
template <> inline BlockEval<double> blockEval<double>(Op op) { return opImpl(op).eval64; }

/// One element through the block evaluator (constant folding, tests).
double evalScalar(Op op, std::span<const double> args);

/// The value of a constant expression (pi, sqrt(2*pi), 2/sqrt(pi)) rounded
/// to double once, from extended precision where the ops allow it: what a
/// kernel bakes in.
double evalConstant(Expr e);
/// 1/e for a constant expression, rounded to double once.
double evalReciprocal(Expr e);

} // namespace hsnn::detail
