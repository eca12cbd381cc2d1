//===- test/Runtime/GlobalTeardown.cpp - Layers and losses held in globals ===//
//
// Built and run by ctest (global_teardown) against the stand-in driver: the
// globals below (one compiled before main) are destroyed after main returns, after the engine's own
// statics; the process must exit 0 without a crash or an abort.
//
//===----------------------------------------------------------------------===//
#include <hsnn/Layer.h>
#include <hsnn/Runtime.h>

#include <cstdio>
#include <optional>
#include <vector>

namespace {
// Compiled during static initialisation, before main and before other
// files' statics may be ready.
hsnn::Expected<hsnn::ActivationLayer> gStaticLayer =
    hsnn::ActivationLayer::compile({{"gelu", {}}, {"leaky_relu", {}}}, {.method = hsnn::Method::CpuJit});
std::optional<hsnn::ActivationLayer> gJitLayer, gInterpLayer, gGpuLayer;
std::optional<hsnn::Loss> gJitLoss, gGpuLoss;

template <class T> bool keep(std::optional<T> &slot, hsnn::Expected<T> made, const char *what) {
  if (!made) {
    std::fprintf(stderr, "%s: %s\n", what, made.error().message().c_str());
    return false;
  }
  slot.emplace(std::move(*made));
  return true;
}
} // namespace

int main() {
  using namespace hsnn;
  if (!gStaticLayer)
    return std::fprintf(stderr, "static layer: %s\n", gStaticLayer.error().message().c_str()), 1;
  std::vector<NodeSpec> nodes = {{"gelu", {}}, {"sin(num)*alpha", {{"alpha", 2}}}};
  bool ok = keep(gJitLayer, ActivationLayer::compile(nodes, {.method = Method::CpuJit}), "cpu_jit layer") &&
            keep(gInterpLayer, ActivationLayer::compile(nodes, {.method = Method::CpuInterp}), "interp layer") &&
            keep(gJitLoss, Loss::compile("huber", {}, {.method = Method::CpuJit}), "cpu_jit loss");
  if (!ok)
    return 1;
  std::vector<float> z(2 * 8, 0.5f), a(z.size());
  if (Error e = gJitLayer->forward(z, a, 8))
    return std::fprintf(stderr, "%s\n", e.message().c_str()), 1;
  // The cuda method where the (stand-in) driver has a GPU.
  if (runtimeInfo().gpuEnabled) {
    if (!keep(gGpuLayer, ActivationLayer::compile(nodes, {.method = Method::Cuda}), "cuda layer") ||
        !keep(gGpuLoss, Loss::compile("mse", {}, {.method = Method::Cuda}), "cuda loss"))
      return 1;
    if (Error e = gGpuLayer->forward(z, a, 8))
      return std::fprintf(stderr, "%s\n", e.message().c_str()), 1;
  }
  // A tiered layer leaked while its JIT still compiles (cache off, so it
  // really compiles): exit must wait for the background compile.
  if (runtimeInfo().cpuJitEnabled) {
    ScopedRuntimeFlags noCache({.useKernelCache = false});
    std::vector<NodeSpec> many;
    for (int k = 1; k <= 40; ++k)
      many.push_back({"tanh(num*" + std::to_string(k) + ")*sin(num)", {}});
    auto tiered = ActivationLayer::compile(many, {.method = Method::CpuJit, .tiered = true});
    if (!tiered)
      return std::fprintf(stderr, "%s\n", tiered.error().message().c_str()), 1;
    new ActivationLayer(std::move(*tiered)); // never destroyed
  }
  std::printf("teardown: ready (cuda %s)\n", runtimeInfo().gpuEnabled ? "on" : "off");
  return 0;
}
