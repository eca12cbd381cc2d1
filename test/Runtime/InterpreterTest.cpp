//===- test/Runtime/InterpreterTest.cpp - Activation layers on the interpreter -===//
#include "hsnn/Formula.h"
#include "hsnn/Layer.h"

#include <cmath>
#include "TestUtil.h"

#include <doctest/doctest.h>


#include <random>

using namespace hsnn;

namespace {

const std::vector<NodeSpec> kMixed = {
    {"sin(num)*alpha", {{"alpha", 2.0}}},
    {"relu", {}},
    {"gelu", {}},
    {"Piecewise((num, num > 0), (beta*num, True))", {{"beta", 0.1}}},
    {"sin(x)*alpha", {{"alpha", -1.5}}}, // same formula as node 0, other constant
    {"mish", {}},
    {"elu", {{"alpha", 0.7}}},
    {"x**3/(1 + x**2)", {}},
};

// Reference: each node's formula evaluated one element at a time in double.
double reference(const NodeSpec &node, double z, bool derivative) {
  ExprContext ctx;
  Formula f = *parseFormula(ctx, node.formula);
  Expr e = derivative ? differentiate(ctx, f.expr, Variable::Num) : f.expr;
  auto layer = ActivationLayer::compile({node}, {.method = Method::CpuInterp, .dtype = DType::F64});
  REQUIRE(layer);
  double out = 0, one = 1;
  REQUIRE_OK(derivative ? layer->backward({&z, 1}, {&one, 1}, {&out, 1}, 1) : layer->forward({&z, 1}, {&out, 1}, 1));
  (void)e;
  return out;
}

template <class T> std::vector<T> randomInputs(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> pick(-4, 4);
  std::vector<T> v(n);
  for (T &x : v)
    x = T(pick(rng));
  return v;
}

template <class T> void checkLayer(Layout layout, size_t batch) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  auto layer = ActivationLayer::compile(kMixed, {.dtype = dt, .layout = layout});
  REQUIRE(layer);
  size_t nodes = kMixed.size(), n = nodes * batch;
  CHECK(layer->numDistinctFormulas() == 7);
  std::vector<T> z = randomInputs<T>(n, 1), err = randomInputs<T>(n, 2), a(n), delta(n), fa(n), fd(n);
  REQUIRE_OK(layer->forward(z, a, batch));
  REQUIRE_OK(layer->backward(z, err, delta, batch));
  REQUIRE_OK(layer->fused(z, fa, fd, batch));
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-13;
  for (size_t node = 0; node < nodes; ++node)
    for (size_t b = 0; b < batch; b += std::max<size_t>(1, batch / 37)) {
      size_t i = layout == Layout::NodesMajor ? node * batch + b : b * nodes + node;
      CAPTURE(node);
      CAPTURE(b);
      double f = reference(kMixed[node], double(z[i]), false), d = reference(kMixed[node], double(z[i]), true);
      CHECK(double(a[i]) == doctest::Approx(f).epsilon(tol).scale(1));
      CHECK(double(delta[i]) == doctest::Approx(double(err[i]) * d).epsilon(tol).scale(1));
      CHECK(fa[i] == a[i]);
      CHECK(double(fd[i]) == doctest::Approx(d).epsilon(tol).scale(1));
    }
}

} // namespace

TEST_CASE("nodes-major layers: forward, backward and fused match per-element evaluation") {
  checkLayer<double>(Layout::NodesMajor, 1000);
  checkLayer<float>(Layout::NodesMajor, 1000);
  checkLayer<double>(Layout::NodesMajor, 3);
  checkLayer<float>(Layout::NodesMajor, 9000); // large enough to go parallel
}

TEST_CASE("batch-major layers: forward, backward and fused match per-element evaluation") {
  checkLayer<double>(Layout::BatchMajor, 1000);
  checkLayer<float>(Layout::BatchMajor, 1000);
  checkLayer<float>(Layout::BatchMajor, 1);
  checkLayer<double>(Layout::BatchMajor, 9000);
}

