//===- lib/Runtime/Runtime.cpp - Configuration, environment, fallbacks ----===//
#include "hsnn/Runtime.h"
#include "hsnn/Environment.h"

#include "CodeGen/HostJIT.h"
#include "CPU/RowCalibration.h"
#include "LayerState.h"
#include "CPU/SharedObject.h"
#include "CodeGenModule/CodeGenModule.h"
#include "CUDA/Driver.h"
#include "Cache/ObjectCache.h"
#include "RunGuard.h"

#if HSNN_HAS_NVPTX
#include "CodeGen/PTXCompiler.h"
#endif
#include "Warn.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <memory>
#include <mutex>
#include <optional>
#include <tbb/global_control.h>

namespace hsnn {
namespace {

constexpr unsigned kMaxThreads = RunGuard::kMaxThreads;

// A boolean variable: 0/1, true/false, on/off, yes/no in any case. Anything
// else is reported and the default used.
bool envFlag(EnvironmentVariable var, bool fallback, std::vector<std::string> &warnings) {
  const char *name = environmentVariableName(var);
  const char *v = environmentValue(var);
  if (!v || !*v)
    return fallback;
  std::string s(v);
  for (char &c : s)
    c = char(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "on" || s == "yes")
    return true;
  if (s == "0" || s == "false" || s == "off" || s == "no")
    return false;
  warnings.push_back(fmt::format("{}='{}' is not a valid value: use 0 or 1 (also true/false, on/off, yes/no); using {}",
                                 name, v, fallback ? 1 : 0));
  return fallback;
}

unsigned envThreads(std::vector<std::string> &warnings) {
  const char *v = environmentValue(EnvironmentVariable::NumThreads);
  if (!v || !*v)
    return 0;
  unsigned n = 0;
  auto [p, ec] = std::from_chars(v, v + std::strlen(v), n);
  if (ec != std::errc() || *p || n > kMaxThreads) {
    warnings.push_back(fmt::format("HSNN_NUM_THREADS='{}' is not a valid value: use a whole number from 0 (all cores) "
                                   "to {}; using all cores",
                                   v, kMaxThreads));
    return 0;
  }
  return n;
}

struct State {
  std::mutex mutex;
  RuntimeFlags flags;
  WarningHandler warn = [](std::string_view m) { fmt::print(stderr, "hsnn: warning: {}\n", m); };
  std::optional<tbb::global_control> threadLimit;
  std::vector<std::string> envWarnings; // given once the state exists

  State() {
    flags.useKernelCache = envFlag(EnvironmentVariable::UseKernelCache, true, envWarnings);
    flags.strict = envFlag(EnvironmentVariable::Strict, false, envWarnings);
    flags.threads = envThreads(envWarnings);
    if (const char *d = environmentValue(EnvironmentVariable::CacheDir))
      flags.cacheDir = d;
    applyThreads();
  }
  void applyThreads() {
    threadLimit.reset();
    if (flags.threads)
      threadLimit.emplace(tbb::global_control::max_allowed_parallelism, flags.threads);
  }
};

// Never destroyed: layers and losses held in globals are destroyed at exit,
// after function-local statics, and may still warn or read the flags.
State &state() {
  static State *s = [] {
    auto *st = new State;
    for (const std::string &w : st->envWarnings)
      st->warn(w);
    return st;
  }();
  return *s;
}

} // namespace

std::string_view to_string(Reduction r) { return r == Reduction::Mean ? "mean" : r == Reduction::Sum ? "sum" : "none"; }
std::string_view to_string(Method m) {
  switch (m) {
  case Method::Auto: return "auto";
  case Method::CpuJit: return "cpu_jit";
  case Method::CpuInterp: return "cpu_interp";
  case Method::Cuda: return "cuda";
  }
  return "?";
}

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
    i.codeGenerator = detail::codeGenModulePath();
    if (i.cpuJitEnabled && detail::canLinkSharedObjects())
      i.cacheLinker = detail::linkerProgram();
    i.defaultMethod = i.gpuEnabled ? Method::Cuda : i.cpuJitEnabled ? Method::CpuJit : Method::CpuInterp;
    return i;
  }();
  return info;
}

RowKernelShape rowKernelShape() {
  RowKernelShape out;
  auto fixed = detail::rowShapeOverride();
  if (!fixed) {
    out.source = fixed.error().message();
    return out;
  }
  if (*fixed) {
    out.shape = detail::to_string(**fixed);
    out.source = environmentVariableName(EnvironmentVariable::RowShape);
    return out;
  }
  if (!runtimeInfo().cpuJitEnabled) {
    out.source = "no cpu_jit here";
    return out;
  }
  if (auto chosen = detail::processRowShape()) {
    out.shape = detail::to_string(chosen->shape);
    out.source = chosen->measured ? "measured on this host" : "fixed for this CPU: it could not be measured";
    out.timings = chosen->timings;
    return out;
  }
  auto stored = detail::storedRowShape(detail::cacheConfig());
  if (!stored) {
    out.source = "not measured yet: measured at the first batch-major compile that misses the cache";
    return out;
  }
  out.shape = detail::to_string(stored->first);
  out.source = "measured on this host";
  out.timings = stored->second.substr(stored->second.find('\n') + 1);
  return out;
}

