//===- test/CPU/TieredTest.cpp - Tiered compilation -----------------------===//
//
// LayerOptions::tiered: the interpreter serves calls at once, the JIT's code
// takes over when it is ready, constants set meanwhile survive the switch,
// copies switch too, and strict mode stays synchronous.
//===----------------------------------------------------------------------===//
#include "Cache/CacheTestUtil.h"
#include "CPU/SharedObject.h"
#include "Runtime/BackgroundCompile.h"
#include "TestUtil.h"

#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <mutex>
#include <random>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace hsnn;
using namespace hsnn::test;

namespace {

const std::vector<NodeSpec> kNodes = {{"gelu", {}}, {"sin(num)*alpha", {{"alpha", 1.5}}}, {"tanh", {}}, {"softplus", {}}};

std::vector<float> inputs(size_t n) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-4, 4);
  std::vector<float> v(n);
  for (float &x : v)
    x = u(rng);
  return v;
}

// Each test compiles with the cache off, so the JIT really compiles.
RuntimeFlagsOverride noCache() { return {.useKernelCache = false}; }

} // namespace

TEST_CASE("tiered: the interpreter answers first, the JIT takes over with the same constants") {
  if (!runtimeInfo().cpuJitEnabled) {
    MESSAGE("skipped: cpu_jit unavailable");
    return;
  }
  ScopedRuntimeFlags scope(noCache());
  const size_t batch = 300;
  std::vector<float> z = inputs(kNodes.size() * batch), a(z.size()), want(z.size());
  auto layer = ActivationLayer::compile(kNodes, {.method = Method::CpuJit, .tiered = true});
  REQUIRE_OK_EXPECTED(layer);
  // A copy made before the switch shares the background compile.
  ActivationLayer copy = *layer;
  REQUIRE_OK(layer->forward(z, a, batch));
  REQUIRE_OK(layer->setConstant(1, "alpha", -2.0)); // set while (most likely) still interpreting
  REQUIRE_OK(layer->waitForCompile());
  CHECK(layer->method() == Method::CpuJit);
  CHECK(layer->compileInfo().method == Method::CpuJit);
  CHECK(layer->compileInfo().codegenMs > 0);
  CHECK(*layer->constant(1, "alpha") == -2.0);

  auto sync = ActivationLayer::compile(kNodes, {.method = Method::CpuJit});
  REQUIRE_OK_EXPECTED(sync);
  REQUIRE_OK(sync->setConstant(1, "alpha", -2.0));
  REQUIRE_OK(sync->forward(z, want, batch));
  REQUIRE_OK(layer->forward(z, a, batch));
  CHECK(a == want); // the JIT's own bits once it runs

  REQUIRE_OK(copy.waitForCompile());
  CHECK(copy.method() == Method::CpuJit);
  CHECK(*copy.constant(1, "alpha") == 1.5); // a copy owns its constants
  REQUIRE_OK(layer->waitForCompile()); // nothing pending: returns at once
}

