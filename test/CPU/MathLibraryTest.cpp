//===- test/CPU/MathLibraryTest.cpp - hsnn's math library against the truth ===//
//
// Every function of the formula language as the CPU kernels compute it
// (hsnn's own IR, lib/CodeGen/InlineMath.h, on CPUs with FMA) against the
// true value rounded to the type: floats over every 97th or 397th float of
// the whole range against glibc's double functions, doubles over random
// inputs at every magnitude against glibc's long double (x87, 64-bit
// significand) functions, whose error is 2^-11 of a double's ulp. Limits
// (0, inf, NaN, -0) exactly. The bounds are docs/guide/numerics.md's.
//===----------------------------------------------------------------------===//
#include "RequireJit.h"
#include "TestUtil.h"

#include "hsnn/Layer.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <algorithm>
#include <random>

using namespace hsnn;
using namespace hsnn::test;

// `x` through a compiled layer of `formula` in x's type, against `truth`
// (in double or long double) rounded to that type: the worst distance in ulp.
// 0, inf and NaN must come out exactly (and NaN in, NaN out); -0 too where
// the truth says -0.
namespace {
template <class T, class Truth> uint64_t worstUlp(const char *formula, std::vector<T> x, Truth truth) {
  auto layer = ActivationLayer::compile({{formula, {}}}, {.method = Method::CpuJit,
                                                          .dtype = std::is_same_v<T, float> ? DType::F32 : DType::F64});
  REQUIRE_OK_EXPECTED(layer);
  x.push_back(std::numeric_limits<T>::quiet_NaN());
  std::vector<T> y(x.size());
  REQUIRE_OK(layer->forward(x, y, x.size()));
  CHECK(std::isnan(y.back()));
  uint64_t worst = 0;
  size_t limitsMissed = 0;
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    T want = T(truth(x[i]));
    if (std::isnan(want)) {
      limitsMissed += !std::isnan(y[i]);
      continue;
    }
    worst = std::max(worst, ulpDistance(y[i], want));
    limitsMissed += (std::isinf(want) || want == 0) && (y[i] != want || std::signbit(y[i]) != std::signbit(want));
  }
  CHECK(limitsMissed == 0);
  return worst;
}

// Every `stride`th float of [-limit, limit] and `edges`, as worstUlp.
template <class Truth>
uint64_t worstF32Ulp(const char *formula, uint32_t limitBits, std::initializer_list<float> edges, Truth truth,
                     uint32_t stride = 97) {
  std::vector<float> x;
  for (uint32_t bits = 0; bits <= limitBits && bits < 0x7f800000u; bits += stride) {
    float v;
    std::memcpy(&v, &bits, sizeof v);
    x.push_back(v);
    x.push_back(-v);
  }
  x.insert(x.end(), edges);
  return worstUlp(formula, std::move(x), [&](float v) { return truth(double(v)); });
}
} // namespace

namespace {
/// Doubles for a function's domain: `count` uniform in [lo, hi], and as
/// many of each sign at log-uniform magnitudes 2^[emin, emax).
std::vector<double> doubles(double lo, double hi, int emin, int emax, size_t count = 40000, uint64_t seed = 5) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(lo, hi), mantissa(1, 2);
  std::uniform_int_distribution<int> exponent(emin, emax - 1);
  std::vector<double> x;
  for (size_t i = 0; i < count; ++i) {
    x.push_back(uniform(rng));
    double v = std::ldexp(mantissa(rng), exponent(rng));
    x.push_back(i % 2 ? -v : v);
  }
  for (double v : {0.0, -0.0, HUGE_VAL, -HUGE_VAL, 0x1.fffffffffffffp1023, -0x1.fffffffffffffp1023, 0x1p-1074, -0x1p-1074,
                   0x1p-1022, 1.0, -1.0, 0.5, -0.5, 2.0})
    x.push_back(v);
  return x;
}

using LongUnary = long double (*)(long double);
struct Unary {
  const char *name;
  LongUnary truth;
  double lo, hi;   // the dense stretch
  int emin, emax;  // magnitudes
  uint64_t f32Ulp, f64Ulp;
};

