//===- test/Runtime/PopulationErrorsTest.cpp - Bad members, arrays, calls -===//
//
// A member that does not parse, or names neither a variable nor a constant,
// is reported (index, caret, cause) and scored NaN; the rest are evaluated.
// Trees given as arrays, prefix or postfix, are the formulas they encode.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "hsnn/Population.h"

#include <limits>

using namespace hsnn;
using namespace hsnn::test;

TEST_CASE("bad population members are reported with index, caret and cause, and the rest are scored") {
  std::vector<std::string> f = {"x0 + x1", "sin(x0", "x0 * x3", "tanhh(x1)", "gelu", "x1 / 0", "log(x0)"};
  auto pop = Population::create(f, {.variables = {"x0", "x1"}, .dtype = DType::F64});
  REQUIRE_OK_EXPECTED(pop);
  REQUIRE(pop->errors().size() == 4);
  CHECK(pop->errors()[0].render() ==
        "node 1: error: expected ')' to close the call to 'sin' at column 4, found the end of the formula\n"
        "  sin(x0\n"
        "        ^");
  CHECK(pop->errors()[1].render() ==
        "node 2: error: 'x3' is neither a variable (x0, x1) nor a constant given to this formula\n"
        "  x0 * x3\n"
        "       ^~");
  CHECK(pop->errors()[2].node == 3);
  CHECK(pop->errors()[2].message == "unknown function 'tanhh'; did you mean 'tanh'?");
  CHECK(pop->errors()[3].message == "'gelu' alone does not say which variable; call it, e.g. gelu(x0)");
  for (size_t i : {0, 5, 6})
    CHECK(pop->valid(i));
  for (size_t i : {1, 2, 3, 4})
    CHECK_FALSE(pop->valid(i));
  std::vector<double> x = {1, 2, -1, 0.5, 0, 0}, y = {3, 0, 0};
  std::vector<double> out(f.size() * 3), scores(f.size());
  REQUIRE_OK(pop->evaluate(PopulationData<double>{.x = x, .rows = 3}, out));
  CHECK(out[0] == 3);
  CHECK(out[2] == 0);
  CHECK(std::isnan(out[3]));
  CHECK(out[5 * 3 + 0] == std::numeric_limits<double>::infinity()); // IEEE's, not an error
  CHECK(std::isnan(out[6 * 3 + 1]));                                  // log(-1)
  REQUIRE_OK(pop->fitness(PopulationData<double>{.x = x, .rows = 3, .y = y}, scores));
  CHECK(scores[0] == doctest::Approx((0.0 + 0.25 + 0) / 3));
  CHECK(std::isnan(scores[1]));
  CHECK(std::isnan(scores[6]));
  CHECK(pop->simplified(0) == "x0 + x1");
  CHECK(pop->simplified(1) == "");
}

TEST_CASE("population arguments are checked with messages") {
  CHECK(Population::create(std::vector<std::string>{"x"}, {.variables = {"x", "x"}}).error().message() ==
        "variable 'x' is named twice");
  CHECK(Population::create(std::vector<std::string>{"x"}, {.variables = {"sin"}}).error().message() ==
        "variable name 'sin' is reserved (a function, built-in or named number)");
  CHECK(Population::create(std::vector<std::string>{"x"}, {.variables = {"2x"}}).error().message() ==
        "variable name '2x' is not an identifier");
  auto pop = Population::create(std::vector<std::string>{"x0 * c"}, {.variables = {"x0"}, .literalsAsConstants = true});
  REQUIRE_OK_EXPECTED(pop);
  REQUIRE_FALSE(pop->valid(0)); // c is not given
  auto ok = Population::create(std::vector<PopulationMember>{{"x0 * c + 1", {{"c", 2}}}}, {.variables = {"x0"}});
  REQUIRE_OK_EXPECTED(ok);
  std::vector<float> x = {1, 2}, y = {1}, out(3), scores(1);
  std::vector<double> s(1), g(5);
  CHECK(ok->evaluate(PopulationData<float>{.x = x, .rows = 2}, out).message() ==
        "out has 3 values; 1 formulas x 2 rows need 2");
  CHECK(ok->fitness(PopulationData<float>{.x = x, .rows = 2, .y = y}, s).message() == "y has 1 values for 2 rows");
  std::vector<float> y3 = {1, 1, 1};
  CHECK(ok->fitness(PopulationData<float>{.x = x, .rows = 3, .y = y3}, s).message() ==
        "X has 2 values; 3 rows x 1 variables need 3");
  std::vector<float> y2 = {1, 1};
  CHECK(ok->constantGradients(PopulationData<float>{.x = x, .rows = 2, .y = y2}, s, g).message() ==
        "gradients has 5 values; the population has 1 constants");
  CHECK(ok->fitness(PopulationData<float>{.x = x, .rows = 2, .y = y2}, s, {.formula = "msee"}).message().find(
            "did you mean 'mse'") != std::string::npos);
  CHECK(ok->fitness(PopulationData<float>{.x = x, .rows = 2, .y = y2}, s, {.reduction = Reduction::None})
            .message() == "a fitness is reduced: use Reduction::Mean or Reduction::Sum");
  CHECK(ok->setConstants(std::vector<double>{std::nan("")}).message() == "constant value nan at index 0 is not finite");
}

