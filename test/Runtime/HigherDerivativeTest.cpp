//===- test/Runtime/HigherDerivativeTest.cpp - Derivatives of any order ---===//
//
// derivativeLayer(k), constantTangentLayer(), derivativeLoss(k) and
// constantDerivativeLoss(name) against central differences of the compiled
// kernels one order down, on every CPU engine and layout; the first
// derivative layer against the parent's own f' bit for bit; kinks, NaN, and
// the errors.
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <random>

using namespace hsnn;
using hsnn::test::cpuMethods;
using hsnn::test::randoms;

namespace {


std::vector<double> forward(const ActivationLayer &layer, const std::vector<double> &z, size_t batch) {
  std::vector<double> a(z.size());
  REQUIRE_OK(layer.forward(z, a, batch));
  return a;
}

// Smooth everywhere (the kinks are checked apart), so a central difference
// of order k-1 approximates order k to ~1e-7.
const std::vector<NodeSpec> kSmooth = {{"sin(num)*alpha + beta", {{"alpha", 1.5}, {"beta", -0.25}}},
                                       {"tanh", {}},
                                       {"gelu", {}},
                                       {"softplus", {}},
                                       {"erf(num*s)", {{"s", 0.7}}},
                                       {"num*tanh(softplus(num))", {}},
                                       {"exp(-(num - mu)**2/(2*s**2))", {{"mu", 0.3}, {"s", 0.8}}},
                                       {"sigmoid", {}}};

void checkClose(const std::vector<double> &got, const std::vector<double> &want, double tol, const char *what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]))) && bad++ == 0)
      first = i;
  INFO(what << ": " << bad << " of " << got.size() << " differ; first at " << first << ": " << got[first] << " vs "
            << want[first]);
  CHECK(bad == 0);
}

} // namespace

TEST_CASE("derivative layers of order 1-3 match central differences of the order below, every CPU engine and layout") {
  const size_t batch = 67, n = kSmooth.size();
  const double h = 1e-5;
  for (Method m : cpuMethods())
    for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
      CAPTURE(to_string(m));
      CAPTURE(to_string(layout));
      auto layer = ActivationLayer::compile(kSmooth, {.method = m, .dtype = DType::F64, .layout = layout});
      REQUIRE_OK_EXPECTED(layer);
      std::vector<double> z = randoms(n * batch, 3, -2.5, 2.5), zp(z), zm(z);
      for (size_t i = 0; i < z.size(); ++i)
        zp[i] += h, zm[i] -= h;
      ActivationLayer below = *layer;
      for (unsigned k = 1; k <= 3; ++k) {
        CAPTURE(k);
        auto d = layer->derivativeLayer(k);
        REQUIRE_OK_EXPECTED(d);
        CHECK(d->method() == layer->method());
        std::vector<double> got = forward(*d, z, batch), up = forward(below, zp, batch), down = forward(below, zm, batch);
        std::vector<double> fd(z.size());
        for (size_t i = 0; i < z.size(); ++i)
          fd[i] = (up[i] - down[i]) / (2 * h);
        checkClose(got, fd, 2e-6, "f^(k) vs the difference of f^(k-1)");
        // backward of order k is err * f^(k+1); fused gives both.
        auto next = layer->derivativeLayer(k + 1);
        REQUIRE_OK_EXPECTED(next);
        std::vector<double> err = randoms(z.size(), 4, -1, 1), delta(z.size()), a(z.size()), dfdz(z.size());
        REQUIRE_OK(d->backward(z, err, delta, batch));
        REQUIRE_OK(d->fused(z, a, dfdz, batch));
        std::vector<double> higher = forward(*next, z, batch), want(z.size());
        for (size_t i = 0; i < z.size(); ++i)
          want[i] = err[i] * higher[i];
        checkClose(delta, want, 1e-13, "backward of order k vs err * f^(k+1)");
        test::expectSameBits(a, got, "fused value vs forward");
        test::expectSameBits(dfdz, higher, "fused derivative vs the next layer's forward");
        below = *d;
      }
    }
}

