//===- lib/CUDA/GpuEngine.h - Models run on an NVIDIA GPU -------*- C++ -*-===//
//
// The cuda engine: PTX from the same tapes (one kernel per layer and kind,
// see KernelSpec.h's GpuLayerKernel), assembled for the device by the
// driver's linker, cached on disk under the GPU category (keyed by the tapes,
// architecture, compute capability and driver version), loaded on one
// device. Constants live in device memory per ParamSet, so a run reads the
// set it started with. Run on a real GPU: see the GPU tests; without one the
// test driver checks the calls.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Cache/ObjectCache.h"
#include "Model/Engine.h"

namespace hsnn::detail {

/// How PTX is generated: the layer's or loss's optimisation level and
/// fast-math choice.
struct GpuBuildOptions {
  int optLevel = 3;
  bool fastMath = false;
  CacheConfig cache;
};

/// Compiles the model's kernels for `device`'s architecture (or loads them
/// from the cache) and loads them there. A layer's fused kernel (the
/// largest, and many users never call it) is built at its first use, as on
/// the CPU.
Expected<std::shared_ptr<const Engine>> makeGpuEngine(std::shared_ptr<const CompiledModel> model, int device,
                                                      const GpuBuildOptions &options, CompileInfo &info);

} // namespace hsnn::detail
