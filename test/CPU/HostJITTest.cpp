//===- test/CPU/HostJITTest.cpp - Compiled kernels vs the interpreter -----===//
//
// The interpreter is the oracle: every op and built-in, both dtypes, both
// layouts, every kernel kind, at O0 and O3, on random and edge inputs.
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <random>
#include <thread>
#include <type_traits>

using namespace hsnn;
using namespace hsnn::test;

namespace {


// Says why a JIT test cannot run here, or "" when it can.
std::string jitSkipReason() {
  const RuntimeInfo &info = runtimeInfo();
  return info.cpuJitEnabled ? "" : "skipped: cpu_jit unavailable (" + info.cpuJitUnavailableReason + ")";
}
#define REQUIRE_JIT()                                                                                        \
  if (std::string why = jitSkipReason(); !why.empty()) {                                                     \
    MESSAGE(why);                                                                                            \
    return;                                                                                                  \
  }

// Single ops: within 4 ulp in f32. Composite built-ins: each op within 4
// ulp, so the whole may drift a little more.
// A function, not a global: the built-in table is only ready after static initialisation.
const std::vector<std::string> &kOpsList() {
  static const std::vector<std::string> list = test::opFormulas();
  return list;
}
// A function, not a global: the built-in table is only ready after static initialisation.
const std::vector<std::string> &kCompositeList() {
  static const std::vector<std::string> list = [] {
  std::vector<std::string> names = test::builtinNames(FormulaMode::Activation);
  names.push_back("sin(num)*alpha + beta");
  return names;
}();
  return list;
}

template <class T> std::vector<T> inputs(size_t n, uint64_t seed) {
  // Edge values first, then random ones over several scales.
  std::vector<T> v = {T(0), T(-0.0), std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
                      std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::denorm_min() * 3,
                      -std::numeric_limits<T>::denorm_min() * 3, T(88.7), T(-88.7), T(1000), T(-1000), T(1), T(-1),
                      T(0.5), T(-0.5)};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mant(-1, 1);
  std::uniform_int_distribution<int> scale(-6, 6);
  while (v.size() < n)
    v.push_back(T(std::ldexp(mant(rng), scale(rng))));
  v.resize(n);
  return v;
}

template <class T> void expectClose(const std::vector<T> &got, const std::vector<T> &want, uint64_t maxUlp, double absTol) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (sameOrBothNaN(got[i], want[i]))
      continue;
    CAPTURE(i);
    CAPTURE(got[i]);
    CAPTURE(want[i]);
    CAPTURE(ulpDistance(got[i], want[i]));
    bool ok = std::isfinite(want[i]) && (ulpDistance(got[i], want[i]) <= maxUlp || std::fabs(double(got[i]) - double(want[i])) <= absTol);
    CHECK(ok);
  }
}

std::map<std::string, double> constantsFor(const std::string &formula) {
  if (formula.find("alpha") != std::string::npos)
    return {{"alpha", 1.5}, {"beta", -0.25}};
  return {};
}

// Forward results within maxUlp; derivative kernels (a product of several
// ops, e.g. 1/cosh(x)**2) within twice that.
template <class T>
void compareLayer(const std::vector<std::string> &formulas, Layout layout, int optLevel, uint64_t maxUlp, double absTol) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  std::vector<NodeSpec> nodes;
  for (const std::string &f : formulas)
    nodes.push_back({f, constantsFor(f)});
  auto jit = ActivationLayer::compile(nodes, {.method = Method::CpuJit, .dtype = dt, .layout = layout, .optLevel = optLevel});
  auto interp = ActivationLayer::compile(nodes, {.method = Method::CpuInterp, .dtype = dt, .layout = layout});
  REQUIRE_OK_EXPECTED(jit);
  REQUIRE(interp);
  REQUIRE(jit->method() == Method::CpuJit);
  const size_t batch = 333; // not a multiple of any vector width: tails are exercised
  size_t n = nodes.size() * batch;
  std::vector<T> z = inputs<T>(batch, 7), err = inputs<T>(n, 8);
  std::vector<T> zz;
  for (size_t k = 0; k < nodes.size(); ++k)
    zz.insert(zz.end(), z.begin(), z.end()); // every node sees every edge value
  if (layout == Layout::BatchMajor) {
    std::vector<T> t(n);
    for (size_t k = 0; k < nodes.size(); ++k)
      for (size_t b = 0; b < batch; ++b)
        t[b * nodes.size() + k] = zz[k * batch + b];
    zz = t;
  }
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<T> a(n), b(n), a2(n), b2(n);
    CAPTURE(kind);
    if (kind == 0) {
      REQUIRE_OK(jit->forward(zz, a, batch));
      REQUIRE_OK(interp->forward(zz, a2, batch));
    } else if (kind == 1) {
      REQUIRE_OK(jit->backward(zz, err, a, batch));
      REQUIRE_OK(interp->backward(zz, err, a2, batch));
    } else {
      REQUIRE_OK(jit->fused(zz, a, b, batch));
      REQUIRE_OK(interp->fused(zz, a2, b2, batch));
      expectClose(b, b2, 2 * maxUlp, absTol);
    }
    expectClose(a, a2, kind == 1 ? 2 * maxUlp : maxUlp, absTol);
  }
}

} // namespace