TEST_CASE("the first derivative layer runs the layer's own f', bit for bit, and keeps its current constants") {
  for (Method m : cpuMethods()) {
    CAPTURE(to_string(m));
    auto layer = ActivationLayer::compile(kSmooth, {.method = m, .dtype = DType::F64});
    REQUIRE_OK_EXPECTED(layer);
    REQUIRE_OK(layer->setConstant(0, "alpha", -3.0));
    const size_t batch = 100;
    std::vector<double> z = randoms(kSmooth.size() * batch, 5, -4, 4), a(z.size()), dfdz(z.size());
    REQUIRE_OK(layer->fused(z, a, dfdz, batch));
    auto d = layer->derivativeLayer(1);
    REQUIRE_OK_EXPECTED(d);
    CHECK(d->params() == layer->params());
    CHECK(d->formula(0) == "alpha*cos(num)");
    test::expectSameBits(forward(*d, z, batch), dfdz, "derivativeLayer(1).forward vs fused's dfdz");
    auto same = layer->derivativeLayer(0);
    REQUIRE_OK_EXPECTED(same);
    test::expectSameBits(forward(*same, z, batch), a, "derivativeLayer(0).forward vs forward");
  }
}

TEST_CASE("kinks keep defined higher derivatives and NaN stays NaN") {
  const std::vector<NodeSpec> nodes = {{"relu", {}},
                                       {"Abs(num)", {}},
                                       {"Max(num, 0.5*num**2)", {}},
                                       {"Piecewise((num**3, num > 0), (beta*num, True))", {{"beta", 0.1}}}};
  const double nan = std::nan("");
  const std::vector<double> z = {0.0, -0.0, 1.0, -1.0, nan};
  const size_t batch = z.size();
  std::vector<double> zs;
  for (size_t n = 0; n < nodes.size(); ++n)
    zs.insert(zs.end(), z.begin(), z.end());
  for (Method m : cpuMethods()) {
    CAPTURE(to_string(m));
    auto layer = ActivationLayer::compile(nodes, {.method = m, .dtype = DType::F64});
    REQUIRE_OK_EXPECTED(layer);
    auto d2 = layer->derivativeLayer(2);
    REQUIRE_OK_EXPECTED(d2);
    auto d3 = layer->derivativeLayer(3);
    REQUIRE_OK_EXPECTED(d3);
    std::vector<double> second = forward(*d2, zs, batch), third = forward(*d3, zs, batch);
    // relu'' = Abs'' = 0 everywhere, the kink included; Max(x, x^2/2)'' is 0
    // on [0, 2] (x wins) and 1 outside; the Piecewise: 6x for x > 0, else 0.
    const std::vector<double> want2 = {0, 0, 0, 0, nan, 0, 0, 0, 0, nan, 0, 0, 0, 1, nan, 0, 0, 6, 0, nan};
    const std::vector<double> want3 = {0, 0, 0, 0, nan, 0, 0, 0, 0, nan, 0, 0, 0, 0, nan, 0, 0, 6, 0, nan};
    test::expectSameBits(second, want2, "second derivatives");
    test::expectSameBits(third, want3, "third derivatives");
  }
}

TEST_CASE("d/dc of f' and the constant tangent layer match central differences in the constants") {
  const size_t batch = 41, n = kSmooth.size();
  for (Method m : cpuMethods()) {
    CAPTURE(to_string(m));
    auto layer = ActivationLayer::compile(kSmooth, {.method = m, .dtype = DType::F64, .layout = Layout::BatchMajor});
    REQUIRE_OK_EXPECTED(layer);
    auto d1 = layer->derivativeLayer(1);
    REQUIRE_OK_EXPECTED(d1);
    auto tangent = layer->constantTangentLayer();
    REQUIRE_OK_EXPECTED(tangent);
    std::vector<double> params = layer->params();
    REQUIRE(params.size() == 5); // alpha, beta; s; mu, s
    CHECK(tangent->constantNames(0) == std::vector<std::string>{"alpha", "beta", "alpha'", "beta'"});
    CHECK(tangent->params().size() == 10);

    std::vector<double> z = randoms(n * batch, 6, -2, 2), err = randoms(z.size(), 7, -1, 1);
    std::vector<double> grads(params.size());
    REQUIRE_OK(d1->constantGradients(z, err, grads, batch));
    // The tangent layer with direction t: sum_i t_i df/dc_i per element.
    std::vector<double> t = randoms(params.size(), 8, -1, 1), tp = tangent->params();
    for (size_t node = 0, k = 0; node < n; ++node) {
      size_t count = layer->constantNames(node).size(), at = tangent->offsets()[node];
      for (size_t i = 0; i < count; ++i, ++k)
        tp[at + count + i] = t[k];
    }
    REQUIRE_OK(tangent->setParams(tp));
    std::vector<double> jvp = forward(*tangent, z, batch);

    const double h = 1e-6;
    std::vector<double> fdGrads(params.size()), fdJvp(z.size(), 0.0);
    for (size_t k = 0; k < params.size(); ++k) {
      std::vector<double> up = params, down = params;
      up[k] += h, down[k] -= h;
      REQUIRE_OK(d1->setParams(up));
      std::vector<double> fu = forward(*d1, z, batch);
      REQUIRE_OK(d1->setParams(down));
      std::vector<double> fdn = forward(*d1, z, batch);
      REQUIRE_OK(layer->setParams(up));
      std::vector<double> gu = forward(*layer, z, batch);
      REQUIRE_OK(layer->setParams(down));
      std::vector<double> gd = forward(*layer, z, batch);
      for (size_t i = 0; i < z.size(); ++i) {
        fdGrads[k] += err[i] * (fu[i] - fdn[i]) / (2 * h);
        fdJvp[i] += t[k] * (gu[i] - gd[i]) / (2 * h);
      }
    }
    checkClose(grads, fdGrads, 1e-6, "d/dc of f' (summed with err)");
    checkClose(jvp, fdJvp, 1e-6, "the tangent layer vs the constants' Jacobian times t");
  }
}

