//===- lib/Backend/CpuBackend.h - Host memory as a backend ------*- C++ -*-===//
#pragma once

#include "hsnn/Backend.h"

#include <memory>

namespace hsnn::detail {
/// The process's one CPU backend.
std::shared_ptr<Backend> cpuBackend();
} // namespace hsnn::detail
