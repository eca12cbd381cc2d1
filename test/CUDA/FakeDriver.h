//===- test/CUDA/FakeDriver.h - The GPU engine's tests against the stand-in driver -*- C++ -*-===//
//
// What the tests that run against test/CUDA/FakeDriver.cpp's library share:
// the environment that points the engine at it (set before anything opens
// a driver), its counters and launch log, and a private kernel cache.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "TestUtil.h"

#include "hsnn/Runtime.h"

#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>

namespace hsnn::test {

#ifndef HSNN_PTXAS
#define HSNN_PTXAS ""
#endif

// Before anything opens the driver: the fake one, with four devices (the
// environment may override the driver version, as fake_cuda_old_driver does).
inline const bool kFakeDriverConfigured = [] {
  ::setenv("HSNN_CUDA_LIBRARY", HSNN_FAKE_CUDA_LIBRARY, 1);
  ::setenv("HSNN_FAKE_CUDA_DEVICES", "9.0,9.0,8.0,10.0", 1);
  if (*HSNN_PTXAS)
    ::setenv("HSNN_FAKE_CUDA_PTXAS", HSNN_PTXAS, 0);
  return true;
}();

// The fake driver's counters, from the copy the engine loaded.
struct Fake {
  void *lib = nullptr;
  Fake() {
    REQUIRE(kFakeDriverConfigured);
    (void)runtimeInfo(); // the engine opens the driver first
    lib = ::dlopen(HSNN_FAKE_CUDA_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
    REQUIRE_MESSAGE(lib, "the engine did not load the fake driver");
  }
  ~Fake() {
    if (lib)
      ::dlclose(lib);
  }
  int count(const char *what) const {
    auto fn = reinterpret_cast<int (*)(const char *)>(::dlsym(lib, "hsnnFakeCudaCount"));
    return fn(what);
  }
  std::string launches() const {
    return reinterpret_cast<const char *(*)()>(::dlsym(lib, "hsnnFakeCudaLaunches"))();
  }
  std::string lastTarget() const {
    return reinterpret_cast<const char *(*)()>(::dlsym(lib, "hsnnFakeCudaLastTarget"))();
  }
  std::string lastPtx() const { return reinterpret_cast<const char *(*)()>(::dlsym(lib, "hsnnFakeCudaLastPtx"))(); }
  uintptr_t lastStream() const { return reinterpret_cast<uintptr_t (*)()>(::dlsym(lib, "hsnnFakeCudaLastStream"))(); }
  void clearLaunches() const { reinterpret_cast<void (*)()>(::dlsym(lib, "hsnnFakeCudaClearLaunches"))(); }
};

inline bool cudaMethodAvailable() {
  const RuntimeInfo &info = runtimeInfo();
  if (!info.gpuEnabled)
    MESSAGE("skipped: the cuda method is unavailable in this build (" << info.gpuUnavailableReason << ")");
  return info.gpuEnabled;
}

// A fresh, private cache directory for one test.
struct TempCache {
  std::filesystem::path dir;
  std::unique_ptr<ScopedRuntimeFlags> flags;
  explicit TempCache(bool enabled = true) {
    dir = std::filesystem::temp_directory_path() / ("hsnn-fake-gpu-cache-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    RuntimeFlags f = runtimeFlags();
    f.cacheDir = dir.string();
    f.useKernelCache = enabled;
    flags = std::make_unique<ScopedRuntimeFlags>(RuntimeFlagsOverride::from(f));
  }
  ~TempCache() {
    flags.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

} // namespace hsnn::test
