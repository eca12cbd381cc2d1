//===- test/Expr/OpsTest.cpp - Every op and built-in: values, derivatives -===//
#include "TestUtil.h"

#include <limits>
#include <random>
#include <set>

using namespace hsnn;
using namespace hsnn::test;

namespace {

// Evaluates a formula (or its derivative) at a point; built-in defaults fill
// the constants not given.
double evalFormula(std::string_view formula, FormulaMode mode, bool derivative, double x, double yt,
                   std::map<std::string, double> k) {
  ExprContext ctx;
  Formula f = mustParse(ctx, formula, mode);
  for (auto &[name, v] : f.defaults)
    k.emplace(name, v);
  Variable v = mode == FormulaMode::Loss ? Variable::YPred : Variable::Num;
  return evalAt(derivative ? differentiate(ctx, f.expr, v) : f.expr, x, yt, k);
}
double act(std::string_view formula, double x, const std::map<std::string, double> &k = {}) {
  return evalFormula(formula, FormulaMode::Activation, false, x, 0, k);
}
double actDeriv(std::string_view formula, double x, const std::map<std::string, double> &k = {}) {
  return evalFormula(formula, FormulaMode::Activation, true, x, 0, k);
}
double loss(std::string_view formula, double yp, double yt, const std::map<std::string, double> &k = {}) {
  return evalFormula(formula, FormulaMode::Loss, false, yp, yt, k);
}
double lossDeriv(std::string_view formula, double yp, double yt, const std::map<std::string, double> &k = {}) {
  return evalFormula(formula, FormulaMode::Loss, true, yp, yt, k);
}

// A unary function of the language and the interval where it is smooth.
struct Domain {
  const char *formula;
  double lo, hi;
};
const Domain kUnary[] = {
    {"exp(x)", -3, 3},      {"log(x)", 0.1, 5},     {"sqrt(x)", 0.1, 5},   {"sin(x)", -3, 3},
    {"cos(x)", -3, 3},      {"tan(x)", -1.2, 1.2},  {"asin(x)", -0.9, 0.9}, {"acos(x)", -0.9, 0.9},
    {"atan(x)", -3, 3},     {"sinh(x)", -3, 3},     {"cosh(x)", -3, 3},    {"tanh(x)", -3, 3},
    {"asinh(x)", -3, 3},    {"acosh(x)", 1.1, 5},   {"atanh(x)", -0.9, 0.9}, {"erf(x)", -3, 3},
    {"erfc(x)", -3, 3},     {"log1p(x)", -0.9, 3},  {"expm1(x)", -3, 3},   {"sigmoid(x)", -8, 8},
    {"softplus(x)", -8, 8}, {"Abs(x)", 0.1, 3},     {"x**3", -3, 3},       {"x**x", 0.2, 3},
    {"2**x", -3, 3},        {"x**2.5", 0.1, 3},     {"1/x", 0.2, 3},       {"atan2(x, 2)", -3, 3},
    {"atan2(1.5, x)", -3, 3}, {"log(x, 3)", 0.1, 5}, {"Max(x, 0.5)", 0.6, 3}, {"Min(x, 0.5)", 0.6, 3},
    {"Max(x, sin(x))", 0.1, 3}, {"x - 1/x", 0.1, 3},
    {"Heaviside(x)", 0.1, 3}, {"sign(x)", -3, -0.1}, {"floor(x)", 1.1, 1.9}, {"ceiling(x)", -1.9, -1.1},
    // Built-ins, away from their kinks.
    {"relu", 0.01, 3},      {"sigmoid", -8, 8},     {"swish", -5, 5},      {"silu", -5, 5},
    {"softplus", -8, 8},    {"mish", -5, 5},        {"gelu", -4, 4},       {"linear", -3, 3},
    {"tanh", -3, 3},        {"elu", 0.01, 3},       {"elu", -3, -0.01},    {"selu", -3, -0.01},
    {"leaky_relu", -3, -0.01}, {"softsign", 0.01, 3}, {"softsign", -3, -0.01}, {"hardtanh", -0.99, 0.99},
    {"hardsigmoid", -2.9, 2.9}, {"hardswish", -2.9, 2.9}, {"gelu_tanh", -4, 4}, {"log_sigmoid", -8, 8},
    {"Piecewise((x**2, x < 1), (sin(x), True))", -2, 0.99},
};

} // namespace

