//===- lib/Expr/Derivative.cpp - Symbolic differentiation -----------------===//
//
// Forward-mode over the DAG with a memo, so a shared subexpression is
// differentiated once. Each op's rule lives in the op table; this file only
// walks. A null derivative is an exact zero (the expression does not depend
// on the variable), which keeps 0*inf = NaN out of derivatives of constants.
//===----------------------------------------------------------------------===//
#include "hsnn/Formula.h"

#include "OpTable.h"

#include <unordered_map>

namespace hsnn {
namespace {

class Differentiator {
public:
  Differentiator(ExprContext &ctx, Expr wrt) : ctx_(ctx), wrt_(wrt) {}

  Expr run(Expr e) {
    if (auto it = memo_.find(e); it != memo_.end())
      return it->second;
    Expr d = nullptr;
    if (e == wrt_) {
      d = ctx_.number(1);
    } else if (e->numArgs() && !e->isBool()) {
      std::vector<Expr> dargs;
      bool any = false;
      for (Expr a : e->args()) {
        dargs.push_back(a->isBool() ? nullptr : run(a));
        any |= dargs.back() != nullptr;
      }
      if (any)
        d = detail::opImpl(e->op()).diff(ctx_, e, dargs);
    }
    memo_[e] = d;
    return d;
  }

private:
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
