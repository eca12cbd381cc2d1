//===- test/Cache/CacheTestUtil.h - A temporary cache for one test -*- C++ -*-===//
#pragma once

#include "hsnn/Cache.h"
#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <doctest/doctest.h>
#include <filesystem>
#include <memory>
#include <stdlib.h>
#include <string>
#include <vector>

namespace hsnn::test {

namespace fs = std::filesystem;

// A fresh cache directory for one test, the runtime pointed at it.
struct TempCache {
  std::string dir;
  std::unique_ptr<ScopedRuntimeFlags> flags;
  std::vector<std::string> warnings;
  WarningHandler previous;
  TempCache() {
    char tmpl[] = "/tmp/hsnn-cache-test-XXXXXX";
    dir = std::string(::mkdtemp(tmpl)) + "/cache";
    RuntimeFlags f = runtimeFlags();
    f.cacheDir = dir;
    f.useKernelCache = true;
    flags = std::make_unique<ScopedRuntimeFlags>(RuntimeFlagsOverride::from(f));
    previous = setWarningHandler([this](std::string_view m) { warnings.emplace_back(m); });
  }
  ~TempCache() {
    flushKernelCache(); // no background link writing into the directory being removed
    setWarningHandler(previous);
    std::error_code ec;
    fs::remove_all(fs::path(dir).parent_path(), ec);
  }
  // The entries (every file but the cache's key).
  std::vector<fs::path> files() const {
    std::vector<fs::path> v;
    for (auto &e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file() && e.path() != fs::path(dir) / "key")
        v.push_back(e.path());
    return v;
  }
};

inline const std::vector<NodeSpec> kLayer = {{"gelu", {}}, {"sin(num)*alpha", {{"alpha", 2}}}, {"softplus", {}}};

inline Expected<ActivationLayer> build(const std::vector<NodeSpec> &nodes = kLayer, LayerOptions o = {}) {
  o.method = Method::CpuJit;
  return ActivationLayer::compile(nodes, o);
}

inline bool jitAvailable() {
  if (!runtimeInfo().cpuJitEnabled)
    MESSAGE("skipped: cpu_jit unavailable (" << runtimeInfo().cpuJitUnavailableReason << ")");
  return runtimeInfo().cpuJitEnabled;
}

inline std::vector<float> run(const ActivationLayer &layer) {
  std::vector<float> z(3 * 100), a(z.size());
  for (size_t i = 0; i < z.size(); ++i)
    z[i] = float(i % 17) * 0.3f - 2;
  REQUIRE_FALSE(static_cast<bool>(layer.forward(z, a, 100)));
  return a;
}


} // namespace hsnn::test
