//===- test/CUDA/GpuPopulationTest.cpp - The GPU's population interpreter, emulated ---===//
//
// The population kernels (KernelSpec.h's GpuPopulationKernel) run on the
// CPU's threads (GpuEmulation.h): every op and built-in, both dtypes, X in
// both layouts, against the CPU's population (whose values have cpu_jit's
// bits, PopulationTest.cpp); scores against its fitness, with and without
// weights, for a built-in loss and a formula loss.
//
//===----------------------------------------------------------------------===//
#include "GpuEmulation.h"
#include "TestUtil.h"

#include "Model/CompiledModel.h"
#include "Runtime/PopulationImpl.h"

#include "hsnn/Population.h"

#include <cmath>
#include <fmt/format.h>

using namespace hsnn;
using namespace hsnn::test;

namespace {

template <class T>
using PopulationKernel = void(const T *x, int64_t rowStride, int64_t varStride, const uint32_t *steps,
                              const uint64_t *stepStart, const double *scalars, const uint64_t *scalarStart,
                              const uint32_t *outputs, int64_t rows, int64_t firstFormula, T *values, const T *y,
                              const T *weights, const double *lossParams, double *partials);
using SumKernel = void(const double *, int64_t, double *);

// The CPU reference has cpu_jit's bits where its op kernels are the JIT's
// on a CPU with FMA (the GPU's math is the same IR); elsewhere a few ulp.
bool bitReference() { return runtimeInfo().cpuJitEnabled && __builtin_cpu_supports("fma"); }

template <class T> void expectSame(T got, T want) {
  if (bitReference() ? sameBits(got, want) || (std::isnan(got) && std::isnan(want))
                     : sameOrBothNaN(got, want) || ulpDistance(got, want) <= 8)
    return;
  FAIL_CHECK(fmt::format("GPU {} vs CPU {}", double(got), double(want)));
}

// Formulas over two variables: every op and built-in in x, and formulas
// that read the second, so both strides matter; one that does not parse.
std::vector<PopulationMember> members() {
  std::vector<PopulationMember> out;
  for (const std::string &f : activationFormulas({"alpha*sin(x) + beta", "x**3 - x**-2", "x**17", "x**-19 + x**0.5",
                                                  "x**40 - x**-33", "Max(x, alpha)*x + beta", "x*v + sin(v)/x", "v",
                                                  "2.5", "x +* 2"})) {
    std::map<std::string, double> c;
    if (f.find("alpha") != std::string::npos)
      c = {{"alpha", 1.25}, {"beta", -0.5}};
    out.push_back({f, c});
  }
  return out;
}

template <class T> struct Case {
  static constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  Population pop;
  detail::DeviceCode code;
  size_t rows = 300; // 2 blocks of 64 threads: each thread takes two or three rows
  std::vector<T> rowMajor, colMajor, y, w;

  // `every`: every k-th member (and the last, which does not parse).
  explicit Case(size_t every = 1) : pop(*Population::create(subset(every), {.variables = {"x", "v"}, .dtype = dt})) {
    auto c = detail::deviceCode(pop.impl(), pop.allConstants().data());
    REQUIRE_OK_EXPECTED(c);
    code = std::move(*c);
    std::vector<double> x = randoms(rows, 3, -4, 4), v = randoms(rows, 5, 0.1, 3), t = randoms(rows, 9, -2, 2);
    x[0] = 0, x[1] = -0.0, x[2] = std::numeric_limits<double>::infinity(), x[3] = std::nan("");
    for (size_t r = 0; r < rows; ++r) {
      rowMajor.insert(rowMajor.end(), {T(x[r]), T(v[r])});
      y.push_back(T(t[r]));
      w.push_back(T(0.5 + double(r % 7)));
    }
    colMajor.resize(2 * rows);
    for (size_t r = 0; r < rows; ++r)
      colMajor[r] = rowMajor[2 * r], colMajor[rows + r] = rowMajor[2 * r + 1];
  }
  static std::vector<PopulationMember> subset(size_t every) {
    std::vector<PopulationMember> all = members(), some;
    for (size_t i = 0; i < all.size(); ++i)
      if (i % every == 0 || i + 1 == all.size())
        some.push_back(all[i]);
    return some;
  }
  // One launch over every formula (split in two at formula 10, as launches
  // past 65535 formulas are), the variables at (rowStride, varStride).
  template <class Body> void run(Body &&body) {
    int64_t n = int64_t(code.formulas());
    launch(2, 10, 64, [&] { body(0); });
    launch(2, unsigned(n - 10), 64, [&] { body(10); });
  }
};

template <class T> void sameValuesAsTheCpu() {
  Case<T> c;
  detail::GpuModuleSpec spec;
  spec.populations.push_back({"values", Case<T>::dt, nullptr});
  EmulatedModule module(spec);
  auto *k = module.kernel<PopulationKernel<T>>("values");
  size_t n = c.code.formulas(), rows = c.rows;
  REQUIRE(n == c.pop.size());
  CHECK_FALSE(c.pop.valid(n - 1)); // "x +* 2"
  std::vector<T> want(n * rows);
  REQUIRE_OK(c.pop.evaluate(PopulationData<T>{.x = c.rowMajor, .rows = rows}, want));
  for (DataLayout layout : {DataLayout::RowMajor, DataLayout::ColMajor}) {
    bool rm = layout == DataLayout::RowMajor;
    CAPTURE(rm);
    const std::vector<T> &x = rm ? c.rowMajor : c.colMajor;
    std::vector<T> got(n * rows, T(-7));
    c.run([&](int64_t first) {
      k(x.data(), rm ? 2 : 1, rm ? 1 : int64_t(rows), c.code.steps.data(), c.code.stepStart.data(),
        c.code.scalars.data(), c.code.scalarStart.data(), c.code.outputs.data(), int64_t(rows), first, got.data(),
        nullptr, nullptr, nullptr, nullptr);
    });
    for (size_t i = 0; i < n; ++i) {
      CAPTURE(c.pop.impl().members[i].formula.text);
      for (size_t r = 0; r < rows; ++r) {
        CAPTURE(r);
        expectSame(got[i * rows + r], want[i * rows + r]);
      }
    }
  }
}

template <class T> void sameScoresAsTheCpu(const char *lossName) {
  CAPTURE(std::string(lossName));
  Case<T> c(5); // every op ran in the values' test; here the sums matter
  std::vector<std::string> warnings;
  auto model = detail::CompiledModel::loss(lossName, {}, {.dtype = Case<T>::dt}, warnings);
  REQUIRE_OK_EXPECTED(model);
  const detail::Program *loss = (*model)->units[0].programs[size_t(detail::KernelKind::LossSum)];
  detail::GpuModuleSpec spec;
  spec.populations.push_back({"scores", Case<T>::dt, loss});
  spec.sumKernel = "add";
  EmulatedModule module(spec);
  auto *k = module.kernel<PopulationKernel<T>>("scores");
  auto *add = module.kernel<SumKernel>("add");
  size_t n = c.code.formulas(), rows = c.rows, warps = 2 * 64 / 32;
  std::vector<double> params = (*model)->defaultParams;
  params.push_back(0);
  for (bool weighted : {false, true}) {
    CAPTURE(weighted);
    std::vector<double> partials(n * warps, -1.0), sums(n, -1.0), want(n);
    c.run([&](int64_t first) {
      k(c.rowMajor.data(), 2, 1, c.code.steps.data(), c.code.stepStart.data(), c.code.scalars.data(),
        c.code.scalarStart.data(), c.code.outputs.data(), int64_t(rows), first, nullptr, c.y.data(),
        weighted ? c.w.data() : nullptr, params.data(), partials.data());
    });
    for (double p : partials)
      CHECK(p != -1.0); // every warp of every formula left its partial
    launch(unsigned(n), 1, detail::sumKernelThreads(warps), [&] { add(partials.data(), int64_t(warps), sums.data()); });
    PopulationData<T> data{.x = c.rowMajor, .rows = rows, .y = c.y};
    if (weighted)
      data.weights = c.w;
    REQUIRE_OK(c.pop.fitness(data, want, {.formula = lossName, .reduction = Reduction::Sum}));
    for (size_t i = 0; i < n; ++i) {
      CAPTURE(c.pop.impl().members[i].formula.text);
      if (!c.pop.valid(i) || !std::isfinite(want[i])) {
        CHECK((std::isnan(sums[i]) || std::isinf(sums[i]) || !c.pop.valid(i)));
        continue;
      }
      // The same terms, added in another order.
      CHECK(sums[i] == doctest::Approx(want[i]).epsilon(1e-11));
    }
  }
}

} // namespace

