//===- test/Expr/ParserErrorsTest.cpp - Bad input: message and caret ------===//
#include "TestUtil.h"

#include "hsnn/Layer.h"

#include <thread>

using namespace hsnn;
using namespace hsnn::test;

namespace {

struct BadCase {
  std::string text;
  size_t column; // 1-based; 0 = the whole formula
  std::string message;
  FormulaMode mode = FormulaMode::Activation;
};

Diagnostic diagnose(const std::string &text, FormulaMode mode) {
  ExprContext ctx;
  auto r = parseFormulaDetailed(ctx, text, {mode});
  REQUIRE_MESSAGE(std::holds_alternative<Diagnostic>(r), "parsed but should not: ", text);
  return std::get<Diagnostic>(r);
}

const FormulaMode LossMode = FormulaMode::Loss;

} // namespace

TEST_CASE("every malformed formula is reported with its cause and column") {
  const std::vector<BadCase> cases = {
      {"", 0, "empty formula"},
      {"   ", 0, "empty formula"},
      {"(x+1", 5, "expected ')' to close the '(' at column 1, found the end of the formula"},
      {"x+1)", 4, "unmatched ')'"},
      {"x +", 4, "expected an expression after '+'"},
      {"x *", 4, "expected an expression after '*'"},
      {"2**", 4, "expected an expression after '**'"},
      {"tanhh(x)", 1, "unknown function 'tanhh'; did you mean 'tanh'?"},
      {"Sin(x)", 1, "unknown function 'Sin'; did you mean 'sin'?"},
      {"exp(x) + sigmod(x)", 10, "unknown function 'sigmod'; did you mean 'sigmoid'?"},
      {"foo(x)", 1, "unknown function 'foo'"},
      {"sin(x, 2)", 1, "sin takes 1 argument, got 2"},
      {"atan2(x)", 1, "atan2 takes 2 arguments, got 1"},
      {"Max()", 1, "Max takes at least 1 argument, got 0"},
      {"log(x, 2, 3)", 1, "log takes 1 or 2 arguments, got 3"},
      {"relu(x, 1)", 1, "relu takes 1 argument, got 2"},
      {"Heaviside(x, 1, 2)", 1, "Heaviside takes 1 or 2 arguments, got 3"},
      {"And(x > 0)", 1, "And takes at least 2 arguments, got 1"},
      {"x + num", 5, "formula uses both 'x' and 'num' for the variable; they are aliases, use one"},
      {"z*x", 3, "formula uses both 'z' and 'x' for the variable; they are aliases, use one"},
      {"y_true*2", 0, "a loss formula must use y_pred (the derivative is taken with respect to it)", LossMode},
      {"Piecewise((x, x > 0))", 1,
       "Piecewise without a final (expression, True) branch; add one so every input has a value"},
      {"Piecewise((x, x > 0), (0, x <= 0))", 1,
       "Piecewise without a final (expression, True) branch; add one so every input has a value"},
      {"Piecewise(x, True)", 11, "Piecewise arguments are (expression, condition) pairs; found name 'x'"},
      {"Piecewise((x x > 0), (0, True))", 14, "expected ',' and a condition in the Piecewise pair at column 11"},
      {"Piecewise((x, x), (0, True))", 15, "a number cannot be used as a condition (Piecewise condition)"},
      {"x\xc2\xb7" "2", 2, "non-ASCII byte 0xC2; formulas are plain ASCII"},
      {"\xe2\x88\x9ax", 1, "non-ASCII byte 0xE2; formulas are plain ASCII"},
      {"1.2.3", 1, "malformed number '1.2.3'"},
      {"2x", 1, "malformed number '2x'"},
      {"x + 1e", 5, "malformed number '1e'"},
      {"1e400*x", 1, "number '1e400' is out of range for a double"},
      {"x^2", 2, "'^' is not a power in SymPy syntax; use '**'"},
      {"x = 1", 3, "'=' is assignment; compare with '=='"},
      {"x ! 2", 3, "'!' is not an operator; negate a condition with '~'"},
      {"x $ 2", 3, "unexpected character '$'"},
      {"x\x01", 2, "unexpected control character 0x01"},
      {"x y", 3, "unexpected name 'y' after a complete expression"},
      {"x, 2", 2, "unexpected ',' after a complete expression"},
      {"()", 2, "expected an expression inside '()'"},
      {"(x, 2)", 3, "unexpected ','; tuples only appear as Piecewise((expression, condition), ...) pairs"},
      {"sin(x", 6, "expected ')' to close the call to 'sin' at column 4, found the end of the formula"},
      {"y_pred + 1", 1, "'y_pred' is a loss variable; activation formulas use num (or x, z)"},
      {"x + y_pred", 1, "'x' is the activation variable; loss formulas use y_pred and y_true", LossMode},
      {"mse", 1, "'mse' is a loss; it cannot be used in an activation formula"},
      {"2*huber(x, x)", 3, "'huber' is a loss; it cannot be used in an activation formula"},
      {"relu", 1, "'relu' is an activation; in a loss formula call it, e.g. relu(y_pred - y_true)", LossMode},
      {"mse(y_pred)", 1, "mse takes 2 arguments (y_pred, y_true), got 1", LossMode},
      {"sin", 1, "'sin' is a function; call it, e.g. sin(num)"},
      {"num(2)", 1, "'num' is not a function"},
      {"x > 0", 1, "the formula is a condition, not a number; use it inside Piecewise"},
      {"True", 1, "the formula is a condition, not a number; use it inside Piecewise"},
      {"(x > 0) + 1", 1, "a condition cannot be used as a number (left of '+')"},
      {"exp(x < 1)", 5, "a condition cannot be used as a number (argument of exp)"},
      {"~x", 2, "a number cannot be used as a condition (operand of '~')"},
      {"Piecewise((1, x & True), (0, True))", 15, "a number cannot be used as a condition (left of '&')"},
      {"0 < x < 1", 7, "chained comparison; write (a < b) & (b < c)"},
      {std::string(200, '(') + "x" + std::string(200, ')'), 129, "formula nested deeper than 128 levels"},
      {std::string(200, '-') + "x", 129, "formula nested deeper than 128 levels"},
      {"x" + std::string(5000, ' '), 4097, "formula is 5001 characters long; the limit is 4096"},
  };
  CHECK(cases.size() >= 40);
  for (const BadCase &c : cases) {
    CAPTURE(c.text);
    Diagnostic d = diagnose(c.text, c.mode);
    CHECK(d.message == c.message);
    CHECK(d.column == c.column);
  }
}

