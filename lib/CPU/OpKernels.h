//===- lib/CPU/OpKernels.h - The interpreter's op kernels, built -*- C++ -*-===//
//
// Builds Program/OpKernels.h's table with the host JIT: one kernel per op
// and operand shape, from one-instruction tapes through the layers' own
// emitter (KernelBuild.h: the cache, linked objects, parallel compiles).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Cache/ObjectCache.h"
#include "Program/OpKernels.h"

#include "hsnn/Error.h"
#include "hsnn/Layer.h"

namespace hsnn::detail {

/// The host JIT's op kernels for T, kept for the process: built (or loaded
/// from the cache, linked: no LLVM) at the first call and installed
/// (installOpKernels). The reason where there is no JIT, at every call.
template <class T> Expected<const OpKernels<T> *> compiledOpKernels(const CacheConfig &cache);

} // namespace hsnn::detail
