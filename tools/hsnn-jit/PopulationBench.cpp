//===- tools/hsnn-jit/PopulationBench.cpp - Scoring many new formulas ------===//
//
// The population workload: what a formula search waits for each
// generation. N new random formulas (1-64 nodes: + - * / alone, or with
// exp/log/sin/cos, numbers written in), one variable, scored by MSE against
// a target: prepare (Population::create), score (fitness), both, and the
// constants' gradients, beside the same formulas in a cpu_jit layer (one
// forward over the input tiled to N x rows: the compiled speed) and a
// STREAM-like copy measured in the same row. With --device cuda the
// populations run on the GPU, beside a device-to-device copy. Node evaluations per second =
// the formulas' sizes summed x rows / time.
//
//===----------------------------------------------------------------------===//
#include "PopulationBench.h"
#include "RandomFormulas.h"

#include "hsnn/Backend.h"
#include "hsnn/Population.h"
#include "hsnn/Runtime.h"

#include <cstdlib>
#include <cstring>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace hsnn::cli {
namespace {

using Clock = BenchClock;

double copyGBs(int reps) {
  constexpr size_t kBytes = size_t(64) << 20;
  std::vector<char> a(kBytes, 1), b(kBytes, 0);
  double ms = medianMs(reps, [&] {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, kBytes, 1 << 20), [&](const tbb::blocked_range<size_t> &r) {
      std::memcpy(b.data() + r.begin(), a.data() + r.begin(), r.end() - r.begin());
    });
  });
  return 2.0 * double(kBytes) / (ms * 1e6);
}

// A device-to-device copy of 64 MB on `device` ("cuda:N"): the GPU rows'
// bandwidth reference.
Expected<double> deviceCopyGBs(const std::string &device, int reps) {
  constexpr size_t kCount = size_t(16) << 20;
  auto backend = getBackend(device);
  if (!backend)
    return backend.error();
  auto a = (*backend)->allocate(kCount, DType::F32), b = (*backend)->allocate(kCount, DType::F32);
  for (auto *m : {&a, &b})
    if (!*m)
      return m->error();
  Error failed;
  double ms = medianMs(reps, [&] {
    if (Error e = (*backend)->copy(*b, *a, kCount * 4); e && !failed)
      failed = e;
    if (Error e = (*backend)->synchronize(); e && !failed)
      failed = e;
  });
  if (failed)
    return failed;
  return 2.0 * double(kCount * 4) / (ms * 1e6);
}

template <class T>
Error runRow(const BenchOptions &o, bool math, size_t n, size_t rows, bool withLayer, std::vector<PopulationRow> &out) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  std::mt19937_64 rng(20261202 + n + rows + math);
  std::vector<std::string> formulas;
  double nodes = 0;
  for (size_t i = 0; i < n; ++i) {
    size_t size = std::uniform_int_distribution<size_t>(1, 64)(rng);
    formulas.push_back(randomTree(size, math, rng));
    nodes += double(size);
  }
  std::vector<T> x = randomArray<T>(rows, 0.1, 2.0, 1), y = randomArray<T>(rows, -1, 1, 2);
  PopulationData<T> data{.x = x, .rows = rows, .y = y};
  std::vector<double> scores(n);
  PopulationRow r{math ? "+-*/ exp log sin cos" : "+-*/", dt == DType::F32 ? "f32" : "f64", n, rows, nodes};
  // New formulas each time: every run prepares a population not seen before.
  auto fresh = [&](int k) {
    std::vector<std::string> f = formulas;
    for (std::string &s : f)
      s = fmt::format("{} + {}", s, k); // a different tape, the same work
    return f;
  };
  bool gpu = o.device != "cpu";
  PopulationOptions po{.variables = {"num"}, .dtype = dt};
  if (gpu) {
    po.method = Method::Cuda;
    po.gpuId = o.device == "cuda" ? 0 : std::atoi(o.device.c_str() + 5);
  }
  {
    auto warm = Population::create(fresh(-1), po); // op kernels loaded, pages touched
    if (!warm)
      return warm.error();
    if (Error e = warm->fitness(data, scores))
      return e;
  }
  std::vector<double> prep, first;
  for (int k = 0; k < std::max(3, o.reps / 2); ++k) {
    auto f = fresh(k);
    auto t0 = Clock::now();
    auto pop = Population::create(f, po);
    if (!pop)
      return pop.error();
    double p = msSince(t0);
    if (Error e = pop->fitness(data, scores))
      return e;
    prep.push_back(p);
    first.push_back(msSince(t0));
  }
  std::sort(prep.begin(), prep.end());
  std::sort(first.begin(), first.end());
  r.prepareMs = prep[prep.size() / 2];
  r.firstMs = first[first.size() / 2];
  auto pop = Population::create(formulas, po);
  if (!pop)
    return pop.error();
  if (!pop->errors().empty())
    return Error(ErrorCode::Internal, "a random formula did not parse: " + pop->errors()[0].render());
  Error failed;
  r.scoreMs = medianMs(o.reps, [&] {
    if (Error e = pop->fitness(data, scores))
      failed = std::move(e);
  });
  if (failed)
    return failed;
  if (gpu) { // gradients run on the CPU; the bandwidth reference is the device's
    auto copy = deviceCopyGBs(o.device, o.reps);
    if (!copy)
      return copy.error();
    r.copyGBs = *copy;
    out.push_back(r);
    return Error::success();
  }
  PopulationOptions fitted = po;
  fitted.literalsAsConstants = true;
  auto withConstants = Population::create(formulas, fitted);
  if (!withConstants)
    return withConstants.error();
  std::vector<double> grads(withConstants->allConstants().size());
  r.gradientMs = medianMs(std::max(1, o.reps / 2), [&] {
    if (Error e = withConstants->constantGradients(data, scores, grads))
      failed = std::move(e);
  });
  if (failed)
    return failed;
  if (withLayer) {
    std::vector<NodeSpec> specs;
    for (const std::string &f : formulas)
      specs.push_back({f, {}});
    std::vector<T> z(n * rows), a(z.size());
    for (size_t i = 0; i < n; ++i)
      std::copy(x.begin(), x.end(), z.begin() + long(i * rows));
    for (Method m : {Method::CpuJit, Method::CpuInterp}) {
      auto t0 = Clock::now();
      auto layer = ActivationLayer::compile(specs, {.method = m, .dtype = dt});
      if (!layer)
        return layer.error();
      double compileMs = msSince(t0);
      double ms = medianMs(o.reps, [&] {
        if (Error e = layer->forward(z, a, rows))
          failed = std::move(e);
      });
      if (failed)
        return failed;
      (m == Method::CpuJit ? r.layerMs : r.interpMs) = ms;
      if (m == Method::CpuJit)
        r.layerCompileMs = compileMs;
    }
  }
  r.copyGBs = copyGBs(o.reps);
  out.push_back(r);
  return Error::success();
}

} // namespace