TEST_CASE("a sum too long to nest is rejected at the operator that crosses the depth limit") {
  std::string text = "x";
  for (int i = 0; i < 600; ++i)
    text += "+x";
  Diagnostic d = diagnose(text, FormulaMode::Activation);
  CHECK(d.message == "expression nested deeper than 512 levels");
  CHECK(d.column == 2 * 511 + 2); // the '+' that builds the 512th level
}

TEST_CASE("the caret display underlines the cause") {
  Diagnostic d = diagnose("tanhh(x)", FormulaMode::Activation);
  CHECK(d.render() == "error: unknown function 'tanhh'; did you mean 'tanh'?\n  tanhh(x)\n  ^~~~~");
  d.node = 3;
  CHECK(d.render() == "node 3: error: unknown function 'tanhh'; did you mean 'tanh'?\n  tanhh(x)\n  ^~~~~");
}

TEST_CASE("constants: missing, reserved, unused and non-finite values are named") {
  ExprContext ctx;
  Formula f = mustParse(ctx, "sin(num)*alpha + beta");
  auto check = [&](std::map<std::string, double> given, size_t column, std::string message) {
    auto r = bindConstants(f, given, 2);
    REQUIRE(std::holds_alternative<Diagnostic>(r));
    const Diagnostic &d = std::get<Diagnostic>(r);
    CHECK(d.message == message);
    CHECK(d.column == column);
    CHECK(d.node == 2);
  };
  check({{"beta", 1}}, 10, "missing constant 'alpha': give it a value");
  check({{"alpha", 1}}, 18, "missing constant 'beta': give it a value");
  check({{"alpha", 1}, {"beta", 1}, {"pi", 3}}, 0, "'pi' is a reserved name and cannot be a constant");
  check({{"alpha", 1}, {"beta", 1}, {"sin", 3}}, 0, "'sin' is a reserved name and cannot be a constant");
  check({{"alpha", 1}, {"betta", 1}}, 0, "constant 'betta' is not used by the formula; did you mean 'beta'?");
  check({{"alpha", 1}, {"beta", NAN}}, 18, "constant 'beta' is nan; constants must be finite");
  check({{"alpha", INFINITY}, {"beta", 1}}, 10, "constant 'alpha' is inf; constants must be finite");

  auto ok = bindConstants(f, {{"alpha", 2}, {"beta", 3}});
  REQUIRE(std::holds_alternative<std::vector<double>>(ok));
  CHECK(std::get<std::vector<double>>(ok) == std::vector<double>{2, 3});
}

