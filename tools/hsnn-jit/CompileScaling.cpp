//===- tools/hsnn-jit/CompileScaling.cpp - How compile time grows -----------===//
//
// The compile workload's table of layers of distinct formulas, the kind a
// search over formulas makes: math calls per formula (0, 1, 2, 4, 8) at a
// fixed count, random formulas with exp/log/sin/cos at growing counts, and
// one formula changed in a compiled layer of 1000. Each row times what a
// user waits for: compile to a running forward pass (cpu_jit, cold cache)
// beside the interpreter's preparation and the same forward pass.
//===----------------------------------------------------------------------===//
#include "CompileScaling.h"
#include "RandomFormulas.h"

#include "hsnn/Cache.h"
#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <random>
#include <unistd.h>

namespace hsnn::cli {
namespace {

using Clock = BenchClock;

std::vector<NodeSpec> specs(const std::vector<std::string> &formulas) {
  std::vector<NodeSpec> nodes;
  for (const std::string &f : formulas)
    nodes.push_back({f, {}});
  return nodes;
}

// Compile and one forward pass over `rows` (nodes-major), in ms; the
// compile info of the JIT's layer.
Expected<double> timeLayer(const std::vector<NodeSpec> &nodes, Method method, size_t rows, CompileInfo *info) {
  std::vector<float> z(nodes.size() * rows, 0.5f), a(z.size());
  auto t0 = Clock::now();
  auto layer = ActivationLayer::compile(nodes, {.method = method});
  if (!layer)
    return layer.error();
  if (Error e = layer->forward(z, a, rows))
    return e;
  double ms = msSince(t0);
  if (layer->method() != method)
    return Error(ErrorCode::Unsupported, fmt::format("the compile table needs {}", to_string(method)));
  if (info)
    *info = layer->compileInfo();
  return ms;
}

} // namespace

Error runCompileScaling(const BenchOptions &o, std::vector<CompileScalingRow> &rows) {
  constexpr size_t kRows = 1000;
  std::mt19937_64 rng(20261202);
  RuntimeFlags f = runtimeFlags();
  f.useKernelCache = false;
  ScopedRuntimeFlags noCache(RuntimeFlagsOverride::from(f));
  auto add = [&](std::string what, const std::vector<std::string> &formulas) -> Error {
    CompileScalingRow r{std::move(what), formulas.size()};
    auto nodes = specs(formulas);
    CompileInfo info;
    auto jit = timeLayer(nodes, Method::CpuJit, kRows, &info);
    if (!jit)
      return jit.error();
    auto interp = timeLayer(nodes, Method::CpuInterp, kRows, nullptr);
    if (!interp)
      return interp.error();
    r.jitMs = *jit;
    r.interpMs = *interp;
    r.codegenMs = info.codegenMs;
    r.objectBytes = info.objectBytes;
    rows.push_back(std::move(r));
    return Error::success();
  };
  const size_t count = o.reps >= 10 ? 100 : 20;
  for (int calls : {0, 1, 2, 4, 8}) {
    std::vector<std::string> fs;
    for (size_t i = 0; i < count; ++i)
      fs.push_back(mathCallFormula(calls, rng));
    if (Error e = add(fmt::format("{} math call{} a formula", calls, calls == 1 ? "" : "s"), fs))
      return e;
  }
  for (size_t n : {size_t(10), size_t(100), size_t(400), size_t(1000)}) {
    std::vector<std::string> fs;
    for (size_t i = 0; i < n; ++i)
      fs.push_back(randomTree(16, true, rng));
    if (Error e = add("random, 16 nodes, exp/log/sin/cos", fs))
      return e;
  }
  std::vector<std::string> big;
  for (size_t i = 0; i < 1000; ++i)
    big.push_back(randomTree(std::uniform_int_distribution<size_t>(1, 64)(rng), true, rng));
  if (Error e = add("random, 1-64 nodes, exp/log/sin/cos", big))
    return e;

  // One formula changed in a compiled layer of 1000: with the cache on, the
  // parts whose formulas did not change are hits.
  char tmpl[] = "/tmp/hsnn-bench-cache-XXXXXX";
  if (!::mkdtemp(tmpl))
    return Error(ErrorCode::Internal, "cannot create a temporary cache directory");
  f.useKernelCache = true;
  f.cacheDir = std::string(tmpl) + "/cache";
  Error failed;
  {
    ScopedRuntimeFlags cached(RuntimeFlagsOverride::from(f));
    auto nodes = specs(big);
    if (auto first = timeLayer(nodes, Method::CpuJit, kRows, nullptr); !first)
      failed = first.error();
    nodes[nodes.size() / 2].formula = randomTree(32, true, rng);
    CompileInfo info;
    auto again = failed ? Expected<double>(Error(ErrorCode::Internal, "")) : timeLayer(nodes, Method::CpuJit, kRows, &info);
    if (!failed && !again)
      failed = again.error();
    if (!failed)
      rows.push_back({"1 of 1000 formulas changed", 1000, *again, 0, info.codegenMs, info.objectBytes});
    flushKernelCache();
  }
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  return failed;
}

void printCompileScaling(const std::vector<CompileScalingRow> &rows) {
  fmt::print("compile time by formulas (f32, cold cache; compile + one forward over 1000 rows, ms):\n");
  fmt::print("{:<38} {:>9} {:>10} {:>10} {:>11} {:>12} {:>11}\n", "layer", "formulas", "cpu_jit", "per formula",
             "codegen", "object KiB", "cpu_interp");
  for (const CompileScalingRow &r : rows)
    fmt::print("{:<38} {:>9} {:>10.1f} {:>10.2f} {:>11.1f} {:>12.0f} {:>11}\n", r.what, r.formulas, r.jitMs,
               r.jitMs / double(r.formulas), r.codegenMs, double(r.objectBytes) / 1024,
               r.interpMs > 0 ? fmt::format("{:.1f}", r.interpMs) : std::string("-"));
}

} // namespace hsnn::cli