Error runPopulationBench(const BenchOptions &o, std::vector<PopulationRow> &out) {
  if (o.device != "cpu") {
    // Each row is one launch a call: no N x rows arrays, so the largest
    // rows (10^4 formulas x 10^5 rows) are what a GPU is for.
    for (DType dt : o.dtypes)
      for (bool math : {false, true})
        for (size_t n : {size_t(1000), size_t(10000)})
          for (size_t rows : {size_t(1000), size_t(100000)}) {
            Error e = dt == DType::F32 ? runRow<float>(o, math, n, rows, false, out)
                                       : runRow<double>(o, math, n, rows, false, out);
            if (e)
              return e;
          }
    return Error::success();
  }
  bool full = o.reps >= 10;
  std::vector<size_t> rowCounts = full ? std::vector<size_t>{100, 1000, 10000, 100000} : std::vector<size_t>{100, 1000};
  for (DType dt : o.dtypes)
    for (bool math : {false, true})
      for (size_t n : full ? std::vector<size_t>{1000, 10000} : std::vector<size_t>{1000})
        for (size_t rows : rowCounts) {
          if (n * rows > size_t(1e8)) // 10^4 x 10^5: 4 GB of layer arrays; the population needs none
            continue;
          // The compiled layer beside the 1000-formula rows up to 10^4 rows.
          bool layer = n == 1000 && rows <= 10000;
          Error e = dt == DType::F32 ? runRow<float>(o, math, n, rows, layer, out)
                                     : runRow<double>(o, math, n, rows, layer, out);
          if (e)
            return e;
        }
  return Error::success();
}

void printPopulationBench(const std::vector<PopulationRow> &rows) {
  fmt::print("populations of new random formulas (1-64 nodes), MSE fitness; G/s = node evaluations per second\n");
  fmt::print("{:<21} {:>4} {:>6} {:>7} {:>9} {:>9} {:>9} {:>7} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>7}\n", "ops",
             "type", "N", "rows", "prepare", "score", "first", "first/", "score", "grads", "cpu_jit", "score/", "interp",
             "jit build", "copy");
  fmt::print("{:<21} {:>4} {:>6} {:>7} {:>9} {:>9} {:>9} {:>7} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>7}\n", "", "", "",
             "", "ms", "ms", "ms", "score", "G/s", "G/s", "G/s", "cpu_jit", "G/s", "s", "GB/s");
  for (const PopulationRow &r : rows) {
    double evals = r.nodes * double(r.rows);
    auto gs = [&](double ms) { return ms > 0 ? fmt::format("{:.2f}", evals / (ms * 1e6)) : std::string("-"); };
    fmt::print("{:<21} {:>4} {:>6} {:>7} {:>9.2f} {:>9.2f} {:>9.2f} {:>7.2f} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>7.1f}\n",
               r.ops, r.dtype, r.formulas, r.rows, r.prepareMs, r.scoreMs, r.firstMs, r.firstMs / r.scoreMs,
               gs(r.scoreMs), gs(r.gradientMs), gs(r.layerMs),
               r.layerMs > 0 ? fmt::format("{:.2f}", r.layerMs / r.scoreMs) : std::string("-"), gs(r.interpMs),
               r.layerMs > 0 ? fmt::format("{:.1f}", r.layerCompileMs / 1000) : std::string("-"), r.copyGBs);
  }
}

} // namespace hsnn::cli
