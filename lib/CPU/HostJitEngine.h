//===- lib/CPU/HostJitEngine.h - Models run as JIT-compiled host code -*- C++ -*-===//
//
// The cpu_jit engine: kernels for the model's code units compiled by the host
// JIT (or loaded from the disk cache, keyed by the tapes, target and
// options), run over the batch with TBB. Activation forward and backward
// kernels are built at creation; fused ones at their first use.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Cache/ObjectCache.h"
#include "CodeGen/HostJIT.h"
#include "Model/Engine.h"

namespace hsnn::detail {

struct HostEngineOptions {
  JITOptions jit;
  CacheConfig cache;
  /// What to do when a kernel built after creation (fused) fails.
  LazyFailurePolicy onLazyFailure;
  /// Told how many of the creation's kernels are built (cache hits count).
  CompileProgress progress = nullptr;
  /// Only the kernels linked in the cache, loaded without LLVM; on any
  /// other case, no engine (null) and nothing compiled.
  bool linkedOnly = false;
};

/// What a cold compile of the engine's kernels for `m` (those built at
/// creation) is expected to take, in ms of one core: tiered compilation's
/// cost model.
double estimatedCompileMs(const CompiledModel &m);

/// Builds the engine (null where `linkedOnly` finds nothing), filling the compile statistics of `info`.
Expected<std::shared_ptr<const Engine>> makeHostJitEngine(std::shared_ptr<const CompiledModel> model,
                                                          const HostEngineOptions &options, CompileInfo &info);

} // namespace hsnn::detail