// The functions of one variable, their test domains and bounds.
const Unary kUnary[] = {
    {"exp", expl, -746, 710, -1074, 10, 1, 1},       {"expm1", expm1l, -40, 710, -1074, 10, 1, 2},
    {"log", logl, 0, 4, -1074, 1024, 1, 1},          {"log1p", log1pl, -1, 4, -1074, 1024, 1, 1},
    {"sin", sinl, -10, 10, -1074, 1024, 1, 1},       {"cos", cosl, -10, 10, -1074, 1024, 1, 1},
    {"tan", tanl, -10, 10, -1074, 1024, 1, 2},       {"tanh", tanhl, -20, 20, -1074, 6, 2, 2},
    {"sinh", sinhl, -20, 20, -1074, 10, 1, 2},       {"cosh", coshl, -20, 20, -1074, 10, 1, 2},
    {"asinh", asinhl, -20, 20, -1074, 1024, 1, 2},   {"acosh", acoshl, -2, 20, 0, 1024, 1, 2},
    {"atanh", atanhl, -1, 1, -1074, 1, 1, 2},        {"atan", atanl, -20, 20, -1074, 1024, 1, 2},
    {"asin", asinl, -1, 1, -1074, 1, 1, 3},          {"acos", acosl, -1, 1, -1074, 1, 1, 2},
    {"erf", erfl, -6, 6, -1074, 5, 1, 2},            {"erfc", erfcl, -6, 28, -1074, 5, 2, 2},
};
} // namespace

TEST_CASE("every function of the library is within its bound of the true value, floats and doubles") {
  REQUIRE_JIT();
  for (const Unary &f : kUnary) {
    std::string formula = std::string(f.name) + "(num)";
    CAPTURE(formula);
    uint64_t f32 = worstF32Ulp(formula.c_str(), 0x7f7fffffu, {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-30f, 0x1p-149f},
                               [&](double v) { return double(f.truth((long double)v)); }, 397);
    uint64_t f64 = worstUlp(formula.c_str(), doubles(f.lo, f.hi, f.emin, f.emax),
                            [&](double v) { return f.truth((long double)v); });
    MESSAGE(std::string(f.name) << ": f32 " << f32 << " ulp, f64 " << f64 << " ulp");
    CHECK(f32 <= f.f32Ulp);
    CHECK(f64 <= f.f64Ulp);
  }
}

namespace {
/// `formula` over `x` in one call, and again with each value repeated to
/// fill whole vectors of its own: the library takes a slow path for a
/// vector with a special lane (log's zeros and negatives, log1p's -1, exp's
/// |x| > 87, erfc's > 9, sinh's and cosh's far tails, asinh's and acosh's
/// log form past 2^28, sin's and cos's past 2^14 (floats) and 2^19), so the two runs give a value different
/// neighbours, and must give it the same bits.
template <class T> void expectNeighbourFree(const char *formula, std::vector<T> x) {
  CAPTURE(formula);
  auto layer = ActivationLayer::compile({{formula, {}}}, {.method = Method::CpuJit,
                                                          .dtype = std::is_same_v<T, float> ? DType::F32 : DType::F64});
  REQUIRE_OK_EXPECTED(layer);
  std::vector<T> mixed(x.size());
  REQUIRE_OK(layer->forward(x, mixed, x.size()));
  const size_t group = 64; // at least a step's lanes (two AVX-512 registers of floats: 32)
  std::vector<T> alone(x.size() * group), out(alone.size());
  for (size_t i = 0; i < alone.size(); ++i)
    alone[i] = x[i / group];
  REQUIRE_OK(layer->forward(alone, out, alone.size()));
  std::vector<T> got;
  for (size_t i = 0; i < x.size(); ++i)
    got.push_back(out[i * group]);
  expectSameBits(got, mixed, formula);
}
} // namespace

