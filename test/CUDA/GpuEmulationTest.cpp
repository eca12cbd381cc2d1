//===- test/CUDA/GpuEmulationTest.cpp - GPU kernels run on the CPU's threads ---===//
//
// The layers' and losses' GPU kernels (grid-stride indexing in both
// layouts, the per-node formula switch, constant offsets, the warp-shuffle
// reduction and the partial sums) run on the CPU's threads (GpuEmulation.h)
// and are compared with the CPU JIT's results bit for bit (with the
// interpreter's within a few ulp where the CPU has no FMA).
//===----------------------------------------------------------------------===//
#include "GpuEmulation.h"
#include "TestUtil.h"
#include "CPU/RequireJit.h"

#include "Model/CompiledModel.h"

#include "hsnn/Layer.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>

using namespace hsnn;
using namespace hsnn::test;

namespace {

using LayerKernel = void(const void *, const void *, void *, void *, const double *, const uint32_t *, const uint64_t *,
                         int64_t, int64_t, int64_t);
template <class T> using LossKernel = void(const T *, const T *, T *, const double *, int64_t, T, double *);
using SumKernel = void(const double *, int64_t, double *);
using LayerConstantGradientKernel = void(const void *, const void *, double *, const double *, const uint32_t *,
                                         const uint64_t *, int64_t, int64_t, int64_t);
template <class T> using LossConstantGradientKernel = void(const T *, const T *, double *, const double *, int64_t);

// Where the CPU kernels run hsnn's math library (a JIT, a CPU with FMA),
// they are the same IR as the GPU kernels, so the emulated kernels must give
// their bits; elsewhere (libmvec) the interpreter within a few ulp is the
// reference.
bool jitIsBitReference() { return runtimeInfo().cpuJitEnabled && __builtin_cpu_supports("fma"); }

template <class T> bool sameBitsOrNaN(T a, T b) {
  std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t> x, y;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  return x == y || (std::isnan(a) && std::isnan(b));
}

template <class T> void expectClose(T got, T want, uint64_t ulps) {
  if (jitIsBitReference()) {
    CAPTURE(got);
    CAPTURE(want);
    CHECK(sameBitsOrNaN(got, want));
    return;
  }
  if (sameOrBothNaN(got, want))
    return;
  CAPTURE(got);
  CAPTURE(want);
  CHECK((ulpDistance(got, want) <= ulps || std::fabs(double(got) - double(want)) < 1e-30));
}

// The interpreter's layer (the reference) and the compiled model the GPU kernels are made from.
std::pair<ActivationLayer, std::shared_ptr<const detail::CompiledModel>> layerModels(const std::vector<NodeSpec> &nodes,
                                                                                     DType dt, Layout layout) {
  auto ref = ActivationLayer::compile(nodes, {.method = Method::CpuInterp, .dtype = dt, .layout = layout});
  REQUIRE(ref);
  std::vector<std::string> warnings;
  auto compiled = detail::CompiledModel::activation(nodes, {.dtype = dt, .layout = layout}, warnings);
  REQUIRE(compiled);
  return {std::move(*ref), *compiled};
}

// The same for a loss, summed (the kernels' partials add up to the sum).
std::pair<Loss, std::shared_ptr<const detail::CompiledModel>> lossModels(const char *name, DType dt) {
  auto ref = Loss::compile(name, {}, {.method = Method::CpuInterp, .dtype = dt, .reduction = Reduction::Sum});
  REQUIRE(ref);
  std::vector<std::string> warnings;
  auto compiled = detail::CompiledModel::loss(name, {}, {.dtype = dt}, warnings);
  REQUIRE(compiled);
  return {std::move(*ref), *compiled};
}

const std::vector<std::string> kFormulas = {"relu", "sigmoid", "tanh", "gelu", "sin(num)*alpha", "softplus",
                                            "Piecewise((num, num > 0), (beta*num, True))", "x**3", "0.5*num+0.1"};

// `count` nodes over kFormulas: formulas repeat with different constants, so offsets matter.
std::vector<NodeSpec> mixedNodes(size_t count) {
  std::vector<NodeSpec> nodes;
  for (size_t j = 0; j < count; ++j) {
    const std::string &f = kFormulas[j % kFormulas.size()];
    std::map<std::string, double> c;
    if (f.find("alpha") != std::string::npos)
      c["alpha"] = 0.5 + double(j);
    if (f.find("beta") != std::string::npos)
      c["beta"] = 0.01 * double(j + 1);
    nodes.push_back({f, c});
  }
  return nodes;
}

template <class T> void compareLayer(Layout layout) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  std::vector<NodeSpec> nodes = mixedNodes(23);
  auto [interpreted, compiled] = layerModels(nodes, dt, layout);
  auto ref = jitIsBitReference()
                 ? *ActivationLayer::compile(nodes, {.method = Method::CpuJit, .dtype = dt, .layout = layout})
                 : std::move(interpreted);
  const detail::CompiledModel &model = *compiled;
  detail::GpuModuleSpec spec;
  for (int k = 0; k < 3; ++k) {
    detail::GpuLayerKernel kernel{"layer" + std::to_string(k), detail::KernelKind(k), dt, layout, {}};
    for (const detail::CodeUnit &u : model.units)
      kernel.units.push_back(u.programs[size_t(k)]);
    spec.layers.push_back(std::move(kernel));
  }
  EmulatedModule module(spec);

