//===- lib/Expr/Builtins.cpp - Named activations and losses ---------------===//
//
// Each built-in expands into ordinary ops, in the numerically stable form:
// the seed's `log(1+exp(x))` softplus overflowed above 88, ours does not.
// A built-in's parameter is a user constant with a default.
//===----------------------------------------------------------------------===//
#include "Builtins.h"
#include "StableForms.h"
#include "Traversal.h"

#include <unordered_map>
#include <vector>

namespace hsnn::detail {
namespace {

using A = std::span<const Expr>;
Expr n(ExprContext &c, double v) { return c.number(v); }
Expr pos(ExprContext &c, Expr u) { return c.make(Op::Gt, {u, n(c, 0)}); }
Expr pw(ExprContext &c, Expr a, Expr cond, Expr b) { return c.make(Op::Piecewise, {a, cond, b}); }
// (u + 3)/6 rather than u/6 + 0.5: exact where it crosses 0 (u + 3 is exact
// for u in [-6, -1.5]); u/6 + 0.5 was 683-2700 ulp off near u = -3.
Expr hardsigmoid(ExprContext &c, Expr u) {
  return c.make(Op::Max, {n(c, 0), c.make(Op::Min, {n(c, 1), c.div(c.add(u, n(c, 3)), n(c, 6))})});
}
Expr diff(ExprContext &c, A a) { return c.sub(a[0], a[1]); }

// A self-gated activation u*g(u) at its limits: -0 below `lo` (where g has
// underflowed, and -inf*0 would be NaN), u above `hi` (where u*g'(u) would
// be inf*0 in the derivative). NaN fails both tests and stays NaN.
Expr gated(ExprContext &c, Expr u, Expr body, double lo, double hi) {
  return c.make(Op::Guarded, {n(c, -0.0), c.make(Op::Le, {u, n(c, lo)}), u, c.make(Op::Ge, {u, n(c, hi)}), body});
}

// x*log(y) that is 0 where x is 0 and y is a number (log 0 included), as
// frameworks' xlogy: bce with eps = 0 is 0, not NaN, at a confident right answer.
Expr xlogy(ExprContext &c, Expr x, Expr y, Expr logy) {
  Expr zeroWeight = c.make(Op::And, {c.make(Op::Eq, {x, n(c, 0)}), c.make(Op::Eq, {y, y})});
  return pw(c, n(c, 0), zeroWeight, c.mul(x, logy));
}

// e with each `from` leaf replaced by its `to`.
Expr substitute(ExprContext &c, Expr e, std::initializer_list<std::pair<Expr, Expr>> map) {
  std::unordered_map<Expr, Expr> memo(map.begin(), map.end());
  return postOrder(memo, e, [&](Expr n) {
    if (!n->numArgs())
      return n;
    std::vector<Expr> args;
    for (Expr a : n->args())
      args.push_back(memo.at(a));
    return c.make(n->op(), args);
  });
}

Expr bceValue(ExprContext &c, Expr p, Expr t, Expr eps) {
  // log(p + eps) and log(1 - p + eps), each in the form that keeps p's
  // digits on its side of 1/2: 1 - p and p - 1 are exact there, and
  // log1p takes the small rest (1 - p + eps rounded 1 + eps first, so
  // p = 7e-8 gave -0 and the gradient's denominator cancelled near 1).
  // One log and one log1p per element, their arguments chosen by side.
  Expr one = n(c, 1), low = c.make(Op::Lt, {p, n(c, 0.5)});
  Expr logs = c.call(Op::Log, pw(c, c.add(p, eps), low, c.add(c.sub(one, p), eps)));
  Expr log1ps = c.call(Op::Log1p, pw(c, c.sub(eps, p), low, c.add(c.sub(p, one), eps)));
  Expr logP = pw(c, logs, low, log1ps), log1mP = pw(c, log1ps, low, logs);
  Expr t1 = xlogy(c, t, c.add(p, eps), logP);
  Expr t2 = xlogy(c, c.sub(one, t), c.add(p, eps), log1mP);
  return c.neg(c.add(t1, t2));
}

// bce with its derivative in p written out: the rules give t/q - (1 - t)/r
// (q = p + eps, r = 1 - p + eps), two quotients that cancel where p ~ t
// (8e3 ulp measured); over one denominator the numerator's p - t is exact
// there. Hard labels keep their one quotient (and 1 at p = t = eps = 0,
// where the combined form is 0/0). The partials in t and eps are the rules',
// taken on placeholder operands so they are partial even where the
// operands share variables.
Expr bce(ExprContext &c, A a) {
  Expr p = c.param("bce#p"), t = c.param("bce#t"), eps = c.param("bce#eps");
  Expr value = bceValue(c, p, t, eps), one = n(c, 1);
  Expr q = c.add(p, eps), r = c.add(c.sub(one, p), eps);
  Expr numerator = c.add(c.sub(p, t), c.mul(eps, c.sub(one, c.mul(n(c, 2), t))));
  Expr dp = c.make(Op::Piecewise, {c.div(one, r), c.make(Op::Eq, {t, n(c, 0)}), c.neg(c.div(one, q)),
                                   c.make(Op::Eq, {t, one}), c.div(numerator, c.mul(q, r))});
  Expr node = c.make(Op::Partials, {value, p, dp, t, differentiate(c, value, t), eps, differentiate(c, value, eps)});
  return substitute(c, node, {{p, a[0]}, {t, a[1]}, {eps, c.param("eps")}});
}

// A function-local static, not a global: layers may be compiled while other
// files are still being statically initialised (a layer held in a global).
std::span<const BuiltinDef> table() {
  static const BuiltinDef defs[] = {
    {{"relu", FormulaMode::Activation, "Max(0, num)", {}}, [](ExprContext &c, A a) { return c.make(Op::Max, {n(c, 0), a[0]}); }},
    {{"sigmoid", FormulaMode::Activation, "1/(1 + exp(-num))", {}}, [](ExprContext &c, A a) { return c.call(Op::Sigmoid, a[0]); }},
    {{"swish", FormulaMode::Activation, "num/(1 + exp(-num))", {}},
     [](ExprContext &c, A a) { return gated(c, a[0], c.mul(a[0], c.call(Op::Sigmoid, a[0])), -1000, 1000); }},
    {{"silu", FormulaMode::Activation, "num/(1 + exp(-num))", {}},
     [](ExprContext &c, A a) { return gated(c, a[0], c.mul(a[0], c.call(Op::Sigmoid, a[0])), -1000, 1000); }},
    {{"softplus", FormulaMode::Activation, "log(1 + exp(num))", {}}, [](ExprContext &c, A a) { return c.call(Op::Softplus, a[0]); }},
    {{"mish", FormulaMode::Activation, "num*tanh(log(1 + exp(num)))", {}},
     [](ExprContext &c, A a) {
       return gated(c, a[0], c.mul(a[0], c.call(Op::Tanh, c.call(Op::Softplus, a[0]))), -1000, 1000);
     }},
    {{"gelu", FormulaMode::Activation, "0.5*num*(1 + erf(num/sqrt(2)))", {}},
     [](ExprContext &c, A a) {
       // 1 + erf(-t) cancels for t >> 0; erfc(t) is the same value without
       // the cancellation. Past +-40 gelu is x or -0 in both dtypes.
       Expr sqrt2 = c.call(Op::Sqrt, n(c, 2));
       Expr body = c.div(c.mul(a[0], c.call(Op::Erfc, c.div(c.neg(a[0]), sqrt2))), n(c, 2));
       return gated(c, a[0], body, -40, 40);
     }},
    {{"linear", FormulaMode::Activation, "num", {}}, [](ExprContext &, A a) { return a[0]; }},
    {{"tanh", FormulaMode::Activation, "tanh(num)", {}}, [](ExprContext &c, A a) { return c.call(Op::Tanh, a[0]); }},
    {{"elu", FormulaMode::Activation, "Piecewise((num, num > 0), (alpha*(exp(num) - 1), True))", {{"alpha", 1.0}}},
     [](ExprContext &c, A a) { return pw(c, a[0], pos(c, a[0]), c.mul(c.param("alpha"), c.call(Op::Expm1, a[0]))); }},
    {{"selu", FormulaMode::Activation,
      "1.0507009873554805*Piecewise((num, num > 0), (1.6732632423543772*(exp(num) - 1), True))", {}},
     [](ExprContext &c, A a) {
       return c.mul(n(c, 1.0507009873554805),
                    pw(c, a[0], pos(c, a[0]), c.mul(n(c, 1.6732632423543772), c.call(Op::Expm1, a[0]))));
     }},
    {{"leaky_relu", FormulaMode::Activation, "Piecewise((num, num > 0), (negative_slope*num, True))",
      {{"negative_slope", 0.01}}},
     [](ExprContext &c, A a) { return pw(c, a[0], pos(c, a[0]), c.mul(c.param("negative_slope"), a[0])); }},
    {{"softsign", FormulaMode::Activation, "num/(1 + Abs(num))", {}},
     [](ExprContext &c, A a) { return c.div(a[0], c.add(n(c, 1), c.call(Op::Abs, a[0]))); }},
    {{"hardtanh", FormulaMode::Activation, "Max(-1, Min(1, num))", {}},
     [](ExprContext &c, A a) { return c.make(Op::Max, {n(c, -1), c.make(Op::Min, {n(c, 1), a[0]})}); }},
    {{"hardsigmoid", FormulaMode::Activation, "Max(0, Min(1, (num + 3)/6))", {}},
     [](ExprContext &c, A a) { return hardsigmoid(c, a[0]); }},
    {{"hardswish", FormulaMode::Activation, "Piecewise((0, num <= -3), (num, num >= 3), (num*(num + 3)/6, True))", {}},
     [](ExprContext &c, A a) {
       // Its derivative is then ((num + 3) + num)/6, exact near its zero at -1.5.
       Expr u = a[0];
       return c.make(Op::Piecewise, {n(c, 0), c.make(Op::Le, {u, n(c, -3)}), u, c.make(Op::Ge, {u, n(c, 3)}),
                                     c.div(c.mul(u, c.add(u, n(c, 3))), n(c, 6))});
     }},
    {{"gelu_tanh", FormulaMode::Activation, "0.5*num*(1 + tanh(sqrt(2/pi)*(num + 0.044715*num**3)))", {}},
     [](ExprContext &c, A a) {
       // 0.5*(1 + tanh(y)) = sigmoid(2y): the same value without cancellation for y << 0.
       Expr cube = c.mul(c.mul(a[0], a[0]), a[0]);
       Expr scale = c.mul(n(c, 2), c.call(Op::Sqrt, c.div(n(c, 2), c.constant(Op::Pi))));
       Expr inner = c.mul(scale, c.add(a[0], c.mul(n(c, 0.044715), cube)));
       return gated(c, a[0], c.mul(a[0], c.call(Op::Sigmoid, inner)), -1000, 1000);
     }},
    {{"log_sigmoid", FormulaMode::Activation, "-log(1 + exp(-num))", {}},
     [](ExprContext &c, A a) { return c.neg(c.call(Op::Softplus, c.neg(a[0]))); }},

    {{"mse", FormulaMode::Loss, "(y_pred - y_true)**2", {}},
     [](ExprContext &c, A a) { Expr d = diff(c, a); return c.mul(d, d); }},
    {{"mae", FormulaMode::Loss, "Abs(y_pred - y_true)", {}}, [](ExprContext &c, A a) { return c.call(Op::Abs, diff(c, a)); }},
    {{"huber", FormulaMode::Loss,
      "Piecewise((0.5*(y_pred - y_true)**2, Abs(y_pred - y_true) <= delta), "
      "(delta*(Abs(y_pred - y_true) - 0.5*delta), True))",
      {{"delta", 1.0}}},
     [](ExprContext &c, A a) {
       Expr d = diff(c, a), ad = c.call(Op::Abs, d), delta = c.param("delta");
       return pw(c, c.mul(n(c, 0.5), c.mul(d, d)), c.make(Op::Le, {ad, delta}),
                 c.mul(delta, c.sub(ad, c.mul(n(c, 0.5), delta))));
     },
     {0, true, "huber"}},
    {{"bce", FormulaMode::Loss, "-(xlogy(y_true, y_pred + eps) + xlogy(1 - y_true, 1 - y_pred + eps))", {{"eps", 1e-7}}},
     bce,
     {0, false, "bce"}},
    {{"log_cosh", FormulaMode::Loss, "log(cosh(y_pred - y_true))", {}},
     [](ExprContext &c, A a) {
       // Exact near 0 (a gradient of 0 there would stop training near
       // convergence) and no overflow where cosh overflows.
       return logCosh(c, diff(c, a));
     }},
    {{"smooth_l1", FormulaMode::Loss,
      "Piecewise((0.5*(y_pred - y_true)**2/beta, Abs(y_pred - y_true) < beta), (Abs(y_pred - y_true) - 0.5*beta, True))",
      {{"beta", 1.0}}},
     [](ExprContext &c, A a) {
       Expr d = diff(c, a), ad = c.call(Op::Abs, d), beta = c.param("beta");
       return pw(c, c.div(c.mul(n(c, 0.5), c.mul(d, d)), beta), c.make(Op::Lt, {ad, beta}),
                 c.sub(ad, c.mul(n(c, 0.5), beta)));
     },
     {0, true, "smooth_l1"}},
    {{"bce_with_logits", FormulaMode::Loss, "log(1 + exp(y_pred)) - y_true*y_pred", {}},
     [](ExprContext &c, A a) {
       // softplus(x) - t*x cancels for x >> 0 at t = 1 (it was 0 at x = 20
       // for 2.06e-9); (1 - t)*x + softplus(-x) is the same without it there.
       Expr x = a[0], t = a[1];
       return pw(c, c.add(c.mul(c.sub(n(c, 1), t), x), c.call(Op::Softplus, c.neg(x))), c.make(Op::Ge, {x, n(c, 0)}),
                 c.sub(c.call(Op::Softplus, x), c.mul(t, x)));
     }},
    {{"poisson_nll", FormulaMode::Loss, "exp(y_pred) - y_true*y_pred", {}},
     [](ExprContext &c, A a) { return c.sub(c.call(Op::Exp, a[0]), c.mul(a[1], a[0])); }},
  };
  return defs;
}

std::vector<BuiltinInfo> makeInfos() {
  std::vector<BuiltinInfo> out;
  for (const BuiltinDef &d : table())
    out.push_back(d.info);
  return out;
}

} // namespace

const BuiltinDef *findBuiltin(std::string_view name) {
  for (const BuiltinDef &d : table())
    if (d.info.name == name)
      return &d;
  return nullptr;
}

std::span<const BuiltinDef> builtinDefs() { return table(); }

} // namespace hsnn::detail

namespace hsnn {
std::span<const BuiltinInfo> builtins() {
  static const std::vector<BuiltinInfo> infos = detail::makeInfos();
  return infos;
}
} // namespace hsnn
