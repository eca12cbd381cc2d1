//===- test/CPU/BitIdentityTest.cpp - The same bits from every entry point ===//
//
// A property test: random layers of built-ins, random batch sizes (1..33,
// primes), both layouts, forward vs fused vs backward vs the AOT object's
// whole-layer and _range entry points, 1 vs 2 threads. An element's result
// must not depend on where it sits or which path computed it: compared bit
// for bit (NaN payloads aside), not within a tolerance.
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "AotLoad.h"
#include "RequireJit.h"

#include "CodeGen/HostJIT.h"
#include "CodeGen/MathCalls.h"
#include "Model/KernelRequests.h"
#include "hsnn/AOT.h"
#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <cstring>
#include <fmt/format.h>
#include <random>

using namespace hsnn;
using namespace hsnn::test;

namespace {

// Values over the whole range: edges, tails of the math functions, random scales.
template <class T> std::vector<T> values(size_t n, std::mt19937_64 &rng) {
  std::vector<T> v = {T(0), T(-0.0), T(1), T(-1), T(3), T(-3), T(-2.99914288520813), T(20), T(-20), T(88.5),
                      T(-88.5), T(1e-30), T(-1e-30), std::numeric_limits<T>::infinity(),
                      -std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN(),
                      std::numeric_limits<T>::denorm_min(), std::numeric_limits<T>::max()};
  std::uniform_real_distribution<double> mant(-1, 1);
  std::uniform_int_distribution<int> scale(-12, 9);
  while (v.size() < n)
    v.push_back(T(std::ldexp(mant(rng), scale(rng))));
  v.resize(n);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

std::vector<NodeSpec> randomLayer(std::mt19937_64 &rng, size_t nodes) {
  std::vector<std::string> pool = builtinNames(FormulaMode::Activation);
  for (const char *f : {"sin(num)*alpha + beta", "exp(-num**2/2)", "log(cosh(num))", "atan(num)/(1 + num**2)"})
    pool.push_back(f);
  std::vector<NodeSpec> out;
  for (size_t i = 0; i < nodes; ++i) {
    std::string f = pool[rng() % pool.size()];
    std::map<std::string, double> c;
    if (f.find("alpha") != std::string::npos)
      c = {{"alpha", 1.25}, {"beta", -0.5}};
    out.push_back({f, c});
  }
  return out;
}


template <class T> void checkLayer(uint64_t seed) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  std::mt19937_64 rng(seed);
  const size_t nodes = 3 + rng() % 6;
  std::vector<NodeSpec> spec = randomLayer(rng, nodes);
  std::string names;
  for (const NodeSpec &s : spec)
    names += s.formula + "; ";
  CAPTURE(names);
  CAPTURE(seed);

  // The reference: each node over M values in one nodes-major call.
  const size_t M = 401;
  std::vector<T> z;
  for (size_t n = 0; n < nodes; ++n) {
    std::vector<T> v = values<T>(M, rng);
    z.insert(z.end(), v.begin(), v.end());
  }
  auto nm = ActivationLayer::compile(spec, {.method = Method::CpuJit, .dtype = dt});
  auto bm = ActivationLayer::compile(spec, {.method = Method::CpuJit, .dtype = dt, .layout = Layout::BatchMajor});
  REQUIRE_OK_EXPECTED(nm);
  REQUIRE_OK_EXPECTED(bm);
  std::vector<T> refA(z.size()), refD(z.size());
  REQUIRE_OK(nm->fused(z, refA, refD, M));

  // Whole-array paths: forward, backward with err = 1, batch-major, 1 thread.
  {
    std::vector<T> a(z.size()), d(z.size()), ones(z.size(), T(1));
    REQUIRE_OK(nm->forward(z, a, M));
    expectSameBits(a, refA, "forward vs fused");
    REQUIRE_OK(nm->backward(z, ones, d, M));
    expectSameBits(d, refD, "backward(err = 1) vs fused");
    std::vector<T> zb = transposed(z, nodes, M), ab(z.size()), db(z.size());
    REQUIRE_OK(bm->fused(zb, ab, db, M));
    expectSameBits(transposed(ab, M, nodes), refA, "batch_major vs nodes_major");
    expectSameBits(transposed(db, M, nodes), refD, "batch_major derivative vs nodes_major");
    auto one = ActivationLayer::compile(spec, {.method = Method::CpuJit, .dtype = dt, .threads = 1});
    REQUIRE_OK_EXPECTED(one);
    REQUIRE_OK(one->forward(z, a, M));
    expectSameBits(a, refA, "1 thread vs default");
  }

  // Every batch size up to 33 and some primes, at random offsets: element
  // (n, i) of a call holds the value at (n, offset + i) of the reference.
  std::vector<size_t> batches;
  for (size_t b = 1; b <= 33; ++b)
    batches.push_back(b);
  for (size_t b : {37, 61, 97, 131, 257, 389})
    batches.push_back(b);
  for (size_t b : batches) {
    CAPTURE(b);
    size_t off = rng() % (M - b + 1);
    std::vector<T> zs, want;
    for (size_t n = 0; n < nodes; ++n)
      for (size_t i = 0; i < b; ++i) {
        zs.push_back(z[n * M + off + i]);
        want.push_back(refA[n * M + off + i]);
      }
    std::vector<T> a(zs.size());
    REQUIRE_OK(nm->forward(zs, a, b));
    expectSameBits(a, want, "nodes_major batch slice");
    std::vector<T> ab(zs.size());
    REQUIRE_OK(bm->forward(transposed(zs, nodes, b), ab, b));
    expectSameBits(transposed(ab, b, nodes), want, "batch_major batch slice");
  }

  // The AOT object of the same spec: whole layer, fused and _range, both layouts.
  for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
    CAPTURE(to_string(layout));
    bool batchMajor = layout == Layout::BatchMajor;
    std::string name = fmt::format("bits_{}_{}_{}", seed, to_string(dt), batchMajor ? "bm" : "nm");
    AotLayer<T> aot = loadAot<T>(name, spec, layout);
    std::vector<T> zin = batchMajor ? transposed(z, nodes, M) : z;
    auto back = [&](const std::vector<T> &v) { return batchMajor ? transposed(v, M, nodes) : v; };
    std::vector<T> a(z.size()), d(z.size());
    aot.forward(zin.data(), a.data(), int64_t(M), aot.params);
    expectSameBits(back(a), refA, "AOT forward vs JIT");
    aot.fused(zin.data(), a.data(), d.data(), int64_t(M), aot.params);
    expectSameBits(back(a), refA, "AOT fused vs JIT");
    expectSameBits(back(d), refD, "AOT fused derivative vs JIT");
    std::fill(a.begin(), a.end(), T(0));
    size_t mid = nodes / 2;
    aot.forwardRange(zin.data(), a.data(), int64_t(M), aot.params, 0, int64_t(mid));
    aot.forwardRange(zin.data(), a.data(), int64_t(M), aot.params, int64_t(mid), int64_t(nodes));
    expectSameBits(back(a), refA, "AOT forward_range vs JIT");
  }
}