TEST_CASE("built-ins and functions have their known values") {
  CHECK(act("gelu", 1) == doctest::Approx(0.8413447460685429).epsilon(1e-15));
  CHECK(act("sigmoid", 0) == 0.5);
  CHECK(act("swish", 1) == doctest::Approx(0.7310585786300049).epsilon(1e-15));
  CHECK(act("mish", 1) == doctest::Approx(0.8650983882673103).epsilon(1e-15));
  CHECK(act("softplus", 0) == doctest::Approx(0.6931471805599453).epsilon(1e-15));
  CHECK(act("elu", -1) == doctest::Approx(-0.6321205588285577).epsilon(1e-15));
  CHECK(act("elu", -1, {{"alpha", 2}}) == doctest::Approx(-1.2642411176571153).epsilon(1e-15));
  CHECK(act("selu", 1) == doctest::Approx(1.0507009873554805).epsilon(1e-15));
  CHECK(act("selu", -1) == doctest::Approx(-1.1113307378125628).epsilon(1e-14));
  CHECK(act("leaky_relu", -1) == doctest::Approx(-0.01));
  CHECK(act("softsign", 1) == 0.5);
  CHECK(act("hardtanh", 2) == 1);
  CHECK(act("hardtanh", -2) == -1);
  CHECK(act("hardsigmoid", 0) == 0.5);
  CHECK(act("hardswish", 1) == doctest::Approx(2.0 / 3).epsilon(1e-15));
  CHECK(act("gelu_tanh", 1) == doctest::Approx(0.8411919906082768).epsilon(1e-14));
  CHECK(act("log_sigmoid", 0) == doctest::Approx(-0.6931471805599453).epsilon(1e-15));
  CHECK(act("linear", -2.5) == -2.5);
  CHECK(act("sin(num)*alpha", 1, {{"alpha", 2}}) == doctest::Approx(1.682941969615793).epsilon(1e-15));
  CHECK(act("E + pi + tau + phi + e", 0) ==
        doctest::Approx(2 * 2.718281828459045 + 3 * 3.141592653589793 + 1.618033988749895).epsilon(1e-15));
  CHECK(act("log(8, 2)", 0) == doctest::Approx(3).epsilon(1e-15));
  CHECK(act("floor(x) + ceiling(x) + ceil(x)", 1.5) == 5);
  CHECK(act("sign(x)", -3) == -1);
  CHECK(act("Max(1, x, 3)", 2) == 3);
  CHECK(act("min(abs(x), 2)", -5) == 2);
  CHECK(act("Piecewise((1, (x > 0) & (x < 2)), (2, (x > 5) | ~(x < 10)), (3, True))", 1) == 1);
  CHECK(act("Piecewise((1, (x > 0) & (x < 2)), (2, (x > 5) | ~(x < 10)), (3, True))", 6) == 2);
  CHECK(act("Piecewise((1, And(x > 0, x < 2)), (2, Or(x > 5, Not(x < 10))), (3, True))", -1) == 3);
  CHECK(act("-x**2", 3) == -9);
  CHECK(act("2**-x", 1) == 0.5);
  CHECK(act("2**3**2", 0) == 512);

  CHECK(loss("mse", 3, 1) == 4);
  CHECK(loss("mae", 3, 1) == 2);
  CHECK(loss("huber", 3, 1) == 1.5);
  CHECK(loss("huber", 1.5, 1) == 0.125);
  CHECK(loss("huber", 3, 1, {{"delta", 0.5}}) == doctest::Approx(0.875));
  CHECK(loss("log_cosh", 1, 0) == doctest::Approx(0.4337808304830271).epsilon(1e-15));
  CHECK(loss("smooth_l1", 1.5, 1) == 0.125);
  CHECK(loss("smooth_l1", 3, 1) == 1.5);
  CHECK(loss("bce_with_logits", 0, 1) == doctest::Approx(0.6931471805599453).epsilon(1e-15));
  CHECK(loss("poisson_nll", 0, 1) == 1);
  CHECK(loss("bce", 0.5, 1) == doctest::Approx(0.6931469805599654).epsilon(1e-12));
  CHECK(loss("mse(y_pred, y_true)/2 + mae(y_pred, 0)", 3, 1) == 5);
}