TEST_CASE("a value's result does not depend on its neighbours: the library's paths for special lanes") {
  REQUIRE_JIT();
  auto inputs = [](auto zero) {
    using T = decltype(zero);
    const T inf = std::numeric_limits<T>::infinity();
    std::vector<T> v = {T(0), T(-0.0), inf, -inf, T(-1), T(100), T(-100), T(1e30), T(-1e30), std::numeric_limits<T>::quiet_NaN(),
                        std::numeric_limits<T>::denorm_min(), std::numeric_limits<T>::min(), std::numeric_limits<T>::max()};
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> mantissa(1, 2);
    std::uniform_int_distribution<int> exponent(-30, 30);
    while (v.size() < 2000) // mostly ordinary values, a special one among every few
      v.push_back(T((v.size() % 3 ? 1 : -1) * std::ldexp(mantissa(rng), exponent(rng))));
    std::shuffle(v.begin(), v.end(), rng);
    return v;
  };
  for (const char *formula :
       {"log(num)", "log1p(num)", "exp(num)", "softplus", "erfc(num)", "gelu", "sinh(num)", "cosh(num)", "asinh(num)",
        "acosh(num)", "sin(num)", "cos(num)", "log(num)**2.5"}) {
    expectNeighbourFree(formula, inputs(0.0f));
    expectNeighbourFree(formula, inputs(0.0));
  }
}

namespace {
/// `formula` in y_pred and y_true as a loss's elements over every pair of
/// `a` and `b` in T, against `truth`: the worst distance in ulp, limits exact.
template <class T, class Truth>
uint64_t worstPairUlp(const char *formula, const std::vector<T> &a, const std::vector<T> &b, Truth truth) {
  auto loss = Loss::compile(formula, {}, {.method = Method::CpuJit, .dtype = std::is_same_v<T, float> ? DType::F32 : DType::F64});
  REQUIRE_OK_EXPECTED(loss);
  std::vector<T> x, y;
  for (T u : a)
    for (T v : b)
      x.push_back(u), y.push_back(v);
  std::vector<T> out(x.size());
  REQUIRE_OK(loss->forwardElements(x, y, out));
  uint64_t worst = 0;
  std::pair<T, T> worstAt;
  for (size_t i = 0; i < x.size(); ++i) {
    T want = T(truth(x[i], y[i]));
    CAPTURE(x[i]);
    CAPTURE(y[i]);
    if (std::isnan(want)) {
      CHECK(std::isnan(out[i]));
      continue;
    }
    if (std::isinf(want) || want == 0) {
      CHECK(out[i] == want);
      CHECK(std::signbit(out[i]) == std::signbit(want));
      continue;
    }
    if (uint64_t d = ulpDistance(out[i], want); d > worst) {
      worst = d;
      worstAt = {x[i], y[i]};
    }
  }
  MESSAGE(formula << ": worst " << worst << " ulp at (" << worstAt.first << ", " << worstAt.second << ")");
  return worst;
}

template <class T> std::vector<T> pairInputs(uint64_t seed) {
  const T inf = std::numeric_limits<T>::infinity();
  std::vector<T> v = {T(0), T(-0.0), inf, -inf, T(1), T(-1), T(2), T(-2), T(0.5), T(-0.5), T(3), T(-3),
                      std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::denorm_min(),
                      std::numeric_limits<T>::max()};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mantissa(1, 2);
  std::uniform_int_distribution<int> exponent(-12, 12);
  while (v.size() < 300)
    v.push_back(T((v.size() % 2 ? -1 : 1) * std::ldexp(mantissa(rng), exponent(rng))));
  return v;
}
} // namespace

TEST_CASE("atan2 and pow of every pair of signs, zeros and infinities are within their bounds") {
  REQUIRE_JIT();
  auto atan2Truth = [](auto y, auto x) { return atan2l((long double)y, (long double)x); };
  CHECK(worstPairUlp<float>("atan2(y_pred, y_true)", pairInputs<float>(1), pairInputs<float>(2), atan2Truth) <= 1);
  CHECK(worstPairUlp<double>("atan2(y_pred, y_true)", pairInputs<double>(1), pairInputs<double>(2), atan2Truth) <= 2);
  // C99's special cases: negative bases with integer and other exponents,
  // zeros, infinities, 1 and -1 with NaN and infinite exponents.
  std::vector<float> exponents = pairInputs<float>(3);
  for (float e : {0.25f, -0.25f, 5.0f, -5.0f, 4.0f, 7.5f, 127.0f, -149.0f, 0x1p25f, 0x1p25f + 2})
    exponents.push_back(e);
  CHECK(worstPairUlp<float>("y_pred**y_true", pairInputs<float>(4), exponents,
                            [](float x, float y) { return std::pow(double(x), double(y)); }) <= 1);
  std::vector<double> bases = pairInputs<double>(5), dexponents(exponents.begin(), exponents.end());
  for (double v : {1.0 + 0x1p-52, 1.0 - 0x1p-53, 0x1p-1074, 1e300, 0.999, 1.001, 2.718281828459045})
    bases.push_back(v);
  for (double e : {1e5, -1e5, 709.0, 1074.0, -1074.5, 0.5 + 0x1p-40})
    dexponents.push_back(e);
  CHECK(worstPairUlp<double>("y_pred**y_true", bases, dexponents,
                             [](double x, double y) { return powl((long double)x, (long double)y); }) <= 2);
}