template <class T> void checkLoss(const std::string &name, uint64_t seed) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  CAPTURE(name);
  std::mt19937_64 rng(seed);
  const size_t M = 70001; // above the serial threshold: the 2-thread call splits
  std::vector<T> yp = values<T>(M, rng), yt(M);
  std::uniform_real_distribution<double> u(0, 1);
  for (size_t i = 0; i < M; ++i) {
    if (name == "bce") // probabilities
      yp[i] = T(u(rng));
    yt[i] = name == "bce" || name == "bce_with_logits" ? T(rng() % 2) : T(u(rng) * 4 - 2);
  }
  auto two = Loss::compile(name, {}, {.method = Method::CpuJit, .dtype = dt, .reduction = Reduction::Sum, .threads = 2});
  auto one = Loss::compile(name, {}, {.method = Method::CpuJit, .dtype = dt, .reduction = Reduction::Sum, .threads = 1});
  REQUIRE_OK_EXPECTED(two);
  REQUIRE_OK_EXPECTED(one);
  std::vector<T> g(M), gf(M), l(M);
  REQUIRE_OK(two->gradient(yp, yt, g));
  auto sum = two->fused(yp, yt, gf);
  REQUIRE_OK_EXPECTED(sum);
  expectSameBits(gf, g, "fused gradient vs gradient");
  auto sum1 = one->fused(yp, yt, gf);
  REQUIRE_OK_EXPECTED(sum1);
  CHECK(sameBits(*sum, *sum1));
  auto value = one->forward(yp, yt);
  REQUIRE_OK_EXPECTED(value);
  CHECK(sameBits(*value, *sum));
  // Element by element at any offset and length.
  REQUIRE_OK(two->forwardElements(yp, yt, l));
  for (size_t b : {1, 2, 3, 5, 7, 13, 17, 31, 33, 97}) {
    size_t off = rng() % (M - b);
    std::vector<T> ls(b), gs(b);
    std::span<const T> p(yp.data() + off, b), t(yt.data() + off, b);
    REQUIRE_OK(one->forwardElements(p, t, ls));
    REQUIRE_OK(one->gradient(p, t, gs));
    expectSameBits(ls, std::vector<T>(l.begin() + off, l.begin() + off + b), "loss elements slice");
    expectSameBits(gs, std::vector<T>(g.begin() + off, g.begin() + off + b), "loss gradient slice");
  }
}

