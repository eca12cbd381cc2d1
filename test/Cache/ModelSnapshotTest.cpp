//===- test/Cache/ModelSnapshotTest.cpp - Front-end results from the cache ===//
//
// A second compile of the same nodes reads the front end's result from the
// disk cache (lib/Runtime/ModelCache.cpp): the same tapes, printed
// formulas, constants, warnings and bits as the front end's, keyed by
// everything the front end reads; damaged snapshot bytes are refused.
//===----------------------------------------------------------------------===//
#include "CacheTestUtil.h"
#include "Model/CompiledModel.h"
#include "Program/Interpreter.h"

#include <cmath>
#include <map>
#include <cstring>
#include <random>

using namespace hsnn;
using namespace hsnn::test;

namespace {

// Constants given and defaulted, a Piecewise, a formula that ignores its
// input and an unused constant (the last two warn).
const std::vector<NodeSpec> kMixed = {
    {"gelu", {}},
    {"sin(num)*alpha + beta", {{"alpha", 2}, {"beta", -0.5}}},
    {"Piecewise((num, num > 0), (slope*num, True))", {{"slope", 0.1}}},
    {"elu", {}},
    {"leaky_relu", {{"negative_slope", 0.02}}},
    {"0.25", {}},
    {"tanh(num)", {{"unused", 3}}},
    {"sin(num)*alpha + beta", {{"alpha", -1}, {"beta", 0.5}}},
};

struct Outputs {
  std::vector<double> a, d, fa, fd;
};

Outputs runAll(const ActivationLayer &layer) {
  const size_t batch = 37, n = layer.numNodes();
  std::vector<double> z(n * batch), err(n * batch);
  for (size_t i = 0; i < z.size(); ++i)
    z[i] = double(i % 23) * 0.37 - 4, err[i] = double(i % 7) - 3;
  Outputs o{std::vector<double>(z.size()), std::vector<double>(z.size()), std::vector<double>(z.size()),
            std::vector<double>(z.size())};
  REQUIRE_FALSE(static_cast<bool>(layer.forward(z, o.a, batch)));
  REQUIRE_FALSE(static_cast<bool>(layer.backward(z, err, o.d, batch)));
  REQUIRE_FALSE(static_cast<bool>(layer.fused(z, o.fa, o.fd, batch)));
  return o;
}

void expectSameLayer(const ActivationLayer &a, const ActivationLayer &b) {
  REQUIRE(a.numNodes() == b.numNodes());
  CHECK(a.numDistinctFormulas() == b.numDistinctFormulas());
  for (size_t n = 0; n < a.numNodes(); ++n) {
    CHECK(a.formula(n) == b.formula(n));
    CHECK(a.derivative(n) == b.derivative(n));
    CHECK(a.constantNames(n) == b.constantNames(n));
  }
  CHECK(a.params() == b.params());
  CHECK(std::equal(a.offsets().begin(), a.offsets().end(), b.offsets().begin(), b.offsets().end()));
  Outputs x = runAll(a), y = runAll(b);
  CHECK(std::memcmp(x.a.data(), y.a.data(), x.a.size() * 8) == 0);
  CHECK(std::memcmp(x.d.data(), y.d.data(), x.d.size() * 8) == 0);
  CHECK(std::memcmp(x.fa.data(), y.fa.data(), x.fa.size() * 8) == 0);
  CHECK(std::memcmp(x.fd.data(), y.fd.data(), x.fd.size() * 8) == 0);
}

Expected<ActivationLayer> compileWith(Method m, const std::vector<NodeSpec> &nodes = kMixed, LayerOptions o = {}) {
  o.method = m;
  o.dtype = DType::F64;
  return ActivationLayer::compile(nodes, o);
}

} // namespace

TEST_CASE("a second compile reads the front end's result from the cache: same formulas, constants, warnings, bits") {
  std::vector<Method> methods{Method::CpuInterp};
  if (runtimeInfo().cpuJitEnabled)
    methods.push_back(Method::CpuJit);
  for (Method m : methods) {
    CAPTURE(to_string(m));
    TempCache cache;
    auto first = compileWith(m);
    REQUIRE(first);
    CHECK_FALSE(first->compileInfo().modelFromCache);
    std::vector<std::string> warned = cache.warnings;
    CHECK(warned.size() == 2); // node 5 ignores its input, node 6 has an unused constant
    cache.warnings.clear();
    auto second = compileWith(m);
    REQUIRE(second);
    CHECK(second->compileInfo().modelFromCache);
    CHECK(second->compileInfo().parseMs == 0);
    CHECK(second->method() == first->method());
    CHECK(cache.warnings == warned);
    expectSameLayer(*first, *second);
    // Constants are checked and set the same way.
    CHECK(static_cast<bool>(second->setConstant(1, "alpha", std::nan(""))));
    REQUIRE_FALSE(static_cast<bool>(first->setConstant(1, "alpha", 0.75)));
    REQUIRE_FALSE(static_cast<bool>(second->setConstant(1, "alpha", 0.75)));
    expectSameLayer(*first, *second);
  }
}