TEST_CASE("loss derivatives of order 2-3 and d/dc per element match central differences") {
  const std::string formula = "huber";
  const size_t count = 300;
  std::vector<double> yp = randoms(count, 9, -3, 3), yt = randoms(count, 10, -3, 3);
  for (Method m : cpuMethods()) {
    CAPTURE(to_string(m));
    for (const char *text : {"bce_with_logits", "(y_pred - y_true)**2*w + log(cosh(y_pred - y_true))"}) {
      CAPTURE(text);
      std::map<std::string, double> constants;
      if (text[0] == '(')
        constants["w"] = 0.7;
      std::vector<double> target = yt;
      if (std::string(text) == "bce_with_logits")
        for (double &v : target)
          v = v > 0 ? 1 : 0;
      auto loss = Loss::compile(text, constants, {.method = m, .dtype = DType::F64, .reduction = Reduction::Sum});
      REQUIRE_OK_EXPECTED(loss);
      const double h = 1e-5;
      std::vector<double> up = yp, down = yp;
      for (size_t i = 0; i < count; ++i)
        up[i] += h, down[i] -= h;
      for (unsigned k = 2; k <= 3; ++k) {
        CAPTURE(k);
        auto below = loss->derivativeLoss(k - 1);
        REQUIRE_OK_EXPECTED(below);
        auto d = loss->derivativeLoss(k);
        REQUIRE_OK_EXPECTED(d);
        std::vector<double> got(count), fu(count), fdn(count), fd(count), grad(count);
        REQUIRE_OK(d->forwardElements(yp, target, got));
        REQUIRE_OK(below->forwardElements(up, target, fu));
        REQUIRE_OK(below->forwardElements(down, target, fdn));
        for (size_t i = 0; i < count; ++i)
          fd[i] = (fu[i] - fdn[i]) / (2 * h);
        checkClose(got, fd, 2e-6, "l^(k) vs the difference of l^(k-1)");
        REQUIRE_OK(below->gradient(yp, target, grad));
        test::expectSameBits(grad, [&] {
          std::vector<double> v(count);
          REQUIRE_OK(loss->derivativeLoss(k - 1)->gradient(yp, target, v));
          return v;
        }(), "gradient of a derived loss is repeatable");
      }
    }
  }
  // d(huber)/d(delta) per element, and of its y_pred derivative.
  auto loss = Loss::compile("huber", {{"delta", 0.8}}, {.dtype = DType::F64});
  REQUIRE_OK_EXPECTED(loss);
  auto byDelta = loss->constantDerivativeLoss("delta");
  REQUIRE_OK_EXPECTED(byDelta);
  std::vector<double> got(count), lu(count), ld(count);
  REQUIRE_OK(byDelta->forwardElements(yp, yt, got));
  const double h = 1e-6;
  auto at = [&](double delta, std::vector<double> &out) {
    auto l = Loss::compile("huber", {{"delta", delta}}, {.dtype = DType::F64});
    REQUIRE_OK_EXPECTED(l);
    REQUIRE_OK(l->forwardElements(yp, yt, out));
  };
  at(0.8 + h, lu);
  at(0.8 - h, ld);
  std::vector<double> fd(count);
  for (size_t i = 0; i < count; ++i)
    fd[i] = (lu[i] - ld[i]) / (2 * h);
  checkClose(got, fd, 1e-6, "dl/d(delta) per element");
  // The derived loss keeps the parent's current value of the constant.
  REQUIRE_OK(loss->setConstant("delta", 2.0));
  auto later = loss->derivativeLoss(1);
  REQUIRE_OK_EXPECTED(later);
  CHECK(*later->constant("delta") == 2.0);
}