TEST_CASE("integer powers of negative bases keep pow's values and signs") {
  REQUIRE_JIT();
  // f32 powers up to 16 are squarings in double, rounded once (Lowering);
  // u**3 and u**4 are products (Program::lower).
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-0.0f, 0.0f, -inf, inf, -1.0f, -1.5f, -3.25f, 2.5f, -1e-10f, -1e10f, -0.75f};
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> pick(-4, 4);
  while (x.size() < 200)
    x.push_back(pick(rng));
  for (int n : {5, -3, 6, -2, 7, 16, -16, 9, 3, 4}) {
    CAPTURE(n);
    std::string formula = "num**(" + std::to_string(n) + ")";
    auto layer = ActivationLayer::compile({{formula, {}}}, {.method = Method::CpuJit});
    REQUIRE_OK_EXPECTED(layer);
    std::vector<float> y(x.size());
    REQUIRE_OK(layer->forward(x, y, x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      CAPTURE(x[i]);
      float want = float(std::pow(double(x[i]), n));
      CHECK(std::signbit(y[i]) == std::signbit(want));
      if (std::isinf(want) || want == 0)
        CHECK(y[i] == want);
      else
        CHECK(ulpDistance(y[i], want) <= (n == 4 ? 2u : 1u)); // (u*u)**2: two roundings
    }
  }
  // f64 powers up to 16 by squaring in double-double (InlineMath.cpp):
  // within 1 ulp of x87's powl, overflow, underflow, zeros and infinities
  // with C99's signs; past 16, pow(|u|, n) with u's sign put back.
  std::vector<double> xd(x.begin(), x.end());
  std::uniform_real_distribution<double> mantissa(1, 2);
  std::uniform_int_distribution<int> exponent(-80, 80);
  for (int i = 0; i < 20000; ++i) // every magnitude whose 16th power is finite, and past it
    xd.push_back((i % 2 ? -1 : 1) * std::ldexp(mantissa(rng), exponent(rng)));
  for (double v : {1e20, -1e20, 1e-20, -1e-20, 1e80, -1e80, 1e-80, 1e300, 1e-300, 0x1.fffffffffffffp1023,
                   std::numeric_limits<double>::denorm_min(), 1.0 + 0x1p-52, 1.0 - 0x1p-53})
    xd.push_back(v);
  xd.push_back(std::numeric_limits<double>::quiet_NaN());
  for (int n : {5, -3, 6, 7, 2, -2, 16, -16, 11, -9, 17}) {
    CAPTURE(n);
    auto layer = ActivationLayer::compile({{"num**(" + std::to_string(n) + ")", {}}},
                                          {.method = Method::CpuJit, .dtype = DType::F64});
    REQUIRE_OK_EXPECTED(layer);
    std::vector<double> y(xd.size());
    REQUIRE_OK(layer->forward(xd, y, xd.size()));
    for (size_t i = 0; i < xd.size(); ++i) {
      CAPTURE(xd[i]);
      double want = double(std::pow((long double)xd[i], n));
      if (std::isnan(want)) {
        CHECK(std::isnan(y[i]));
        continue;
      }
      CHECK(std::signbit(y[i]) == std::signbit(want));
      CHECK((std::isinf(want) || want == 0 ? y[i] == want : ulpDistance(y[i], want) <= (n == 17 ? 2u : 1u)));
    }
  }
}