TEST_CASE("tiered: the compile starts once the interpreter's time pays for it, at once when cheap, or when waited for") {
  if (!runtimeInfo().cpuJitEnabled) {
    MESSAGE("skipped: cpu_jit unavailable");
    return;
  }
  ScopedRuntimeFlags scope(noCache());
  auto cheap = ActivationLayer::compile({{"num*0.5 + 0.25", {}}}, {.method = Method::CpuJit, .tiered = true});
  REQUIRE_OK_EXPECTED(cheap);
  CHECK(cheap->compileInfo().compileEstimateMs < 50);
  CHECK(cheap->compileInfo().compileStarted);

  std::vector<NodeSpec> many;
  for (int k = 0; k < 300; ++k)
    many.push_back({fmt::format("sin(num*{})*{} + exp(num/{})", k + 2, k + 3, k + 4), {}});
  auto layer = ActivationLayer::compile(many, {.method = Method::CpuJit, .tiered = true});
  REQUIRE_OK_EXPECTED(layer);
  const double estimate = layer->compileInfo().compileEstimateMs;
  CHECK(estimate > 50);
  // One small call: the interpreter's time is far below the estimate.
  std::vector<float> z1 = inputs(many.size()), a1(z1.size());
  REQUIRE_OK(layer->forward(z1, a1, 1));
  CompileInfo info = layer->compileInfo();
  CHECK(info.interpreterMs > 0);
  CHECK(info.interpreterMs < estimate);
  CHECK_FALSE(info.compileStarted);
  CHECK(layer->method() == Method::CpuInterp);
  // Calls until the time the JIT would have saved pays for the compile.
  const size_t batch = 512;
  std::vector<float> z = inputs(many.size() * batch), a(z.size());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!layer->compileInfo().compileStarted && std::chrono::steady_clock::now() < deadline)
    REQUIRE_OK(layer->forward(z, a, batch));
  info = layer->compileInfo();
  CHECK(info.compileStarted);
  CHECK(info.interpreterMs * 0.4 >= estimate * 0.999); // the JIT saves 0.4 of it (math calls)
  REQUIRE_OK(layer->waitForCompile());
  CHECK(layer->method() == Method::CpuJit);

  auto waited = ActivationLayer::compile(many, {.method = Method::CpuJit, .tiered = true});
  REQUIRE_OK_EXPECTED(waited);
  CHECK_FALSE(waited->compileInfo().compileStarted);
  REQUIRE_OK(waited->waitForCompile());
  CHECK(waited->method() == Method::CpuJit);
  CHECK(waited->compileInfo().compileStarted);
}

TEST_CASE("tiered: kernels linked in the cache run at once") {
  if (!runtimeInfo().cpuJitEnabled || !detail::canLinkSharedObjects()) {
    MESSAGE("skipped: needs cpu_jit and a linker program");
    return;
  }
  TempCache cache;
  REQUIRE(ActivationLayer::compile(kNodes, {.method = Method::CpuJit}));
  flushKernelCache(); // the linked shared object
  auto layer = ActivationLayer::compile(kNodes, {.method = Method::CpuJit, .tiered = true});
  REQUIRE_OK_EXPECTED(layer);
  CHECK(layer->method() == Method::CpuJit);
  CHECK(layer->compileInfo().linkedFromCache);
}

TEST_CASE("tiered: strict mode and losses") {
  if (!runtimeInfo().cpuJitEnabled) {
    MESSAGE("skipped: cpu_jit unavailable");
    return;
  }
  ScopedRuntimeFlags scope(noCache());
  {
    ScopedRuntimeFlags strict({.strict = true});
    auto layer = ActivationLayer::compile(kNodes, {.method = Method::CpuJit, .tiered = true});
    REQUIRE_OK_EXPECTED(layer);
    CHECK(layer->method() == Method::CpuJit); // strict: a JIT failure must be an error at compile(), so no tiers
  }
  auto loss = Loss::compile("huber", {{"delta", 0.5}}, {.method = Method::CpuJit, .tiered = true});
  REQUIRE_OK_EXPECTED(loss);
  std::vector<float> yp = inputs(1000), yt(1000, 0.25f);
  auto first = loss->forward(yp, yt);
  REQUIRE_OK_EXPECTED(first);
  REQUIRE_OK(loss->waitForCompile());
  CHECK(loss->method() == Method::CpuJit);
  auto second = loss->forward(yp, yt);
  REQUIRE_OK_EXPECTED(second);
  CHECK(*second == doctest::Approx(*first).epsilon(1e-6));
}

TEST_CASE("the progress callback counts every kernel, in order, tiered or not") {
  if (!runtimeInfo().cpuJitEnabled) {
    MESSAGE("skipped: cpu_jit unavailable");
    return;
  }
  ScopedRuntimeFlags scope(noCache());
  std::vector<NodeSpec> nodes;
  for (int k = 1; k <= 30; ++k)
    nodes.push_back({fmt::format("tanh(num*{})", k), {}});
  for (bool tiered : {false, true}) {
    CAPTURE(tiered);
    std::mutex m;
    std::vector<std::pair<size_t, size_t>> seen;
    auto layer = ActivationLayer::compile(nodes, {.method = Method::CpuJit, .tiered = tiered,
                                                  .progress = [&](size_t done, size_t total) {
                                                    std::lock_guard lock(m);
                                                    seen.emplace_back(done, total);
                                                  }});
    REQUIRE_OK_EXPECTED(layer);
    REQUIRE_OK(layer->waitForCompile());
    std::lock_guard lock(m);
    REQUIRE(!seen.empty());
    CHECK(seen.back() == std::pair<size_t, size_t>(60, 60)); // 30 formulas x forward and backward
    for (size_t i = 1; i < seen.size(); ++i)
      CHECK(seen[i].first > seen[i - 1].first);
  }
}