// Whether the model's kernels of `kind` call the math library (MathCalls.h)
// rather than inline it: all of them (true), none (false).
std::optional<bool> callsMathLibrary(const std::vector<NodeSpec> &nodes, DType dt, detail::KernelKind kind) {
  std::vector<std::string> warnings;
  auto model = detail::CompiledModel::activation(nodes, {.dtype = dt}, warnings);
  REQUIRE(model);
  detail::MultiKernelSet set = detail::multiUnitKernels(**model, kind, "k");
  size_t called = 0;
  for (const detail::KernelRequest &r : set.requests)
    called += detail::outlinesMath(r);
  if (called == set.requests.size())
    return true;
  return called == 0 ? std::optional(false) : std::nullopt;
}

// Every op and built-in alone (its kernels inline the math library) and in
// one layer of them all (whose kernels call it): forward, backward and
// fused, on inputs that reach the functions' rare lanes, bit for bit.
template <class T> void calledMathGivesInlinedBits() {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  std::vector<NodeSpec> nodes;
  for (const std::string &f : activationFormulas({"exp(num*0.75) + log(num) + sin(num) + cos(num*3) + tan(num) + "
                                                  "erf(num) + sinh(num) + atan2(num, 2) + num**0.3"}))
    nodes.push_back({f, {}});
  for (auto kind : {detail::KernelKind::Forward, detail::KernelKind::Backward, detail::KernelKind::Fused})
    REQUIRE(callsMathLibrary(nodes, dt, kind) == std::optional(true));
  auto all = ActivationLayer::compile(nodes, {.method = Method::CpuJit, .dtype = dt});
  REQUIRE_OK_EXPECTED(all);
  std::mt19937_64 rng(11);
  const std::vector<T> v = values<T>(97, rng);
  const size_t M = v.size(), width = nodes.size();
  std::vector<T> z, err;
  for (size_t j = 0; j < width; ++j) {
    z.insert(z.end(), v.begin(), v.end());
    for (size_t i = 0; i < M; ++i)
      err.push_back(T(0.5 + double(i % 7)));
  }
  std::vector<T> a(z.size()), d(z.size()), fa(z.size()), fd(z.size());
  REQUIRE_OK(all->forward(z, a, M));
  REQUIRE_OK(all->backward(z, err, d, M));
  REQUIRE_OK(all->fused(z, fa, fd, M));
  // An ahead-of-time object defines the functions it calls itself.
  AotLayer<T> aot = loadAot<T>(std::string("called_math_") + (dt == DType::F32 ? "f32" : "f64"), nodes,
                               Layout::NodesMajor);
  std::vector<T> aa(z.size()), ad(z.size());
  aot.fused(z.data(), aa.data(), ad.data(), int64_t(M), aot.params);
  expectSameBits(aa, fa, "AOT fused value vs JIT");
  expectSameBits(ad, fd, "AOT fused derivative vs JIT");
  size_t inlinedWithCalls = 0;
  for (size_t j = 0; j < width; ++j) {
    CAPTURE(nodes[j].formula);
    std::vector<NodeSpec> alone = {nodes[j]};
    auto forwardCalls = callsMathLibrary(alone, dt, detail::KernelKind::Forward);
    REQUIRE(forwardCalls);
    std::vector<std::string> warnings;
    auto model = detail::CompiledModel::activation(alone, {.dtype = dt}, warnings);
    REQUIRE(model);
    const detail::Program &forward = *(*model)->units[0].programs[size_t(detail::KernelKind::Forward)];
    inlinedWithCalls += !*forwardCalls && detail::mathCallSites(forward) > 0;
    auto one = ActivationLayer::compile(alone, {.method = Method::CpuJit, .dtype = dt});
    REQUIRE_OK_EXPECTED(one);
    std::span<const T> zj(z.data() + j * M, M), ej(err.data() + j * M, M);
    std::vector<T> oa(M), od(M), ofa(M), ofd(M);
    REQUIRE_OK(one->forward(zj, oa, M));
    REQUIRE_OK(one->backward(zj, ej, od, M));
    REQUIRE_OK(one->fused(zj, ofa, ofd, M));
    auto part = [&](const std::vector<T> &x) { return std::vector<T>(x.begin() + long(j * M), x.begin() + long((j + 1) * M)); };
    expectSameBits(part(a), oa, "forward, called vs inlined");
    expectSameBits(part(d), od, "backward, called vs inlined");
    expectSameBits(part(fa), ofa, "fused value, called vs inlined");
    expectSameBits(part(fd), ofd, "fused derivative, called vs inlined");
  }
  CHECK(inlinedWithCalls >= 30); // the comparison covers the math library, not arithmetic alone
}

} // namespace

