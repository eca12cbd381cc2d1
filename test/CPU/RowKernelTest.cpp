//===- test/CPU/RowKernelTest.cpp - Batch-major layers run in place ------===//
//
// Batch-major layers whose formulas repeat a pattern run through row
// kernels (lib/Program/RowPlan.h, lib/CodeGen/RowKernel.cpp): the plan on
// its own, then compiled layers of each shape (runs, periods that are and
// are not powers of two, partial last blocks, per-node constants) against
// the nodes-major kernels bit for bit, for every kind and several batches.
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "AotLoad.h"
#include "RequireJit.h"

#include "Program/RowPlan.h"
#include "CPU/RowCalibration.h"
#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <fmt/format.h>

using namespace hsnn;
using namespace hsnn::test;
using detail::planRowSegments;
using detail::RowSegment;

namespace {

std::vector<uint32_t> repeat(std::vector<uint32_t> pattern, size_t times) {
  std::vector<uint32_t> out;
  for (size_t t = 0; t < times; ++t)
    out.insert(out.end(), pattern.begin(), pattern.end());
  return out;
}

std::string show(const std::optional<std::vector<RowSegment>> &plan) {
  if (!plan)
    return "none";
  std::string s;
  for (const RowSegment &g : *plan)
    s += fmt::format("[{} x{} {}]", g.first, g.periods, fmt::join(g.slots, ","));
  return s;
}

} // namespace

TEST_CASE("row plan: repeating patterns become segments, scattered formulas none") {
  CHECK(show(planRowSegments(repeat({0, 1, 2, 3, 4, 5, 6, 7}, 32), 16)) == "[0 x32 0,1,2,3,4,5,6,7]");
  std::vector<uint32_t> blocks = repeat({0}, 40);
  for (uint32_t u : repeat({1}, 24))
    blocks.push_back(u);
  CHECK(show(planRowSegments(blocks, 16)) == "[0 x40 0][40 x24 1]");
  std::vector<uint32_t> mixed = repeat({0, 1, 2}, 37);
  for (uint32_t u : repeat({3}, 20))
    mixed.push_back(u);
  CHECK(show(planRowSegments(mixed, 16)) == "[0 x37 0,1,2][111 x20 3]");
  // A period needs a vector's worth of periods: 8 of (0, 1) fill 8 lanes, not 16.
  CHECK(show(planRowSegments(repeat({0, 1}, 8), 8)) == "[0 x8 0,1]");
  CHECK(show(planRowSegments(repeat({0, 1}, 8), 16)) == "none");
  // Scattered formulas would leave the vectors mostly empty.
  std::vector<uint32_t> scattered;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 64; ++i)
    scattered.push_back(uint32_t(rng() % 5));
  CHECK(show(planRowSegments(scattered, 16)) == "none");
  CHECK(show(planRowSegments(std::vector<uint32_t>{0, 1, 2}, 16)) == "none");
  CHECK(show(planRowSegments(std::vector<uint32_t>{}, 16)) == "none");
}

