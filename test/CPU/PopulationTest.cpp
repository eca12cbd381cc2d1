//===- test/CPU/PopulationTest.cpp - Populations against compiled layers ---===//
//
// A population's values have the bits of the same formulas in a cpu_jit
// layer (its op kernels are the layers' code), for every op and built-in,
// both dtypes; its scores are the loss of those values; its constant
// gradients agree with finite differences.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "RequireJit.h"

#include "hsnn/Population.h"

#include <fmt/format.h>
#include <limits>

using namespace hsnn;
using namespace hsnn::test;

namespace {

// Values that reach every branch of the math library: zeros, tiny and huge
// numbers, the rare lanes' ranges, infinities and NaN, then random ones.
template <class T> std::vector<T> probeValues(size_t n) {
  const T inf = std::numeric_limits<T>::infinity();
  std::vector<T> v = {T(0), T(-0.0), T(1), T(-1), T(0.5), T(-0.5), T(1e-30), T(-1e-30), T(3), T(-3), T(20), T(-20),
                      T(88.5), T(-88.5), T(700), T(-745), T(1e30), T(-1e30), inf, -inf,
                      std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::denorm_min()};
  std::vector<double> r = randoms(n - v.size(), 7, -6, 6);
  for (size_t i = 0; i < r.size(); ++i)
    v.push_back(T(i % 3 == 0 ? std::ldexp(r[i], int(i % 40) - 20) : r[i]));
  return v;
}

template <class T> void sameBitsAsCompiledLayers() {
  DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  std::vector<std::string> formulas =
      activationFormulas({"alpha*sin(x) + beta", "x**3 - x**-2", "x**17", "x**-19 + x**0.5", "Max(x, alpha)*x + beta"});
  std::vector<PopulationMember> members;
  std::vector<NodeSpec> nodes;
  for (const std::string &f : formulas) {
    std::map<std::string, double> c;
    if (f.find("alpha") != std::string::npos)
      c = {{"alpha", 1.25}, {"beta", -0.5}};
    members.push_back({f, c});
    nodes.push_back({f, c});
  }
  auto pop = Population::create(members, {.variables = {"x"}, .dtype = dt});
  REQUIRE_OK_EXPECTED(pop);
  for (const Diagnostic &d : pop->errors())
    FAIL(d.render());
  const size_t rows = 1000; // four blocks of rows and a short one
  std::vector<T> x = probeValues<T>(rows);
  std::vector<T> out(formulas.size() * rows);
  REQUIRE_OK(pop->evaluate(PopulationData<T>{.x = x, .rows = rows}, out));

  auto layer = ActivationLayer::compile(nodes, {.method = Method::CpuJit, .dtype = dt});
  REQUIRE_OK_EXPECTED(layer);
  std::vector<T> z(formulas.size() * rows), a(z.size());
  for (size_t i = 0; i < formulas.size(); ++i)
    std::copy(x.begin(), x.end(), z.begin() + long(i * rows));
  REQUIRE_OK(layer->forward(z, a, rows));
  size_t differing = 0;
  for (size_t i = 0; i < formulas.size(); ++i) {
    CAPTURE(formulas[i]);
    for (size_t r = 0; r < rows; ++r)
      if (!sameBits(out[i * rows + r], a[i * rows + r]) && differing++ < 10)
        FAIL_CHECK(fmt::format("x = {}: population {} vs layer {}", double(x[r]), double(out[i * rows + r]),
                               double(a[i * rows + r])));
  }
  CHECK(differing == 0);
}

} // namespace

TEST_CASE("a population's values have the bits of cpu_jit layers: every op and built-in, both dtypes") {
  REQUIRE_JIT();
  sameBitsAsCompiledLayers<float>();
  sameBitsAsCompiledLayers<double>();
}

