//===- test/Runtime/TieredExitProbe.cpp - Exit while a tiered compile runs ===//
//
// Starts a tiered compile of N distinct formulas (the cache off, so the JIT
// really compiles), makes one call (served by the interpreter), starts the
// compile (a thread waits for it) and returns from main at once, while the
// JIT is still loading LLVM or compiling; with
// "wait" it waits for the compile first (the reference time). Prints
// nothing; exits 0. tiered_exit.sh runs it and times it.
//===----------------------------------------------------------------------===//
#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char **argv) {
  using namespace hsnn;
  size_t n = argc > 1 ? std::stoul(argv[1]) : 500;
  bool wait = argc > 2 && std::string(argv[2]) == "wait";
  setRuntimeFlags({.useKernelCache = false});
  std::vector<NodeSpec> nodes;
  for (size_t k = 0; k < n; ++k)
    nodes.push_back({"sin(num*" + std::to_string(k + 2) + ")*alpha + tanh(num)/" + std::to_string(k + 3), {{"alpha", 1.5}}});
  auto layer = ActivationLayer::compile(nodes, {.method = Method::CpuJit, .tiered = true});
  if (!layer) {
    std::fprintf(stderr, "%s\n", layer.error().message().c_str());
    return 1;
  }
  std::vector<float> z(n * 4, 0.5f), a(z.size());
  if (Error e = layer->forward(z, a, 4)) {
    std::fprintf(stderr, "%s\n", e.message().c_str());
    return 1;
  }
  if (wait)
    return layer->waitForCompile() ? 1 : 0;
  // A compile this long waits until it pays; a waiter starts it.
  std::thread([copy = *layer] { (void)copy.waitForCompile(); }).detach(); // a copy: it outlives main
  while (!layer->compileInfo().compileStarted)
    std::this_thread::yield();
  return 0; // exit, with the JIT's thread still at work
}
