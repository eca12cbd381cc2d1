//===- test/Runtime/FallbackTest.cpp - Method selection and runtime flags ---===//
#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <cstdlib>
#include <doctest/doctest.h>
#include <string>
#include <vector>

using namespace hsnn;

namespace {
// Collects warnings for the lifetime of the object.
struct WarningLog {
  std::vector<std::string> messages;
  WarningHandler previous;
  WarningLog() {
    previous = setWarningHandler([this](std::string_view m) { messages.emplace_back(m); });
  }
  ~WarningLog() { setWarningHandler(previous); }
};
} // namespace

TEST_CASE("an unavailable method warns and steps down, and strict mode makes it an error") {
  const RuntimeInfo &info = runtimeInfo();
  // CUDA is not built yet, so it always steps down; the CPU JIT may be missing too (sanitizer builds).
  if (info.gpuEnabled) {
    MESSAGE("skipped: a GPU is present; this case covers machines without one (the GPU tests cover the rest)");
    return;
  }
  Method cpu = info.cpuJitEnabled ? Method::CpuJit : Method::CpuInterp;
  {
    WarningLog log;
    auto layer = ActivationLayer::compile({{"relu", {}}}, {.method = Method::Cuda});
    REQUIRE(layer);
    CHECK(layer->method() == cpu);
    REQUIRE(log.messages.size() == 1);
    CHECK(log.messages[0] == "method cuda is unavailable: " + info.gpuUnavailableReason + "; using " +
                                 std::string(to_string(cpu)));
  }
  {
    ScopedRuntimeFlags strict({.strict = true});
    WarningLog log;
    auto layer = ActivationLayer::compile({{"relu", {}}}, {.method = Method::Cuda});
    REQUIRE_FALSE(layer);
    CHECK(layer.error().message() == "method cuda is unavailable: " + info.gpuUnavailableReason + " (strict mode)");
    CHECK(log.messages.empty());
    auto loss = Loss::compile("mse", {}, {.method = Method::Cuda});
    REQUIRE_FALSE(loss);
  }
  CHECK_FALSE(runtimeFlags().strict); // the scope restored it
  if (!info.cpuJitEnabled) {
    WarningLog log;
    auto layer = ActivationLayer::compile({{"relu", {}}}, {.method = Method::CpuJit});
    REQUIRE(layer);
    CHECK(layer->method() == Method::CpuInterp);
    REQUIRE(log.messages.size() == 1);
    CHECK(log.messages[0] == "method cpu_jit is unavailable: " + info.cpuJitUnavailableReason + "; using cpu_interp");
  }
}

TEST_CASE("auto picks the best available method without a warning") {
  WarningLog log;
  auto layer = ActivationLayer::compile({{"relu", {}}});
  REQUIRE(layer);
  CHECK(layer->method() == runtimeInfo().defaultMethod);
  CHECK(log.messages.empty());
  CHECK(runtimeInfo().defaultMethod == (runtimeInfo().gpuEnabled     ? Method::Cuda
                                        : runtimeInfo().cpuJitEnabled ? Method::CpuJit
                                                                      : Method::CpuInterp));
}

TEST_CASE("method names, the seed's included") {
  CHECK(*parseMethod("GPU_CUDA") == Method::Cuda);
  CHECK(*parseMethod("CPU_JIT") == Method::CpuJit);
  CHECK(*parseMethod("CPU_CPP") == Method::CpuJit); // the seed's CPU names: one meaning, the JIT
  CHECK(*parseMethod("CPU_PYTHON") == Method::CpuJit);
  CHECK(*parseMethod("auto") == Method::Auto);
  CHECK(parseMethod("gpu").error().message() ==
        "unknown method 'gpu'; use auto, cpu_jit, cpu_interp, cuda (or GPU_CUDA, CPU_JIT, CPU_CPP, CPU_PYTHON)");
}

TEST_CASE("scoped flags restore what they replaced") {
  RuntimeFlags before = runtimeFlags();
  {
    ScopedRuntimeFlags s({.useKernelCache = false, .strict = true, .threads = 1, .cacheDir = "/tmp/x"});
    CHECK(runtimeFlags().threads == 1);
    CHECK(runtimeFlags().cacheDir == "/tmp/x");
    CHECK_FALSE(runtimeFlags().useKernelCache);
  }
  CHECK(runtimeFlags().threads == before.threads);
  CHECK(runtimeFlags().cacheDir == before.cacheDir);
  CHECK(runtimeFlags().useKernelCache == before.useKernelCache);
}

TEST_CASE("without a driver the CUDA method reports why, and strict mode refuses it") {
  const RuntimeInfo &info = runtimeInfo();
  if (const char *lib = std::getenv("HSNN_CUDA_LIBRARY")) {
    // ctest runs this case again with HSNN_CUDA_LIBRARY=/nonexistent.
    CHECK(info.gpuUnavailableReason.rfind(std::string("no CUDA driver: cannot load ") + lib + " (", 0) == 0);
    CHECK(info.numGpus == 0);
  }
  if (info.gpuEnabled) {
    MESSAGE("skipped: a GPU is present");
    return;
  }
  CHECK_FALSE(info.gpuUnavailableReason.empty());
  ScopedRuntimeFlags strict({.strict = true});
  auto layer = ActivationLayer::compile({{"relu", {}}}, {.method = Method::Cuda});
  REQUIRE_FALSE(layer);
  CHECK(layer.error().code() == ErrorCode::Unsupported);
}