TEST_CASE("population fitness is the loss of its values, with weights and sums, X in either layout") {
  std::vector<std::string> f = {"x0*x1 + sin(x2)", "exp(x0) - x1**2", "log(x2)", "x0 + c"};
  std::vector<PopulationMember> m;
  for (auto &s : f)
    m.push_back({s, {{"c", 0.5}}});
  auto pop = Population::create(m, {.variables = {"x0", "x1", "x2"}, .dtype = DType::F64});
  REQUIRE_OK_EXPECTED(pop);
  const size_t rows = 5000;
  std::vector<double> xr = randoms(rows * 3, 3, -2, 2), y = randoms(rows, 4, -1, 1), w = randoms(rows, 5, 0, 2);
  std::vector<double> xc(xr.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < 3; ++j)
      xc[j * rows + r] = xr[r * 3 + j];
  std::vector<double> v(f.size() * rows), vc(v.size());
  REQUIRE_OK(pop->evaluate(PopulationData<double>{.x = xr, .rows = rows}, v));
  REQUIRE_OK(pop->evaluate(PopulationData<double>{.x = xc, .rows = rows, .layout = DataLayout::ColMajor}, vc));
  for (size_t k = 0; k < v.size(); ++k)
    REQUIRE(sameBits(v[k], vc[k]));
  std::vector<double> mse(f.size()), wsum(f.size()), huber(f.size());
  REQUIRE_OK(pop->fitness(PopulationData<double>{.x = xr, .rows = rows, .y = y}, mse));
  REQUIRE_OK(pop->fitness(PopulationData<double>{.x = xr, .rows = rows, .y = y, .weights = w}, wsum,
                          {.formula = "mse", .reduction = Reduction::Sum}));
  REQUIRE_OK(pop->fitness(PopulationData<double>{.x = xr, .rows = rows, .y = y}, huber,
                          {.formula = "huber", .constants = {{"delta", 0.25}}}));
  for (size_t i = 0; i < f.size(); ++i) {
    CAPTURE(f[i]);
    double s = 0, ws = 0, hs = 0;
    for (size_t r = 0; r < rows; ++r) {
      double d = v[i * rows + r] - y[r];
      s += d * d;
      ws += w[r] * d * d;
      hs += std::fabs(d) <= 0.25 ? 0.5 * d * d : 0.25 * (std::fabs(d) - 0.125);
    }
    if (std::isnan(s)) { // log of negatives
      CHECK(std::isnan(mse[i]));
      continue;
    }
    CHECK(mse[i] == doctest::Approx(s / rows).epsilon(1e-12));
    CHECK(wsum[i] == doctest::Approx(ws).epsilon(1e-12));
    CHECK(huber[i] == doctest::Approx(hs / rows).epsilon(1e-12));
  }
}

TEST_CASE("population constant and variable gradients agree with finite differences") {
  std::vector<PopulationMember> m = {{"a*sin(b*x) + c", {{"a", 1.5}, {"b", 0.7}, {"c", -0.2}}},
                                     {"exp(-a*x*x)", {{"a", 0.3}}},
                                     {"2.5*x + 0.5", {}},
                                     {"x", {}}};
  auto pop = Population::create(m, {.variables = {"x"}, .dtype = DType::F64, .literalsAsConstants = true});
  REQUIRE_OK_EXPECTED(pop);
  REQUIRE(pop->constantNames(2) == std::vector<std::string>{"_c0", "_c1"});
  REQUIRE(pop->constants(2)[0] == 2.5);
  const size_t rows = 700;
  std::vector<double> x = randoms(rows, 11, -3, 3), y = randoms(rows, 12, -1, 1);
  PopulationData<double> data{.x = x, .rows = rows, .y = y};
  for (std::string loss : {"mse", "mae", "log(cosh(y_pred - y_true))"}) {
    CAPTURE(loss);
    PopulationLoss l{.formula = loss};
    std::vector<double> scores(pop->size()), grads(pop->allConstants().size()), plain(pop->size());
    REQUIRE_OK(pop->constantGradients(data, scores, grads, l));
    REQUIRE_OK(pop->fitness(data, plain, l));
    // The same losses; a fitness adds them in the compiled loss kernel's
    // order, the gradients' pass in the interpreter's.
    for (size_t i = 0; i < scores.size(); ++i)
      CHECK(scores[i] == doctest::Approx(plain[i]).epsilon(1e-13));
    std::vector<double> c(pop->allConstants().begin(), pop->allConstants().end());
    for (size_t k = 0; k < c.size(); ++k) {
      CAPTURE(k);
      const double h = 1e-6;
      std::vector<double> up = c, down = c, su(pop->size()), sd(pop->size());
      up[k] += h;
      down[k] -= h;
      Population p = *pop;
      REQUIRE_OK(p.setConstants(up));
      REQUIRE_OK(p.fitness(data, su, l));
      REQUIRE_OK(p.setConstants(down));
      REQUIRE_OK(p.fitness(data, sd, l));
      size_t i = 0;
      while (pop->constantOffset(i + 1) <= k)
        ++i;
      CHECK(grads[k] == doctest::Approx((su[i] - sd[i]) / (2 * h)).epsilon(1e-5));
    }
  }
  std::vector<double> v(pop->size() * rows), g(pop->size() * rows);
  REQUIRE_OK(pop->evaluate(PopulationData<double>{.x = x, .rows = rows}, v));
  REQUIRE_OK(pop->variableGradients(PopulationData<double>{.x = x, .rows = rows}, g));
  for (size_t r = 0; r < rows; ++r) {
    CHECK(g[0 * rows + r] == doctest::Approx(1.5 * 0.7 * std::cos(0.7 * x[r])));
    CHECK(g[3 * rows + r] == 1.0);
  }
}