TEST_CASE("on the GPU a population's values have the CPU's bits: every op and built-in, both dtypes, both layouts "
          "(emulated on CPU threads)") {
  sameValuesAsTheCpu<float>();
  sameValuesAsTheCpu<double>();
}

TEST_CASE("on the GPU a population's loss sums are the CPU's, with and without weights (emulated on CPU threads)") {
  for (const char *loss : {"mse", "abs(y_pred - y_true)**1.5 + 0.25*y_pred*y_true"}) {
    sameScoresAsTheCpu<float>(loss);
    sameScoresAsTheCpu<double>(loss);
  }
}

TEST_CASE("a formula the GPU interpreter cannot hold is an error, not a crash") {
  // x*1, ..., x*70, all computed before the first is added: 70 live values.
  detail::Program p;
  p.code.push_back({.op = Op::Var, .var = Variable::Num});
  std::vector<uint32_t> products;
  for (int i = 1; i <= 70; ++i) {
    p.code.push_back({.op = Op::Number, .number = double(i)});
    p.args.insert(p.args.end(), {0, uint32_t(p.code.size() - 1)});
    p.code.push_back({.op = Op::Mul, .argBegin = uint32_t(p.args.size() - 2), .numArgs = 2});
    products.push_back(uint32_t(p.code.size() - 1));
  }
  uint32_t sum = products[0];
  for (size_t i = 1; i < products.size(); ++i) {
    p.args.insert(p.args.end(), {sum, products[i]});
    p.code.push_back({.op = Op::Add, .argBegin = uint32_t(p.args.size() - 2), .numArgs = 2});
    sum = uint32_t(p.code.size() - 1);
  }
  p.outputs = {sum};
  detail::BlockCode c = detail::BlockCode::from(p);
  REQUIRE(c.buffers > detail::kDeviceRegisters);
  detail::DeviceCode code;
  Error e = code.append(&c, nullptr);
  REQUIRE(e);
  CHECK(e.message() ==
        fmt::format("the formula holds {} values at once; the GPU interpreter holds at most 64", c.buffers));
  CHECK(code.formulas() == 0);
}
