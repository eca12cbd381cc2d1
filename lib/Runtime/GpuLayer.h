//===- lib/Runtime/GpuLayer.h - Layers and losses on an NVIDIA GPU -*- C++ -*-===//
//
// The cuda method's engine: PTX from the same tapes, loaded on one device,
// one grid-stride launch per node (nodes-major) or per strided column
// (batch-major). Written without a GPU at hand: untested until a session
// with one runs it (see the issue notes).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CUDA/GpuModule.h"
#include "CodeGen/KernelSpec.h"
#include "Program/Program.h"

#include "hsnn/Layer.h"

#include <array>
#include <memory>

namespace hsnn::detail {

/// What both GPU engines hold: a loaded module, its element type and the
/// constants on the device.
class GpuCode {
public:
  int device() const { return module_->device(); }
  /// Copies the constants to the device (after setConstant).
  Error uploadParams(const std::vector<double> &params);

protected:
  /// Compiles the requests to PTX for `device`, loads them, uploads params.
  Error init(int device, DType dtype, std::span<const KernelRequest> requests, const std::vector<double> &params);
  std::shared_ptr<GpuModule> module_;
  DType dtype_ = DType::F32;
  DeviceMemory params_;
};

class GpuActivation : public GpuCode {
public:
  /// Compiles PTX for `device`'s architecture and loads it.
  static Expected<std::unique_ptr<GpuActivation>> create(int device, DType dtype, Layout layout,
                                                         const std::vector<std::array<const Program *, 3>> &units,
                                                         const std::vector<uint32_t> &unitOf,
                                                         const std::vector<double> &params,
                                                         const std::vector<uint64_t> &offsets);
  /// kind: 0 forward, 1 backward, 2 fused. Device pointers (0 when unused).
  Error run(int kind, CUdeviceptr z, CUdeviceptr err, CUdeviceptr out0, CUdeviceptr out1, size_t batch) const;
  /// Host pointers: copied to the device and back (slower).
  Error runHost(int kind, const void *z, const void *err, void *out0, void *out1, size_t batch) const;

private:
  Layout layout_ = Layout::NodesMajor;
  std::vector<uint32_t> unitOf_;
  std::vector<uint64_t> offsets_;
  size_t units_ = 0;
};

class GpuLoss : public GpuCode {
public:
  static Expected<std::unique_ptr<GpuLoss>> create(int device, DType dtype, const std::array<const Program *, 4> &programs,
                                                   const std::vector<double> &params);
  /// kind: 0 elements, 1 sum, 2 gradient, 3 fused, on host arrays; returns
  /// the sum of the losses for 1 and 3 (partials added in a fixed order).
  Expected<double> runHost(int kind, const void *yp, const void *yt, void *out, double scale, size_t n) const;
  /// The same on device memory (out may be 0 for kind 1).
  Expected<double> run(int kind, CUdeviceptr yp, CUdeviceptr yt, CUdeviceptr out, double scale, size_t n) const;
};

} // namespace hsnn::detail