TEST_CASE("math functions called from large kernels give the bits they give inlined, every op and built-in, both dtypes") {
  REQUIRE_JIT();
  if (!__builtin_cpu_supports("fma")) {
    MESSAGE("skipped: this CPU has no FMA, so its kernels call libmvec, not hsnn's math library");
    return;
  }
  calledMathGivesInlinedBits<float>();
  calledMathGivesInlinedBits<double>();
}

TEST_CASE("property: every entry point, layout, batch size, thread count and AOT give the same bits") {
  REQUIRE_JIT();
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    checkLayer<float>(seed);
    checkLayer<double>(seed + 100);
  }
}

TEST_CASE("property: loss gradients and sums have the same bits on every path and thread count") {
  REQUIRE_JIT();
  for (const std::string &name : builtinNames(FormulaMode::Loss)) {
    checkLoss<float>(name, 11);
    checkLoss<double>(name, 12);
  }
}

namespace {
/// The sum in 113-bit arithmetic, rounded once to double.
template <class T> double exactSum(const std::vector<T> &terms) {
  __float128 sum = 0;
  for (T x : terms)
    sum += x;
  return double(sum);
}

/// y_pred - y_true summed over yp (y_true = 0: the terms are yp's) by
/// cpu_jit, the interpreter and an AOT object's NAME_sum over the whole
/// array in one call (the JIT's calls take 16384 elements each), each
/// within 2 ulp of `want`.
template <class T>
void expectSumsWithin2Ulp(const char *aotName, const std::vector<T> &yp, const std::vector<T> &yt, double want) {
  const char *formula = "y_pred - y_true";
  const DType dtype = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  for (Method m : {Method::CpuJit, Method::CpuInterp}) {
    if (m == Method::CpuJit && !runtimeInfo().cpuJitEnabled)
      continue;
    CAPTURE(to_string(m));
    auto loss = Loss::compile(formula, {}, {.method = m, .dtype = dtype, .reduction = Reduction::Sum});
    REQUIRE_OK_EXPECTED(loss);
    auto sum = loss->forward(yp, yt);
    REQUIRE_OK_EXPECTED(sum);
    CAPTURE(*sum);
    CHECK(ulpDistance(*sum, want) <= 2);
  }
  if (!runtimeInfo().cpuJitEnabled)
    return;
  auto art = compileLossAot(aotName, formula, {}, dtype);
  REQUIRE_OK_EXPECTED(art);
  auto jit = detail::HostJIT::get();
  REQUIRE_OK_EXPECTED(jit);
  std::vector<std::vector<char>> objects = {art->bytes};
  std::vector<std::string> symbols = {std::string(aotName) + "_sum"};
  auto lib = (*jit)->load(objects, symbols, nullptr);
  REQUIRE_OK_EXPECTED(lib);
  using SumFn = double (*)(const T *, const T *, T *, const double *, int64_t, T);
  auto fn = reinterpret_cast<SumFn>((*lib)->address(symbols[0]));
  REQUIRE(static_cast<bool>(fn));
  double params[1] = {0};
  double aot = fn(yp.data(), yt.data(), nullptr, params, int64_t(yp.size()), T(1));
  CAPTURE(aot);
  CHECK(ulpDistance(aot, want) <= 2);
}
} // namespace