TEST_CASE("stable forms: no overflow where the naive formula overflows") {
  CHECK(act("softplus", 100) == 100);
  CHECK(act("log(1 + exp(x))", 1000) == 1000);  // rewritten to softplus
  CHECK(act("softplus", -1000) == 0);
  CHECK(act("sigmoid", -1000) == 0);
  CHECK(act("1/(1 + exp(-x))", -1000) == 0);    // rewritten to sigmoid
  CHECK(act("sigmoid", 1000) == 1);
  CHECK(act("swish", -1000) == 0);
  CHECK(act("x/(1 + exp(-x))", -1000) == 0);
  CHECK(act("mish", 1000) == 1000);
  CHECK(act("log_sigmoid", -1000) == -1000);
  CHECK(act("log(1 + x)", 1e-20) == 1e-20);     // log1p
  CHECK(act("exp(x) - 1", 1e-20) == 1e-20);     // expm1
  CHECK(loss("log_cosh", 1000, 0) == doctest::Approx(1000 - 0.6931471805599453));
  CHECK(std::isfinite(loss("bce", 0, 1)));
  CHECK(std::isfinite(loss("bce", 1, 0)));
  CHECK(loss("bce_with_logits", 1000, 0) == 1000);
  CHECK(loss("bce_with_logits", -1000, 1) == 1000);
  CHECK(lossDeriv("log_cosh", 1000, 0) == 1);
}

TEST_CASE("bce stays finite at 0 and 1 in f32 and f64") {
  ExprContext ctx;
  Formula f = mustParse(ctx, "bce", FormulaMode::Loss);
  Expr d = differentiate(ctx, f.expr, Variable::YPred);
  for (double yp : {0.0, 1.0})
    for (double yt : {0.0, 1.0}) {
      CAPTURE(yp);
      CAPTURE(yt);
      CHECK(std::isfinite(evalAt<double>(f.expr, yp, yt, {{"eps", 1e-7}})));
      CHECK(std::isfinite(evalAt<float>(f.expr, yp, yt, {{"eps", 1e-7}})));
      CHECK(std::isfinite(evalAt<double>(d, yp, yt, {{"eps", 1e-7}})));
      CHECK(std::isfinite(evalAt<float>(d, yp, yt, {{"eps", 1e-7}})));
    }
}

TEST_CASE("derivatives agree with central finite differences in f64") {
  std::mt19937_64 rng(42);
  for (const Domain &dom : kUnary) {
    ExprContext ctx;
    Formula f = mustParse(ctx, dom.formula);
    std::map<std::string, double> k;
    for (auto &[name, v] : f.defaults)
      k[name] = v;
    Expr d = differentiate(ctx, f.expr, Variable::Num);
    std::uniform_real_distribution<double> pick(dom.lo, dom.hi);
    for (int i = 0; i < 20; ++i) {
      double x = pick(rng);
      double h = 1e-6 * std::max(1.0, std::fabs(x));
      double fd = (evalAt(f.expr, x + h, 0, k) - evalAt(f.expr, x - h, 0, k)) / (2 * h);
      double exact = evalAt(d, x, 0, k);
      CAPTURE(dom.formula);
      CAPTURE(x);
      CAPTURE(print(d));
      CHECK(exact == doctest::Approx(fd).epsilon(1e-6).scale(1.0));
    }
  }
}

