//===- lib/Expr/StableForms.cpp - Well-conditioned forms, in one place ----===//
#include "StableForms.h"

namespace hsnn::detail {

Expr sech2(ExprContext &c, Expr u) {
  Expr e = c.call(Op::Exp, c.mul(c.number(-2), c.call(Op::Abs, u))), den = c.add(c.number(1), e);
  return c.div(c.mul(c.number(4), e), c.mul(den, den));
}

Expr logCosh(ExprContext &c, Expr u) {
  Expr au = c.call(Op::Abs, u), s = c.call(Op::Sinh, c.div(u, c.number(2)));
  Expr small = c.call(Op::Log1p, c.mul(c.number(2), c.mul(s, s)));
  Expr large = c.sub(c.add(au, c.call(Op::Softplus, c.mul(c.number(-2), au))), c.call(Op::Log, c.number(2)));
  return c.make(Op::Piecewise, {small, c.make(Op::Lt, {au, c.number(1)}), large});
}

} // namespace hsnn::detail
