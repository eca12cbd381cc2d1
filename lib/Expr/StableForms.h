//===- lib/Expr/StableForms.h - Well-conditioned forms, in one place -*- C++ -*-===//
//
// The forms a built-in expands into, a derivative rule produces and a
// simplifier rule rewrites into, for functions whose textbook form loses
// digits (cancellation near a zero, overflow in a tail). One definition,
// so `log(cosh(d))` written out computes what the built-in `log_cosh` does.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Expr.h"

namespace hsnn::detail {

/// sech(u)**2 = 1 - tanh(u)**2 as 4e/(1 + e)**2 with e = exp(-2|u|): no
/// cancellation where tanh is near 1, no overflow where cosh(u)**2 would be.
Expr sech2(ExprContext &ctx, Expr u);

/// log(cosh(u)): log1p(2*sinh(u/2)**2) for |u| < 1 (exact near 0, where the
/// derivative tanh(u) keeps its digits), |u| + softplus(-2|u|) - log(2)
/// elsewhere (cosh overflows past 89 in f32, 710 in f64).
Expr logCosh(ExprContext &ctx, Expr u);

} // namespace hsnn::detail
