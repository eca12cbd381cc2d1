//===- test/Runtime/LossTest.cpp - Losses and their reductions ------------===//
#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <cmath>
#include "TestUtil.h"

#include <doctest/doctest.h>


#include <random>

using namespace hsnn;

namespace {
template <class T> void fill(std::vector<T> &v, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> pick(lo, hi);
  for (T &x : v)
    x = T(pick(rng));
}
} // namespace

TEST_CASE("mean, sum and none reductions of a loss and its gradient") {
  const size_t n = 100000;
  std::vector<double> yp(n), yt(n), per(n), g(n), gs(n), gn(n), gf(n);
  fill(yp, 1, -3, 3);
  fill(yt, 2, -3, 3);
  auto mean = Loss::compile("huber", {{"delta", 0.5}}, {.dtype = DType::F64, .reduction = Reduction::Mean});
  auto sum = Loss::compile("huber", {{"delta", 0.5}}, {.dtype = DType::F64, .reduction = Reduction::Sum});
  auto none = Loss::compile("huber", {{"delta", 0.5}}, {.dtype = DType::F64, .reduction = Reduction::None});
  REQUIRE(mean);
  REQUIRE(sum);
  REQUIRE(none);

  REQUIRE_OK(none->forwardElements({yp.data(), n}, {yt.data(), n}, {per.data(), n}));
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = yp[i] - yt[i];
    double want = std::fabs(d) <= 0.5 ? 0.5 * d * d : 0.5 * (std::fabs(d) - 0.25);
    REQUIRE(per[i] == doctest::Approx(want).epsilon(1e-15));
    total += per[i];
  }
  CHECK(*sum->forward({yp.data(), n}, {yt.data(), n}) == doctest::Approx(total).epsilon(1e-12));
  CHECK(*mean->forward({yp.data(), n}, {yt.data(), n}) == doctest::Approx(total / n).epsilon(1e-12));
  CHECK(none->forward({yp.data(), n}, {yt.data(), n}).error().message() ==
        "reduction is none: use forwardElements for per-element losses");

  REQUIRE_OK(mean->gradient({yp.data(), n}, {yt.data(), n}, {g.data(), n}));
  REQUIRE_OK(sum->gradient({yp.data(), n}, {yt.data(), n}, {gs.data(), n}));
  REQUIRE_OK(none->gradient({yp.data(), n}, {yt.data(), n}, {gn.data(), n}));
  for (size_t i = 0; i < n; i += 97) {
    double d = yp[i] - yt[i];
    double want = std::fabs(d) <= 0.5 ? d : 0.5 * (d > 0 ? 1 : -1);
    CHECK(gs[i] == doctest::Approx(want).epsilon(1e-15));
    CHECK(gn[i] == gs[i]);
    CHECK(g[i] == doctest::Approx(want / n).epsilon(1e-15)); // seed: mean gradient scaled by 1/N
  }
  auto fusedValue = mean->fused({yp.data(), n}, {yt.data(), n}, {gf.data(), n});
  REQUIRE(fusedValue);
  CHECK(*fusedValue == *mean->forward({yp.data(), n}, {yt.data(), n}));
  CHECK(gf == g);
}

TEST_CASE("reductions are deterministic across runs and thread counts") {
  const size_t n = 1 << 20;
  std::vector<float> yp(n), yt(n);
  fill(yp, 3, 0.01, 0.99);
  fill(yt, 4, 0, 1);
  auto a = Loss::compile("bce", {}, {.threads = 1});
  auto b = Loss::compile("bce", {}, {.threads = 3});
  REQUIRE(a);
  REQUIRE(b);
  double first = *a->forward({yp.data(), n}, {yt.data(), n});
  for (int rep = 0; rep < 3; ++rep) {
    CHECK(*a->forward({yp.data(), n}, {yt.data(), n}) == first);
    CHECK(*b->forward({yp.data(), n}, {yt.data(), n}) == first);
  }
}

TEST_CASE("loss constants, f32 and errors") {
  auto loss = Loss::compile("mse", {}, {.dtype = DType::F32, .reduction = Reduction::Sum});
  REQUIRE(loss);
  float yp[3] = {1, 2, 3}, yt[3] = {0, 0, 0}, g[3];
  CHECK(*loss->forward({yp, 3}, {yt, 3}) == 14);
  REQUIRE_OK(loss->gradient({yp, 3}, {yt, 3}, {g, 3}));
  CHECK(g[2] == 6);
  CHECK(loss->formula() == "(y_pred - y_true)**2");
  CHECK(loss->derivative() == "2*(y_pred - y_true)");

  auto huber = Loss::compile("huber");
  REQUIRE(huber);
  CHECK(*huber->constant("delta") == 1.0);
  REQUIRE_OK(huber->setConstant("delta", 0.25));
  float p = 2, t = 0;
  CHECK(*huber->forward({&p, 1}, {&t, 1}) == doctest::Approx(0.25 * (2 - 0.125)));
  CHECK(huber->setConstant("dleta", 1).message() == "the loss has no constant 'dleta'; it has: delta");
  CHECK(huber->forward({&p, 0}, {&t, 0}).error().message() == "the mean of zero elements is undefined");

  auto bad = Loss::compile("y_true**2");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message() ==
        "error: a loss formula must use y_pred (the derivative is taken with respect to it)\n  y_true**2");
  auto badConst = Loss::compile("huber", {{"delta", INFINITY}});
  REQUIRE_FALSE(badConst);
  CHECK(badConst.error().message() == "error: constant 'delta' is inf; constants must be finite\n  huber\n  ^~~~~");
}

TEST_CASE("built-in constants outside their domain are errors at compile time and in setConstant") {
  auto bad = Loss::compile("huber", {{"delta", -0.5}});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message() == "error: constant 'delta' of huber must be > 0, got -0.5\n  huber\n  ^~~~~");
  auto beta0 = Loss::compile("smooth_l1", {{"beta", 0}});
  REQUIRE_FALSE(beta0);
  CHECK(beta0.error().message().find("constant 'beta' of smooth_l1 must be > 0, got 0") != std::string::npos);
  auto huber = Loss::compile("huber", {{"delta", 1.0}});
  REQUIRE(huber);
  CHECK(huber->setConstant("delta", -1).message() == "constant 'delta' of huber must be > 0, got -1");
  CHECK(*huber->constant("delta") == 1.0);
  CHECK_FALSE(static_cast<bool>(huber->setConstant("delta", 0.25)));
  auto layer = ActivationLayer::compile({{"relu", {}}, {"huber_like*num", {{"huber_like", -3}}}});
  REQUIRE(layer); // a user constant has no domain
  auto eps = Loss::compile("bce", {{"eps", 0}});
  CHECK(eps.has_value()); // bce's eps may be 0 (>= 0)
}

TEST_CASE("a loss whose y_pred terms cancel warns that its gradient is 0") {
  std::vector<std::string> seen;
  WarningHandler old = setWarningHandler([&](std::string_view w) { seen.emplace_back(w); });
  auto loss = Loss::compile("(y_true + y_pred) - y_pred", {}, {.method = Method::CpuInterp});
  setWarningHandler(old);
  REQUIRE(loss);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == "warning: loss '(y_true + y_pred) - y_pred' does not depend on y_pred once simplified (its terms "
                   "in y_pred cancel); its gradient is 0");
}
