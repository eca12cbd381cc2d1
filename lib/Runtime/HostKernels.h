//===- lib/Runtime/HostKernels.h - JIT-compiled kernels for a layer -*- C++ -*-===//
#pragma once

#include "CPU/HostJIT.h"

#include "hsnn/Layer.h"

#include <memory>
#include <span>

namespace hsnn::detail {

/// Compiles (or loads from the disk cache) the requested kernels and
/// returns them loaded, filling the JIT fields of `info`.
Expected<std::shared_ptr<KernelLibrary>> buildHostKernels(std::span<const KernelRequest> requests,
                                                          const JITOptions &options, CompileInfo &info);

} // namespace hsnn::detail
