//===- lib/Expr/Simplify.cpp - IEEE-safe and numerically stable rewrites --===//
//
// A bottom-up mutator: children first, then rules at the node until none
// applies. The builder already did the folds that are exact for all inputs;
// the rules here trade a formula for a better-conditioned equal one.
//===----------------------------------------------------------------------===//
#include "hsnn/Formula.h"

#include "Collect.h"
#include "StableForms.h"
#include "Traversal.h"

#include <unordered_map>

namespace hsnn {
namespace {

bool isOne(Expr e) { return e->isNumber(1); }

// u when e is exp(u) (or nullptr).
Expr expArg(Expr e) { return e->op() == Op::Exp ? e->arg(0) : nullptr; }

// v when e is 1 + v or v + 1.
Expr onePlus(Expr e) {
  if (e->op() != Op::Add)
    return nullptr;
  if (isOne(e->arg(0)))
    return e->arg(1);
  if (isOne(e->arg(1)))
    return e->arg(0);
  return nullptr;
}

// u when e is 1 + exp(-u).
Expr onePlusExpNeg(Expr e) {
  Expr v = onePlus(e);
  Expr u = v ? expArg(v) : nullptr;
  if (!u)
    return nullptr;
  if (u->op() == Op::Neg)
    return u->arg(0);
  return nullptr;
}

class Simplifier {
public:
  Simplifier(ExprContext &ctx, const SimplifyOptions &opt) : ctx_(ctx), opt_(opt) {}

  Expr run(Expr root) {
    return detail::postOrder(memo_, root, [&](Expr e) { return node(e); });
  }

private:
  // Arguments are simplified (in memo_); rebuild, then rules until none applies.
  Expr node(Expr e) {
    Expr r = withSimplifiedArgs(e);
    for (int i = 0; i < 8; ++i) { // each rule shrinks or stabilizes; 8 is ample
      Expr next = rewrite(r);
      if (next == r) {
        // No rule: the canonical form of a sum or product (Collect.h).
        next = detail::collectSum(ctx_, r, opt_.fast);
        if (next == r)
          next = detail::collectProduct(ctx_, r, opt_.fast);
        if (next == r)
          break;
        settle(next);
        r = next;
        continue;
      }
      // A rule's new node may have new arguments: simplify those first.
      if (next->numArgs())
        for (Expr a : next->args())
          run(a);
      r = withSimplifiedArgs(next);
    }
    return r;
  }

  Expr withSimplifiedArgs(Expr e) {
    if (!e->numArgs())
      return e;
    std::vector<Expr> args;
    bool changed = false;
    for (Expr a : e->args()) {
      args.push_back(memo_.at(a));
      changed |= args.back() != a;
    }
    return changed ? ctx_.make(e->op(), args) : e;
  }