  const size_t batch = 300, n = nodes.size() * batch;
  std::vector<T> z(n), err(n), a(n), d(n), ra(n), rd(n), rb(n), b(n);
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> pick(-4, 4);
  for (size_t i = 0; i < n; ++i) {
    z[i] = T(pick(rng));
    err[i] = T(pick(rng));
  }
  int64_t nb = int64_t(batch), nn = int64_t(nodes.size());
  std::vector<double> params = model.defaultParams;
  if (params.empty())
    params.push_back(0);
  // Shapes that make threads loop: nodes-major (2, nodes) x 64 threads over
  // 300 elements a node; batch-major 3 blocks over its 5 tiles. The
  // nodes-major launch is split in two at node 10, as launches past 65535
  // nodes are.
  auto run = [&](int kind, const T *errIn, T *o0, T *o1) {
    auto *k = module.kernel<LayerKernel>("layer" + std::to_string(kind));
    if (layout == Layout::NodesMajor) {
      launch(2, 10, 64, [&] { k(z.data(), errIn, o0, o1, params.data(), model.unitOf.data(), model.offsets.data(), nb, nn, 0); });
      launch(2, unsigned(nn - 10), 64,
             [&] { k(z.data(), errIn, o0, o1, params.data(), model.unitOf.data(), model.offsets.data(), nb, nn, 10); });
    } else {
      launch(3, 1, detail::kBatchMajorBlock,
             [&] { k(z.data(), errIn, o0, o1, params.data(), model.unitOf.data(), model.offsets.data(), nb, nn, 0); });
    }
  };
  run(0, nullptr, a.data(), nullptr);
  run(1, err.data(), b.data(), nullptr);
  std::vector<T> fa(n), fd(n);
  run(2, nullptr, fa.data(), fd.data());
  REQUIRE_OK(ref.forward(z, ra, batch));
  REQUIRE_OK(ref.backward(z, err, rb, batch));
  std::vector<T> ra2(n);
  REQUIRE_OK(ref.fused(z, ra2, rd, batch));
  for (size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    expectClose(a[i], ra[i], 4);
    expectClose(fa[i], ra[i], 4);
    expectClose(fd[i], rd[i], 8);
    expectClose(b[i], rb[i], 8);
  }
}

