//===- test/Expr/RoundTripTest.cpp - print(e) parses back to e ------------===//
#include "TestUtil.h"


using namespace hsnn;
using namespace hsnn::test;

namespace {

// Nodes that print as something else: a Guarded as its Piecewise, a
// Partials (bce) as its value.
bool hasGuards(Expr e) {
  if (e->op() == Op::Guarded || e->op() == Op::Partials)
    return true;
  for (Expr a : e->args())
    if (hasGuards(a))
      return true;
  return false;
}

// With its guards printed, a built-in's text reads back to the same
// function: the same node, or (guards parse as the Piecewise they are) the
// same text again.
void checkRoundTrip(ExprContext &ctx, Expr e, FormulaMode mode) {
  std::string text = print(e, {.guards = true});
  CAPTURE(text);
  auto back = parseFormulaDetailed(ctx, text, {mode, -1, /*simplify=*/false});
  if (auto *d = std::get_if<Diagnostic>(&back))
    FAIL(d->render());
  Expr b = std::get<Formula>(back).expr;
  if (hasGuards(e))
    CHECK(print(b) == text);
  else
    CHECK(b == e);
}

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

TEST_CASE("bce (a Partials node) as a factor among others reads back in the same order") {
  // Found by the parser fuzzer: a Partials node sorted among a product's
  // operands by its own hash, its printed value by another.
  ExprContext ctx;
  for (const char *text : {"Max(bce*a*elux, -0, 1)**2*y_pred*bce + log_cosh*bce", "y_true*bce*q - bce/y_pred",
                           "Max(bce, mse, huber)*x_g*bce",
                           "Max(swZish, Max(b---Xgs*a_g*selux*anX*bce*a*elux*anX*bce*a*_g*zea*_glog_kosh*selux*an+dml*ftgXX*b4444444444444444444444444444444444---Xgs*a-xj, -0 ,1))**_g*selux*anX*bce*a*eluce4ft44444444444x*anX*bce*a*_g*zea*_glog_kosh*selux*an+dml*ftgXX*bce4ft244444444444"}) {
    CAPTURE(text);
    checkRoundTrip(ctx, mustParse(ctx, text, FormulaMode::Loss).expr, FormulaMode::Loss);
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

TEST_CASE("the parser fuzzer's findings read back to the same function and derivative") {
  // A formula that simplifies to one constant named like a built-in
  // (log(exp(xswish)) is xswish) prints in parentheses, which read back as
  // the constant, not as a mistyped built-in.
  {
    ExprContext ctx;
    Formula f = mustParse(ctx, "log(exp(xswish))");
    CHECK(print(f.expr) == "(xswish)");
    CHECK(mustParse(ctx, print(f.expr)).expr == f.expr);
    auto bare = parseFormulaDetailed(ctx, "  xswish ", {FormulaMode::Activation});
    REQUIRE(std::holds_alternative<Diagnostic>(bare)); // the bare name still says what it looks like
    CHECK(std::get<Diagnostic>(bare).message == "'xswish' is not a built-in activation; did you mean 'swish'?");
  }
  // A built-in's guarded form inside Max keeps its place among the operands
  // when read back (a guard hashes as the Piecewise it prints as): the
  // derivative at a tie follows the operand order.
  for (const char *text : {"Max(swish, Max(-xb, 0, -1))**2", "Min(gelu, x*xb)", "Max(softplus, -x) + sigmoid*x",
                           "Max(mish, gelu, silu, x)"}) {
    ExprContext ctx;
    CAPTURE(text);
    Formula f = mustParse(ctx, text);
    std::string printed = print(f.expr, {.guards = true});
    Expr back = mustParse(ctx, printed, FormulaMode::Activation, /*simplify=*/false).expr;
    CHECK(print(back, {.guards = true}) == printed);
    CHECK(print(differentiate(ctx, back, Variable::Num), {.guards = true}) ==
          print(differentiate(ctx, f.expr, Variable::Num), {.guards = true}));
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

TEST_CASE("SymPy's Eq, Ne, Lt..Ge, Rational, Mod, log2, log10 and cbrt parse, and Eq and Ne print as SymPy reads them") {
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

TEST_CASE("PrintOptions::sympy spells out what SymPy does not read, and the text is the same function") {
  // Every activation built-in and its derivative: no sigmoid, softplus,
  // log1p or expm1 call left, and hsnn reads the text back to the same
  // values (exactly where it recognizes the spelled-out form, within
  // rounding where the argument is compound).
  for (const BuiltinInfo &b : builtins()) {
    if (b.mode != FormulaMode::Activation)
      continue;
    ExprContext ctx;
    CAPTURE(b.name);
    Formula f = mustParse(ctx, b.name);
    for (Expr e : {f.expr, differentiate(ctx, f.expr, Variable::Num)}) {
      std::string text = print(e, {.sympy = true});
      CAPTURE(text);
      for (const char *unknown : {"sigmoid(", "softplus(", "log1p(", "expm1("})
        CHECK(text.find(unknown) == std::string::npos);
      Formula back = mustParse(ctx, text);
      for (double at : {-3.0, -0.7, 0.0, 0.4, 2.5}) {
        CAPTURE(at);
        double want = evalAt<double>(e, at, 0, f.defaults), got = evalAt<double>(back.expr, at, 0, f.defaults);
        CHECK((got == doctest::Approx(want).epsilon(1e-12) || (std::isnan(got) && std::isnan(want))));
      }
    }
  }
  ExprContext ctx;
  CHECK(print(mustParse(ctx, "sigmoid(x)").expr, {.sympy = true}) == "1/(1 + exp(-num))");
  CHECK(print(mustParse(ctx, "2**sigmoid(x)").expr, {.sympy = true}) == "2**(1/(1 + exp(-num)))");
  CHECK(print(mustParse(ctx, "expm1(x)**2").expr, {.sympy = true}) == "(exp(num) - 1)**2");
  CHECK(print(mustParse(ctx, "softplus(x)").expr) == "softplus(num)"); // hsnn's own by default
}