  Expr rewrite(Expr e) {
    Expr a = e->numArgs() > 0 ? e->arg(0) : nullptr;
    Expr b = e->numArgs() > 1 ? e->arg(1) : nullptr;
    switch (e->op()) {
    case Op::Log: {
      if (a->op() == Op::Cosh) // log(cosh(u)): cosh overflows, and cancels near 0
        return detail::logCosh(ctx_, a->arg(0));
      if (a->op() == Op::Sigmoid) // log(sigmoid(u)) = -softplus(-u): no log of an underflowed 0
        return ctx_.neg(ctx_.call(Op::Softplus, ctx_.neg(a->arg(0))));
      Expr v = onePlus(a);
      if (v && expArg(v)) // log(1 + exp(u)) -> softplus(u)
        return ctx_.call(Op::Softplus, expArg(v));
      if (v) // log(1 + u) -> log1p(u)
        return ctx_.call(Op::Log1p, v);
      if (expArg(a)) // log(exp(u)) -> u, also right at +-inf
        return expArg(a);
      break;
    }
    case Op::Div:
      if (Expr u = onePlusExpNeg(b)) // v/(1 + exp(-u)) -> v*sigmoid(u)
        return isOne(a) ? ctx_.call(Op::Sigmoid, u) : ctx_.mul(a, ctx_.call(Op::Sigmoid, u));
      if (expArg(a) && onePlus(b) == a) // exp(u)/(1 + exp(u)) -> sigmoid(u): inf/inf was NaN
        return ctx_.call(Op::Sigmoid, expArg(a));
      if (opt_.fast && a == b)
        return ctx_.number(1);
      break;
    case Op::Sub:
      if (isOne(b) && expArg(a)) // exp(u) - 1 -> expm1(u)
        return ctx_.call(Op::Expm1, expArg(a));
      if (isOne(a) && b->op() == Op::Erf) // 1 - erf(u) -> erfc(u)
        return ctx_.call(Op::Erfc, b->arg(0));
      // 1 - tanh(u)**2 -> sech(u)**2, without the cancellation
      if (isOne(a) && b->op() == Op::Mul && b->arg(0) == b->arg(1) && b->arg(0)->op() == Op::Tanh)
        return detail::sech2(ctx_, b->arg(0)->arg(0));
      // (p + q) - q -> p: the true value where IEEE rounds p away (1 + |x|
      // - |x| is 0 past 2^24 in f32) or gives inf - inf = NaN; documented
      // as one of the rules that trade IEEE's result for the real one.
      if (a->op() == Op::Add && a->arg(1) == b)
        return a->arg(0);
      if (a->op() == Op::Add && a->arg(0) == b)
        return a->arg(1);
      if (opt_.fast && a == b)
        return ctx_.number(0);
      if (opt_.fast && a->isNumber(0))
        return ctx_.neg(b);
      break;
    case Op::Add:
      if (b->isNumber(-1) && expArg(a)) // exp(u) + -1 -> expm1(u)
        return ctx_.call(Op::Expm1, expArg(a));
      // 1 + erf(u) -> erfc(-u): gelu written out cancels for u << 0 (true
      // values below 1e-8 came out as 0); erfc keeps them.
      if (Expr v = onePlus(e); v && v->op() == Op::Erf)
        return ctx_.call(Op::Erfc, ctx_.neg(v->arg(0)));
      if (opt_.fast && b->isNumber(0))
        return a;
      if (opt_.fast && a->isNumber(0))
        return b;
      break;
    case Op::Pow:
      if (b->isNumber(2)) // one rounding, no libm call
        return ctx_.mul(a, a);
      if (b->isNumber(-1))
        return ctx_.div(ctx_.number(1), a);
      break;
    case Op::Mul:
      // x*sign(x) -> |x|: equal for every x, +-0, inf and NaN included.
      if ((b->op() == Op::Sign && b->arg(0) == a) || (a->op() == Op::Sign && a->arg(0) == b))
        return ctx_.call(Op::Abs, a->op() == Op::Sign ? b : a);
      if (opt_.fast && (a->isNumber(0) || b->isNumber(0)))
        return ctx_.number(0);
      break;
    default:
      break;
    }
    return e;
  }

  // A collected sum or product is canonical all the way down its spine of
  // +, -, *, / and negations, and its factors were simplified before:
  // recorded as fixed points, so its new inner nodes are not collected
  // again (which made a product of n factors cost n**3).
  void settle(Expr root) {
    // Not the root itself: a rule may still apply to it.
    std::vector<Expr> stack(root->args().begin(), root->args().end());
    while (!stack.empty()) {
      Expr e = stack.back();
      stack.pop_back();
      bool spine = e->op() == Op::Add || e->op() == Op::Sub || e->op() == Op::Mul || e->op() == Op::Div ||
                   e->op() == Op::Neg;
      if (!spine || !memo_.emplace(e, e).second)
        continue;
      for (Expr a : e->args())
        stack.push_back(a);
    }
  }

  ExprContext &ctx_;
  SimplifyOptions opt_;
  std::unordered_map<Expr, Expr> memo_;
};

} // namespace

Expr simplify(ExprContext &ctx, Expr e, const SimplifyOptions &options) { return Simplifier(ctx, options).run(e); }

} // namespace hsnn