// d/dc of every node's constants, summed over the batch with err: the
// kernel in a 2 x nodes grid (split at node 10), then one warp per (node,
// constant) adds the 4 partials each warp row left.
template <class T> void compareConstantGradient(Layout layout) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  CAPTURE(to_string(layout));
  std::vector<NodeSpec> nodes;
  const char *formulas[] = {"sin(num*w)*alpha", "relu", "Piecewise((num, num > 0), (beta*num, True))", "elu", "tanh"};
  for (size_t j = 0; j < 13; ++j) {
    std::string f = formulas[j % std::size(formulas)];
    std::map<std::string, double> c;
    if (j % 5 == 0)
      c = {{"alpha", 0.5 + double(j)}, {"w", 1.0 + 0.1 * double(j)}};
    if (j % 5 == 2)
      c = {{"beta", 0.01 * double(j + 1)}};
    nodes.push_back({f, c});
  }
  auto [ref, compiled] = layerModels(nodes, dt, layout);
  const detail::CompiledModel &model = *compiled;
  detail::GpuModuleSpec spec;
  detail::GpuLayerKernel kernel{"cg", detail::KernelKind::ConstantGradient, dt, layout, {}};
  size_t K = 0;
  for (const detail::CodeUnit &u : model.units) {
    kernel.units.push_back(u.programs[size_t(detail::KernelKind::ConstantGradient)]);
    K = std::max(K, kernel.units.back()->outputs.size());
  }
  REQUIRE(K == 2);
  spec.layers.push_back(std::move(kernel));
  spec.sumKernel = "add";
  EmulatedModule module(spec);

  const size_t batch = 300, n = nodes.size() * batch, warpsPerNode = 2 * 64 / 32;
  std::vector<T> z(n), err(n);
  std::mt19937_64 rng(29);
  std::uniform_real_distribution<double> pick(-3, 3);
  for (size_t i = 0; i < n; ++i) {
    z[i] = T(pick(rng));
    err[i] = T(pick(rng));
  }
  std::vector<double> params = model.defaultParams, partials(nodes.size() * K * warpsPerNode, -1.0),
                      sums(nodes.size() * K, 0.0);
  int64_t nb = int64_t(batch), nn = int64_t(nodes.size());
  auto *k = module.kernel<LayerConstantGradientKernel>("cg");
  launch(2, 10, 64, [&] { k(z.data(), err.data(), partials.data(), params.data(), model.unitOf.data(), model.offsets.data(), nb, nn, 0); });
  launch(2, unsigned(nn - 10), 64,
         [&] { k(z.data(), err.data(), partials.data(), params.data(), model.unitOf.data(), model.offsets.data(), nb, nn, 10); });
  for (double p : partials)
    CHECK(p != -1.0); // every warp wrote every partial, zeros for formulas with fewer constants
  auto *add = module.kernel<SumKernel>("add");
  launch(unsigned(nodes.size() * K), 1, detail::sumKernelThreads(warpsPerNode),
         [&] { add(partials.data(), int64_t(warpsPerNode), sums.data()); });

  std::vector<double> want(model.defaultParams.size());
  REQUIRE_OK(ref.constantGradients(z, err, want, batch));
  for (size_t j = 0; j < nodes.size(); ++j) {
    size_t kj = model.units[model.unitOf[j]].programs[size_t(detail::KernelKind::ConstantGradient)]->outputs.size();
    for (size_t c = 0; c < K; ++c) {
      CAPTURE(j);
      CAPTURE(c);
      if (c < kj)
        CHECK(sums[j * K + c] == doctest::Approx(want[model.offsets[j] + c]).epsilon(std::is_same_v<T, float> ? 1e-5 : 1e-12));
      else
        CHECK(sums[j * K + c] == 0);
    }
  }
}

template <class T> void compareLossConstantGradient(const char *name) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  CAPTURE(name);
  auto [ref, compiled] = lossModels(name, dt);
  const detail::CompiledModel &model = *compiled;
  const detail::Program *program = model.units[0].programs[size_t(detail::KernelKind::LossConstantGradient)];
  size_t K = program->outputs.size();
  REQUIRE(K == 1);
  detail::GpuModuleSpec spec;
  spec.losses.push_back({"lcg", program, detail::KernelKind::LossConstantGradient, dt});
  spec.sumKernel = "add";
  EmulatedModule module(spec);
  const int64_t n = 1000;
  std::vector<T> yp(n), yt(n);
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<double> pick(-2, 2);
  for (int64_t i = 0; i < n; ++i) {
    yp[size_t(i)] = T(pick(rng));
    yt[size_t(i)] = T(pick(rng));
  }
  std::vector<double> params = model.defaultParams, partials(6 * K, -1.0), sums(K, 0.0);
  auto *k = module.kernel<LossConstantGradientKernel<T>>("lcg");
  launch(3, 1, 64, [&] { k(yp.data(), yt.data(), partials.data(), params.data(), n); });
  for (double p : partials)
    CHECK(p != -1.0);
  auto *add = module.kernel<SumKernel>("add");
  launch(unsigned(K), 1, detail::sumKernelThreads(6), [&] { add(partials.data(), 6, sums.data()); });
  std::vector<double> want(K);
  REQUIRE_OK(ref.constantGradients(yp, yt, want));
  CHECK(sums[0] == doctest::Approx(want[0]).epsilon(std::is_same_v<T, float> ? 1e-5 : 1e-12));
}