TEST_CASE("with the op kernels installed, cpu_interp layers and losses give cpu_jit's bits") {
  REQUIRE_JIT();
  // A population builds and installs the op kernels; interpreter engines
  // made after it run on them.
  auto pop = Population::create(std::vector<std::string>{"sin(x)"}, {.variables = {"x"}});
  REQUIRE_OK_EXPECTED(pop);
  std::vector<float> x(8, 0.5f), v(8);
  REQUIRE_OK(pop->evaluate(PopulationData<float>{.x = x, .rows = 8}, v));
  std::vector<std::string> formulas = activationFormulas({"alpha*sin(num) + beta*num**3"});
  std::vector<NodeSpec> nodes;
  for (const std::string &f : formulas)
    nodes.push_back({f, f.find("alpha") != std::string::npos ? std::map<std::string, double>{{"alpha", 1.25}, {"beta", 0.5}}
                                                              : std::map<std::string, double>{}});
  auto interp = ActivationLayer::compile(nodes, {.method = Method::CpuInterp});
  auto jit = ActivationLayer::compile(nodes, {.method = Method::CpuJit});
  REQUIRE_OK_EXPECTED(interp);
  REQUIRE_OK_EXPECTED(jit);
  const size_t batch = 700;
  std::vector<float> z(nodes.size() * batch), err(z.size());
  std::vector<float> probe = probeValues<float>(batch);
  for (size_t n = 0; n < nodes.size(); ++n)
    for (size_t b = 0; b < batch; ++b) {
      z[n * batch + b] = probe[b];
      err[n * batch + b] = 0.5f + float(b % 7);
    }
  std::vector<float> a1(z.size()), a2(z.size()), d1(z.size()), d2(z.size());
  REQUIRE_OK(interp->fused(z, a1, d1, batch));
  REQUIRE_OK(jit->fused(z, a2, d2, batch));
  size_t differing = 0;
  for (size_t k = 0; k < z.size(); ++k)
    differing += !sameBits(a1[k], a2[k]) + !sameBits(d1[k], d2[k]);
  CHECK(differing == 0);
  REQUIRE_OK(interp->backward(z, err, d1, batch));
  REQUIRE_OK(jit->backward(z, err, d2, batch));
  for (size_t k = 0; k < z.size(); ++k)
    differing += !sameBits(d1[k], d2[k]);
  CHECK(differing == 0);
  for (const char *l : {"mse", "bce", "huber", "log(cosh(y_pred - y_true))"}) {
    CAPTURE(l);
    auto li = Loss::compile(l, {}, {.method = Method::CpuInterp});
    auto lj = Loss::compile(l, {}, {.method = Method::CpuJit});
    REQUIRE_OK_EXPECTED(li);
    REQUIRE_OK_EXPECTED(lj);
    std::vector<double> yp = randoms(batch, 5, 0.01, 0.99), yt = randoms(batch, 6, 0, 1);
    std::vector<float> p(yp.begin(), yp.end()), t(yt.begin(), yt.end()), g1(batch), g2(batch);
    auto f1 = li->fused(p, t, g1), f2 = lj->fused(p, t, g2);
    REQUIRE_OK_EXPECTED(f1);
    REQUIRE_OK_EXPECTED(f2);
    for (size_t k = 0; k < batch; ++k)
      CHECK(sameBits(g1[k], g2[k]));
  }
}