namespace {

struct Shape {
  const char *name;
  std::vector<NodeSpec> nodes;
};

// Node j's constants differ per node, so a lane that read its neighbour's
// would show.
NodeSpec node(std::string formula, size_t j) {
  std::map<std::string, double> c;
  if (formula.find("alpha") != std::string::npos)
    c["alpha"] = 0.5 + 0.01 * double(j);
  if (formula.find("beta") != std::string::npos)
    c["beta"] = -0.25 - 0.003 * double(j);
  return {std::move(formula), c};
}

std::vector<Shape> shapes() {
  const std::vector<std::string> f = {"relu", "sin(num)*alpha + beta", "gelu", "tanh",
                                      "Piecewise((num, num > 0), (alpha*num, True))", "softplus", "silu",
                                      "exp(-num**2/2)*beta", "sigmoid", "log(cosh(num))", "0.5*num + 0.1",
                                      "elu", "atan(num)*alpha", "mish", "num**3", "cos(num)"};
  std::vector<Shape> out;
  auto periodic = [&](const char *name, size_t period, size_t periods, size_t extraRun) {
    Shape s{name, {}};
    for (size_t q = 0; q < periods; ++q)
      for (size_t k = 0; k < period; ++k)
        s.nodes.push_back(node(f[k], s.nodes.size()));
    for (size_t k = 0; k < extraRun; ++k)
      s.nodes.push_back(node(f[1], s.nodes.size()));
    out.push_back(std::move(s));
  };
  periodic("period 8, 32 periods", 8, 32, 0);
  periodic("period 3, 37 periods (a partial block), then a run", 3, 37, 21);
  periodic("period 16, 17 periods", 16, 17, 0);
  periodic("period 5, 40 periods", 5, 40, 0);
  // Powers of two whose slot bits all lie inside a 128-bit block (f32), or
  // also in the block bits (f64): each shuffle plan of RowKernel.cpp.
  periodic("period 2, 45 periods", 2, 45, 0);
  periodic("period 4, 19 periods", 4, 19, 3);
  // Formulas without vector math calls: passes of several blocks in f64
  // too (f64's erfc, tanh, sin are calls, which keep the others at one).
  Shape inlineOnly{"period 4 of inline formulas, 29 periods", {}};
  const std::vector<std::string> g = {"Piecewise((num, num > 0), (alpha*num, True))",
                                      "(num*num + alpha)*(num - beta)/(1 + num*num)", "Max(num, beta)*alpha + num",
                                      "Abs(num - alpha)*num + beta*num*num"};
  for (size_t q = 0; q < 29; ++q)
    for (size_t k = 0; k < g.size(); ++k)
      inlineOnly.nodes.push_back(node(g[k], inlineOnly.nodes.size()));
  out.push_back(std::move(inlineOnly));
  Shape runs{"runs of one formula", {}};
  for (size_t k = 0; k < 4; ++k)
    for (size_t i = 0; i < 19 + 7 * k; ++i)
      runs.nodes.push_back(node(f[k + 1], runs.nodes.size()));
  out.push_back(std::move(runs));
  return out;
}

template <class T> void checkShape(const Shape &shape) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  CAPTURE(shape.name);
  CAPTURE(to_string(dt));
  const size_t nodes = shape.nodes.size();
  auto nm = ActivationLayer::compile(shape.nodes, {.method = Method::CpuJit, .dtype = dt});
  auto bm = ActivationLayer::compile(shape.nodes, {.method = Method::CpuJit, .dtype = dt, .layout = Layout::BatchMajor});
  REQUIRE_OK_EXPECTED(nm);
  REQUIRE_OK_EXPECTED(bm);
  CHECK(bm->compileInfo().rowSegments > 0);

  std::mt19937_64 rng(nodes);
  std::uniform_real_distribution<double> pick(-6, 6);
  for (size_t batch : {0, 1, 5, 33, 300}) { // 0: nothing to do, and no crash
    CAPTURE(batch);
    std::vector<T> z(nodes * batch), err(nodes * batch);
    for (size_t i = 0; i < z.size(); ++i)
      z[i] = T(pick(rng)), err[i] = T(pick(rng));
    if (batch > 0) {
      z[0] = std::numeric_limits<T>::infinity();
      z[z.size() - 1] = std::numeric_limits<T>::quiet_NaN();
    }
    if (z.size() > 2) // sin's and cos's slow path for huge arguments
      z[z.size() / 2 + 1] = T(-1e30);
    std::vector<T> a(z.size()), d(z.size()), fa(z.size()), fd(z.size());
    REQUIRE_OK(nm->forward(z, a, batch));
    REQUIRE_OK(nm->backward(z, err, d, batch));
    REQUIRE_OK(nm->fused(z, fa, fd, batch));

    std::vector<T> zb = transposed(z, nodes, batch), eb = transposed(err, nodes, batch);
    std::vector<T> ab(z.size()), db(z.size()), fab(z.size()), fdb(z.size());
    REQUIRE_OK(bm->forward(zb, ab, batch));
    expectSameBits(transposed(ab, batch, nodes), a, "forward");
    REQUIRE_OK(bm->backward(zb, eb, db, batch));
    expectSameBits(transposed(db, batch, nodes), d, "backward");
    REQUIRE_OK(bm->fused(zb, fab, fdb, batch));
    expectSameBits(transposed(fab, batch, nodes), fa, "fused value");
    expectSameBits(transposed(fdb, batch, nodes), fd, "fused derivative");
    // In place: each block is loaded before it is stored.
    REQUIRE_OK(bm->forward(zb, zb, batch));
    expectSameBits(transposed(zb, batch, nodes), a, "forward in place");
  }

