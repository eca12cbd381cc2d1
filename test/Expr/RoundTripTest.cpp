//===- test/Expr/RoundTripTest.cpp - print(e) parses back to e ------------===//
#include "TestUtil.h"

#include <random>

using namespace hsnn;
using namespace hsnn::test;

namespace {

void checkRoundTrip(ExprContext &ctx, Expr e, FormulaMode mode) {
  std::string text = print(e);
  CAPTURE(text);
  auto back = parseFormulaDetailed(ctx, text, {mode, -1, /*simplify=*/false});
  if (auto *d = std::get_if<Diagnostic>(&back))
    FAIL(d->render());
  CHECK(std::get<Formula>(back).expr == e);
}

// A random numeric expression over the activation variable.
class RandomExpr {
public:
  RandomExpr(ExprContext &ctx, uint64_t seed) : ctx_(ctx), rng_(seed) {}

  Expr num(int depth) {
    int pick = int(rng_() % (depth <= 0 ? 4 : 14));
    Expr x = ctx_.variable(Variable::Num);
    switch (pick) {
    case 0: return x;
    case 1: return ctx_.param(rng_() % 2 ? "alpha" : "beta");
    case 2: return ctx_.number(double(int(rng_() % 21) - 10) / 4);
    case 3: return ctx_.number(std::ldexp(double(rng_() % 1000) + 0.1, int(rng_() % 40) - 20));
    case 4: return ctx_.add(num(depth - 1), num(depth - 1));
    case 5: return ctx_.sub(num(depth - 1), num(depth - 1));
    case 6: return ctx_.mul(num(depth - 1), num(depth - 1));
    case 7: return ctx_.div(num(depth - 1), num(depth - 1));
    case 8: return ctx_.pow(num(depth - 1), num(depth - 1));
    case 9: return ctx_.neg(num(depth - 1));
    case 10: {
      static const Op unary[] = {Op::Sin, Op::Exp, Op::Abs, Op::Softplus, Op::Sigmoid, Op::Erf, Op::Log1p, Op::Sign};
      return ctx_.call(unary[rng_() % std::size(unary)], num(depth - 1));
    }
    case 11: return ctx_.make(rng_() % 2 ? Op::Max : Op::Min, {num(depth - 1), num(depth - 1)});
    case 12: return ctx_.make(Op::Atan2, {num(depth - 1), num(depth - 1)});
    default: return ctx_.make(Op::Piecewise, {num(depth - 1), cond(depth - 1), num(depth - 1), cond(depth - 1), num(depth - 1)});
    }
  }

  Expr cond(int depth) {
    static const Op cmp[] = {Op::Lt, Op::Le, Op::Gt, Op::Ge, Op::Eq, Op::Ne};
    switch (depth <= 0 ? 0 : rng_() % 4) {
    case 0: return ctx_.make(cmp[rng_() % 6], {num(depth - 1), num(depth - 1)});
    case 1: return ctx_.make(Op::And, {cond(depth - 1), cond(depth - 1)});
    case 2: return ctx_.make(Op::Or, {cond(depth - 1), cond(depth - 1)});
    default: return ctx_.make(Op::Not, {cond(depth - 1)});
    }
  }

private:
  ExprContext &ctx_;
  std::mt19937_64 rng_;
};

} // namespace

TEST_CASE("every built-in and its derivative round-trip through the printer") {
  for (const BuiltinInfo &b : builtins()) {
    ExprContext ctx;
    CAPTURE(b.name);
    Formula f = mustParse(ctx, b.name, b.mode);
    checkRoundTrip(ctx, f.expr, b.mode);
    checkRoundTrip(ctx, differentiate(ctx, f.expr, b.mode == FormulaMode::Loss ? Variable::YPred : Variable::Num), b.mode);
  }
}

TEST_CASE("hand-picked tricky spellings round-trip") {
  ExprContext ctx;
  for (const char *text : {"-x**2", "(-x)**2", "2**-x", "x**y_", "x - (y_ - x)", "x/(y_*x)", "(x/y_)/x", "-(x*y_)",
                           "-2*x", "x*-2", "(x**2)**3", "x**2**3", "Piecewise((x, (x > 0) & ~(x < 1)), (0, True))",
                           "1e-300*x", "1.7976931348623157e308*x", "-0.0 + x", "x - -3", "Max(x, 0, -1)"}) {
    CAPTURE(text);
    checkRoundTrip(ctx, mustParse(ctx, text, FormulaMode::Activation, false).expr, FormulaMode::Activation);
    checkRoundTrip(ctx, mustParse(ctx, text).expr, FormulaMode::Activation);
  }
}

TEST_CASE("random expressions round-trip through the printer") {
  ExprContext ctx;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    RandomExpr gen(ctx, seed);
    Expr e = gen.num(5);
    CAPTURE(seed);
    checkRoundTrip(ctx, e, FormulaMode::Activation);
  }
}

TEST_CASE("SymPy's Eq, Ne, Lt..Ge, Rational, Mod, log2, log10 and cbrt parse; Eq and Ne print as SymPy reads them") {
  ExprContext ctx;
  struct Case {
    const char *text, *printed;
    double at, value;
  };
  const Case cases[] = {
      {"Piecewise((1, Eq(x, 0)), (x, True))", "Piecewise((1, Eq(num, 0)), (num, True))", 0, 1},
      {"Piecewise((1, x == 0), (x, True))", "Piecewise((1, Eq(num, 0)), (num, True))", 2, 2},
      {"Piecewise((1, Ne(x, 0)), (x, Lt(x, 1)), (2, True))", "Piecewise((1, Ne(num, 0)), (num, num < 1), (2, True))", 0, 0},
      {"Piecewise((x, Ge(x, 1) & Gt(x, 2) | Le(x, -5)), (0, True))", nullptr, 3, 3},
      {"Rational(1, 4)*x", "num/4", 2, 0.5},
      {"Mod(x, 3)", "num - 3*floor(num/3)", -1, 2},
      {"log2(x)", nullptr, 8, 3},
      {"log10(x)", nullptr, 1000, 3},
      {"cbrt(x)", nullptr, 27, 3},
  };
  for (const Case &c : cases) {
    CAPTURE(c.text);
    Formula f = mustParse(ctx, c.text);
    if (c.printed)
      CHECK(print(f.expr) == c.printed);
    CHECK(evalAt<double>(f.expr, c.at) == doctest::Approx(c.value).epsilon(1e-15));
    CHECK(mustParse(ctx, print(f.expr)).expr == f.expr); // the printed text reads back to the same node
  }
  auto message = [&](const char *text) {
    auto r = parseFormulaDetailed(ctx, text);
    return std::holds_alternative<Diagnostic>(r) ? std::get<Diagnostic>(r).message : std::string("(parsed)");
  };
  CHECK(message("Rational(1, 0)*x") == "Rational with a zero denominator");
  CHECK(message("Rational(x, 2)") == "Rational takes two integers, e.g. Rational(1, 3)");
  CHECK(message("Mod(x)") == "Mod takes 2 arguments, got 1");
}
