//===- lib/Runtime/InterpreterKernels.h - The interpreter's op kernels -*- C++ -*-===//
#pragma once

#include "Program/OpKernels.h"

#include "hsnn/Layer.h"

#include <string>

namespace hsnn::detail {

/// The interpreter's op kernels (Program/OpKernels.h) for the engines made
/// next, wherever this build has the JIT: so cpu_interp gives cpu_jit's
/// bits whatever the cache holds. Built once per host and dtype, then loaded
/// linked from the cache (no LLVM), and kept for the process (the
/// populations guide has the times). Null where there is no JIT, or where
/// they cannot be built (the reason in `why`: a layer whose JIT failed has
/// said it already; a population says it).
template <class T> const OpKernels<T> *runtimeOpKernels(std::string *why = nullptr);
void prepareOpKernels(DType dtype);

} // namespace hsnn::detail
