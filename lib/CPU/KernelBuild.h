//===- lib/CPU/KernelBuild.h - Kernel requests to loaded code -*- C++ -*-===//
//
// The cpu_jit engine's one way from kernel requests to callable code: the
// layer's objects linked into one shared object in the cache (loaded
// without LLVM), else each object from the cache or compiled in parallel
// beside the math functions they call (MathObjects.h), loaded into the JIT
// and linked in the background for the next process. Objects are keyed by
// their requests, the target and the code generator; large layers' are cut
// by content (Model/KernelRequests.h), so a changed formula recompiles the
// objects around it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Cache/ObjectCache.h"
#include "CodeGen/HostJIT.h"

#include "hsnn/Layer.h"

#include <functional>
#include <memory>
#include <span>
#include <string>

namespace hsnn::detail {

/// The requests' kernels loaded, the JIT fields of `info` filled; with
/// `linkedOnly`, null unless they are linked in the cache (nothing compiled,
/// no LLVM). `describe` names what the cache entries hold, asked on a miss.
Expected<std::shared_ptr<KernelLibrary>> buildKernels(std::span<const KernelRequest> requests, const JITOptions &options,
                                                      const CacheConfig &cache,
                                                      const std::function<std::string()> &describe, CompileInfo &info,
                                                      const CompileProgress &progress, bool linkedOnly);

} // namespace hsnn::detail