TEST_CASE("loss gradients agree with finite differences in y_pred") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> pick(0.05, 0.95);
  for (const char *name : {"mse", "mae", "huber", "bce", "log_cosh", "smooth_l1", "bce_with_logits", "poisson_nll",
                           "(y_pred - y_true)**4 + sin(y_pred*y_true)"}) {
    ExprContext ctx;
    Formula f = mustParse(ctx, name, FormulaMode::Loss);
    std::map<std::string, double> k(f.defaults.begin(), f.defaults.end());
    Expr d = differentiate(ctx, f.expr, Variable::YPred);
    for (int i = 0; i < 20; ++i) {
      double yp = pick(rng) * 4 - 2, yt = pick(rng);
      if (std::string_view(name) == "bce")
        yp = pick(rng);
      double h = 1e-6;
      double fd = (evalAt(f.expr, yp + h, yt, k) - evalAt(f.expr, yp - h, yt, k)) / (2 * h);
      CAPTURE(name);
      CAPTURE(yp);
      CAPTURE(yt);
      CHECK(evalAt(d, yp, yt, k) == doctest::Approx(fd).epsilon(1e-6).scale(1.0));
    }
  }
}

TEST_CASE("kinks have the documented derivatives") {
  CHECK(actDeriv("relu", 0) == 0);
  CHECK(actDeriv("Max(x, 0)", 0) == 0); // operand order does not matter
  CHECK(actDeriv("Max(0, x)", 0) == 0);
  CHECK(actDeriv("relu", 1) == 1);
  CHECK(actDeriv("relu", -1) == 0);
  CHECK(actDeriv("Abs(x)", 0) == 0);
  CHECK(act("Heaviside(x)", 0) == 0);
  CHECK(act("Heaviside(x)", 2) == 1);
  CHECK(act("Heaviside(x, 0.5)", 0) == 0.5); // SymPy's second argument: the value at 0
  CHECK(act("Heaviside(x, 0.5)", -1) == 0);
  CHECK(act("Heaviside(x, 0.5)", 3) == 1);
  CHECK(actDeriv("Heaviside(x)", 0) == 0);
  CHECK(actDeriv("Heaviside(x)*x", 2) == 1); // the seed broke on this
  CHECK(actDeriv("sign(x)", 0) == 0);
  CHECK(actDeriv("floor(x)", 0.5) == 0);
  CHECK(actDeriv("ceiling(x)", 0.5) == 0);
  CHECK(actDeriv("Min(x, 1)", 1) == 0);      // tie: the number's derivative
  CHECK(actDeriv("Max(x, sin(x))", 0) == 1); // tie between two non-numbers: first in canonical order
  CHECK(actDeriv("leaky_relu", 0) == doctest::Approx(0.01));
  CHECK(actDeriv("elu", 0) == 1);            // alpha*exp(0), the left branch at 0
  CHECK(actDeriv("hardtanh", 1) == 0);
  CHECK(actDeriv("hardtanh", -1) == 0);
  CHECK(actDeriv("hardsigmoid", 3) == 0);
  CHECK(actDeriv("Piecewise((x, x > 0), (2*x, True))", 0) == 2);
  CHECK(lossDeriv("mae", 1, 1) == 0);
  CHECK(lossDeriv("huber", 2, 1) == 1);
}

TEST_CASE("derivatives of constants are exact zeros, not 0*x") {
  ExprContext ctx;
  Formula f = mustParse(ctx, "alpha*x + beta");
  Expr d = differentiate(ctx, f.expr, Variable::Num);
  CHECK(print(d) == "alpha");
  // At x = inf the naive 0*x + alpha*1 would be NaN.
  CHECK(evalAt(d, INFINITY, 0, {{"alpha", 2}, {"beta", 1}}) == 2);
  CHECK(print(differentiate(ctx, mustParse(ctx, "sin(alpha)").expr, Variable::Num)) == "0");
}