TEST_CASE("every op compiled matches the interpreter within 4 ulp (derivatives 8) at O0 and O3") {
  REQUIRE_JIT();
  for (std::string op : kOpsList())
    for (int opt : {0, 3}) {
      CAPTURE(op);
      CAPTURE(opt);
      compareLayer<float>({op}, Layout::NodesMajor, opt, 4, 0);
      compareLayer<double>({op}, Layout::NodesMajor, opt, 4, 0);
    }
}

TEST_CASE("every built-in compiled matches the interpreter, both layouts and dtypes") {
  REQUIRE_JIT();
  std::vector<std::string> all = kCompositeList();
  for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
    CAPTURE(layout == Layout::NodesMajor);
    // Composites chain several 4-ulp functions; near zero, compare absolutely.
    compareLayer<float>(all, layout, 3, 16, 1e-6);
    compareLayer<double>(all, layout, 3, 64, 1e-14);
  }
}

TEST_CASE("compiled layers read constants at run time") {
  REQUIRE_JIT();
  auto layer = ActivationLayer::compile({{"sin(num)*alpha", {{"alpha", 2}}}, {"sin(num)*alpha", {{"alpha", 3}}}},
                                        {.method = Method::CpuJit, .dtype = DType::F64});
  REQUIRE(layer);
  CHECK(layer->numDistinctFormulas() == 1);
  double z[2] = {1, 1}, a[2];
  REQUIRE_OK(layer->forward(z, a, 1));
  CHECK(a[0] == doctest::Approx(2 * std::sin(1.0)));
  CHECK(a[1] == doctest::Approx(3 * std::sin(1.0)));
  REQUIRE_OK(layer->setConstant(1, "alpha", -1));
  REQUIRE_OK(layer->forward(z, a, 1));
  CHECK(a[1] == doctest::Approx(-std::sin(1.0)));
}

TEST_CASE("baked constants give the same results and refuse changes") {
  REQUIRE_JIT();
  std::vector<NodeSpec> nodes = {{"sin(num)*alpha", {{"alpha", 2}}}, {"sin(num)*alpha", {{"alpha", 3}}},
                                 {"sin(num)*alpha", {{"alpha", 2}}}, {"elu", {{"alpha", 0.5}}}};
  auto baked = ActivationLayer::compile(nodes, {.method = Method::CpuJit, .dtype = DType::F64, .bakeConstants = true});
  auto plain = ActivationLayer::compile(nodes, {.method = Method::CpuJit, .dtype = DType::F64});
  REQUIRE(baked);
  REQUIRE(plain);
  std::vector<double> z(4 * 300), a(z.size()), b(z.size());
  for (size_t i = 0; i < z.size(); ++i)
    z[i] = double(i % 300) / 50 - 3;
  REQUIRE_OK(baked->forward(z, a, 300));
  REQUIRE_OK(plain->forward(z, b, 300));
  CHECK(a == b);
  CHECK(baked->setConstant(0, "alpha", 1).message() ==
        "constants are baked into this layer's code (bakeConstants); compile a new layer to change them");
  auto loss = Loss::compile("huber", {{"delta", 0.5}}, {.method = Method::CpuJit, .bakeConstants = true});
  REQUIRE(loss);
  float p[3] = {0, 1, 3}, t[3] = {0, 0, 0};
  CHECK(*loss->forward({p, 3}, {t, 3}) == doctest::Approx((0 + 0.5 * (1 - 0.25) + 0.5 * (3 - 0.25)) / 3));
  CHECK(loss->setConstant("delta", 1).message() ==
        "constants are baked into this loss's code (bakeConstants); compile a new loss to change them");
}

TEST_CASE("a value's result does not depend on its position in the array") {
  REQUIRE_JIT();
  auto layer = ActivationLayer::compile({{"gelu", {}}}, {.method = Method::CpuJit});
  REQUIRE(layer);
  std::vector<float> z(1000, 0.7f), a(1000), f(1000), d(1000);
  REQUIRE_OK(layer->forward(z, a, z.size()));
  REQUIRE_OK(layer->fused(z, f, d, z.size()));
  for (size_t i = 0; i < z.size(); ++i) {
    REQUIRE(a[i] == a[0]);
    REQUIRE(f[i] == a[i]);
  }
}

