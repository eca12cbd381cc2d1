//===- lib/CUDA/CudaBackend.cpp - Device memory on an NVIDIA GPU ----------===//
//
// One primary context per device (retained once per process), made current
// on the calling thread before each driver call (driver state is per thread).
// Streams are non-blocking CUDA streams; async copies go on them.
//===----------------------------------------------------------------------===//
#include "CudaBackend.h"

#include "Driver.h"

#include <fmt/format.h>
#include <limits>

namespace hsnn::detail {
namespace {

constexpr unsigned kStreamNonBlocking = 1;

class CudaStream final : public Stream {
public:
  /// `owned`: made by createStream (destroyed with this); else borrowed.
  CudaStream(const CudaDriver &d, std::string backend, CUcontext ctx, CUstream s, bool owned)
      : d_(d), backend_(std::move(backend)), ctx_(ctx), stream_(s), owned_(owned) {}
  ~CudaStream() override {
    if (owned_ && !d_.cuCtxSetCurrent(ctx_))
      d_.cuStreamDestroy(stream_);
  }
  std::uintptr_t handle() const override { return reinterpret_cast<std::uintptr_t>(stream_); }
  std::string backend() const override { return backend_; }
  Error synchronize() override {
    if (CUresult r = d_.cuCtxSetCurrent(ctx_))
      return Error(ErrorCode::Unsupported, fmt::format("cuCtxSetCurrent on {} failed: {}", backend_, d_.errorString(r)));
    if (CUresult r = d_.cuStreamSynchronize(stream_))
      return Error(ErrorCode::Unsupported, fmt::format("cuStreamSynchronize on {} failed: {}", backend_, d_.errorString(r)));
    return Error::success();
  }
  CUstream get() const { return stream_; }

private:
  const CudaDriver &d_;
  std::string backend_;
  CUcontext ctx_;
  CUstream stream_;
  bool owned_;
};

class CudaBackend final : public Backend, public std::enable_shared_from_this<CudaBackend> {
public:
  CudaBackend(const CudaDriver &d, const GpuDevice &dev, CUcontext ctx) : d_(d), dev_(dev), ctx_(ctx) {}

  std::string name() const override { return fmt::format("cuda:{}", dev_.ordinal); }
  int deviceId() const override { return dev_.ordinal; }
  std::string deviceName() const override { return dev_.name; }
  std::pair<int, int> computeCapability() const override { return {dev_.ccMajor, dev_.ccMinor}; }
  bool isAvailable() const override { return true; }

  Expected<DeviceBuffer> allocate(size_t count, DType dtype) override {
    size_t es = dtype == DType::F32 ? 4 : 8;
    if (count > std::numeric_limits<size_t>::max() / es)
      return Error(ErrorCode::InvalidArgument, fmt::format("{} elements overflow the address space", count));
    if (Error e = current())
      return e;
    CUdeviceptr p = 0;
    if (CUresult r = d_.cuMemAlloc(&p, count ? count * es : es))
      return fail("cuMemAlloc", r);
    // The buffer keeps the backend (and so the context) alive.
    auto self = shared_from_this();
    std::shared_ptr<void> data(reinterpret_cast<void *>(p), [self](void *q) {
      if (!CudaDriver::exiting() && !self->current())
        self->d_.cuMemFree(reinterpret_cast<CUdeviceptr>(q));
    });
    return DeviceBuffer(std::move(data), count, dtype, name());
  }

  Error toDevice(const DeviceBuffer &dst, const void *host, size_t bytes, size_t offset) override {
    if (Error e = check(dst, host, bytes, offset))
      return e;
    if (CUresult r = d_.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst.data()) + offset, host, bytes))
      return fail("cuMemcpyHtoD", r);
    return Error::success();
  }

  Error toHost(void *host, const DeviceBuffer &src, size_t bytes, size_t offset) override {
    if (Error e = check(src, host, bytes, offset))
      return e;
    if (CUresult r = d_.cuMemcpyDtoH(host, reinterpret_cast<CUdeviceptr>(src.data()) + offset, bytes))
      return fail("cuMemcpyDtoH", r);
    return Error::success();
  }