TEST_CASE("edge inputs: NaN propagates and infinities are handled") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = INFINITY;
  for (const Domain &dom : kUnary) {
    CAPTURE(dom.formula);
    CHECK(std::isnan(act(dom.formula, nan)));
  }
  CHECK(act("exp(x)", -inf) == 0);
  CHECK(act("exp(x)", inf) == inf);
  CHECK(act("log(x)", 0) == -inf);
  CHECK(act("softplus", inf) == inf);
  CHECK(act("softplus", -inf) == 0);
  CHECK(act("sigmoid", inf) == 1);
  CHECK(act("sigmoid", -inf) == 0);
  CHECK(act("tanh", inf) == 1);
  CHECK(act("relu", inf) == inf);
  CHECK(act("relu", -inf) == 0);
  CHECK(std::isnan(act("relu", nan)));
  CHECK(std::isnan(act("Max(x, 1)", nan)));
  CHECK(std::isnan(act("Min(1, x)", nan)));
  CHECK(std::isnan(act("Heaviside(x)", nan)));
  CHECK(std::signbit(act("sign(x)", -0.0)));
  CHECK(std::signbit(act("x*1", -0.0)));
  CHECK(std::signbit(act("linear", -0.0)));
  CHECK(std::isnan(act("x*0", inf))); // not folded away
  CHECK(std::isnan(act("x - x", inf)));
  CHECK(act("gelu", -40) == 0); // the erfc form underflows cleanly; -inf*0 at -inf is NaN by IEEE
  CHECK(act("gelu", inf) == inf);
}

TEST_CASE("f32 and f64 interpreters agree within 4 ulp on every op at edge inputs") {
  const double denormal = std::numeric_limits<float>::denorm_min() * 8;
  const double points[] = {0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 3.0, 88.7, -88.7, 1000, -1000, denormal, -denormal,
                           INFINITY, -INFINITY, std::numeric_limits<double>::quiet_NaN()};
  for (const Domain &dom : kUnary) {
    ExprContext ctx;
    Formula f = mustParse(ctx, dom.formula);
    std::map<std::string, double> k(f.defaults.begin(), f.defaults.end());
    for (double x : points) {
      float f32 = evalAt<float>(f.expr, x, 0, k);
      float ref = float(evalAt<double>(f.expr, double(float(x)), 0, k));
      CAPTURE(dom.formula);
      CAPTURE(x);
      CAPTURE(f32);
      CAPTURE(ref);
      if (std::isnan(ref) || std::isinf(ref) || std::fabs(ref) < 1e-30f) {
        // Overflow and underflow thresholds differ between f32 and f64 math;
        // NaN must stay NaN.
        if (std::isnan(ref) && !std::isfinite(x))
          CHECK(std::isnan(f32));
        continue;
      }
      CHECK(ulpDistance(f32, ref) <= 4);
    }
  }
}

TEST_CASE("the finite-difference list covers every numeric op of Ops.def and every activation built-in") {
  // kUnary gives each op the interval where it is smooth, so it is kept by
  // hand; this keeps it complete as Ops.def and the built-in table grow.
  ExprContext ctx;
  std::set<std::string> covered;
  std::vector<Expr> stack;
  for (const Domain &d : kUnary) {
    covered.insert(d.formula);
    stack.push_back(mustParse(ctx, d.formula).expr);
  }
  std::set<Op> ops;
  while (!stack.empty()) {
    Expr e = stack.back();
    stack.pop_back();
    ops.insert(e->op());
    for (Expr a : e->args())
      stack.push_back(a);
  }
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo &o = opInfo(Op(i));
    if (o.isBool || o.syntax == OpSyntax::Leaf || o.arity < 0 || Op(i) == Op::Neg || Op(i) == Op::Sub ||
        Op(i) == Op::Add)
      continue; // Piecewise, Neg, Add, Sub appear in built-ins and composites below
    CAPTURE(o.name);
    CHECK(ops.count(Op(i)));
  }
  for (const std::string &name : test::builtinNames(FormulaMode::Activation)) {
    CAPTURE(name);
    CHECK(covered.count(name));
  }
}