template <class T> void compareLoss(const char *name) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  CAPTURE(std::string(name));
  auto [interpreted, compiled] = lossModels(name, dt);
  auto ref = jitIsBitReference()
                 ? *Loss::compile(name, {}, {.method = Method::CpuJit, .dtype = dt, .reduction = Reduction::Sum})
                 : std::move(interpreted);
  const detail::CompiledModel &model = *compiled;
  detail::GpuModuleSpec spec;
  for (int k = 0; k < 4; ++k)
    spec.losses.push_back({"loss" + std::to_string(k), model.units[0].programs[size_t(detail::kLossKinds[size_t(k)])],
                           detail::kLossKinds[size_t(k)], dt});
  spec.sumKernel = "add";
  EmulatedModule module(spec);

  const int64_t n = 1000;
  std::vector<T> yp(n), yt(n), out(n), ref_out(n);
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<double> pick(0.02, 0.98);
  for (int64_t i = 0; i < n; ++i) {
    yp[size_t(i)] = T(pick(rng));
    yt[size_t(i)] = T(i % 3 == 0 ? 1.0 : pick(rng));
  }
  std::vector<double> params = model.defaultParams;
  params.push_back(0);
  // 3 blocks of 64 threads: 6 warps, each leaving one partial.
  std::vector<double> partials(6, -1.0), total(1, 0.0);
  auto sum = [&](int kind, T scale) {
    auto *k = module.kernel<LossKernel<T>>("loss" + std::to_string(kind));
    launch(3, 1, 64, [&] { k(yp.data(), yt.data(), out.data(), params.data(), n, scale, partials.data()); });
    auto *add = module.kernel<SumKernel>("add");
    launch(1, 1, detail::sumKernelThreads(partials.size()), [&] { add(partials.data(), int64_t(partials.size()), total.data()); });
    return total[0];
  };
  double s = sum(1, T(1));
  for (double p : partials)
    CHECK(p != -1.0); // every warp wrote its partial
  auto want = ref.forward(yp, yt);
  REQUIRE(want);
  CHECK(s == doctest::Approx(*want).epsilon(std::is_same_v<T, float> ? 1e-6 : 1e-13));
  CHECK(sum(1, T(1)) == s); // the same bits again

  double fusedSum = sum(3, T(0.5));
  CHECK(fusedSum == s); // fused sums the same losses in the same order
  std::vector<T> g(n);
  REQUIRE_OK(ref.gradient(yp, yt, g));
  for (int64_t i = 0; i < n; ++i)
    expectClose(out[size_t(i)], T(0.5) * g[size_t(i)], 8);

  sum(2, T(2));
  for (int64_t i = 0; i < n; ++i)
    expectClose(out[size_t(i)], T(2) * g[size_t(i)], 8);
  std::vector<T> elements(n);
  REQUIRE_OK(ref.forwardElements(yp, yt, elements));
  sum(0, T(1));
  for (int64_t i = 0; i < n; ++i)
    expectClose(out[size_t(i)], elements[size_t(i)], 4);
}

} // namespace

TEST_CASE("GPU layer kernels, emulated on CPU threads, match the interpreter in both layouts") {
  compareLayer<float>(Layout::NodesMajor);
  compareLayer<float>(Layout::BatchMajor);
  compareLayer<double>(Layout::NodesMajor);
  compareLayer<double>(Layout::BatchMajor);
}

