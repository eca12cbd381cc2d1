//===- lib/CUDA/GpuModule.h - PTX loaded on a device, and launches -*- C++ -*-===//
//
// LLVM-free. Written without a GPU at hand: every path that needs a device is
// untested until a session with one runs the GPU tests.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Driver.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hsnn::detail {

/// Device memory owned by RAII (freed in the device's context).
class DeviceMemory {
public:
  static Expected<DeviceMemory> allocate(int device, size_t bytes);
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory &&o) noexcept { swap(o); }
  DeviceMemory &operator=(DeviceMemory &&o) noexcept {
    swap(o);
    return *this;
  }
  ~DeviceMemory();
  CUdeviceptr get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Error upload(const void *host, size_t bytes, size_t offset = 0) const;
  Error download(void *host, size_t bytes, size_t offset = 0) const;

private:
  void swap(DeviceMemory &o) noexcept {
    std::swap(device_, o.device_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
  }
  int device_ = -1;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// A PTX module loaded on one device, with its kernels resolved.
class GpuModule {
public:
  /// Loads `ptx` (the driver assembles it for the device), capturing the
  /// JIT error log into the Error.
  static Expected<std::shared_ptr<GpuModule>> load(int device, const std::string &ptx,
                                                   std::span<const std::string> kernels);
  ~GpuModule();
  int device() const { return device_; }
  /// Threads a launch over n elements uses (grid * block): the size of a
  /// loss kernel's partial-sum array. Depends only on the kernel and n.
  size_t threads(size_t kernel, int64_t n) const;
  /// Launches kernel `kernel` (index into the list given to load) over n
  /// elements with the given argument pointers (cuLaunchKernel's layout).
  Error launch(size_t kernel, void **args, int64_t n) const;
  Error synchronize() const;

private:
  int device_ = 0;
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  std::vector<CUfunction> functions_;
  std::vector<int> blockSize_, maxGrid_;
};

/// "sm_XY" of a device.
Expected<std::string> gpuArch(int device);

} // namespace hsnn::detail
