//===- test/CUDA/FakeDriverPopulationTest.cpp - Populations against the stand-in driver ---===//
//
// A population with method=cuda: one launch a call, a module per dtype and
// loss kept for the process, a call's device memory freed as it returns, and
// the errors. The kernels' results are checked emulated (GpuPopulationTest)
// and on a real GPU.
//===----------------------------------------------------------------------===//
#include "FakeDriver.h"

#include "hsnn/Population.h"

#include <cmath>
#include <vector>

using namespace hsnn;
using namespace hsnn::test;

TEST_CASE("a population on the GPU: one launch for all its formulas, scores added on the device, modules kept") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  TempCache cache;
  std::vector<std::string> formulas = {"sin(x)*2", "x**3 - 1", "x +* 2", "exp(x) / (1 + x*x)"};
  auto pop = Population::create(formulas, {.variables = {"x"}, .method = Method::Cuda, .gpuId = 1});
  REQUIRE_OK_EXPECTED(pop);
  CHECK_FALSE(pop->valid(2));
  const size_t rows = 1000;
  std::vector<float> x(rows, 0.5f), y(rows, 1.0f), out(formulas.size() * rows);
  int modules = fake.count("live_modules"), allocations = fake.count("live_allocations");
  fake.clearLaunches();
  REQUIRE_OK(pop->evaluate(PopulationData<float>{.x = x, .rows = rows}, out));
  // A row of blocks per formula, as many as fill the fake device (8 blocks
  // of 256 threads) over the four formulas.
  CHECK(fake.launches() == "hsnn_population_values 2,4 256;");
  CHECK(fake.count("live_modules") == modules + 1);      // kept for the process
  CHECK(fake.count("live_allocations") == allocations); // a call's memory is freed as it returns
  std::vector<double> scores(formulas.size());
  fake.clearLaunches();
  REQUIRE_OK(pop->fitness(PopulationData<float>{.x = x, .rows = rows, .y = y}, scores));
  CHECK(fake.launches() == "hsnn_population_scores 2,4 256;hsnn_population_add 4,1 32;");
  CHECK(std::isnan(scores[2]));
  CHECK(fake.count("live_modules") == modules + 2); // the loss's, without the values kernel
  REQUIRE_OK(pop->fitness(PopulationData<float>{.x = x, .rows = rows, .y = y}, scores));
  CHECK(fake.count("live_modules") == modules + 2);
  CHECK(fake.count("live_allocations") == allocations);

  auto elsewhere = Population::create(formulas, {.variables = {"x"}, .method = Method::Cuda, .gpuId = 7});
  REQUIRE_OK_EXPECTED(elsewhere);
  Error e = elsewhere->evaluate(PopulationData<float>{.x = x, .rows = rows}, out);
  REQUIRE(e);
  CHECK(e.message() == "GPU id 7 is out of range: valid ids are 0..3");
  auto jit = Population::create(formulas, {.variables = {"x"}, .method = Method::CpuJit});
  REQUIRE_FALSE(jit);
  CHECK(jit.error().message() ==
        "a population runs on cpu_interp or cuda, not cpu_jit (cpu_jit compiles layers: ActivationLayer)");
}