  // The AOT object's entry points run the same row kernels: the same bits,
  // with the params given at the call (a copy with one value changed) read
  // per node.
  {
    static int count = 0;
    std::string aotName = fmt::format("rows_{}_{}", to_string(dt), count++);
    AotLayer<T> aot = loadAot<T>(aotName, shape.nodes, Layout::BatchMajor);
    const size_t batch = 37;
    std::vector<T> z(nodes * batch), err(nodes * batch);
    for (size_t i = 0; i < z.size(); ++i)
      z[i] = T(pick(rng)), err[i] = T(pick(rng));
    std::vector<double> params(aot.params, aot.params + nm->params().size());
    size_t node = nodes - 1;
    while (nm->constantNames(node).empty())
      --node;
    params[nm->offsets()[node]] = 2.75;
    auto ref = ActivationLayer::compile(shape.nodes, {.method = Method::CpuJit, .dtype = dt});
    REQUIRE_OK_EXPECTED(ref);
    REQUIRE_OK(ref->setConstant(node, ref->constantNames(node).front(), 2.75));
    std::vector<T> a(z.size()), d(z.size()), fa(z.size()), fd(z.size());
    REQUIRE_OK(ref->forward(z, a, batch));
    REQUIRE_OK(ref->backward(z, err, d, batch));
    REQUIRE_OK(ref->fused(z, fa, fd, batch));
    std::vector<T> zb = transposed(z, nodes, batch), eb = transposed(err, nodes, batch), out(z.size()), out2(z.size());
    aot.forward(zb.data(), out.data(), int64_t(batch), params.data());
    expectSameBits(transposed(out, batch, nodes), a, "AOT forward");
    // _range over pieces cut anywhere (inside periods too): row kernels for
    // the whole periods, the per-node kernels for the rest.
    std::fill(out.begin(), out.end(), T(0));
    std::vector<size_t> cuts = {0, 1, nodes / 3, nodes / 3 + 5, nodes / 2 + 2, nodes - 1, nodes};
    for (size_t c = 0; c + 1 < cuts.size(); ++c)
      aot.forwardRange(zb.data(), out.data(), int64_t(batch), params.data(), int64_t(cuts[c]), int64_t(cuts[c + 1]));
    expectSameBits(transposed(out, batch, nodes), a, "AOT forward_range in pieces");
    // One piece writes its nodes and no others.
    std::fill(out.begin(), out.end(), T(7));
    size_t from = nodes / 3 + 1, to = nodes / 2 + 3;
    aot.forwardRange(zb.data(), out.data(), int64_t(batch), params.data(), int64_t(from), int64_t(to));
    std::vector<T> want = transposed(a, nodes, batch);
    for (size_t r = 0; r < batch; ++r)
      for (size_t n = 0; n < nodes; ++n)
        if (n < from || n >= to)
          want[r * nodes + n] = T(7);
    expectSameBits(out, want, "AOT forward_range of one piece");
    aot.backward(zb.data(), eb.data(), out.data(), int64_t(batch), params.data());
    expectSameBits(transposed(out, batch, nodes), d, "AOT backward");
    aot.fused(zb.data(), out.data(), out2.data(), int64_t(batch), params.data());
    expectSameBits(transposed(out, batch, nodes), fa, "AOT fused value");
    expectSameBits(transposed(out2, batch, nodes), fd, "AOT fused derivative");
  }

  // A constant changed after compiling reaches the lanes of its node only.
  size_t target = nodes / 2;
  while (bm->constantNames(target).empty())
    ++target;
  std::string name = bm->constantNames(target).front();
  REQUIRE_OK(nm->setConstant(target, name, 3.5));
  REQUIRE_OK(bm->setConstant(target, name, 3.5));
  const size_t batch = 17;
  std::vector<T> z(nodes * batch);
  for (T &x : z)
    x = T(pick(rng));
  std::vector<T> a(z.size()), ab(z.size());
  REQUIRE_OK(nm->forward(z, a, batch));
  REQUIRE_OK(bm->forward(transposed(z, nodes, batch), ab, batch));
  expectSameBits(transposed(ab, batch, nodes), a, "forward after setConstant");
}


} // namespace

TEST_CASE("row kernels: batch-major layers with a pattern give the nodes-major bits, f32") {
  REQUIRE_JIT();
  for (const Shape &s : shapes())
    checkShape<float>(s);
}

TEST_CASE("row kernels: batch-major layers with a pattern give the nodes-major bits, f64") {
  REQUIRE_JIT();
  for (const Shape &s : shapes())
    checkShape<double>(s);
}

namespace {

// Batch-major AOT objects against nodes-major ones, bit for bit, over
// forward, backward and fused.
template <class T> void expectRowsMatch(const AotLayer<T> &nm, const AotLayer<T> &bm, size_t nodes, size_t batch) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> pick(-6, 6);
  std::vector<T> z(nodes * batch), err(nodes * batch);
  for (size_t i = 0; i < z.size(); ++i)
    z[i] = T(pick(rng)), err[i] = T(pick(rng));
  std::vector<T> zb = transposed(z, nodes, batch), eb = transposed(err, nodes, batch);
  std::vector<T> a(z.size()), d(z.size()), ab(z.size()), db(z.size());
  nm.forward(z.data(), a.data(), int64_t(batch), nm.params);
  bm.forward(zb.data(), ab.data(), int64_t(batch), bm.params);
  expectSameBits(transposed(ab, batch, nodes), a, "forward");
  nm.backward(z.data(), err.data(), d.data(), int64_t(batch), nm.params);
  bm.backward(zb.data(), eb.data(), db.data(), int64_t(batch), bm.params);
  expectSameBits(transposed(db, batch, nodes), d, "backward");
  nm.fused(z.data(), a.data(), d.data(), int64_t(batch), nm.params);
  bm.fused(zb.data(), ab.data(), db.data(), int64_t(batch), bm.params);
  expectSameBits(transposed(ab, batch, nodes), a, "fused value");
  expectSameBits(transposed(db, batch, nodes), d, "fused derivative");
}

