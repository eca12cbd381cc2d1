//===- lib/Expr/Collect.h - Canonical sums and products ---------*- C++ -*-===//
//
// Sums and products in one canonical shape, so equal polynomials in the same
// atoms are one node and their terms can meet: a sum is its terms (each a
// numeric coefficient times a product) in a fixed order with like terms
// combined and its number last; a product is its coefficient, then its factors
// in a fixed order with like bases combined into integer powers (fractional
// ones where the domain stays: combineFractionalPowers), then one
// division by the factors with negative powers. `(-(2*x))/2 * exp(-(x*x)/2)`
// becomes `-x*exp(-x**2/2)`, `cos(x)*sin(x) - sin(x)*cos(x)` becomes 0.
//
// What it will and will not do under IEEE 754 (it is part of simplify(), so
// every kernel computes the collected form):
// - Reordering and combining change results only by rounding (2*a + 3*a is
//   5*a: one rounding, and the same inf and NaN).
// - Terms that cancel (coefficient 0) are dropped only where the term is
//   bounded for every finite input (sin(x)*cos(x), tanh(u) of a finite u), so
//   0 replaces NaN only where an input is already inf or NaN; otherwise the
//   sum is left as written. Likewise x/x is left alone (0/0, inf/inf).
// - Numbers on one side of a division multiply as the builder folds them;
//   the two sides become one number only when that is exact (x/3 stays
//   x/3, not x*0.333). x/b/b stays so for a b that can be large (b*b could
//   overflow), and a sum whose terms do not combine keeps its association.
// SimplifyOptions::fast drops every cancelled term and base.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Expr.h"

namespace hsnn::detail {

/// The canonical form of a sum (Add, Sub or Neg of a sum), or `e` when it is
/// not a sum or cannot be collected safely.
Expr collectSum(ExprContext &ctx, Expr e, bool fast);

/// The canonical form of a product (Mul, Div or Neg), or `e`.
Expr collectProduct(ExprContext &ctx, Expr e, bool fast);

/// True when `e` is finite and bounded for every finite value of its
/// variables and constants' defaults cannot change that (sin, cos, tanh,
/// sigmoid, erf, ... of finite arguments, and sums and products of them).
bool boundedForFiniteInputs(Expr e);

/// True when `e` has no variable and no constant (a number, pi, sqrt(2)).
bool isConstantExpr(Expr e);

} // namespace hsnn::detail
