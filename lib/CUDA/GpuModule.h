//===- lib/CUDA/GpuModule.h - Code loaded on a device, and launches -*- C++ -*-===//
//
// LLVM-free. Exercised without a GPU through the test driver
// (test/CUDA/FakeDriver.cpp), which checks the calls but runs no kernel.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Driver.h"

#include <memory>
#include <span>
#include <string>
#include <optional>
#include <vector>

namespace hsnn::detail {

/// Makes device `device`'s primary context current on this thread (driver
/// state is per thread) and returns the driver.
Expected<const CudaDriver *> driverAt(int device);

/// Where a call's kernels go: the stream of the caller's StreamScope
/// (hsnn/Backend.h), or none (the legacy default stream, and the call waits
/// for the device before it returns).
using Queue = std::optional<CUstream>;

/// Puts the thread's current context back when it goes out of scope. Each
/// call makes its device's primary context current (driverAt); left so, a
/// call on cuda:1 would move another library on the same thread (PyTorch,
/// whose current device is the current context's) onto cuda:1.
class ContextRestorer {
public:
  ContextRestorer();
  ~ContextRestorer();
  ContextRestorer(const ContextRestorer &) = delete;
  ContextRestorer &operator=(const ContextRestorer &) = delete;

private:
  const CudaDriver *driver_ = nullptr;
  CUcontext saved_ = nullptr;
};

/// This thread's StreamScope's stream for a call on `device`; an error when
/// the stream is another device's.
Expected<Queue> currentQueue(int device);

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
  int device() const { return device_; }
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

/// Synchronous copies in device `device`'s context.
Error copyToDevice(int device, CUdeviceptr dst, const void *src, size_t bytes);
Error copyToHost(int device, void *dst, CUdeviceptr src, size_t bytes);

/// Device buffers kept between runs (allocating per run costs more than a
/// memory-bound kernel), grown on demand and reallocated on another device.
/// Not thread-safe: its owner serializes the runs that use it.
class DeviceScratch {
public:
  /// Buffer `slot`, at least `bytes` long, on `device`.
  Expected<CUdeviceptr> get(int device, size_t slot, size_t bytes);
  void clear() { buffers_.clear(); }

private:
  std::vector<DeviceMemory> buffers_;
};

/// PTX assembled for a device by the driver's linker: a cubin, with the
/// linker's error log in the Error when it fails. Unsupported (without a
/// message worth showing) when the driver has no linker entry points.
Expected<std::vector<char>> linkPtx(int device, const std::string &ptx);

/// A module (PTX or cubin) loaded on one device, with its kernels resolved.
class GpuModule {
public:
  /// Loads `image` (PTX text, NUL-terminated by this call, or a cubin),
  /// capturing the driver's JIT error log into the Error.
  static Expected<std::shared_ptr<GpuModule>> load(int device, std::span<const char> image,
                                                   std::span<const std::string> kernels);
  ~GpuModule();
  int device() const { return device_; }
  /// Threads per block for a kernel: the occupancy calculator's choice,
  /// a multiple of the warp size.
  unsigned blockSize(size_t kernel) const { return blockSize_[kernel]; }
  /// Blocks that fill the device at that block size.
  unsigned fullGrid(size_t kernel) const { return fullGrid_[kernel]; }
  /// Launches kernel `kernel` (index into the list given to load) with the
  /// argument pointers in cuLaunchKernel's layout, on `queue`.
  Error launch(size_t kernel, void **args, unsigned gridX, unsigned gridY, unsigned block, Queue queue) const;
  /// The end of a call: waits for the device when unscoped; a scoped call
  /// returns with its kernels queued.
  Error finish(Queue queue) const;
  /// Waits for the work queued so far: the queue's stream, or the device.
  Error wait(Queue queue) const;
  /// Copies device memory to the host after the work queued before it.
  Error toHost(void *dst, CUdeviceptr src, size_t bytes, Queue queue) const;

private:
  int device_ = 0;
  CUmodule module_ = nullptr;
  std::vector<CUfunction> functions_;
  std::vector<unsigned> blockSize_, fullGrid_;
};

} // namespace hsnn::detail
