//===- hsnn/Backend.h - Devices that hold arrays and run kernels -*- C++ -*-===//
//
// PyDotCompute's Backend interface: where arrays live and how they move.
// getBackend("auto" | "cpu" | "cuda" | "cuda:N"); asking for a backend this
// machine does not have is an error that says why.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Error.h"
#include "hsnn/Layer.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace hsnn {

struct MemoryInfo {
  size_t free = 0;
  size_t total = 0;
};

/// Typed memory owned by a backend: `count` elements of `dtype` on one
/// device; freed when the last copy goes away. Layers and losses check all
/// three against what they run.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(std::shared_ptr<void> data, size_t count, DType dtype, std::string backend)
      : data_(std::move(data)), count_(count), dtype_(dtype), backend_(std::move(backend)) {}
  void *data() const { return data_.get(); }
  /// Elements it holds.
  size_t count() const { return count_; }
  DType dtype() const { return dtype_; }
  /// Its size in bytes; SIZE_MAX when `count` elements would not fit in
  /// the address space (such a buffer is refused by every call).
  size_t bytes() const {
    size_t es = dtype_ == DType::F32 ? 4 : 8;
    return count_ > SIZE_MAX / es ? SIZE_MAX : count_ * es;
  }
  /// The backend that owns it ("cpu", "cuda:0", ...).
  const std::string &backend() const { return backend_; }
  template <class T> T *as() const { return static_cast<T *>(data_.get()); }

private:
  std::shared_ptr<void> data_;
  size_t count_ = 0;
  DType dtype_ = DType::F32;
  std::string backend_;
};

/// An ordered queue of work on one device (a CUDA stream).
class Stream {
public:
  virtual ~Stream() = default;
  /// The backend it belongs to ("cuda:0", ...).
  virtual std::string backend() const = 0;
  /// Waits until everything queued on the stream has finished.
  virtual Error synchronize() = 0;
  /// The native handle: a CUstream (0 is CUDA's legacy default stream).
  virtual std::uintptr_t handle() const = 0;
};

/// While alive, this thread's layer and loss calls on device buffers are
/// queued on `stream` and return without waiting for their kernels, as
/// PyTorch's and CuPy's operations do on their current stream (a loss's
/// value waits for this stream only). Without a scope a call runs on the
/// legacy default stream and waits for the device. The stream must be on
/// the layer's device (an error names both otherwise); calls on host arrays
/// are not affected. Scopes nest; the innermost wins.
class StreamScope {
public:
  explicit StreamScope(std::shared_ptr<Stream> stream);
  ~StreamScope();
  StreamScope(const StreamScope &) = delete;
  StreamScope &operator=(const StreamScope &) = delete;

  /// This thread's innermost scope's stream; null outside every scope.
  static Stream *current();

private:
  std::shared_ptr<Stream> stream_;
  StreamScope *outer_;
};

class Backend {
public:
  virtual ~Backend() = default;
  /// "cpu", "cuda:0", ...
  virtual std::string name() const = 0;
  /// The device ordinal (-1 for the CPU), its name ("NVIDIA H100 80GB HBM3", or
  /// the CPU model), and its compute capability ({9, 0}; {0, 0} for the CPU).
  virtual int deviceId() const = 0;
  virtual std::string deviceName() const = 0;
  virtual std::pair<int, int> computeCapability() const = 0;
  virtual bool isAvailable() const = 0;
  /// Room for `count` elements of `dtype` (64-byte aligned on the CPU).
  virtual Expected<DeviceBuffer> allocate(size_t count, DType dtype) = 0;
  /// Copies `bytes` from host memory into the buffer (at byte `offset`).
  virtual Error toDevice(const DeviceBuffer &dst, const void *host, size_t bytes, size_t offset = 0) = 0;
  /// Copies `bytes` from the buffer (at byte `offset`) into host memory.
  virtual Error toHost(void *host, const DeviceBuffer &src, size_t bytes, size_t offset = 0) = 0;
  /// Copies `bytes` between two buffers of this backend (device to device).
  virtual Error copy(const DeviceBuffer &dst, const DeviceBuffer &src, size_t bytes) = 0;
  /// Waits until all work issued to this backend has finished.
  virtual Error synchronize() = 0;
  virtual Expected<MemoryInfo> memoryInfo() const = 0;
  /// "async", "streams", "shared_memory".
  virtual bool supportsFeature(std::string_view feature) const = 0;

  /// A new stream; an error on backends without streams (the CPU).
  virtual Expected<std::shared_ptr<Stream>> createStream();
  /// A stream another library made, by its native handle (a CUstream, e.g.
  /// PyTorch's torch.cuda.current_stream().cuda_stream; 0 for the legacy
  /// default stream): used, never destroyed. An error on backends without
  /// streams.
  virtual Expected<std::shared_ptr<Stream>> borrowStream(std::uintptr_t handle);
  /// Queue a copy on `stream` and return (supportsFeature("async")); the
  /// host memory must stay untouched until stream.synchronize(). From memory
  /// that is not page-locked the driver may copy before returning. Backends
  /// without streams copy synchronously.
  virtual Error toDeviceAsync(const DeviceBuffer &dst, const void *host, size_t bytes, size_t offset, Stream &stream);
  virtual Error toHostAsync(void *host, const DeviceBuffer &src, size_t bytes, size_t offset, Stream &stream);

protected:
  /// What every copy checks first: the buffer is this backend's, the host
  /// pointer is set, and [offset, offset + bytes) lies inside the buffer.
  Error checkCopy(const DeviceBuffer &buf, const void *host, size_t bytes, size_t offset) const;
  /// The same for a copy between two of this backend's buffers.
  Error checkCopy(const DeviceBuffer &dst, const DeviceBuffer &src, size_t bytes) const;
};

/// "auto" (the best available), "cpu", "cuda" (device 0) or "cuda:N".
Expected<std::shared_ptr<Backend>> getBackend(std::string_view spec = "auto");

} // namespace hsnn
