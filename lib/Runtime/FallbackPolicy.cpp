//===- lib/Runtime/FallbackPolicy.cpp - Which method runs when one fails ---===//
#include "FallbackPolicy.h"

#include "Warn.h"

#include "hsnn/Runtime.h"

#include <fmt/format.h>

namespace hsnn::detail {

Expected<Method> gpuFailed(const Error &failure) {
  const RuntimeInfo &info = runtimeInfo();
  Method next = info.cpuJitEnabled ? Method::CpuJit : Method::CpuInterp;
  if (runtimeFlags().strict)
    return Error(failure.code(), "cuda failed (strict mode): " + failure.message());
  warn(fmt::format("cuda failed: {}; using {}", failure.message(), to_string(next)));
  return next;
}

Error checkGpuId(Method method, int gpuId) {
  if (method != Method::Cuda)
    return Error::success();
  const RuntimeInfo &rt = runtimeInfo();
  if (gpuId >= 0 && gpuId < rt.numGpus)
    return Error::success();
  return Error(ErrorCode::InvalidArgument,
               rt.numGpus ? fmt::format("GPU id {} is out of range: valid ids are 0..{}", gpuId, rt.numGpus - 1)
                          : fmt::format("GPU id {} is out of range: this machine has no usable GPU ({})", gpuId,
                                        rt.gpuUnavailableReason));
}

Expected<Method> checkedMethod(Method asked, int optLevel, int gpuId) {
  if (optLevel < 0 || optLevel > 3)
    return Error(ErrorCode::InvalidArgument, fmt::format("optLevel must be 0..3, got {}", optLevel));
  auto method = resolveMethod(asked);
  if (!method)
    return method;
  if (Error e = checkGpuId(*method, gpuId))
    return e;
  return method;
}

Error jitFailed(const Error &failure) {
  // A kernel the JIT cannot build is a fallback like any other.
  if (runtimeFlags().strict)
    return Error(failure.code(), "cpu_jit failed (strict mode): " + failure.message());
  warn(fmt::format("cpu_jit failed: {}; using cpu_interp", failure.message()));
  return Error::success();
}
} // namespace hsnn::detail
