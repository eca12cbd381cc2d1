//===- tools/hsnn-jit/BenchCommon.h - What the CPU and GPU benches share -*- C++ -*-===//
#pragma once

#include "hsnn/Layer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace hsnn::cli {

inline constexpr size_t kBenchNodes = 256, kBenchBatch = 65536, kBenchElements = kBenchNodes * kBenchBatch;
inline const char *const kW1Formulas[8] = {"relu", "sigmoid", "tanh", "gelu", "silu", "softplus", "sin(num)", "0.5*num+0.1"};

using BenchClock = std::chrono::steady_clock;

inline double msSince(BenchClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(BenchClock::now() - t0).count();
}

/// The median of `reps` timed runs after one warm-up run.
inline double medianMs(int reps, const std::function<void()> &fn) {
  fn(); // warm-up: page faults, caches, thread pool, lazy module loading
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = BenchClock::now();
    fn();
    t.push_back(msSince(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct BenchResult {
  std::string workload, variant, dtype;
  double ms, gbps, streamMs, xLimit;
};

struct BenchOptions {
  std::string workload = "all";
  std::vector<DType> dtypes = {DType::F32};
  Method method = Method::Auto;
  std::string device = "cpu"; ///< "cpu", "cuda" or "cuda:N"
  unsigned threads = 0;
  int reps = 10;
  bool json = false;
};

/// GPU compile figures for the W1 layer.
struct GpuCompileResult {
  double ptxMs = 0, coldLoadMs = 0, coldMs = 0, cacheHitMs = 0, cacheHitLoadMs = 0;
  bool ran = false;
};

inline std::vector<NodeSpec> w1Nodes() {
  std::vector<NodeSpec> nodes;
  for (size_t j = 0; j < kBenchNodes; ++j)
    nodes.push_back({kW1Formulas[j % 8], {}});
  return nodes;
}

template <class T> std::vector<T> randomArray(size_t n, double lo, double hi, uint64_t seed) {
  std::vector<T> v(n);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> pick(lo, hi);
  for (T &x : v)
    x = T(pick(rng));
  return v;
}

/// Compares every 4099th element with the interpreter's.
template <class T> Error checkAgainst(const std::vector<T> &got, const std::vector<T> &want, std::string_view what) {
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  for (size_t i = 0; i < got.size(); i += 4099) {
    double g = double(got[i]), w = double(want[i]);
    if (!(std::fabs(g - w) <= tol * std::max(1.0, std::fabs(w))) && !(std::isnan(g) && std::isnan(w)))
      return Error(ErrorCode::Internal, fmt::format("{}: element {} is {}, the interpreter says {}", what, i, g, w));
  }
  return Error::success();
}

/// W1-W4 on device memory of a GPU backend, each next to a device-to-device
/// copy of the same bytes; results are appended to `out`.
Error runGpuBench(const BenchOptions &o, DType dtype, std::vector<BenchResult> &out);
/// Cold PTX generation and load of the W1 layer, and a cache hit.
Error runGpuCompileBench(const BenchOptions &o, GpuCompileResult &r);

} // namespace hsnn::cli
