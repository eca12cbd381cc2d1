//===- lib/CUDA/PTXCompiler.h - Kernels to PTX through NVPTX ----*- C++ -*-===//
#pragma once

#include "CodeGen/Pipeline.h"

#include <string>

namespace hsnn::detail {

struct PtxOptions {
  std::string arch = "sm_80"; ///< sm_XY
  int optLevel = 3;
  bool fastMath = false;      ///< Also flushes denormals (libdevice __CUDA_FTZ).
};

/// The libdevice bitcode: $HSNN_LIBDEVICE, else the one found at configure
/// time, else /usr/local/cuda/nvvm/libdevice/libdevice.10.bc.
std::string libdevicePath();

/// PTX text for the requests (same tapes and emitter as the CPU, as
/// grid-stride kernels), with the libdevice functions they call linked in.
Expected<std::string> compilePtx(std::span<const KernelRequest> requests, const PtxOptions &options,
                                 CompileStats *stats = nullptr);

} // namespace hsnn::detail