TEST_CASE("built-in parameters have defaults that a given value overrides") {
  ExprContext ctx;
  Formula f = mustParse(ctx, "huber", FormulaMode::Loss);
  CHECK(f.constants == std::vector<std::string>{"delta"});
  CHECK(std::get<std::vector<double>>(bindConstants(f, {})) == std::vector<double>{1.0});
  CHECK(std::get<std::vector<double>>(bindConstants(f, {{"delta", 0.5}})) == std::vector<double>{0.5});
  Formula leaky = mustParse(ctx, "leaky_relu");
  CHECK(std::get<std::vector<double>>(bindConstants(leaky, {})) == std::vector<double>{0.01});
}

TEST_CASE("a layer reports the errors of all its nodes in one message") {
  auto layer = ActivationLayer::compile({{"tanhh(x)", {}}, {"relu", {}}, {"(x+1", {}}, {"x*alpha", {}}});
  REQUIRE_FALSE(layer);
  CHECK(layer.error().code() == ErrorCode::InvalidFormula);
  CHECK(layer.error().message() ==
        "node 0: error: unknown function 'tanhh'; did you mean 'tanh'?\n  tanhh(x)\n  ^~~~~\n"
        "node 2: error: expected ')' to close the '(' at column 1, found the end of the formula\n  (x+1\n      ^\n"
        "node 3: error: missing constant 'alpha': give it a value\n  x*alpha\n    ^~~~~");
  CHECK(layer.error().nodes() == std::vector<int>{0, 2, 3});
}

TEST_CASE("a bad formula shared by many nodes is reported once, naming its nodes") {
  std::vector<NodeSpec> specs;
  for (int i = 0; i < 256; ++i)
    specs.push_back({i % 8 == 6 ? "sin" : i == 3 ? "tanhh(x)" : i % 8 == 1 ? "(x+1" : "relu", {}});
  specs[9].formula = "relu"; // node 9 is fine: the (x+1 block names 1, 17, 25, ...
  auto layer = ActivationLayer::compile(specs);
  REQUIRE_FALSE(layer);
  CHECK(layer.error().message() ==
        "nodes 1, 17, 25, ... (31 nodes): error: expected ')' to close the '(' at column 1, found the end of the "
        "formula\n  (x+1\n      ^\n"
        "node 3: error: unknown function 'tanhh'; did you mean 'tanh'?\n  tanhh(x)\n  ^~~~~\n"
        "nodes 6, 14, 22, ... (32 nodes): error: 'sin' is a function; call it, e.g. sin(num)\n  sin\n  ^~~");
  const std::vector<int> &nodes = layer.error().nodes();
  REQUIRE(nodes.size() == 64);
  CHECK(nodes[0] == 1);
  CHECK(nodes[1] == 3);
  CHECK(nodes[2] == 6);
  CHECK(nodes.back() == 254);
  // A few nodes are all listed.
  auto few = ActivationLayer::compile({{"sin", {}}, {"relu", {}}, {"sin", {}}});
  REQUIRE_FALSE(few);
  CHECK(few.error().message() == "nodes 0, 2 (2 nodes): error: 'sin' is a function; call it, e.g. sin(num)\n  sin\n  ^~~");
}
