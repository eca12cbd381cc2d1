//===- lib/CUDA/Driver.cpp - The CUDA driver API, loaded at run time ------===//
#include "Driver.h"

#include "hsnn/Environment.h"

#include <algorithm>
#include <cstdlib>
#include <dlfcn.h>
#include <atomic>
#include <fmt/format.h>
#include <mutex>

namespace hsnn::detail {
namespace {
constexpr int kAttrComputeCapabilityMajor = 75, kAttrComputeCapabilityMinor = 76, kAttrMultiprocessorCount = 16;

// The groups of DriverEntryPoints.def.
enum EntryGroup { Required, Link, AsyncAlloc, kEntryGroups };

template <class F> bool resolve(void *lib, const char *name, F &fn) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  return fn != nullptr;
}
} // namespace

std::string CudaDriver::errorString(CUresult r) const {
  const char *s = nullptr;
  if (cuGetErrorString && cuGetErrorString(r, &s) == 0 && s)
    return fmt::format("{} (CUresult {})", s, r);
  return fmt::format("CUresult {}", r);
}

namespace {
std::atomic<bool> gExiting{false};
} // namespace

bool CudaDriver::exiting() { return gExiting.load(std::memory_order_relaxed); }

Expected<const CudaDriver *> CudaDriver::get() {
  // Never destroyed, like the driver library itself (never dlclose'd).
  static std::once_flag once;
  static CudaDriver &driver = *new CudaDriver;
  static Error &failure = *new Error;
  std::call_once(once, [] {
    const char *name = hsnn::environmentValue(hsnn::EnvironmentVariable::CudaLibrary);
    if (!name || !*name)
      name = "libcuda.so.1";
    void *lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *why = ::dlerror();
      failure = Error(ErrorCode::Unsupported, fmt::format("no CUDA driver: cannot load {} ({})", name, why ? why : "?"));
      return;
    }
    // Registered after the library's own exit handlers, so it runs before
    // them: from then on device memory and modules are left to the process
    // exit (a layer held in a global is destroyed after the driver's state).
    std::atexit([] { gExiting = true; });
    CudaDriver d;
    // Each group (DriverEntryPoints.def) is all there, or an optional one is not used.
    bool all[kEntryGroups] = {true, true, true};
#define HSNN_CUDA_ENTRY(member, symbol, group, params) all[group] = resolve(lib, #symbol, d.member) && all[group];
#include "DriverEntryPoints.def"
    bool ok = all[Required];
    if (!all[Link]) // the cache then keeps PTX
      d.cuLinkCreate = nullptr;
    if (!all[AsyncAlloc])
      d.cuMemAllocAsync = nullptr, d.cuMemFreeAsync = nullptr;
    d.library = name;
    if (!ok) {
      failure = Error(ErrorCode::Unsupported, fmt::format("driver too old: {} lacks a required entry point", name));
      return;
    }
    if (CUresult r = d.cuInit(0)) {
      failure = Error(ErrorCode::Unsupported, fmt::format("cuInit failed: {}", d.errorString(r)));
      return;
    }
    d.cuDriverGetVersion(&d.driverVersion);
    int count = 0;
    if (CUresult r = d.cuDeviceGetCount(&count); r || count == 0) {
      failure = Error(ErrorCode::Unsupported, r ? fmt::format("cuDeviceGetCount failed: {}", d.errorString(r))
                                                : std::string("no CUDA device"));
      return;
    }
    for (int i = 0; i < count; ++i) {
      CUdevice dev;
      GpuDevice g;
      g.ordinal = i;
      char nameBuf[256] = {};
      if (d.cuDeviceGet(&dev, i) || d.cuDeviceGetName(nameBuf, sizeof nameBuf - 1, dev) ||
          d.cuDeviceGetAttribute(&g.ccMajor, kAttrComputeCapabilityMajor, dev) ||
          d.cuDeviceGetAttribute(&g.ccMinor, kAttrComputeCapabilityMinor, dev) ||
          d.cuDeviceGetAttribute(&g.multiprocessors, kAttrMultiprocessorCount, dev) || d.cuDeviceTotalMem(&g.totalMemory, dev))
        continue;
      g.name = nameBuf;
      d.devices.push_back(g);
    }
    driver = d;
  });
  if (failure)
    return failure;
  return &driver;
}

int maxPtxIsa(int driverVersion) {
  int major = driverVersion / 1000, minor = driverVersion % 1000 / 10;
  // From the PTX ISA release notes: CUDA 11.x ships ISA 7.x, 12.0-12.5 ship
  // 8.0-8.5, 12.6 also 8.5, 12.7 8.6, 12.8 8.7, 12.9 8.8, 13.x 9.x.
  if (major < 11)
    return 0;
  if (major == 11)
    return 70 + std::min(minor, 8);
  if (major == 12)
    return minor <= 5 ? 80 + minor : minor == 6 ? 85 : 80 + minor - 1;
  return 90 + (major - 13) * 10 + minor;
}

std::string driverVersionString(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }

Expected<CUcontext> CudaDriver::context(int ordinal) const {
  static std::mutex mutex;
  static std::vector<CUcontext> contexts;
  std::lock_guard lock(mutex);
  if (ordinal < 0 || size_t(ordinal) >= devices.size())
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("device {} does not exist; valid devices are 0..{}", ordinal, int(devices.size()) - 1));
  contexts.resize(devices.size(), nullptr);
  if (!contexts[size_t(ordinal)]) {
    CUcontext ctx = nullptr;
    if (CUresult r = cuDevicePrimaryCtxRetain(&ctx, devices[size_t(ordinal)].ordinal))
      return Error(ErrorCode::Unsupported,
                   fmt::format("cuDevicePrimaryCtxRetain on cuda:{} failed: {}", ordinal, errorString(r)));
    contexts[size_t(ordinal)] = ctx;
  }
  return contexts[size_t(ordinal)];
}

} // namespace hsnn::detail