TEST_CASE("bce's written-out partials: orders 1-2, shared operands and d/d(eps) match central differences") {
  // bce carries its partials (Partials in Ops.def): the one in y_pred is
  // hand-written, those in y_true and eps are the rules' on placeholder
  // operands. Soft labels, y_pred away from 0 and 1, and an operand that is
  // an expression (the chain rule through the partial).
  const size_t count = 300;
  std::vector<double> yp = randoms(count, 11, 0.05, 0.95), yt = randoms(count, 12, 0.05, 0.95);
  const double h = 1e-6;
  auto elements = [&](const char *text, double eps, unsigned order, const std::vector<double> &p,
                      std::vector<double> &out) {
    auto l = Loss::compile(text, {{"eps", eps}}, {.dtype = DType::F64, .reduction = Reduction::None});
    REQUIRE_OK_EXPECTED(l);
    auto d = order ? l->derivativeLoss(order) : std::move(l);
    REQUIRE_OK_EXPECTED(d);
    REQUIRE_OK(d->forwardElements(p, yt, out));
  };
  std::vector<double> up = yp, down = yp;
  for (size_t i = 0; i < count; ++i)
    up[i] += h, down[i] -= h;
  for (const char *text : {"bce", "bce(y_pred*y_true + 0.02, y_true)"}) {
    CAPTURE(text);
    for (unsigned k = 1; k <= 2; ++k) {
      CAPTURE(k);
      std::vector<double> got(count), fu(count), fdn(count), fd(count);
      elements(text, 1e-3, k, yp, got);
      elements(text, 1e-3, k - 1, up, fu);
      elements(text, 1e-3, k - 1, down, fdn);
      for (size_t i = 0; i < count; ++i)
        fd[i] = (fu[i] - fdn[i]) / (2 * h);
      checkClose(got, fd, 1e-6, "bce^(k) vs the difference of bce^(k-1)");
    }
    auto loss = Loss::compile(text, {{"eps", 1e-3}}, {.dtype = DType::F64, .reduction = Reduction::None});
    REQUIRE_OK_EXPECTED(loss);
    auto byEps = loss->constantDerivativeLoss("eps");
    REQUIRE_OK_EXPECTED(byEps);
    std::vector<double> got(count), lu(count), ld(count), fd(count);
    REQUIRE_OK(byEps->forwardElements(yp, yt, got));
    elements(text, 1e-3 + h, 0, yp, lu);
    elements(text, 1e-3 - h, 0, yp, ld);
    for (size_t i = 0; i < count; ++i)
      fd[i] = (lu[i] - ld[i]) / (2 * h);
    checkClose(got, fd, 1e-6, "dl/d(eps) per element");
  }
}

TEST_CASE("higher derivatives: the errors") {
  auto layer = ActivationLayer::compile({{"tanh", {}}}, {.method = Method::CpuInterp});
  REQUIRE_OK_EXPECTED(layer);
  auto tooMany = layer->derivativeLayer(9);
  REQUIRE_FALSE(tooMany);
  CHECK(tooMany.error().message() == "derivative of order 9; at most 8 are supported");
  auto d5 = layer->derivativeLayer(5);
  REQUIRE_OK_EXPECTED(d5);
  auto d10 = d5->derivativeLayer(4);
  REQUIRE_FALSE(d10);
  CHECK(d10.error().message() == "9 derivatives taken in all; at most 8 are supported");

  auto baked = ActivationLayer::compile({{"sin(num)*a", {{"a", 2}}}}, {.method = Method::CpuInterp, .dtype = DType::F64, .bakeConstants = true});
  REQUIRE_OK_EXPECTED(baked);
  auto tangent = baked->constantTangentLayer();
  REQUIRE_FALSE(tangent);
  CHECK(tangent.error().message() ==
        "a constant tangent layer needs constants set at run time; this layer compiles them in (bakeConstants)");
  auto bakedSecond = baked->derivativeLayer(2);
  REQUIRE_OK_EXPECTED(bakedSecond);
  std::vector<double> z = {0.5}, a(1);
  REQUIRE_OK(bakedSecond->forward(z, a, 1));
  CHECK(a[0] == doctest::Approx(-2 * std::sin(0.5)));

  auto loss = Loss::compile("huber", {}, {.method = Method::CpuInterp});
  REQUIRE_OK_EXPECTED(loss);
  auto wrong = loss->constantDerivativeLoss("gamma");
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().message() == "the formula has no constant 'gamma' to differentiate by; it has: delta");

  ActivationLayer moved = std::move(*layer);
  auto fromMoved = layer->derivativeLayer(1); // NOLINT(bugprone-use-after-move): the API's answer to it
  REQUIRE_FALSE(fromMoved);
}
