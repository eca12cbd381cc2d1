//===- test/CUDA/GpuTest.cpp - The cuda method against the interpreter ----===//
//
// Runs only where a GPU is present (it reports itself skipped otherwise):
// every op and built-in, all kernel kinds, both layouts, f32 within 4 ulp
// (8 for derivatives, of the terms that cancel where f' crosses zero) and
// f64 within 1e-12 relative, NaN-aware, a miss named by formula and layout;
// losses for every reduction; constants changed at run time.
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "hsnn/Backend.h"
#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace hsnn;
using namespace hsnn::test;

namespace {

bool gpuPresent() {
  const RuntimeInfo &info = runtimeInfo();
  if (!info.gpuEnabled)
    MESSAGE("skipped: no usable GPU (" << info.gpuUnavailableReason << ")");
  return info.gpuEnabled;
}

// A function, not a global: the built-in table is only ready after static initialisation.
const std::vector<std::string> &kFormulasList() {
  static const std::vector<std::string> list = test::activationFormulas({"sin(num)*alpha"});
  return list;
}

template <class T> void compare(Layout layout) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  std::vector<NodeSpec> nodes;
  for (const std::string &f : kFormulasList())
    nodes.push_back({f, f.find("alpha") != std::string::npos ? std::map<std::string, double>{{"alpha", 1.5}}
                                                             : std::map<std::string, double>{}});
  auto gpu = ActivationLayer::compile(nodes, {.method = Method::Cuda, .dtype = dt, .layout = layout});
  auto ref = ActivationLayer::compile(nodes, {.method = Method::CpuInterp, .dtype = dt, .layout = layout});
  REQUIRE(gpu);
  REQUIRE(ref);
  REQUIRE(gpu->method() == Method::Cuda);
  const size_t batch = 1000;
  std::vector<T> z(nodes.size() * batch), err(z.size());
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> pick(-3, 3);
  for (size_t i = 0; i < z.size(); ++i) {
    z[i] = T(pick(rng));
    err[i] = T(pick(rng));
  }
  std::vector<T> a(z.size()), d(z.size()), ra(z.size()), rd(z.size()), b(z.size()), rb(z.size());
  REQUIRE_OK(gpu->fused(z, a, d, batch));
  REQUIRE_OK(ref->fused(z, ra, rd, batch));
  REQUIRE_OK(gpu->backward(z, err, b, batch));
  REQUIRE_OK(ref->backward(z, err, rb, batch));
  // Within `ulps` (f64: 1e-12 relative) of the interpreter, counted in units
  // of max(|want|, scale): where f' crosses zero, its terms (of the size
  // `scale`) cancel, and every engine's f' is off by ulps of those terms, not
  // of the tiny result (silu' near -1.28, mish' near -1.2). NaN matches NaN.
  // A miss names the node's formula, the layout, the kind and the input.
  size_t misses = 0;
  auto expect = [&](const char *kind, size_t i, T got, T want, double scale, unsigned ulps) {
    double unit = std::max(std::fabs(double(want)), scale);
    double tolerance = std::is_same_v<T, float> ? ulps * unit * std::numeric_limits<float>::epsilon() : 1e-12 * unit;
    if (sameOrBothNaN(got, want) || std::fabs(double(got) - double(want)) <= tolerance)
      return;
    if (++misses <= 10) {
      size_t node = layout == Layout::NodesMajor ? i / batch : i % nodes.size();
      FAIL_CHECK(kind << " of node " << node << " (" << nodes[node].formula << "), " << to_string(layout) << " "
                      << to_string(dt) << ", z = " << z[i] << ", err = " << err[i] << ": got " << got << ", want "
                      << want << " (tolerance " << tolerance << ")");
    }
  };
  for (size_t i = 0; i < z.size(); ++i) {
    expect("f", i, a[i], ra[i], 1.0, 4);
    expect("f'", i, d[i], rd[i], 1.0, 8);
    expect("err * f'", i, b[i], rb[i], std::fabs(double(err[i])), 8);
  }
  CHECK(misses == 0);
  // Constant gradients: the same sums (in double, in another order).
  std::vector<double> g(gpu->params().size()), rg(g.size());
  REQUIRE_OK(gpu->constantGradients(z, err, g, batch));
  REQUIRE_OK(ref->constantGradients(z, err, rg, batch));
  for (size_t j = 0; j < g.size(); ++j)
    CHECK(g[j] == doctest::Approx(rg[j]).epsilon(std::is_same_v<T, float> ? 1e-5 : 1e-11));
}

} // namespace

