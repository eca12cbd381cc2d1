//===- test/CPU/IncrementalCompileTest.cpp - Recompile what changed -------===//
//
// A large layer's kernels are cut into functions by their formulas
// (Model/KernelRequests.h), each in an object of its own: a layer with one
// formula changed compiles the functions around that formula and finds the
// others in the cache, and runs as a layer compiled from nothing does.
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "Cache/CacheTestUtil.h"
#include "RequireJit.h"

#include <fmt/format.h>

using namespace hsnn;
using namespace hsnn::test;

namespace {

std::vector<NodeSpec> distinctFormulas(size_t n) {
  std::vector<NodeSpec> nodes;
  for (size_t i = 0; i < n; ++i)
    nodes.push_back({fmt::format("sin(num*{}) + {}*num*num", 0.5 + 0.01 * double(i), 1 + i), {}});
  return nodes;
}

std::vector<float> run(const ActivationLayer &layer, size_t batch) {
  std::vector<float> z(layer.numNodes() * batch), a(z.size());
  for (size_t i = 0; i < z.size(); ++i)
    z[i] = float(i % 17) * 0.25f - 2;
  REQUIRE_OK(layer.forward(z, a, batch));
  return a;
}

} // namespace

TEST_CASE("a large layer with one formula changed compiles the objects around it and finds the rest") {
  REQUIRE_JIT();
  TempCache cache;
  std::vector<NodeSpec> nodes = distinctFormulas(600);
  auto first = ActivationLayer::compile(nodes, {.method = Method::CpuJit});
  REQUIRE_OK_EXPECTED(first);
  const CompileInfo &cold = first->compileInfo();
  const size_t objects = cold.objectsCompiled;
  CHECK(cold.objectsFromCache == 0);
  CHECK(objects >= 16); // forward and backward, at least 8 functions each
  flushKernelCache();

  auto again = ActivationLayer::compile(nodes, {.method = Method::CpuJit});
  REQUIRE_OK_EXPECTED(again);
  CHECK(again->compileInfo().objectsCompiled == 0);

  for (size_t changed : {size_t(0), size_t(301), size_t(599)}) {
    CAPTURE(changed);
    std::vector<NodeSpec> edited = nodes;
    edited[changed].formula = "cos(num*0.125) - exp(num*0.0625)";
    auto layer = ActivationLayer::compile(edited, {.method = Method::CpuJit});
    REQUIRE_OK_EXPECTED(layer);
    const CompileInfo &info = layer->compileInfo();
    // The function holding the formula, and the next where the cut after it
    // moved: at most two a kind.
    CHECK(info.objectsCompiled >= 2);
    CHECK(info.objectsCompiled <= 4);
    CHECK(info.objectsCompiled + info.objectsFromCache >= objects - 2);
    RuntimeFlags off = runtimeFlags();
    off.useKernelCache = false;
    ScopedRuntimeFlags noCache(RuntimeFlagsOverride::from(off));
    auto fresh = ActivationLayer::compile(edited, {.method = Method::CpuJit});
    REQUIRE_OK_EXPECTED(fresh);
    CHECK(fresh->compileInfo().objectsCompiled == info.objectsCompiled + info.objectsFromCache);
    expectSameBits(run(*layer, 37), run(*fresh, 37), "recompiled in part vs from nothing");
  }
}
