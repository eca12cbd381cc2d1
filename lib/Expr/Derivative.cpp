//===- lib/Expr/Derivative.cpp - Symbolic differentiation -----------------===//
//
// Forward-mode over the DAG with a memo, so a shared subexpression is
// differentiated once. Each op's rule lives in the op table; this file only
// walks. A null derivative is an exact zero (the expression does not depend
// on the variable), which keeps 0*inf = NaN out of derivatives of constants.
//===----------------------------------------------------------------------===//
#include "hsnn/Formula.h"

#include "OpTable.h"
#include "Traversal.h"

#include <unordered_map>

namespace hsnn {
namespace {

class Differentiator {
public:
  Differentiator(ExprContext &ctx, Expr wrt) : ctx_(ctx), wrt_(wrt) {}

  Expr run(Expr root) {
    // Conditions keep their value: no walk below a truth-valued node. A
    // Partials node's value and partials are not differentiated, only its
    // operands (node() walks those).
    return detail::postOrder(memo_, root, [&](Expr e) { return node(e); },
                             [](Expr e) { return !e->isBool() && e->op() != Op::Partials; });
  }

private:
  Expr node(Expr e) {
    if (e == wrt_)
      return ctx_.number(1);
    if (!e->numArgs() || e->isBool())
      return nullptr;
    std::vector<Expr> dargs;
    bool any = false, partials = e->op() == Op::Partials;
    for (size_t i = 0; i < e->numArgs(); ++i) {
      Expr a = e->arg(i);
      if (partials && i % 2 == 0) { // the value and the partials themselves
        dargs.push_back(nullptr);
        continue;
      }
      if (partials)
        run(a); // an operand: not walked by run()'s descent
      dargs.push_back(a->isBool() ? nullptr : memo_.at(a));
      any |= dargs.back() != nullptr;
    }
    return any ? detail::opImpl(e->op()).diff(ctx_, e, dargs) : nullptr;
  }

  ExprContext &ctx_;
  Expr wrt_; // a variable or a constant (Param): leaves compare by pointer
  std::unordered_map<Expr, Expr> memo_;
};

} // namespace

Expr differentiate(ExprContext &ctx, Expr e, Variable v, const SimplifyOptions &options) {
  return differentiate(ctx, e, ctx.variable(v), options);
}

Expr differentiate(ExprContext &ctx, Expr e, Expr wrt, const SimplifyOptions &options) {
  Expr d = Differentiator(ctx, wrt).run(e);
  return simplify(ctx, d ? d : ctx.number(0), options);
}

} // namespace hsnn