TEST_CASE("f64 loss sums of 10^6 elements are within 2 ulp of the exact sum: JIT, AOT and interpreter") {
  // Positive terms of one magnitude (losses are mostly non-negative): a
  // sequential sum drifts by tens of ulp over a million of them.
  const size_t n = 1000000;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> yp(n), yt(n, 0.0);
  for (double &v : yp)
    v = u(rng) + 0.5;
  const double want = exactSum(yp); // the 113-bit sum is exact for these terms
  CAPTURE(want);
  // y_pred - y_true is exact with y_true = 0, so the elements are the terms.
  expectSumsWithin2Ulp("sum_check", yp, yt, want);
}

TEST_CASE("f32 loss sums of 10^6 elements are within 2 ulp of the exact sum in double, terms of any spread") {
  // The kernels add a step's terms in groups before the compensated sum;
  // terms 2^60 apart in magnitude make those adds inexact, one magnitude
  // keeps them exact. Without the compensation the one AOT pass is 33 ulp
  // off with the spread (the JIT's calls take 16384 elements each).
  const size_t n = 1000000;
  for (int spread : {0, 30}) {
    CAPTURE(spread);
    std::mt19937_64 rng(7 + spread);
    std::uniform_real_distribution<double> u(0.5, 1.5);
    std::uniform_int_distribution<int> e(-spread, spread);
    std::vector<float> yp(n), yt(n, 0.0f);
    for (float &v : yp)
      v = float(std::ldexp(u(rng), e(rng)));
    const double want = exactSum(yp); // 113 bits: exact for floats 2^61 apart, 2^20 of them
    CAPTURE(want);
    expectSumsWithin2Ulp("sum_check32", yp, yt, want);
  }
}

TEST_CASE("AOT constant-gradient entry points agree with the JIT's") {
  REQUIRE_JIT();
  const std::vector<NodeSpec> spec = {{"sin(num)*alpha + beta", {{"alpha", 1.5}, {"beta", -0.25}}},
                                      {"relu", {}},
                                      {"leaky_relu", {{"negative_slope", 0.2}}}};
  const size_t nodes = spec.size(), batch = 5003;
  std::mt19937_64 rng(9);
  std::vector<double> z = values<double>(nodes * batch, rng), err = values<double>(nodes * batch, rng);
  for (double &v : z)
    v = std::isfinite(v) ? std::clamp(v, -50.0, 50.0) : 0.5;
  for (double &v : err)
    v = std::isfinite(v) ? std::clamp(v, -2.0, 2.0) : 1.0;
  auto jitLayer = ActivationLayer::compile(spec, {.method = Method::CpuJit, .dtype = DType::F64});
  REQUIRE_OK_EXPECTED(jitLayer);
  std::vector<double> want(3);
  REQUIRE_OK(jitLayer->constantGradients(z, err, want, batch));
  auto jit = detail::HostJIT::get();
  REQUIRE_OK_EXPECTED(jit);
  for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
    CAPTURE(to_string(layout));
    bool bm = layout == Layout::BatchMajor;
    std::string name = bm ? "cg_bm" : "cg_nm";
    auto art = compileLayerAot(name, spec, DType::F64, layout);
    REQUIRE_OK_EXPECTED(art);
    std::vector<std::vector<char>> objects = {art->bytes};
    std::vector<std::string> symbols = {name + "_constant_gradient", name + "_default_params"};
    auto lib = (*jit)->load(objects, symbols, nullptr);
    REQUIRE_OK_EXPECTED(lib);
    using Fn = void (*)(const double *, const double *, double *, int64_t, const double *);
    auto fn = reinterpret_cast<Fn>((*lib)->address(symbols[0]));
    auto params = static_cast<const double *>((*lib)->address(symbols[1]));
    REQUIRE(static_cast<bool>(fn));
    std::vector<double> zin = bm ? transposed(z, nodes, batch) : z, ein = bm ? transposed(err, nodes, batch) : err;
    std::vector<double> got(3, -1.0);
    fn(zin.data(), ein.data(), got.data(), int64_t(batch), params);
    for (size_t i = 0; i < 3; ++i)
      CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  }
  auto loss = Loss::compile("huber", {{"delta", 0.4}}, {.method = Method::CpuJit, .dtype = DType::F64, .reduction = Reduction::Sum});
  REQUIRE_OK_EXPECTED(loss);
  std::vector<double> yt(batch, 0.1), lw(1), yp(z.begin(), z.begin() + batch);
  REQUIRE_OK(loss->constantGradients(yp, yt, lw));
  auto art = compileLossAot("cg_loss", "huber", {{"delta", 0.4}}, DType::F64);
  REQUIRE_OK_EXPECTED(art);
  std::vector<std::vector<char>> objects = {art->bytes};
  std::vector<std::string> symbols = {"cg_loss_constant_gradient", "cg_loss_default_params"};
  auto lib = (*jit)->load(objects, symbols, nullptr);
  REQUIRE_OK_EXPECTED(lib);
  using LossFn = double (*)(const double *, const double *, double *, const double *, int64_t, double);
  auto fn = reinterpret_cast<LossFn>((*lib)->address(symbols[0]));
  REQUIRE(static_cast<bool>(fn));
  double g = 0;
  fn(yp.data(), yt.data(), &g, static_cast<const double *>((*lib)->address(symbols[1])), int64_t(batch), 1.0);
  CHECK(g == doctest::Approx(lw[0]).epsilon(1e-12));
}

