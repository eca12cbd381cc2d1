//===- lib/Runtime/FallbackPolicy.h - Which method runs when one fails -*- C++ -*-===//
//
// cuda steps down to cpu_jit, cpu_jit to cpu_interp, each step with a
// warning, unless strict mode makes the failure an error. Every layer and
// loss compile (LayerState.cpp) goes through here.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Error.h"
#include "hsnn/Layer.h"

namespace hsnn::detail {

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