TEST_CASE("both layouts give the same numbers, transposed") {
  size_t nodes = kMixed.size(), batch = 777;
  auto nm = ActivationLayer::compile(kMixed, {.layout = Layout::NodesMajor});
  auto bm = ActivationLayer::compile(kMixed, {.layout = Layout::BatchMajor});
  REQUIRE(nm);
  REQUIRE(bm);
  std::vector<float> z = randomInputs<float>(nodes * batch, 3), zt(z.size()), a(z.size()), at(z.size());
  for (size_t n = 0; n < nodes; ++n)
    for (size_t b = 0; b < batch; ++b)
      zt[b * nodes + n] = z[n * batch + b];
  REQUIRE_OK(nm->forward(z, a, batch));
  REQUIRE_OK(bm->forward(zt, at, batch));
  for (size_t n = 0; n < nodes; ++n)
    for (size_t b = 0; b < batch; ++b)
      REQUIRE(a[n * batch + b] == at[b * nodes + n]);
}

TEST_CASE("changing a constant takes effect on the next run without rebuilding") {
  auto layer = ActivationLayer::compile(kMixed);
  REQUIRE(layer);
  size_t batch = 4;
  std::vector<float> z(kMixed.size() * batch, 1.0f), a(z.size());
  REQUIRE_OK(layer->forward(z, a, batch));
  CHECK(a[0] == doctest::Approx(2 * std::sin(1.0)));
  CHECK(a[4 * batch] == doctest::Approx(-1.5 * std::sin(1.0))); // node 4 shares node 0's code
  REQUIRE_OK(layer->setConstant(0, "alpha", 3.0));
  REQUIRE_OK(layer->forward(z, a, batch));
  CHECK(a[0] == doctest::Approx(3 * std::sin(1.0)));
  CHECK(a[4 * batch] == doctest::Approx(-1.5 * std::sin(1.0))); // its own constant is untouched
  CHECK(*layer->constant(0, "alpha") == 3.0);
  CHECK(layer->params()[layer->offsets()[0]] == 3.0);
  CHECK(layer->constantNames(3) == std::vector<std::string>{"beta"});

  CHECK(layer->setConstant(1, "alpha", 1).message() == "node 1 has no constants (asked for 'alpha')");
  CHECK(layer->setConstant(0, "alpah", 1).message() == "node 0 has no constant 'alpah'; it has: alpha");
  CHECK(layer->setConstant(99, "alpha", 1).message() == "node 99 is out of range; the layer has 8 nodes");
  CHECK(layer->setConstant(0, "alpha", NAN).message() == "constant 'alpha' of node 0 must be finite, got nan");
}

TEST_CASE("misuse is an error, not a crash") {
  auto layer = ActivationLayer::compile({{"relu", {}}});
  REQUIRE(layer);
  double zd = 1, ad = 0;
  CHECK(layer->forward({&zd, 1}, {&ad, 1}, 1).message() == "layer was compiled for f32, called with f64 arrays");
  CHECK(layer->forward(std::span<const float>(), std::span<float>(), 5).message() ==
        "'z' holds 0 elements; 1 nodes x batch 5 needs exactly 5");
  REQUIRE_OK(layer->forward(std::span<const float>(), std::span<float>(), 0));
  CHECK(ActivationLayer::compile({}).error().message() == "a layer needs at least one node");
  CHECK(layer->formula(0) == "Max(0, num)");
  CHECK(layer->derivative(0) == "Piecewise((0, 0 >= num), (1, True))");
}

TEST_CASE("a thread budget is honoured and gives the same results") {
  auto one = ActivationLayer::compile(kMixed, {.threads = 1});
  auto many = ActivationLayer::compile(kMixed, {.threads = 4});
  REQUIRE(one);
  REQUIRE(many);
  size_t batch = 20000;
  std::vector<float> z = randomInputs<float>(kMixed.size() * batch, 9), a1(z.size()), a2(z.size());
  REQUIRE_OK(one->forward(z, a1, batch));
  REQUIRE_OK(many->forward(z, a2, batch));
  CHECK(a1 == a2);
}