TEST_CASE("compiled losses match the interpreter for every reduction") {
  REQUIRE_JIT();
  const size_t n = 50001;
  std::vector<double> yp = inputs<double>(n, 1), yt = inputs<double>(n, 2);
  for (double &v : yp)
    v = std::isfinite(v) ? std::fmod(std::fabs(v), 1.0) : 0.5;
  for (double &v : yt)
    v = std::isfinite(v) ? std::fmod(std::fabs(v), 1.0) : 0.25;
  for (std::string name : {"mse", "mae", "huber", "bce", "log_cosh", "smooth_l1", "bce_with_logits", "poisson_nll"})
    for (Reduction red : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      CAPTURE(name);
      auto jit = Loss::compile(name, {}, {.method = Method::CpuJit, .dtype = DType::F64, .reduction = red});
      auto interp = Loss::compile(name, {}, {.method = Method::CpuInterp, .dtype = DType::F64, .reduction = red});
      REQUIRE(jit);
      REQUIRE(interp);
      REQUIRE(jit->method() == Method::CpuJit);
      std::vector<double> g1(n), g2(n), e1(n), e2(n);
      REQUIRE_OK(jit->gradient(yp, yt, g1));
      REQUIRE_OK(interp->gradient(yp, yt, g2));
      expectClose(g1, g2, 64, 1e-15);
      REQUIRE_OK(jit->forwardElements(yp, yt, e1));
      REQUIRE_OK(interp->forwardElements(yp, yt, e2));
      expectClose(e1, e2, 64, 1e-15);
      if (red != Reduction::None) {
        double a = *jit->forward(yp, yt), b = *interp->forward(yp, yt);
        CHECK(a == doctest::Approx(b).epsilon(1e-12));
        CHECK(*jit->forward(yp, yt) == a); // deterministic
        double f = *jit->fused(yp, yt, g2);
        CHECK(f == doctest::Approx(a).epsilon(1e-12));
        CHECK(g2 == g1);
      }
    }
}

TEST_CASE("compiling and running from 8 threads at once is safe") {
  REQUIRE_JIT();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        auto layer = ActivationLayer::compile({{kCompositeList()[size_t(t + rep) % (kCompositeList().size() - 1)], {}}, {"sin(x)*2", {}}}, {.method = Method::CpuJit});
        if (!layer || layer->method() != Method::CpuJit) {
          ++failures;
          continue;
        }
        std::vector<float> z(2 * 1000, 0.3f), a(z.size());
        if (layer->forward(z, a, 1000) || a[1000] != float(std::sin(0.3f) * 2))
          ++failures;
      }
    });
  for (auto &th : threads)
    th.join();
  CHECK(failures == 0);
}

TEST_CASE("fused kernels build once at first use, also when threads race for them") {
  REQUIRE_JIT();
  auto layer = ActivationLayer::compile({{"gelu", {}}, {"sin(num)*alpha", {{"alpha", 2}}}}, {.method = Method::CpuJit});
  REQUIRE(layer);
  std::vector<float> z(2 * 500);
  for (size_t i = 0; i < z.size(); ++i)
    z[i] = float(i % 500) / 100 - 2.5f;
  std::vector<float> fwd(z.size());
  REQUIRE_OK(layer->forward(z, fwd, 500));
  std::vector<std::vector<float>> a(4, std::vector<float>(z.size())), d = a;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      if (layer->fused(z, a[t], d[t], 500))
        ++failures;
    });
  for (auto &th : threads)
    th.join();
  CHECK(failures == 0);
  for (int t = 0; t < 4; ++t) {
    CHECK(a[t] == fwd);
    CHECK(d[t] == d[0]);
  }
}

TEST_CASE("compile timings are reported") {
  REQUIRE_JIT();
  RuntimeFlags noCache = runtimeFlags();
  noCache.useKernelCache = false;
  ScopedRuntimeFlags scope(RuntimeFlagsOverride::from(noCache));
  auto layer = ActivationLayer::compile({{"gelu", {}}, {"relu", {}}}, {.method = Method::CpuJit});
  REQUIRE(layer);
  const CompileInfo &info = layer->compileInfo();
  CHECK(info.method == Method::CpuJit);
  CHECK(info.optimizeMs > 0);
  CHECK(info.codegenMs > 0);
  CHECK(info.objectBytes > 0);
}
