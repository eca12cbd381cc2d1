//===- test/Runtime/ConstantGradientTest.cpp - Trainable constants ---------===//
//
// d/dc of layers and losses against central finite differences of the
// compiled forward pass, every CPU engine, both layouts; the API's checks.
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <random>

using namespace hsnn;
using hsnn::test::cpuMethods;
using hsnn::test::randoms;

namespace {


// sum(err * f(z; params)) as a function of params, through the forward kernel.
double weighted(ActivationLayer &layer, const std::vector<double> &params, const std::vector<double> &z,
                const std::vector<double> &err, size_t batch) {
  REQUIRE_OK(layer.setParams(params));
  std::vector<double> a(z.size());
  REQUIRE_OK(layer.forward(z, a, batch));
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += err[i] * a[i];
  return s;
}

} // namespace

TEST_CASE("layer constant gradients match finite differences, every CPU engine and layout") {
  const std::vector<NodeSpec> nodes = {{"sin(num)*alpha + beta", {{"alpha", 1.5}, {"beta", -0.25}}},
                                       {"leaky_relu", {{"negative_slope", 0.2}}},
                                       {"relu", {}},
                                       {"elu", {{"alpha", 0.7}}},
                                       {"exp(-(num - mu)**2/(2*s**2))", {{"mu", 0.3}, {"s", 0.8}}}};
  const size_t batch = 203;
  for (Method m : cpuMethods())
    for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
      CAPTURE(to_string(m));
      CAPTURE(to_string(layout));
      auto layer = ActivationLayer::compile(nodes, {.method = m, .dtype = DType::F64, .layout = layout});
      REQUIRE_OK_EXPECTED(layer);
      std::vector<double> z = randoms(nodes.size() * batch, 1, -3, 3), err = randoms(z.size(), 2, -1, 1);
      std::vector<double> params = layer->params(), grads(params.size());
      REQUIRE(params.size() == 6);
      REQUIRE_OK(layer->constantGradients(z, err, grads, batch));
      for (size_t i = 0; i < params.size(); ++i) {
        CAPTURE(i);
        double h = 1e-6 * std::max(1.0, std::fabs(params[i]));
        std::vector<double> up = params, down = params;
        up[i] += h;
        down[i] -= h;
        double fd = (weighted(*layer, up, z, err, batch) - weighted(*layer, down, z, err, batch)) / (2 * h);
        CHECK(grads[i] == doctest::Approx(fd).epsilon(1e-6));
      }
      // The same bits again (fixed order), and after restoring the constants.
      REQUIRE_OK(layer->setParams(params));
      std::vector<double> again(params.size());
      REQUIRE_OK(layer->constantGradients(z, err, again, batch));
      CHECK(again == grads);
    }
}

TEST_CASE("a PReLU-style slope: dL/dc is the sum of err * z over the negative inputs") {
  auto layer = ActivationLayer::compile({{"Piecewise((num, num > 0), (a*num, True))", {{"a", 0.25}}}},
                                        {.dtype = DType::F32});
  REQUIRE_OK_EXPECTED(layer);
  std::vector<float> z = {-2, -1, 0, 1, 2}, err = {1, 0.5f, 3, 7, 9};
  std::vector<double> g(1);
  REQUIRE_OK(layer->constantGradients(z, err, g, 5));
  CHECK(g[0] == doctest::Approx(-2.0 * 1 + -1.0 * 0.5 + 0.0 * 3));
}

TEST_CASE("loss constant gradients match finite differences, mean and sum") {
  struct Case {
    const char *name;
    std::map<std::string, double> constants;
  };
  const Case cases[] = {{"huber", {{"delta", 0.6}}}, {"smooth_l1", {{"beta", 0.8}}},
                        {"(y_pred - y_true)**2*w + Abs(y_pred - y_true)*v", {{"w", 0.5}, {"v", 0.1}}}};
  const size_t n = 501;
  std::vector<double> yp = randoms(n, 3, -2, 2), yt = randoms(n, 4, -2, 2);
  for (Method m : cpuMethods())
    for (Reduction r : {Reduction::Mean, Reduction::Sum})
      for (const Case &c : cases) {
        CAPTURE(to_string(m));
        CAPTURE(to_string(r));
        CAPTURE(c.name);
        auto loss = Loss::compile(c.name, c.constants, {.method = m, .dtype = DType::F64, .reduction = r});
        REQUIRE_OK_EXPECTED(loss);
        std::vector<std::string> names = loss->constantNames();
        std::vector<double> grads(names.size());
        REQUIRE_OK(loss->constantGradients(yp, yt, grads));
        for (size_t i = 0; i < names.size(); ++i) {
          CAPTURE(names[i]);
          double c0 = *loss->constant(names[i]), h = 1e-6;
          auto at = [&](double v) {
            REQUIRE_OK(loss->setConstant(names[i], v));
            auto l = loss->forward(yp, yt);
            REQUIRE_OK_EXPECTED(l);
            return *l;
          };
          double fd = (at(c0 + h) - at(c0 - h)) / (2 * h);
          REQUIRE_OK(loss->setConstant(names[i], c0));
          CHECK(grads[i] == doctest::Approx(fd).epsilon(1e-6));
        }
      }
}

