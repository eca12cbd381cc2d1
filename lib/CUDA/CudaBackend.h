//===- lib/CUDA/CudaBackend.h - Device memory on an NVIDIA GPU ---*- C++ -*-===//
#pragma once

#include "hsnn/Backend.h"

#include <memory>

namespace hsnn::detail {

/// The CUDA backend for device `ordinal` (its primary context), or why not.
Expected<std::shared_ptr<Backend>> makeCudaBackend(int ordinal);

} // namespace hsnn::detail