  Error copy(const DeviceBuffer &dst, const DeviceBuffer &src, size_t bytes) override {
    if (Error e = checkCopy(dst, src, bytes))
      return e;
    if (CUresult r = d_.cuMemcpyDtoD(reinterpret_cast<CUdeviceptr>(dst.data()), reinterpret_cast<CUdeviceptr>(src.data()),
                                     bytes))
      return fail("cuMemcpyDtoD", r);
    return Error::success();
  }

  Error synchronize() override {
    if (Error e = current())
      return e;
    if (CUresult r = d_.cuCtxSynchronize())
      return fail("cuCtxSynchronize", r);
    return Error::success();
  }

  Expected<MemoryInfo> memoryInfo() const override {
    if (Error e = current())
      return e;
    MemoryInfo m;
    if (CUresult r = d_.cuMemGetInfo(&m.free, &m.total))
      return fail("cuMemGetInfo", r);
    return m;
  }

  bool supportsFeature(std::string_view f) const override {
    return f == "async" || f == "streams" || f == "shared_memory";
  }

  Expected<std::shared_ptr<Stream>> createStream() override {
    if (Error e = current())
      return e;
    CUstream s = nullptr;
    if (CUresult r = d_.cuStreamCreate(&s, kStreamNonBlocking))
      return fail("cuStreamCreate", r);
    return std::shared_ptr<Stream>(std::make_shared<CudaStream>(d_, name(), ctx_, s, true));
  }

  Expected<std::shared_ptr<Stream>> borrowStream(std::uintptr_t handle) override {
    return std::shared_ptr<Stream>(
        std::make_shared<CudaStream>(d_, name(), ctx_, reinterpret_cast<CUstream>(handle), false));
  }

  Error toDeviceAsync(const DeviceBuffer &dst, const void *host, size_t bytes, size_t offset, Stream &stream) override {
    auto s = ours(stream);
    if (!s)
      return s.takeError();
    if (Error e = check(dst, host, bytes, offset))
      return e;
    if (CUresult r = d_.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dst.data()) + offset, host, bytes, *s))
      return fail("cuMemcpyHtoDAsync", r);
    return Error::success();
  }

  Error toHostAsync(void *host, const DeviceBuffer &src, size_t bytes, size_t offset, Stream &stream) override {
    auto s = ours(stream);
    if (!s)
      return s.takeError();
    if (Error e = check(src, host, bytes, offset))
      return e;
    if (CUresult r = d_.cuMemcpyDtoHAsync(host, reinterpret_cast<CUdeviceptr>(src.data()) + offset, bytes, *s))
      return fail("cuMemcpyDtoHAsync", r);
    return Error::success();
  }

private:
  Expected<CUstream> ours(Stream &stream) const {
    auto *s = dynamic_cast<CudaStream *>(&stream);
    if (!s || s->backend() != name())
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("stream belongs to backend {}, not {}", stream.backend(), name()));
    return s->get();
  }
  Error current() const {
    if (CUresult r = d_.cuCtxSetCurrent(ctx_))
      return fail("cuCtxSetCurrent", r);
    return Error::success();
  }
  Error fail(const char *what, CUresult r) const {
    return Error(ErrorCode::Unsupported, fmt::format("{} on {} failed: {}", what, name(), d_.errorString(r)));
  }
  Error check(const DeviceBuffer &buf, const void *host, size_t bytes, size_t offset) const {
    if (Error e = checkCopy(buf, host, bytes, offset))
      return e;
    return current();
  }

  const CudaDriver &d_;
  GpuDevice dev_;
  CUcontext ctx_;
};

} // namespace

Expected<std::shared_ptr<Backend>> makeCudaBackend(int ordinal) {
  auto driver = CudaDriver::get();
  if (!driver)
    return driver.error();
  const auto &devices = (*driver)->devices;
  if (ordinal < 0 || size_t(ordinal) >= devices.size())
    return Error(ErrorCode::InvalidArgument, fmt::format("device {} does not exist; valid devices are 0..{}", ordinal,
                                                         int(devices.size()) - 1));
  auto ctx = (*driver)->context(ordinal);
  if (!ctx)
    return ctx.takeError();
  return std::shared_ptr<Backend>(std::make_shared<CudaBackend>(**driver, devices[size_t(ordinal)], *ctx));
}

} // namespace hsnn::detail
