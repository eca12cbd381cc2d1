//===- lib/Runtime/Runtime.cpp - Configuration, environment, fallbacks ----===//
#include "hsnn/Runtime.h"

#include "CPU/HostJIT.h"
#include "CUDA/Driver.h"
#include "GpuLayer.h"

#if HSNN_HAS_NVPTX
#include "CUDA/PTXCompiler.h"
#endif
#include "Warn.h"

#include <cstdlib>
#include <fmt/format.h>
#include <memory>
#include <mutex>
#include <optional>
#include <tbb/global_control.h>

namespace hsnn {
namespace {

bool envFlag(const char *name, bool fallback) {
  const char *v = std::getenv(name);
  if (!v || !*v)
    return fallback;
  std::string_view s(v);
  return !(s == "0" || s == "false" || s == "FALSE" || s == "off" || s == "OFF" || s == "no");
}

struct State {
  std::mutex mutex;
  RuntimeFlags flags;
  WarningHandler warn = [](std::string_view m) { fmt::print(stderr, "hsnn: warning: {}\n", m); };
  std::optional<tbb::global_control> threadLimit;

  State() {
    flags.useKernelCache = envFlag("HSNN_USE_KERNEL_CACHE", true);
    flags.strict = envFlag("HSNN_STRICT", false);
    if (const char *t = std::getenv("HSNN_NUM_THREADS"))
      flags.threads = unsigned(std::strtoul(t, nullptr, 10));
    if (const char *d = std::getenv("HSNN_CACHE_DIR"))
      flags.cacheDir = d;
    applyThreads();
  }
  void applyThreads() {
    threadLimit.reset();
    if (flags.threads)
      threadLimit.emplace(tbb::global_control::max_allowed_parallelism, flags.threads);
  }
};

State &state() {
  static State s;
  return s;
}

} // namespace

const RuntimeInfo &runtimeInfo() {
  static const RuntimeInfo info = [] {
    RuntimeInfo i;
    auto driver = detail::CudaDriver::get();
    if (!driver) {
      i.gpuUnavailableReason = driver.error().message();
    } else {
      i.cudaDriverVersion = (*driver)->driverVersion;
      for (const detail::GpuDevice &g : (*driver)->devices) {
        i.gpus.push_back({g.name, g.arch(), g.totalMemory, ""});
#if HSNN_HAS_NVPTX
        if (auto code = detail::ptxArchFor(g.ccMajor, g.ccMinor))
          i.gpus.back().codeArch = *code;
#endif
      }
      i.numGpus = int(i.gpus.size());
#if HSNN_HAS_NVPTX
      i.gpuEnabled = i.numGpus > 0;
#else
      i.gpuUnavailableReason = "this build has no NVPTX code generator (HSNN_ENABLE_JIT=OFF)";
#endif
    }
    auto jit = detail::HostJIT::get();
    i.cpuJitEnabled = bool(jit);
    if (jit) {
      i.cpuName = (*jit)->target().cpu;
      i.cpuCapability = (*jit)->target().capability;
    } else {
      i.cpuJitUnavailableReason = jit.error().message();
      i.cpuCapability = "DEFAULT";
    }
    i.defaultMethod = i.gpuEnabled ? Method::Cuda : i.cpuJitEnabled ? Method::CpuJit : Method::CpuInterp;
    return i;
  }();
  return info;
}

RuntimeFlags runtimeFlags() {
  State &s = state();
  std::lock_guard lock(s.mutex);
  return s.flags;
}

void setRuntimeFlags(const RuntimeFlags &flags) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  bool threadsChanged = flags.threads != s.flags.threads;
  s.flags = flags;
  if (threadsChanged)
    s.applyThreads();
}

ScopedRuntimeFlags::ScopedRuntimeFlags(const RuntimeFlags &flags) : saved_(runtimeFlags()) { setRuntimeFlags(flags); }
ScopedRuntimeFlags::~ScopedRuntimeFlags() { setRuntimeFlags(saved_); }

WarningHandler setWarningHandler(WarningHandler handler) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  WarningHandler old = std::move(s.warn);
  s.warn = handler ? std::move(handler) : [](std::string_view) {};
  return old;
}

namespace detail {
void warn(std::string_view message) {
  WarningHandler h;
  {
    State &s = state();
    std::lock_guard lock(s.mutex);
    h = s.warn;
  }
  h(message);
}
Expected<Method> gpuFailed(const Error &failure) {
  const RuntimeInfo &info = runtimeInfo();
  Method next = info.cpuJitEnabled ? Method::CpuJit : Method::CpuInterp;
  if (runtimeFlags().strict)
    return Error(failure.code(), "cuda failed (strict mode): " + failure.message());
  warn(fmt::format("cuda failed: {}; using {}", failure.message(), to_string(next)));
  return next;
}

Expected<Method> checkedMethod(Method asked, int optLevel, int gpuId) {
  if (optLevel < 0 || optLevel > 3)
    return Error(ErrorCode::InvalidArgument, fmt::format("optLevel must be 0..3, got {}", optLevel));
  auto method = resolveMethod(asked);
  if (!method)
    return method;
  if (Error e = checkGpuId(*method, gpuId))
    return e;
  return method;
}

Error jitFailed(const Error &failure) {
  // A kernel the JIT cannot build is a fallback like any other.
  if (runtimeFlags().strict)
    return Error(failure.code(), "cpu_jit failed (strict mode): " + failure.message());
  warn(fmt::format("cpu_jit failed: {}; using cpu_interp", failure.message()));
  return Error::success();
}
} // namespace detail

Expected<Method> parseMethod(std::string_view name) {
  if (name == "auto" || name == "AUTO")
    return Method::Auto;
  if (name == "cpu_jit" || name == "CPU_JIT")
    return Method::CpuJit;
  if (name == "cpu_interp" || name == "CPU_CPP" || name == "CPU_PYTHON" || name == "interp")
    return Method::CpuInterp;
  if (name == "cuda" || name == "GPU_CUDA")
    return Method::Cuda;
  return Error(ErrorCode::InvalidArgument,
               fmt::format("unknown method '{}'; use auto, cpu_jit, cpu_interp, cuda (or GPU_CUDA, CPU_JIT, CPU_CPP, "
                           "CPU_PYTHON)",
                           name));
}

Expected<Method> resolveMethod(Method asked) {
  const RuntimeInfo &info = runtimeInfo();
  if (asked == Method::Auto)
    return info.defaultMethod;
  bool strict = runtimeFlags().strict;
  auto stepDown = [&](Method m, const std::string &why, Method next) -> Expected<Method> {
    std::string msg = fmt::format("method {} is unavailable: {}", to_string(m), why);
    if (strict)
      return Error(ErrorCode::Unsupported, msg + " (strict mode)");
    detail::warn(fmt::format("{}; using {}", msg, to_string(next)));
    return next;
  };
  Method cpu = info.cpuJitEnabled ? Method::CpuJit : Method::CpuInterp;
  if (asked == Method::Cuda && !info.gpuEnabled)
    return stepDown(Method::Cuda, info.gpuUnavailableReason, cpu);
  if (asked == Method::CpuJit && !info.cpuJitEnabled)
    return stepDown(Method::CpuJit, info.cpuJitUnavailableReason, Method::CpuInterp);
  return asked;
}

} // namespace hsnn