TEST_CASE("AOT higher-derivative entry points give the JIT's derivative layers' bits") {
  REQUIRE_JIT();
  const std::vector<NodeSpec> spec = {{"sin(num)*alpha + beta", {{"alpha", 1.5}, {"beta", -0.25}}},
                                      {"gelu", {}},
                                      {"relu", {}},
                                      {"Piecewise((num**3, num > 0), (a*num, True))", {{"a", 0.3}}}};
  const size_t nodes = spec.size(), batch = 1031;
  std::mt19937_64 rng(11);
  std::vector<double> z = values<double>(nodes * batch, rng), err = values<double>(nodes * batch, rng);
  auto jit = detail::HostJIT::get();
  REQUIRE_OK_EXPECTED(jit);
  auto base = ActivationLayer::compile(spec, {.method = Method::CpuJit, .dtype = DType::F64});
  REQUIRE_OK_EXPECTED(base);
  for (unsigned order : {2u, 3u}) {
    CAPTURE(order);
    auto derived = base->derivativeLayer(order);
    REQUIRE_OK_EXPECTED(derived);
    std::vector<double> want(z.size()), wantDelta(z.size());
    REQUIRE_OK(derived->forward(z, want, batch));
    REQUIRE_OK(derived->backward(z, err, wantDelta, batch));
    std::string name = fmt::format("d{}", order);
    auto art = compileLayerAot(name, spec, DType::F64, Layout::NodesMajor, {.order = order});
    REQUIRE_OK_EXPECTED(art);
    CHECK(art->header.find(fmt::format("differentiated {} times in num", order)) != std::string::npos);
    std::vector<std::vector<char>> objects = {art->bytes};
    std::vector<std::string> symbols = {name + "_forward", name + "_backward", name + "_default_params"};
    auto lib = (*jit)->load(objects, symbols, nullptr);
    REQUIRE_OK_EXPECTED(lib);
    using Fwd = void (*)(const double *, double *, int64_t, const double *);
    using Bwd = void (*)(const double *, const double *, double *, int64_t, const double *);
    auto fwd = reinterpret_cast<Fwd>((*lib)->address(symbols[0]));
    auto bwd = reinterpret_cast<Bwd>((*lib)->address(symbols[1]));
    auto params = static_cast<const double *>((*lib)->address(symbols[2]));
    REQUIRE((fwd && bwd && params));
    std::vector<double> got(z.size()), gotDelta(z.size());
    fwd(z.data(), got.data(), int64_t(batch), params);
    bwd(z.data(), err.data(), gotDelta.data(), int64_t(batch), params);
    expectSameBits(got, want, "AOT f^(k) vs derivativeLayer(k).forward");
    expectSameBits(gotDelta, wantDelta, "AOT err * f^(k+1) vs derivativeLayer(k).backward");
  }
  auto tooHigh = compileLayerAot("d9", spec, DType::F64, Layout::NodesMajor, {.order = 9});
  REQUIRE_FALSE(tooHigh);
  CHECK(tooHigh.error().message() == "derivative of order 9; at most 8 are supported");
}