TEST_CASE("populations from arrays: prefix and postfix trees are the formulas they encode") {
  auto code = [](std::string_view name) {
    for (auto &[n, c] : populationOpCodes())
      if (n == name)
        return c;
    FAIL("no op code " << name);
    return -1;
  };
  int add = code("add"), mul = code("mul"), sin = code("sin"), var = code("variable"), num = code("number"),
      cst = code("constant");
  CHECK(var == int(Op::Var));
  // x0 * sin(x1) + 2.5 ; c*x0 (c fit-able, starting at 3)
  std::vector<int32_t> prefix = {add, mul, var, sin, var, num, mul, cst, var};
  std::vector<double> pv = {0, 0, 0, 0, 1, 2.5, 0, 3, 0};
  std::vector<int64_t> offsets = {0, 6, 9};
  auto pre = Population::fromArrays({.codes = prefix, .values = pv, .offsets = offsets}, {.variables = {"x0", "x1"}});
  REQUIRE_OK_EXPECTED(pre);
  REQUIRE(pre->errors().empty());
  CHECK(pre->simplified(0) == Population::create(std::vector<std::string>{"x0*sin(x1) + 2.5"},
                                                 {.variables = {"x0", "x1"}})->simplified(0));
  CHECK(pre->constants(1).size() == 1);
  CHECK(pre->constants(1)[0] == 3);
  std::vector<int32_t> postfix = {var, var, sin, mul, num, add, cst, var, mul};
  std::vector<double> qv = {0, 1, 0, 0, 2.5, 0, 3, 0, 0};
  auto post = Population::fromArrays({.codes = postfix, .values = qv, .offsets = offsets, .postfix = true},
                                     {.variables = {"x0", "x1"}});
  REQUIRE_OK_EXPECTED(post);
  REQUIRE(post->errors().empty());
  CHECK(post->simplified(0) == pre->simplified(0));
  CHECK(post->simplified(1) == pre->simplified(1));

  std::vector<int32_t> bad = {add, var, 999, add, var, var, var, mul, var};
  std::vector<double> bv = {0, 0, 0, 0, 0, 7, 0, 0, 0};
  std::vector<int64_t> bo = {0, 3, 7, 8, 9};
  auto b = Population::fromArrays({.codes = bad, .values = bv, .offsets = bo}, {.variables = {"x0", "x1"}});
  // Postfix reads the same codes as other trees.
  auto bp = Population::fromArrays({.codes = bad, .values = bv, .offsets = bo, .postfix = true},
                                   {.variables = {"x0", "x1"}});
  REQUIRE_OK_EXPECTED(bp);
  CHECK(bp->errors()[0].message == "position 0: op 'Add' takes 2 operand(s), 0 before it");
  REQUIRE_OK_EXPECTED(b);
  REQUIRE(b->errors().size() == 3);
  CHECK(b->errors()[0].message == "position 2: code 999 is not an op");
  CHECK(b->errors()[1].message == "position 2: variable index 7 is not one of the 2 variables");
  CHECK(b->errors()[2].message == "position 1: the codes end with 1 operator(s) missing operands");
  CHECK(b->valid(3));
}

TEST_CASE("members written alike are prepared once and reported each under its own index") {
  std::vector<PopulationMember> m = {{"sin(x0)*c", {{"c", 2}}}, {"x0 +", {}}, {"sin(x0)*c", {{"c", 2}}},
                                     {"sin(x0)*c", {{"c", 3}}}, {"x0 +", {}}};
  auto pop = Population::create(m, {.variables = {"x0"}, .dtype = DType::F64});
  REQUIRE_OK_EXPECTED(pop);
  REQUIRE(pop->errors().size() == 2);
  CHECK(pop->errors()[0].node == 1);
  CHECK(pop->errors()[1].node == 4);
  CHECK(pop->errors()[1].render().rfind("node 4: error:", 0) == 0);
  std::vector<double> x = {0.5, 1.5}, out(10), g(5 * 2);
  REQUIRE_OK(pop->evaluate(PopulationData<double>{.x = x, .rows = 2}, out));
  CHECK(out[0] == out[4]);
  CHECK(out[6] == 3 * std::sin(0.5));
  // Each copy has its own constants.
  std::vector<double> c(pop->allConstants().begin(), pop->allConstants().end());
  REQUIRE(c.size() == 3);
  c[1] = 5;
  REQUIRE_OK(pop->setConstants(c));
  REQUIRE_OK(pop->evaluate(PopulationData<double>{.x = x, .rows = 2}, out));
  CHECK(out[4] == 5 * std::sin(0.5));
  CHECK(out[0] == 2 * std::sin(0.5));
  REQUIRE_OK(pop->variableGradients(PopulationData<double>{.x = x, .rows = 2}, g));
  CHECK(g[4] == 5 * std::cos(0.5));

  std::vector<int32_t> codes = {int32_t(Op::Add), int32_t(Op::Var), int32_t(Op::Add), int32_t(Op::Var)};
  std::vector<double> values(4, 0.0);
  std::vector<int64_t> offsets = {0, 2, 4};
  auto arrays = Population::fromArrays({.codes = codes, .values = values, .offsets = offsets}, {.variables = {"x0"}});
  REQUIRE_OK_EXPECTED(arrays);
  REQUIRE(arrays->errors().size() == 2);
  CHECK(arrays->errors()[1].node == 1);
  CHECK(arrays->errors()[1].formula == "(arrays: codes 2..4)");
}