// Every row-kernel shape the host JIT may measure best (RowShape.h), on
// this host's CPU, bit for bit against nodes-major.
template <class T> void checkRowShapes(const Shape &shape) {
  static int count = 0;
  AotLayer<T> nm = loadAot<T>(fmt::format("shape_n_{}", count), shape.nodes, Layout::NodesMajor);
  for (const detail::RowShape &rs : detail::candidateRowShapes()) {
    CAPTURE(detail::to_string(rs));
    AotLayer<T> bm = loadAot<T>(fmt::format("shape_b_{}", count++), shape.nodes, Layout::BatchMajor,
                                {.rowShape = detail::to_string(rs)});
    expectRowsMatch(nm, bm, shape.nodes.size(), 41);
  }
}

// Row kernels run one block a pass or several (RowShape.h's fixed shapes,
// by CPU): AOT objects for a CPU of each kind that this host can run,
// batch-major against nodes-major for that CPU, bit for bit.
template <class T> void checkOtherCpus(const Shape &shape) {
  struct Cpu {
    const char *name;
    bool runs;
  };
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512ifma") &&
                      __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") &&
                      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bitalg") &&
                      __builtin_cpu_supports("avx512vpopcntdq") && __builtin_cpu_supports("avx512bf16") &&
                      __builtin_cpu_supports("gfni") && __builtin_cpu_supports("vaes") &&
                      __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("bmi2");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  const std::vector<Cpu> cpus = {{"znver4", avx512}, {"x86-64-v3", avx2}};
#else
  const std::vector<Cpu> cpus;
#endif
  static int count = 0;
  for (const Cpu &cpu : cpus) {
    CAPTURE(cpu.name);
    if (!cpu.runs) {
      MESSAGE("skipped: this host cannot run code for ", cpu.name);
      continue;
    }
    AotLayer<T> nm = loadAot<T>(fmt::format("cpu_n_{}", count), shape.nodes, Layout::NodesMajor, {.cpu = cpu.name});
    AotLayer<T> bm = loadAot<T>(fmt::format("cpu_b_{}", count++), shape.nodes, Layout::BatchMajor, {.cpu = cpu.name});
    expectRowsMatch(nm, bm, shape.nodes.size(), 41);
  }
}

} // namespace

TEST_CASE("row kernels: one block a pass and several give the nodes-major bits, on the CPUs this host runs") {
  REQUIRE_JIT();
  const std::vector<Shape> all = shapes();
  const Shape &w1Like = all[0];
  REQUIRE(std::string(w1Like.name) == "period 8, 32 periods");
  checkOtherCpus<float>(w1Like);
  checkOtherCpus<double>(w1Like);
}

TEST_CASE("row kernels: every shape the host may measure best gives the nodes-major bits") {
  REQUIRE_JIT();
  const std::vector<Shape> all = shapes();
  REQUIRE(std::string(all[6].name) == "period 4 of inline formulas, 29 periods");
  for (const Shape &s : {all[0], all[6]}) { // vector math calls; inline only (several blocks a pass in f64 too)
    CAPTURE(s.name);
    checkRowShapes<float>(s);
    checkRowShapes<double>(s);
  }
}

TEST_CASE("an AOT row shape that is not BxP is an error naming it") {
  auto art = compileLayerAot("bad_shape", {{"relu", {}}}, DType::F32, Layout::BatchMajor, {.rowShape = "4x100"});
  REQUIRE_FALSE(art);
  CHECK(art.error().message() == "row shape '4x100' is not BxP (B blocks a pass: 1, 2 or 4; P bytes prefetched "
                                 "ahead: 0 to 65536, a multiple of 64), e.g. 4x4096");
}

TEST_CASE("row kernels: scattered formulas keep the tile transposes") {
  REQUIRE_JIT();
  std::vector<NodeSpec> nodes;
  for (const char *f : {"relu", "tanh", "gelu", "relu", "sigmoid", "tanh", "silu"})
    nodes.push_back({f, {}});
  auto bm = ActivationLayer::compile(nodes, {.method = Method::CpuJit, .layout = Layout::BatchMajor});
  REQUIRE_OK_EXPECTED(bm);
  CHECK(bm->compileInfo().rowSegments == 0);
}
