//===- lib/Runtime/Warn.h - The runtime's warning channel -------*- C++ -*-===//
#pragma once

#include "hsnn/Error.h"
#include "hsnn/Layer.h"

#include <string_view>

namespace hsnn::detail {
/// Sends a warning to the handler set with setWarningHandler.
void warn(std::string_view message);

/// Applies the fallback policy to a failed JIT compile: an Error in strict
/// mode, else a warning (the caller keeps the interpreter) and success.
Error jitFailed(const Error &failure);

/// Applies the fallback policy to a failed GPU compile or load: the method
/// to step down to (with a warning), or the Error strict mode makes of it.
Expected<Method> gpuFailed(const Error &failure);

/// Runs `compile` when `method` is cpu_jit and applies the fallback policy:
/// the method that will run, or the Error strict mode makes of a failure.
template <class F> Expected<Method> compileForMethod(Method method, F &&compile) {
  if (method != Method::CpuJit)
    return Method::CpuInterp;
  if (Error e = compile()) {
    if (Error strict = jitFailed(e))
      return strict;
    return Method::CpuInterp;
  }
  return Method::CpuJit;
}
} // namespace hsnn::detail
