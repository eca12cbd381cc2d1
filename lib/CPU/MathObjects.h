//===- lib/CPU/MathObjects.h - The math functions kernels link -*- C++ -*-===//
//
// Kernels with many math calls call the math library instead of inlining
// it (CodeGen/MathCalls.h). Its functions are compiled one object per
// function and vector type, once per process (kept in memory) and host
// (kept in the cache), and linked beside every layer's kernels that call
// them: a layer of new formulas then pays for its own code only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Cache/ObjectCache.h"
#include "CodeGen/HostJIT.h"

#include <span>
#include <vector>

namespace hsnn::detail {

/// What changes any object the host JIT compiles: the compiler, the target,
/// hsnn and the code generator's sources.
void addCompilerAndTarget(CacheKeyBuilder &k, const HostTarget &t);

/// The math functions' objects, in the order given, and their keys:
/// from this process's memory, the cache, or compiled in parallel.
struct MathObjects {
  std::vector<std::vector<char>> objects;
  std::vector<CacheKey> keys;
  CompileStats stats; ///< Of the compiles (CPU time summed).
};
Expected<MathObjects> mathObjects(HostJIT &jit, std::span<const MathFunction> functions, const JITOptions &options,
                                  const std::optional<ObjectCache> &cache);

} // namespace hsnn::detail