TEST_CASE("cuda layers match the interpreter in both layouts and dtypes") {
  if (!gpuPresent())
    return;
  compare<float>(Layout::NodesMajor);
  compare<float>(Layout::BatchMajor);
  compare<double>(Layout::NodesMajor);
  compare<double>(Layout::BatchMajor);
}

TEST_CASE("cuda losses match the interpreter for every reduction, deterministically") {
  if (!gpuPresent())
    return;
  const size_t n = 100003;
  std::vector<double> yp(n), yt(n);
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> pick(0.01, 0.99);
  for (size_t i = 0; i < n; ++i) {
    yp[i] = pick(rng);
    yt[i] = pick(rng);
  }
  for (const char *name : {"mse", "huber", "bce", "log_cosh"})
    for (Reduction red : {Reduction::Mean, Reduction::Sum}) {
      CAPTURE(name);
      auto gpu = Loss::compile(name, {}, {.method = Method::Cuda, .dtype = DType::F64, .reduction = red});
      auto ref = Loss::compile(name, {}, {.method = Method::CpuInterp, .dtype = DType::F64, .reduction = red});
      REQUIRE(gpu);
      REQUIRE(ref);
      REQUIRE(gpu->method() == Method::Cuda);
      double g = *gpu->forward(yp, yt), r = *ref->forward(yp, yt);
      CHECK(g == doctest::Approx(r).epsilon(1e-12));
      CHECK(*gpu->forward(yp, yt) == g); // the same bits every run
      std::vector<double> gg(n), rg(n);
      REQUIRE_OK(gpu->gradient(yp, yt, gg));
      REQUIRE_OK(ref->gradient(yp, yt, rg));
      for (size_t i = 0; i < n; i += 101)
        CHECK(gg[i] == doctest::Approx(rg[i]).epsilon(1e-12).scale(1e-15));
    }
}

TEST_CASE("cuda layers read constants at run time") {
  if (!gpuPresent())
    return;
  auto layer = ActivationLayer::compile({{"sin(num)*alpha", {{"alpha", 2}}}}, {.method = Method::Cuda, .dtype = DType::F64});
  REQUIRE(layer);
  double z = 1, a = 0;
  REQUIRE_OK(layer->forward({&z, 1}, {&a, 1}, 1));
  CHECK(a == doctest::Approx(2 * std::sin(1.0)));
  REQUIRE_OK(layer->setConstant(0, "alpha", -3));
  REQUIRE_OK(layer->forward({&z, 1}, {&a, 1}, 1));
  CHECK(a == doctest::Approx(-3 * std::sin(1.0)));
}

TEST_CASE("the cuda backend moves memory") {
  if (!gpuPresent())
    return;
  auto b = getBackend("cuda:0");
  REQUIRE(b);
  auto buf = (*b)->allocate(1000, DType::F32);
  REQUIRE(buf);
  std::vector<float> in(1000, 1.5f), out(1000);
  REQUIRE_OK((*b)->toDevice(*buf, in.data(), 4000));
  REQUIRE_OK((*b)->toHost(out.data(), *buf, 4000));
  CHECK(in == out);
  auto mem = (*b)->memoryInfo();
  REQUIRE(mem);
  CHECK(mem->total > 0);
  CHECK(getBackend("cuda:" + std::to_string(runtimeInfo().numGpus)).error().message().find("valid devices are 0..") !=
        std::string::npos);
}