TEST_CASE("constant gradient and setParams errors name the array and the constant") {
  auto layer = ActivationLayer::compile({{"sin(num)*alpha", {{"alpha", 1}}}, {"relu", {}}}, {.dtype = DType::F32});
  REQUIRE_OK_EXPECTED(layer);
  std::vector<float> z(6), err(6);
  std::vector<double> grads(2);
  Error e = layer->constantGradients(z, err, grads, 3);
  CHECK(e.message() == "'grads' holds 2 elements; 1 constant needs exactly 1");
  std::vector<double> g1(1);
  std::vector<float> shortErr(5);
  e = layer->constantGradients(z, shortErr, g1, 3);
  CHECK(e.message() == "'err' holds 5 elements; 2 nodes x batch 3 needs exactly 6");
  std::vector<double> bad = {std::numeric_limits<double>::infinity()};
  e = layer->setParams(bad);
  CHECK(e.message() == "params[0]: node 0: constant 'alpha' must be finite, got inf");
  std::vector<double> two = {1, 2};
  e = layer->setParams(two);
  CHECK(e.message() == "'params' holds 2 elements; 1 constant needs exactly 1");
  std::vector<double> d64(6);
  e = layer->constantGradients(std::span<const double>(d64), std::span<const double>(d64), g1, 3);
  CHECK(e.message() == "layer was compiled for f32, called with f64 arrays");
}

TEST_CASE("compiled constant gradients agree with the interpreter's, over several chunks, both layouts") {
  if (!runtimeInfo().cpuJitEnabled) {
    MESSAGE("skipped: cpu_jit unavailable");
    return;
  }
  const std::vector<NodeSpec> nodes = {{"sin(num)*alpha + beta", {{"alpha", 1.5}, {"beta", -0.25}}},
                                       {"relu", {}},
                                       {"Piecewise((num, num > 0), (a*num, True))", {{"a", 0.2}}}};
  const size_t batch = 10001; // chunks of 4096 and a remainder
  std::vector<double> z = randoms(nodes.size() * batch, 5, -3, 3), err = randoms(z.size(), 6, -1, 1);
  for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
    CAPTURE(to_string(layout));
    auto jit = ActivationLayer::compile(nodes, {.method = Method::CpuJit, .dtype = DType::F64, .layout = layout});
    auto interp = ActivationLayer::compile(nodes, {.method = Method::CpuInterp, .dtype = DType::F64, .layout = layout});
    REQUIRE_OK_EXPECTED(jit);
    REQUIRE_OK_EXPECTED(interp);
    std::vector<double> gj(3), gi(3), again(3);
    REQUIRE_OK(jit->constantGradients(z, err, gj, batch));
    REQUIRE_OK(interp->constantGradients(z, err, gi, batch));
    for (size_t i = 0; i < 3; ++i)
      CHECK(gj[i] == doctest::Approx(gi[i]).epsilon(1e-12));
    REQUIRE_OK(jit->constantGradients(z, err, again, batch));
    CHECK(again == gj);
  }
  auto loss = Loss::compile("huber", {{"delta", 0.3}}, {.method = Method::CpuJit, .dtype = DType::F64});
  auto lossInterp = Loss::compile("huber", {{"delta", 0.3}}, {.method = Method::CpuInterp, .dtype = DType::F64});
  REQUIRE_OK_EXPECTED(loss);
  REQUIRE_OK_EXPECTED(lossInterp);
  std::vector<double> yp = randoms(70001, 7, -2, 2), yt = randoms(70001, 8, -2, 2), a(1), b(1);
  REQUIRE_OK(loss->constantGradients(yp, yt, a));
  REQUIRE_OK(lossInterp->constantGradients(yp, yt, b));
  CHECK(a[0] == doctest::Approx(b[0]).epsilon(1e-12));
}

TEST_CASE("layers and losses without constants have empty constant gradients on every engine") {
  for (Method m : cpuMethods()) {
    CAPTURE(to_string(m));
    auto layer = ActivationLayer::compile({{"relu", {}}, {"tanh", {}}}, {.method = m, .dtype = DType::F64});
    REQUIRE_OK_EXPECTED(layer);
    std::vector<double> z(10, 0.5), none;
    REQUIRE_OK(layer->constantGradients(z, z, none, 5));
    auto loss = Loss::compile("mse", {}, {.method = m, .dtype = DType::F64});
    REQUIRE_OK_EXPECTED(loss);
    REQUIRE_OK(loss->constantGradients(z, z, none));
  }
}