// Batch-major kernels (shared-memory tiles, a warp per node) give the bits
// of nodes-major ones (a node per grid row) on the same elements: 40 nodes
// (a full and a partial column of tiles) x 300 rows (a partial row of
// tiles), grids of fewer blocks than the 10 tiles, so blocks take several.
template <class T> void compareLayouts() {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  std::vector<NodeSpec> nodes = mixedNodes(40);
  auto [ref, compiled] = layerModels(nodes, dt, Layout::BatchMajor);
  const detail::CompiledModel &model = *compiled;
  detail::GpuModuleSpec spec;
  for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor})
    for (int k = 0; k < 3; ++k) {
      detail::GpuLayerKernel kernel{std::string(to_string(layout)) + std::to_string(k), detail::KernelKind(k), dt,
                                    layout, {}};
      for (const detail::CodeUnit &u : model.units)
        kernel.units.push_back(u.programs[size_t(k)]);
      spec.layers.push_back(std::move(kernel));
    }
  EmulatedModule module(spec);

  const size_t batch = 300, width = nodes.size(), n = width * batch;
  std::vector<T> z(n), err(n), zt(n), errt(n);
  std::mt19937_64 rng(41);
  std::uniform_real_distribution<double> pick(-6, 6);
  for (size_t i = 0; i < n; ++i) {
    z[i] = T(pick(rng));
    err[i] = T(pick(rng));
  }
  z[5] = T(0), z[7] = -T(0), z[11] = std::numeric_limits<T>::infinity(), z[13] = std::numeric_limits<T>::quiet_NaN();
  z[17] = std::numeric_limits<T>::denorm_min();
  for (size_t r = 0; r < batch; ++r) // nodes-major copies: node j's row is column j
    for (size_t j = 0; j < width; ++j)
      zt[j * batch + r] = z[r * width + j], errt[j * batch + r] = err[r * width + j];
  int64_t nb = int64_t(batch), nn = int64_t(width);
  std::vector<double> params = model.defaultParams;
  auto bits = [](T v) {
    std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t> u;
    std::memcpy(&u, &v, sizeof u);
    return u;
  };
  for (int kind = 0; kind < 3; ++kind) {
    CAPTURE(kind);
    std::vector<T> na(n), nd(n);
    auto *nodesMajor = module.kernel<LayerKernel>("nodes_major" + std::to_string(kind));
    launch(2, unsigned(width), 64, [&] {
      nodesMajor(zt.data(), errt.data(), na.data(), nd.data(), params.data(), model.unitOf.data(), model.offsets.data(),
                 nb, nn, 0);
    });
    auto *batchMajor = module.kernel<LayerKernel>("batch_major" + std::to_string(kind));
    for (unsigned grid : {1u, 3u, 7u}) {
      CAPTURE(grid);
      std::vector<T> ba(n, T(-1)), bd(n, T(-1));
      launch(grid, 1, detail::kBatchMajorBlock, [&] {
        batchMajor(z.data(), err.data(), ba.data(), bd.data(), params.data(), model.unitOf.data(), model.offsets.data(),
                   nb, nn, 0);
      });
      size_t differ = 0;
      for (size_t r = 0; r < batch; ++r)
        for (size_t j = 0; j < width; ++j) {
          differ += bits(ba[r * width + j]) != bits(na[j * batch + r]);
          if (kind == 2)
            differ += bits(bd[r * width + j]) != bits(nd[j * batch + r]);
        }
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("batch-major GPU kernels, emulated, give the bits of nodes-major ones") {
  compareLayouts<float>();
  compareLayouts<double>();
}

// hsnn's math library (lib/CodeGen/InlineMath.h) is the same IR at one lane
// on the GPU as at 8 or 16 on the CPU: every op and built-in, forward,
// backward and fused, the GPU kernels emulated against the CPU JIT's vector
// kernels, bit for bit, on inputs that reach every path: zeros of both
// signs, infinities, NaN, subnormals (which the GPU must not flush), the
// largest finite values, the huge arguments of sin and cos, and random
// values at every magnitude. NaN compares as NaN (its payload is not kept).
template <class T> void compareWithCpuJit() {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  std::vector<NodeSpec> nodes;
  for (const std::string &f : activationFormulas({}))
    nodes.push_back({f, {}});
  nodes.push_back({"sin(num*w)*alpha", {{"w", 3.5}, {"alpha", -0.25}}});
  auto cpu = ActivationLayer::compile(nodes, {.method = Method::CpuJit, .dtype = dt});
  REQUIRE_OK_EXPECTED(cpu);
  auto [ref, compiled] = layerModels(nodes, dt, Layout::NodesMajor);
  const detail::CompiledModel &model = *compiled;
  detail::GpuModuleSpec spec;
  for (int k = 0; k < 3; ++k) {
    detail::GpuLayerKernel kernel{"layer" + std::to_string(k), detail::KernelKind(k), dt, Layout::NodesMajor, {}};
    for (const detail::CodeUnit &u : model.units)
      kernel.units.push_back(u.programs[size_t(k)]);
    spec.layers.push_back(std::move(kernel));
  }
  EmulatedModule module(spec);

  const T inf = std::numeric_limits<T>::infinity(), big = std::numeric_limits<T>::max();
  const T tiny = std::numeric_limits<T>::denorm_min(), smallest = std::numeric_limits<T>::min();
  std::vector<T> values = {T(0), -T(0), inf, -inf, std::numeric_limits<T>::quiet_NaN(), tiny, -tiny, smallest,
                           -smallest, smallest / 3, big, -big, T(1), T(-1), T(0.5), T(-0.5), T(1e-5), T(88), T(-104),
                           T(1.5707963267948966), T(1e22), T(3e9), T(-7.5e5), T(0.875), T(-0.875), T(11), T(27)};
  if constexpr (std::is_same_v<T, double>)
    values.insert(values.end(), {700.0, 710.0, -745.0, 1e300, -1e300, 0x1p-1060, 1e18});
  std::mt19937_64 rng(43);
  std::uniform_real_distribution<double> dense(-6, 6), mantissa(1, 2);
  std::uniform_int_distribution<int> exponent(std::numeric_limits<T>::min_exponent - 24,
                                              std::numeric_limits<T>::max_exponent - 1);
  while (values.size() < 96) {
    values.push_back(T(dense(rng)));
    values.push_back(T((values.size() % 2 ? -1 : 1) * std::ldexp(mantissa(rng), exponent(rng))));
  }
  const size_t batch = values.size(), width = nodes.size(), n = width * batch;
  std::vector<T> z(n), err(n);
  for (size_t j = 0; j < width; ++j)
    for (size_t r = 0; r < batch; ++r) {
      z[j * batch + r] = values[(r + j) % batch];
      err[j * batch + r] = T(dense(rng));
    }
  std::vector<double> params = model.defaultParams;
  if (params.empty())
    params.push_back(0);
  int64_t nb = int64_t(batch), nn = int64_t(width);
  std::vector<T> ga(n), gb(n), gfa(n), gfd(n), ca(n), cb(n), cfa(n), cfd(n);
  auto run = [&](int kind, const T *errIn, T *o0, T *o1) {
    auto *k = module.kernel<LayerKernel>("layer" + std::to_string(kind));
    launch(2, unsigned(nn), 64,
           [&] { k(z.data(), errIn, o0, o1, params.data(), model.unitOf.data(), model.offsets.data(), nb, nn, 0); });
  };
  run(0, nullptr, ga.data(), nullptr);
  run(1, err.data(), gb.data(), nullptr);
  run(2, nullptr, gfa.data(), gfd.data());
  REQUIRE_OK(cpu->forward(z, ca, batch));
  REQUIRE_OK(cpu->backward(z, err, cb, batch));
  REQUIRE_OK(cpu->fused(z, cfa, cfd, batch));
  auto same = [](T a, T b) { return sameBitsOrNaN(a, b); };
  for (size_t j = 0; j < width; ++j) {
    CAPTURE(nodes[j].formula);
    size_t differ = 0;
    T firstAt = 0;
    for (size_t r = 0; r < batch; ++r) {
      size_t i = j * batch + r;
      bool ok = same(ga[i], ca[i]) && same(gb[i], cb[i]) && same(gfa[i], cfa[i]) && same(gfd[i], cfd[i]);
      if (!ok && differ++ == 0)
        firstAt = z[i];
    }
    CAPTURE(firstAt);
    CHECK(differ == 0);
  }
}

TEST_CASE("GPU kernels, emulated, give the CPU JIT's bits for every op and built-in, both dtypes") {
  REQUIRE_JIT();
  if (!jitIsBitReference()) {
    MESSAGE("skipped: this CPU has no FMA, so its kernels call libmvec, not hsnn's math library");
    return;
  }
  compareWithCpuJit<float>();
  compareWithCpuJit<double>();
}

TEST_CASE("GPU constant-gradient kernels, emulated on CPU threads, match the interpreter's sums") {
  for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
    compareConstantGradient<float>(layout);
    compareConstantGradient<double>(layout);
  }
  for (const char *name : {"huber", "smooth_l1"}) {
    compareLossConstantGradient<float>(name);
    compareLossConstantGradient<double>(name);
  }
}

TEST_CASE("GPU loss kernels, emulated on CPU threads, reduce through warp shuffles to the interpreter's sum") {
  for (const char *name : {"mse", "bce", "huber", "poisson_nll"}) {
    compareLoss<float>(name);
    compareLoss<double>(name);
  }
}

// The order SUM adds a segment's partials in (GpuKernels.cpp), for a block
// of `threads`: each thread its strided share in index order, each warp its
// lanes in the shuffle tree, warp 0 the warps' totals the same way.
double sumInKernelOrder(const double *p, size_t count, unsigned threads) {
  auto tree = [](std::vector<double> v) { // lane l += lane l + delta; lane 0's result
    for (unsigned delta = 16; delta > 0; delta /= 2)
      for (unsigned l = 0; l + delta < 32; ++l)
        v[l] = v[l] + v[l + delta];
    return v[0];
  };
  std::vector<double> warpTotals(32, 0.0);
  for (unsigned w = 0; w < threads / 32; ++w) {
    std::vector<double> lanes(32, 0.0);
    for (unsigned l = 0; l < 32; ++l)
      for (size_t k = w * 32 + l; k < count; k += threads)
        lanes[l] += p[k];
    warpTotals[w] = tree(lanes);
  }
  return tree(warpTotals);
}

TEST_CASE("the GPU's partial-sum kernels add every partial of each segment in the order their block size fixes") {
  detail::GpuModuleSpec spec;
  spec.sumKernel = "add";
  EmulatedModule module(spec);
  auto *add = module.kernel<SumKernel>("add");
  std::mt19937_64 rng(37);
  std::uniform_real_distribution<double> mantissa(-1, 1), exponent(-30, 30);
  for (size_t count : {1, 5, 32, 33, 1000, 1024, 1025, 5000, 8448}) {
    const size_t segments = 2;
    std::vector<double> partials(segments * count);
    for (double &p : partials) // magnitudes 2^-30..2^30: the order changes the rounding
      p = mantissa(rng) * std::exp2(exponent(rng));
    for (unsigned threads : {32u, 96u, detail::sumKernelThreads(count)}) {
      CAPTURE(count);
      CAPTURE(threads);
      std::vector<double> sums(segments, -1.0);
      launch(unsigned(segments), 1, threads, [&] { add(partials.data(), int64_t(count), sums.data()); });
      for (size_t s = 0; s < segments; ++s) {
        const double *p = partials.data() + s * count;
        CHECK(sums[s] == sumInKernelOrder(p, count, threads));
        long double exact = 0, magnitude = 0;
        for (size_t k = 0; k < count; ++k)
          exact += p[k], magnitude += std::fabs(p[k]);
        CHECK(std::fabs(sums[s] - double(exact)) <= 1e-13 * double(magnitude));
      }
    }
  }
  // The value kernels (a loss left on the device): the same sum, divided, converted.
  for (DType dt : {DType::F32, DType::F64}) {
    detail::GpuModuleSpec valueSpec;
    valueSpec.valueKernel = "value";
    valueSpec.valueType = dt;
    EmulatedModule valueModule(valueSpec);
    std::vector<double> partials(3000);
    for (double &p : partials)
      p = mantissa(rng) * std::exp2(exponent(rng));
    const unsigned threads = detail::sumKernelThreads(partials.size());
    const double sum = sumInKernelOrder(partials.data(), partials.size(), threads), divisor = 12345;
    if (dt == DType::F32) {
      float value = -1;
      auto *k = valueModule.kernel<void(const double *, int64_t, float *, double)>("value");
      launch(1, 1, threads, [&] { k(partials.data(), int64_t(partials.size()), &value, divisor); });
      CHECK(value == float(sum / divisor));
    } else {
      double value = -1;
      auto *k = valueModule.kernel<void(const double *, int64_t, double *, double)>("value");
      launch(1, 1, threads, [&] { k(partials.data(), int64_t(partials.size()), &value, divisor); });
      CHECK(value == sum / divisor);
      launch(1, 1, 32, [&] { k(nullptr, 0, &value, 1.0); }); // no partials: 0
      CHECK(value == 0.0);
    }
  }
  CHECK(detail::sumKernelThreads(1) == 32);
  CHECK(detail::sumKernelThreads(33) == 64);
  CHECK(detail::sumKernelThreads(8448) == 1024);
}