TEST_CASE("loss sums that cancel keep their digits in one AOT pass, f32 sums are compensated, the scale is a double") {
  REQUIRE_JIT();
  // Pairs x, -x + k*2^-20 (k < 37): they nearly cancel, condition number
  // ~5e4 as in the audit's case.
  const size_t n = 10000000;
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> yp(n), yt(n, 0.0);
  for (size_t i = 0; i + 1 < n; i += 2) {
    yp[i] = u(rng);
    yp[i + 1] = -yp[i] + std::ldexp(double(rng() % 37), -20);
  }
  std::shuffle(yp.begin(), yp.end(), rng);
  __float128 exactSum = 0; // the terms are multiples of 2^-74 below 2: exact in 113 bits
  double absSum = 0;
  for (double x : yp)
    exactSum += x, absSum += std::abs(x);
  const double want = double(exactSum);
  CAPTURE(want);
  CAPTURE(absSum / std::abs(want)); // the condition number
  const char *formula = "y_pred - y_true";
  // cpu_jit and the interpreter add their blocks' sums as unadded parts
  // (SumParts): as close as one pass (adding the blocks' rounded sums was
  // 8-9 ulp here), on every thread count.
  for (Method m : {Method::CpuJit, Method::CpuInterp}) {
    CAPTURE(to_string(m));
    auto loss = Loss::compile(formula, {}, {.method = m, .dtype = DType::F64, .reduction = Reduction::Sum});
    REQUIRE_OK_EXPECTED(loss);
    auto sum = loss->forward(yp, yt);
    REQUIRE_OK_EXPECTED(sum);
    CHECK(ulpDistance(*sum, want) <= 1);
  }
  auto jit = detail::HostJIT::get();
  REQUIRE_OK_EXPECTED(jit);
  using SumFn64 = double (*)(const double *, const double *, double *, const double *, int64_t, double);
  using SumFn32 = double (*)(const float *, const float *, float *, const double *, int64_t, float);
  using ConstFn32 = double (*)(const float *, const float *, double *, const double *, int64_t, double);
  auto art64 = compileLossAot("cancel64", formula, {}, DType::F64);
  REQUIRE_OK_EXPECTED(art64);
  std::vector<std::vector<char>> objects64 = {art64->bytes};
  std::vector<std::string> symbols64 = {"cancel64_sum"};
  auto lib64 = (*jit)->load(objects64, symbols64, nullptr);
  REQUIRE_OK_EXPECTED(lib64);
  double params[1] = {0};
  double aot = reinterpret_cast<SumFn64>((*lib64)->address("cancel64_sum"))(yp.data(), yt.data(), nullptr, params,
                                                                            int64_t(n), 1.0);
  CHECK(ulpDistance(aot, want) <= 1);

  // f32 terms summed in double: within an ulp of the double sum of the same floats.
  std::vector<float> fp(n), ft(n, 0.0f);
  __float128 exact32 = 0;
  for (size_t i = 0; i < n; ++i) {
    fp[i] = float(yp[i] * 3 + 0.25); // positive and negative terms of mixed sizes
    exact32 += fp[i];
  }
  auto art32 = compileLossAot("sum32", "(y_pred - y_true)*w", {{"w", 1.0}}, DType::F32);
  REQUIRE_OK_EXPECTED(art32);
  CHECK(art32->header.find("double *grads, const double *params, int64_t n, double scale") != std::string::npos);
  std::vector<std::vector<char>> objects32 = {art32->bytes};
  std::vector<std::string> symbols32 = {"sum32_sum", "sum32_constant_gradient"};
  auto lib32 = (*jit)->load(objects32, symbols32, nullptr);
  REQUIRE_OK_EXPECTED(lib32);
  double w[1] = {1.0};
  double got32 = reinterpret_cast<SumFn32>((*lib32)->address("sum32_sum"))(fp.data(), ft.data(), nullptr, w,
                                                                            int64_t(n), 1.0f);
  CHECK(ulpDistance(got32, double(exact32)) <= 1);
  // d/dw of the mean: the sum times 1/n, with 1/n a double (as a float it is 1e-7 * (1 + 2^-25)).
  double grad = 0;
  reinterpret_cast<ConstFn32>((*lib32)->address("sum32_constant_gradient"))(fp.data(), ft.data(), &grad, w, int64_t(n),
                                                                            1.0 / double(n));
  CHECK(ulpDistance(grad, double(exact32) / double(n)) <= 2);
}
