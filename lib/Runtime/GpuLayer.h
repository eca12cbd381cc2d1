//===- lib/Runtime/GpuLayer.h - Layers and losses on an NVIDIA GPU -*- C++ -*-===//
//
// The cuda method's engine: PTX from the same tapes (one kernel per layer
// and kind, see KernelSpec.h's GpuLayerKernel), assembled for the device by
// the driver's linker, cached on disk under the GPU category (keyed by the
// tapes, architecture, compute capability and driver version), loaded on one
// device. Run on a real GPU: see the GPU tests; without one the test driver
// checks the calls.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CUDA/GpuModule.h"
#include "CodeGen/KernelSpec.h"
#include "Program/Program.h"

#include "hsnn/Layer.h"

#include <array>
#include <memory>
#include <mutex>

namespace hsnn::detail {

/// How PTX is generated: the layer's or loss's optimisation level and
/// fast-math choice (fast math also flushes denormals in libdevice).
struct GpuBuildOptions {
  int optLevel = 3;
  bool fastMath = false;
};

/// What both GPU engines hold: the module spec, the loaded image, its
/// element type and the constants on the device.
class GpuCode {
public:
  virtual ~GpuCode() = default;
  int device() const { return module_->device(); }
  /// Copies the constants to the device (after setConstant).
  virtual Error uploadParams(const std::vector<double> &params);
  /// Moves the code to `device`: the same image is reloaded when the
  /// device's compute capability is the same, else it is rebuilt (or taken
  /// from the cache). Constants and tables are uploaded again.
  virtual Error moveTo(int device, const std::vector<double> &params, CompileInfo *info);

protected:
  /// Builds (or loads from the cache) the module for `device`, uploads params.
  Error init(int device, DType dtype, GpuBuildOptions options, GpuModuleSpec spec, std::vector<std::string> kernels,
             const std::vector<double> &params, CompileInfo *info);
  /// Device-resident tables besides the constants (re-uploaded on moveTo).
  virtual Error uploadTables() { return Error::success(); }
  Error build(int device, CompileInfo *info);

  GpuBuildOptions options_;
  GpuModuleSpec spec_;
  std::vector<std::string> kernels_;
  std::vector<char> image_; ///< cubin, or PTX where the driver has no linker
  int ccMajor_ = 0, ccMinor_ = 0;
  std::shared_ptr<GpuModule> module_;
  DType dtype_ = DType::F32;
  DeviceMemory params_;
};

class GpuActivation : public GpuCode {
public:
  /// Compiles the forward and backward kernels for `device`'s architecture
  /// and loads them; the fused kernel (the largest, and many users never
  /// call it) is built at its first use, as on the CPU.
  static Expected<std::unique_ptr<GpuActivation>> create(int device, DType dtype, GpuBuildOptions options, Layout layout,
                                                         const std::vector<std::array<const Program *, 3>> &units,
                                                         const std::vector<uint32_t> &unitOf,
                                                         const std::vector<double> &params,
                                                         const std::vector<uint64_t> &offsets, CompileInfo *info);
  /// kind: 0 forward, 1 backward, 2 fused. Device pointers (0 when unused).
  Error run(int kind, CUdeviceptr z, CUdeviceptr err, CUdeviceptr out0, CUdeviceptr out1, size_t batch) const;
  /// Host pointers: copied to the device and back (slower).
  Error runHost(int kind, const void *z, const void *err, void *out0, void *out1, size_t batch) const;
  /// Also update the fused kernel's module once it exists.
  Error uploadParams(const std::vector<double> &params) override;
  Error moveTo(int device, const std::vector<double> &params, CompileInfo *info) override;

private:
  static Expected<std::unique_ptr<GpuActivation>> build(int device, DType dtype, GpuBuildOptions options, Layout layout,
                                                        const std::vector<std::array<const Program *, 3>> &units,
                                                        std::initializer_list<int> kinds,
                                                        const std::vector<uint32_t> &unitOf,
                                                        const std::vector<double> &params,
                                                        const std::vector<uint64_t> &offsets, CompileInfo *info);
  Error launch(size_t kernel, CUdeviceptr z, CUdeviceptr err, CUdeviceptr out0, CUdeviceptr out1, size_t batch) const;
  const GpuActivation *fused() const;
  Error uploadTables() override;
  Layout layout_ = Layout::NodesMajor;
  std::vector<std::array<const Program *, 3>> units_;
  std::vector<uint32_t> unitOf_;
  std::vector<uint64_t> offsets_;
  DeviceMemory unitTable_, offsetTable_;
  // The fused kernel's own module, built once on first use. The mutex
  // orders its creation with setConstant / setGpuId (which update it).
  mutable std::mutex fusedMutex_;
  mutable std::unique_ptr<GpuActivation> fused_;
  mutable Error fusedError_;
  std::vector<double> hostParams_; ///< The constants the fused module starts from.
  // Device copies of host arrays for runHost; host-pointer runs take turns.
  mutable std::mutex hostMutex_;
  mutable DeviceScratch hostScratch_;
};

class GpuLoss : public GpuCode {
public:
  static Expected<std::unique_ptr<GpuLoss>> create(int device, DType dtype, GpuBuildOptions options,
                                                   const std::array<const Program *, 4> &programs,
                                                   const std::vector<double> &params, CompileInfo *info);
  /// kind: 0 elements, 1 sum, 2 gradient, 3 fused, on host arrays; returns
  /// the sum of the losses for 1 and 3 (deterministic: see KernelSpec.h).
  Expected<double> runHost(int kind, const void *yp, const void *yt, void *out, double scale, size_t n) const;
  /// The same on device memory (out may be 0 for kind 1).
  Expected<double> run(int kind, CUdeviceptr yp, CUdeviceptr yt, CUdeviceptr out, double scale, size_t n) const;
  Error moveTo(int device, const std::vector<double> &params, CompileInfo *info) override;

private:
  Expected<double> runLocked(int kind, CUdeviceptr yp, CUdeviceptr yt, CUdeviceptr out, double scale, size_t n) const;
  // Partial sums (slot 0) and device copies of host arrays (1-3); runs of
  // one loss take turns.
  mutable std::mutex scratchMutex_;
  mutable DeviceScratch scratch_;
};

/// A gpuId option outside the devices is an error naming the valid range
/// when the code is to run on a GPU (a wrong id is a mistake to report, not
/// a reason to fall back to the CPU).
Error checkGpuId(Method method, int gpuId);

/// setGpuId for layers and losses: the id's range is checked first (so a bad
/// id reads the same whatever the method), then that the code runs on a GPU.
Error moveGpuCode(GpuCode *gpu, int id, const std::vector<double> &params, CompileInfo &info, const char *what);

} // namespace hsnn::detail