RuntimeFlags runtimeFlags() {
  State &s = state();
  std::lock_guard lock(s.mutex);
  return s.flags;
}

void setRuntimeFlags(const RuntimeFlags &flags) {
  RuntimeFlags f = flags;
  if (f.threads > kMaxThreads) {
    detail::warn(fmt::format("threads = {} is more than {}; using {}", f.threads, kMaxThreads, kMaxThreads));
    f.threads = kMaxThreads;
  }
  State &s = state();
  std::lock_guard lock(s.mutex);
  bool threadsChanged = f.threads != s.flags.threads;
  s.flags = std::move(f);
  if (threadsChanged)
    s.applyThreads();
}

RuntimeFlags updateRuntimeFlags(const RuntimeFlagsOverride &changes) {
  RuntimeFlags old = runtimeFlags(), f = old;
  if (changes.useKernelCache)
    f.useKernelCache = *changes.useKernelCache;
  if (changes.strict)
    f.strict = *changes.strict;
  if (changes.threads)
    f.threads = *changes.threads;
  if (changes.cacheDir)
    f.cacheDir = *changes.cacheDir;
  setRuntimeFlags(f);
  return old;
}

ScopedRuntimeFlags::ScopedRuntimeFlags(const RuntimeFlagsOverride &changes) : saved_(updateRuntimeFlags(changes)) {}
ScopedRuntimeFlags::~ScopedRuntimeFlags() { setRuntimeFlags(saved_); }

WarningHandler setWarningHandler(WarningHandler handler) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  WarningHandler old = std::move(s.warn);
  s.warn = handler ? std::move(handler) : [](std::string_view) {};
  return old;
}

namespace detail {
std::vector<std::string> environmentWarnings() { return state().envWarnings; }

void warn(std::string_view message) {
  WarningHandler h;
  {
    State &s = state();
    std::lock_guard lock(s.mutex);
    h = s.warn;
  }
  h(message);
}
} // namespace detail

// The public cache functions: the runtime's directory, the cache's rules.
std::string kernelCacheDir() {
  std::string dir = runtimeFlags().cacheDir;
  if (!dir.empty())
    return dir;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/hsnn";
  if (const char *h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/hsnn";
  return "";
}
Expected<std::vector<CacheEntryInfo>> listKernelCache() { return detail::listCacheEntries(kernelCacheDir()); }
Error clearKernelCache(CacheCategory category) { return detail::clearCacheEntries(kernelCacheDir(), category); }
void flushKernelCache() { detail::waitForLinkedStores(); }
void setKernelCacheLimit(uint64_t bytes) { detail::setCacheLimit(bytes); }

Expected<Method> parseMethod(std::string_view name) {
  if (name == "auto" || name == "AUTO")
    return Method::Auto;
  // The seed's three CPU names are one thing here: hsnn's CPU JIT (which
  // steps down to the interpreter, saying so, where it cannot run).
  if (name == "cpu_jit" || name == "CPU_JIT" || name == "CPU_CPP" || name == "CPU_PYTHON")
    return Method::CpuJit;
  if (name == "cpu_interp" || name == "interp")
    return Method::CpuInterp;
  if (name == "cuda" || name == "GPU_CUDA")
    return Method::Cuda;
  return Error(ErrorCode::InvalidArgument,
               fmt::format("unknown method '{}'; use auto, cpu_jit, cpu_interp, cuda (or GPU_CUDA, CPU_JIT, CPU_CPP, "
                           "CPU_PYTHON)",
                           name));
}

Expected<Method> resolveMethod(Method asked) {
  // The CPU methods need no GPU probe (loading the CUDA driver and cuInit
  // take from a millisecond to hundreds of them).
  if (asked == Method::CpuInterp)
    return asked;
  if (asked == Method::CpuJit) {
    if (detail::HostJIT::available())
      return asked;
  }
  // runtimeInfo()'s choice, without what it asks the code generator (the
  // CPU's name, the GPUs' code architectures): loading LLVM would be most of
  // a cache hit. Where the module then cannot load, the compile falls back
  // to cpu_interp with the usual warning.
  if (asked == Method::Auto) {
#if HSNN_HAS_NVPTX
    if (auto driver = detail::CudaDriver::get(); driver && !(*driver)->devices.empty())
      return Method::Cuda;
#endif
    return detail::HostJIT::available() ? Method::CpuJit : Method::CpuInterp;
  }
  const RuntimeInfo &info = runtimeInfo();
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