TEST_CASE("a loss reads its front end's result from the cache too, domains included") {
  TempCache cache;
  auto compile = [](std::string_view f, std::map<std::string, double> c) {
    return Loss::compile(f, c, {.method = Method::CpuInterp, .dtype = DType::F64});
  };
  auto first = compile("huber", {{"delta", 0.7}});
  REQUIRE(first);
  CHECK_FALSE(first->compileInfo().modelFromCache);
  auto second = compile("huber", {{"delta", 0.7}});
  REQUIRE(second);
  CHECK(second->compileInfo().modelFromCache);
  CHECK(second->formula() == first->formula());
  CHECK(second->derivative() == first->derivative());
  CHECK(second->constantNames() == first->constantNames());
  std::vector<double> yp(101), yt(101), g1(101), g2(101);
  for (size_t i = 0; i < yp.size(); ++i)
    yp[i] = double(i) * 0.05 - 2.5, yt[i] = double(i % 9) * 0.3 - 1;
  auto l1 = first->forward(yp, yt), l2 = second->forward(yp, yt);
  REQUIRE(l1);
  REQUIRE(l2);
  CHECK(std::memcmp(&*l1, &*l2, 8) == 0);
  REQUIRE_FALSE(static_cast<bool>(first->gradient(yp, yt, g1)));
  REQUIRE_FALSE(static_cast<bool>(second->gradient(yp, yt, g2)));
  CHECK(std::memcmp(g1.data(), g2.data(), g1.size() * 8) == 0);
  // huber's delta must stay > 0: the domain came back with the snapshot.
  Error e = second->setConstant("delta", -1);
  REQUIRE(static_cast<bool>(e));
  CHECK(e.message() == first->setConstant("delta", -1).message());
  // An activation layer of the same text is another key (and another mode).
  auto layer = ActivationLayer::compile({{"tanh", {}}}, {.method = Method::CpuInterp});
  REQUIRE(layer);
  auto tanhLoss = compile("(y_pred - y_true)**2", {});
  REQUIRE(tanhLoss);
  CHECK_FALSE(tanhLoss->compileInfo().modelFromCache);
}

TEST_CASE("a snapshot answers only the same nodes and options") {
  TempCache cache;
  REQUIRE(compileWith(Method::CpuInterp));
  auto changed = [&](const std::vector<NodeSpec> &nodes, LayerOptions o = {}) {
    auto l = compileWith(Method::CpuInterp, nodes, o);
    REQUIRE(l);
    return !l->compileInfo().modelFromCache;
  };
  std::vector<NodeSpec> value = kMixed, text = kMixed, fewer(kMixed.begin(), kMixed.end() - 1);
  value[1].constants["alpha"] = 2.5;
  text[0].formula = "gelu(num)";
  CHECK(changed(value));
  CHECK(changed(text));
  CHECK(changed(fewer));
  CHECK(changed(kMixed, {.layout = Layout::BatchMajor}));
  LayerOptions f32;
  auto l = ActivationLayer::compile(kMixed, {.method = Method::CpuInterp, .dtype = DType::F32});
  REQUIRE(l);
  CHECK_FALSE(l->compileInfo().modelFromCache);
  {
    RuntimeFlags flags = runtimeFlags();
    flags.strict = true;
    ScopedRuntimeFlags strict(RuntimeFlagsOverride::from(flags));
    // Strict mode refuses the unused constant: the snapshot does not hide it.
    CHECK_FALSE(compileWith(Method::CpuInterp));
  }
  auto again = compileWith(Method::CpuInterp);
  REQUIRE(again);
  CHECK(again->compileInfo().modelFromCache);
}

TEST_CASE("damaged snapshot bytes are refused or read back well-formed, never out of range") {
  std::vector<std::string> warnings;
  auto model = detail::CompiledModel::activation(kMixed, {DType::F64, Layout::NodesMajor, false, false, {}}, warnings);
  REQUIRE(model);
  const std::vector<char> bytes = (*model)->snapshot(warnings);
  const detail::ModelOptions options{DType::F64, Layout::NodesMajor, false, false, {}};
  std::vector<std::string> said;
  REQUIRE(detail::CompiledModel::fromSnapshot(bytes, options, kMixed.size(), said));
  CHECK(said == warnings);
  CHECK_FALSE(detail::CompiledModel::fromSnapshot(bytes, options, kMixed.size() + 1, said));
  // Every truncation and a trailing byte.
  for (size_t n = 0; n < bytes.size(); ++n)
    CHECK_FALSE(detail::CompiledModel::fromSnapshot(std::span(bytes.data(), n), options, kMixed.size(), said));
  std::vector<char> longer = bytes;
  longer.push_back(0);
  CHECK_FALSE(detail::CompiledModel::fromSnapshot(longer, options, kMixed.size(), said));
  // Changed bytes (under the sanitizers, an out-of-range read would stop
  // here): a model that still reads back must run through the interpreter.
  std::mt19937 rng(5);
  size_t accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<char> bad = bytes;
    for (int k = 0; k < 1 + trial % 3; ++k)
      bad[rng() % bad.size()] ^= char(1 << (rng() % 8));
    auto m = detail::CompiledModel::fromSnapshot(bad, options, kMixed.size(), said);
    if (!m)
      continue;
    ++accepted;
    std::vector<double> z(8, 0.5), params(64, 0.25);
    const double *vars[3] = {z.data(), nullptr, nullptr};
    for (const detail::FormulaGroup &g : m->groups)
      for (const detail::Program &p : g.programs) {
        std::vector<std::vector<double>> out(p.outputs.size(), std::vector<double>(z.size()));
        std::vector<double *> outs;
        for (auto &o : out)
          outs.push_back(o.data());
        if (g.formula.constants.size() <= params.size())
          detail::runBlock<double>(p, vars, params.data(), outs.data(), z.size());
      }
  }
  MESSAGE(accepted << " of 3000 damaged snapshots still read back (numbers and names changed)");
}
