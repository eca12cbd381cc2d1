//===- lib/Runtime/Warn.h - The runtime's warning channel -------*- C++ -*-===//
#pragma once

#include "hsnn/Error.h"
#include "hsnn/Layer.h"

#include <string>
#include <string_view>
#include <vector>

namespace hsnn::detail {
/// Sends a warning to the handler set with setWarningHandler.
void warn(std::string_view message);

/// The warnings about HSNN_* values that could not be read (given once,
/// when the runtime first read the environment).
std::vector<std::string> environmentWarnings();

/// Applies the fallback policy to a failed JIT compile: an Error in strict
/// mode, else a warning (the caller keeps the interpreter) and success.
Error jitFailed(const Error &failure);

/// Applies the fallback policy to a failed GPU compile or load: the method
/// to step down to (with a warning), or the Error strict mode makes of it.
Expected<Method> gpuFailed(const Error &failure);

/// A GPU id outside the devices is an error naming the valid range when the
/// code is to run on a GPU (a wrong id is a mistake to report, not a reason
/// to fall back to the CPU).
Error checkGpuId(Method method, int gpuId);

/// The checks compile() makes of the options every layer and loss has,
/// then the method that will run (the fallback policy applied) with its GPU
/// id checked.
Expected<Method> checkedMethod(Method asked, int optLevel, int gpuId);

/// Builds code for `method` with the fallback policy: cuda tries
/// `compileGpu`, stepping down on failure (warning) to cpu_jit, which tries
/// `compileJit`, stepping down to cpu_interp. Returns the method that will
/// run, or the Error strict mode makes of a failure.
template <class G, class J> Expected<Method> compileForMethod(Method method, G &&compileGpu, J &&compileJit) {
  if (method == Method::Cuda) {
    Error e = compileGpu();
    if (!e)
      return Method::Cuda;
    auto next = gpuFailed(e);
    if (!next)
      return next;
    method = *next;
  }
  if (method != Method::CpuJit)
    return Method::CpuInterp;
  if (Error e = compileJit()) {
    if (Error strict = jitFailed(e))
      return strict;
    return Method::CpuInterp;
  }
  return Method::CpuJit;
}

} // namespace hsnn::detail