TEST_CASE("cuda layers with more nodes than one launch's grid.y holds match the interpreter") {
  if (!gpuPresent())
    return;
  std::vector<NodeSpec> nodes;
  for (size_t i = 0; i < 70000; ++i)
    nodes.push_back({i % 3 == 0 ? "relu" : i % 3 == 1 ? "tanh" : "sin(num)*alpha", {{"alpha", double(i % 7)}}});
  for (auto &n : nodes)
    if (n.formula != "sin(num)*alpha")
      n.constants.clear();
  for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
    auto gpu = ActivationLayer::compile(nodes, {.method = Method::Cuda, .dtype = DType::F64, .layout = layout});
    auto ref = ActivationLayer::compile(nodes, {.method = Method::CpuInterp, .dtype = DType::F64, .layout = layout});
    REQUIRE(gpu);
    REQUIRE(ref);
    const size_t batch = 5;
    std::vector<double> z(nodes.size() * batch), a(z.size()), ra(z.size());
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> pick(-3, 3);
    for (double &v : z)
      v = pick(rng);
    REQUIRE_OK(gpu->forward(z, a, batch));
    REQUIRE_OK(ref->forward(z, ra, batch));
    for (size_t i = 0; i < z.size(); ++i)
      REQUIRE(a[i] == doctest::Approx(ra[i]).epsilon(1e-12).scale(1e-12));
  }
}

TEST_CASE("cuda layers on device buffers give the host path's bits, on every device") {
  if (!gpuPresent())
    return;
  auto layer = ActivationLayer::compile({{"gelu", {}}, {"sin(num)*alpha", {{"alpha", 1.5}}}, {"softplus", {}}},
                                        {.method = Method::Cuda});
  REQUIRE(layer);
  const size_t batch = 4096, n = 3 * batch;
  std::vector<float> z(n), a(n), viaBuffers(n);
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<float> pick(-5, 5);
  for (float &v : z)
    v = pick(rng);
  REQUIRE_OK(layer->forward(z, a, batch));
  for (int id = 0; id < runtimeInfo().numGpus; ++id) {
    CAPTURE(id);
    REQUIRE_OK(layer->setGpuId(id));
    CHECK(layer->gpuId() == id);
    auto b = getBackend("cuda:" + std::to_string(id));
    REQUIRE(b);
    auto dz = (*b)->allocate(n, DType::F32), da = (*b)->allocate(n, DType::F32);
    REQUIRE(dz);
    REQUIRE(da);
    REQUIRE_OK((*b)->toDevice(*dz, z.data(), n * 4));
    REQUIRE_OK(layer->forward(*dz, *da, batch));
    REQUIRE_OK((*b)->toHost(viaBuffers.data(), *da, n * 4));
    CHECK(std::memcmp(viaBuffers.data(), a.data(), n * 4) == 0);
  }
}

TEST_CASE("cuda losses on device buffers: sums are the same bits on every run") {
  if (!gpuPresent())
    return;
  auto loss = Loss::compile("bce", {}, {.method = Method::Cuda, .dtype = DType::F32});
  auto ref = Loss::compile("bce", {}, {.method = Method::CpuInterp, .dtype = DType::F32});
  REQUIRE(loss);
  REQUIRE(ref);
  const size_t n = (size_t(1) << 22) + 17;
  std::vector<float> yp(n), yt(n), g(n), rg(n);
  std::mt19937_64 rng(6);
  std::uniform_real_distribution<float> pick(0.01f, 0.99f);
  for (size_t i = 0; i < n; ++i) {
    yp[i] = pick(rng);
    yt[i] = float(i % 2);
  }
  auto b = getBackend("cuda:0");
  REQUIRE(b);
  auto dp = (*b)->allocate(n, DType::F32), dt = (*b)->allocate(n, DType::F32), dg = (*b)->allocate(n, DType::F32);
  REQUIRE(dp);
  REQUIRE(dt);
  REQUIRE(dg);
  REQUIRE_OK((*b)->toDevice(*dp, yp.data(), n * 4));
  REQUIRE_OK((*b)->toDevice(*dt, yt.data(), n * 4));
  auto first = loss->fused(*dp, *dt, *dg);
  REQUIRE(first);
  for (int rep = 0; rep < 5; ++rep)
    CHECK(*loss->fused(*dp, *dt, *dg) == *first);
  auto want = ref->fused(yp, yt, rg);
  REQUIRE(want);
  CHECK(*first == doctest::Approx(*want).epsilon(1e-5));
  REQUIRE_OK((*b)->toHost(g.data(), *dg, n * 4));
  for (size_t i = 0; i < n; i += 1021)
    CHECK(g[i] == doctest::Approx(rg[i]).epsilon(1e-5).scale(1e-9));
}