namespace {
size_t openDescriptors() {
  size_t n = 0;
  for (auto &e : std::filesystem::directory_iterator("/proc/self/fd"))
    (void)e, ++n;
  return n;
}
size_t mappings() {
  std::ifstream f("/proc/self/maps");
  size_t n = 0;
  for (std::string line; std::getline(f, line);)
    ++n;
  return n;
}
// Until every background compile has ended (or 60 s).
bool backgroundIdle() {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (detail::backgroundTasksRunning() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return detail::backgroundTasksRunning() == 0;
}
} // namespace

// With the kernels linked in the cache a tiered layer loads them at once:
// dropped, it leaves nothing behind either.
TEST_CASE("tiered layers dropped before their code is adopted leave no descriptors or mappings behind") {
  if (!runtimeInfo().cpuJitEnabled || !detail::canLinkSharedObjects()) {
    MESSAGE("skipped: needs cpu_jit and a linker program (each tiered compile then loads a linked image)");
    return;
  }
  TempCache cache;
  REQUIRE(ActivationLayer::compile(kNodes, {.method = Method::CpuJit}));
  flushKernelCache(); // the linked image: every tiered compile below loads it from a memfd
  auto dropOne = [] { REQUIRE(ActivationLayer::compile(kNodes, {.method = Method::CpuJit, .tiered = true})); };
  // The first round also grows what the C library keeps for threads
  // (malloc arenas, cached stacks), up to its bounds.
  for (int i = 0; i < 40; ++i)
    dropOne();
  REQUIRE(backgroundIdle());
  size_t fds = openDescriptors(), maps = mappings();
  for (int i = 0; i < 40; ++i)
    dropOne();
  REQUIRE(backgroundIdle());
  CHECK(openDescriptors() == fds);
  CHECK(mappings() <= maps + 16); // 160 more when each image stayed loaded (4 mappings each)
}

TEST_CASE("a child forked while a tiered compile runs keeps the interpreter and exits at once") {
  if (!runtimeInfo().cpuJitEnabled) {
    MESSAGE("skipped: cpu_jit unavailable");
    return;
  }
  ScopedRuntimeFlags flags(noCache());
  std::vector<NodeSpec> many;
  for (int k = 0; k < 400; ++k)
    many.push_back({fmt::format("sin(num*{})*alpha + tanh(num)/{}", k + 2, k + 3), {{"alpha", 1.5}}});
  auto layer = ActivationLayer::compile(many, {.method = Method::CpuJit, .tiered = true});
  REQUIRE(layer);
  CHECK_FALSE(layer->compileInfo().compileStarted); // a long compile waits until it pays
  // Waiting starts it: the compile runs in the parent while it forks.
  std::thread waiter([&] { (void)layer->waitForCompile(); });
  auto started = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!layer->compileInfo().compileStarted && std::chrono::steady_clock::now() < started)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(layer->compileInfo().compileStarted);
  std::fflush(nullptr);
  pid_t kid = ::fork();
  if (kid == 0) {
    // No compile thread here: waiting returns at once with why, calls run
    // on the interpreter, and exit() (its handlers included) does not hang.
    Error e = layer->waitForCompile();
    bool ok = e && e.message().find("forked") != std::string::npos && layer->method() == Method::CpuInterp;
    std::vector<float> z(400 * 2, 0.5f), a(z.size());
    ok = ok && !layer->forward(z, a, 2);
    std::exit(ok ? 0 : 3);
  }
  REQUIRE(kid > 0);
  int status = -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (::waitpid(kid, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (::kill(kid, 0) == 0 && ::waitpid(kid, &status, WNOHANG) == 0) {
    ::kill(kid, SIGKILL);
    ::waitpid(kid, &status, 0);
    FAIL("the forked child hung");
  }
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  waiter.join();
  CHECK_FALSE(layer->waitForCompile()); // the parent's compile went on
  CHECK(layer->method() == Method::CpuJit);
}
