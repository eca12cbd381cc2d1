//===- test/Expr/ContextTest.cpp - Hash-consing and thread safety ---------===//
#include "TestUtil.h"

#include <thread>

using namespace hsnn;
using namespace hsnn::test;

TEST_CASE("building the same expression twice gives the same node") {
  ExprContext ctx;
  Expr x = ctx.variable(Variable::Num);
  Expr a = ctx.mul(ctx.call(Op::Sin, x), ctx.param("alpha"));
  Expr b = ctx.mul(ctx.call(Op::Sin, x), ctx.param("alpha"));
  CHECK(a == b);
  CHECK(ctx.number(0.0) != ctx.number(-0.0)); // signed zeros are different numbers
  // Parsing simplifies into the canonical order: constants before calls.
  Expr canonical = ctx.mul(ctx.param("alpha"), ctx.call(Op::Sin, x));
  CHECK(mustParse(ctx, "sin(num)*alpha").expr == canonical);
  CHECK(mustParse(ctx, "alpha*sin(num)").expr == canonical);
  CHECK(mustParse(ctx, "sin(x)*alpha").expr == canonical); // aliases name one variable
  size_t before = ctx.size();
  mustParse(ctx, "sin(z)*alpha");
  CHECK(ctx.size() == before);
}

TEST_CASE("f and f' share their common subexpressions") {
  ExprContext ctx;
  Formula f = mustParse(ctx, "exp(sin(x))");
  Expr d = differentiate(ctx, f.expr, Variable::Num);
  // d = exp(sin(x)) * cos(x): the exp node is the formula itself.
  REQUIRE(d->op() == Op::Mul);
  CHECK(d->arg(0) == f.expr);
}

TEST_CASE("the builder folds only what is exact for every IEEE input") {
  ExprContext ctx;
  Expr x = ctx.variable(Variable::Num);
  CHECK(ctx.mul(x, ctx.number(1)) == x);
  CHECK(ctx.div(x, ctx.number(1)) == x);
  CHECK(ctx.sub(x, ctx.number(0)) == x);
  CHECK(ctx.neg(ctx.neg(x)) == x);
  CHECK(ctx.mul(x, ctx.number(-1)) == ctx.neg(x));
  CHECK(ctx.mul(x, ctx.number(0))->op() == Op::Mul);   // inf*0 is NaN
  CHECK(ctx.sub(x, x)->op() == Op::Sub);               // inf-inf is NaN
  CHECK(ctx.add(x, ctx.number(0))->op() == Op::Add);   // -0+0 is +0
  CHECK(ctx.add(ctx.number(2), ctx.number(3)) == ctx.number(5));
  CHECK(ctx.div(ctx.number(1), ctx.number(0))->op() == Op::Div); // inf is not folded
  CHECK(ctx.make(Op::Max, {x, ctx.number(0)}) == ctx.make(Op::Max, {ctx.number(0), x}));
  CHECK(simplify(ctx, ctx.mul(x, ctx.number(0)), {.fast = true}) == ctx.number(0));
  CHECK(simplify(ctx, ctx.sub(x, x), {.fast = true}) == ctx.number(0));
}

TEST_CASE("structural hashes do not depend on the context or build order") {
  ExprContext a, b;
  mustParse(b, "cos(x) + 7"); // different history
  CHECK(mustParse(a, "gelu").expr->hash() == mustParse(b, "gelu").expr->hash());
  CHECK(print(mustParse(a, "Max(x, sin(x))").expr) == print(mustParse(b, "Max(sin(x), x)").expr));
}

TEST_CASE("concurrent parsing from 8 threads into one context is safe and interns once") {
  ExprContext ctx;
  const std::vector<std::string> formulas = {"sin(num)*alpha", "gelu", "mish", "Piecewise((num, num > 0), (beta*num, True))",
                                             "log(1 + exp(x))", "hardswish", "selu", "x**3 - 2*x + 1"};
  std::vector<std::vector<Expr>> seen(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 50; ++rep)
        for (size_t i = 0; i < formulas.size(); ++i) {
          auto r = parseFormula(ctx, formulas[(i + t) % formulas.size()]);
          Expr e = r ? r->expr : nullptr;
          Expr d = e ? differentiate(ctx, e, Variable::Num) : nullptr;
          if (rep == 0)
            seen[t].push_back(d);
        }
    });
  for (auto &th : threads)
    th.join();
  for (int t = 1; t < 8; ++t)
    for (size_t i = 0; i < formulas.size(); ++i) {
      CHECK(seen[t][i] != nullptr);
      CHECK(seen[t][(i + formulas.size() - t) % formulas.size()] == seen[0][i]);
    }
}
