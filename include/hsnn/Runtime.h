//===- hsnn/Runtime.h - Detected facts, flags and fallback policy -*- C++ -*-===//
//
// What this process can run (GPU, CPU JIT, CPU capability) and the user
// flags that steer it. The flags' defaults come from HSNN_USE_KERNEL_CACHE,
// HSNN_STRICT, HSNN_NUM_THREADS and HSNN_CACHE_DIR; every environment
// variable hsnn reads is in the one table of docs/guide/configuration.md
// (the ctest docs_drift keeps the two in step).
// A value that cannot be read is reported through the warning handler,
// naming the variable and the accepted values, and the default is used.
// When the method asked for is unavailable, hsnn warns through the warning
// handler (stderr by default) and steps down (cuda > cpu_jit > cpu_interp);
// in strict mode it returns an error instead. It never falls back silently.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Error.h"
#include "hsnn/Layer.h"

#include <functional>
#include <optional>
#include <vector>
#include <string>
#include <string_view>

namespace hsnn {

/// User flags. Defaults come from the environment at first use.
struct RuntimeFlags {
  bool useKernelCache = true; ///< HSNN_USE_KERNEL_CACHE
  bool strict = false;        ///< HSNN_STRICT: fallbacks become errors; unused constants too
  unsigned threads = 0;       ///< HSNN_NUM_THREADS; 0: all cores; at most 1024
  std::string cacheDir;       ///< HSNN_CACHE_DIR; empty: $XDG_CACHE_HOME/hsnn or ~/.cache/hsnn
};

/// Facts detected once per process.
struct GpuInfo {
  std::string name;
  std::string arch; ///< sm_XY from the compute capability
  size_t totalMemory = 0;
  std::string codeArch; ///< The sm_XY hsnn generates PTX for on it; empty when it cannot
};

struct RuntimeInfo {
  bool gpuEnabled = false;     ///< The cuda method can run here.
  int numGpus = 0;             ///< Devices the driver reports (even when the method cannot run).
  std::vector<GpuInfo> gpus;
  int cudaDriverVersion = 0;   ///< e.g. 13000; 0 without a driver
  std::string gpuUnavailableReason;
  bool cpuJitEnabled = false;
  std::string cpuJitUnavailableReason;
  std::string cpuName;       ///< LLVM's name for the host CPU, e.g. skylake-avx512
  std::string cpuCapability; ///< AVX512, AVX2 or DEFAULT
  /// The program that links a cpu_jit layer's cached objects into one
  /// shared object (HSNN_LINKER, else the build's); empty when none runs.
  std::string cacheLinker;
  /// The code generator module (libhsnn-codegen.so: LLVM, loaded on the
  /// first compile) in use; empty when it cannot be loaded (the reason is
  /// cpuJitUnavailableReason).
  std::string codeGenerator;
  Method defaultMethod = Method::CpuInterp;
};

const RuntimeInfo &runtimeInfo();

/// The shape of cpu_jit's batch-major row kernels (blocks a pass x bytes
/// prefetched ahead, e.g. "4x0"): chosen by timing the candidates on this
/// host at the first batch-major compile that misses the cache, stored in
/// the kernel cache; HSNN_ROW_SHAPE fixes one instead. Speed only: every
/// shape gives the same bits.
struct RowKernelShape {
  std::string shape;  ///< Empty: not measured yet (and HSNN_ROW_SHAPE unset).
  std::string source; ///< "HSNN_ROW_SHAPE", "measured on this host", or why there is none.
  /// Measured: each candidate's time on the probe layer (ms, forward +
  /// backward), one "SHAPE MS" a line.
  std::string timings;
};
/// What a batch-major compile would use now; measures nothing.
RowKernelShape rowKernelShape();

RuntimeFlags runtimeFlags();
void setRuntimeFlags(const RuntimeFlags &flags);

/// Changes to some flags; the fields left empty keep their value.
struct RuntimeFlagsOverride {
  // Default initializers keep -Wextra quiet about the fields left out.
  std::optional<bool> useKernelCache = {};
  std::optional<bool> strict = {};
  std::optional<unsigned> threads = {};
  std::optional<std::string> cacheDir = {};

  /// Every field of `flags`.
  static RuntimeFlagsOverride from(const RuntimeFlags &flags) {
    return {flags.useKernelCache, flags.strict, flags.threads, flags.cacheDir};
  }
};

/// Applies the fields `changes` sets and returns the flags as they were.
RuntimeFlags updateRuntimeFlags(const RuntimeFlagsOverride &changes);

/// Changes the flags it names (only those) and restores the flags it found
/// when it goes out of scope: ScopedRuntimeFlags strict({.strict = true});
class ScopedRuntimeFlags {
public:
  explicit ScopedRuntimeFlags(const RuntimeFlagsOverride &changes);
  ~ScopedRuntimeFlags();
  ScopedRuntimeFlags(const ScopedRuntimeFlags &) = delete;
  ScopedRuntimeFlags &operator=(const ScopedRuntimeFlags &) = delete;

private:
  RuntimeFlags saved_;
};

/// A thread pool of the application's that hsnn's CPU kernels may spread
/// their work over instead of hsnn's own (TBB) threads: two pools on the
/// same cores compete. PyTorch's OpenMP threads spin for a while after each
/// op, and hsnn's kernels called between PyTorch ops ran several times
/// slower beside them (on 2 cores); hsnn.torch hands PyTorch's pool.
struct ParallelFor {
  /// Calls body(ctx, begin, end) over disjoint ranges that cover
  /// [0, tasks), of at least `grain` tasks where there are enough, and
  /// returns when all are done. Must not throw.
  void (*run)(void *pool, size_t tasks, size_t grain, void (*body)(void *ctx, size_t begin, size_t end),
              void *ctx) = nullptr;
  void *pool = nullptr;
};

/// While it lives, the kernels this thread calls spread their work with
/// `pool` (a default ParallelFor: hsnn's threads); nested scopes restore
/// the one they found.
class ScopedParallelFor {
public:
  explicit ScopedParallelFor(const ParallelFor &pool);
  ~ScopedParallelFor();
  ScopedParallelFor(const ScopedParallelFor &) = delete;
  ScopedParallelFor &operator=(const ScopedParallelFor &) = delete;

private:
  ParallelFor saved_;
};

/// Receives every warning (fallbacks, refused cache directories). The
/// default prints "hsnn: warning: ..." to stderr. Returns the previous one.
using WarningHandler = std::function<void(std::string_view)>;
WarningHandler setWarningHandler(WarningHandler handler);

/// Parses a method name: auto, cpu_jit, cpu_interp, cuda, and the seed's
/// GPU_CUDA, CPU_JIT, CPU_CPP and CPU_PYTHON (both interpreted here).
Expected<Method> parseMethod(std::string_view name);

/// The method that will run a request for `asked`, applying the fallback
/// policy (a warning, or an error in strict mode).
Expected<Method> resolveMethod(Method asked);

} // namespace hsnn
