//===- lib/Backend/Backend.cpp - The Backend base class and the CPU backend ===//
#include "hsnn/Backend.h"

#include "CpuBackend.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <limits>
#include <sys/sysinfo.h>

namespace hsnn {
namespace {

size_t elementSize(DType d) { return d == DType::F32 ? 4 : 8; }

std::string_view dtypeName(DType d) { return d == DType::F32 ? "f32" : "f64"; }

/// Host memory: "device" and host are one address space, copies are memcpy.
class CpuBackend final : public Backend {
public:
  std::string name() const override { return "cpu"; }
  int deviceId() const override { return -1; }
  std::string deviceName() const override {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
        return line.substr(line.find(':') + 2);
    return "cpu";
  }
  std::pair<int, int> computeCapability() const override { return {0, 0}; }
  bool isAvailable() const override { return true; }

  Expected<DeviceBuffer> allocate(size_t count, DType dtype) override {
    size_t es = elementSize(dtype);
    if (count > std::numeric_limits<size_t>::max() / es - 64)
      return Error(ErrorCode::InvalidArgument, fmt::format("{} elements of {} overflow the address space", count, dtypeName(dtype)));
    size_t bytes = count * es, rounded = (bytes + 63) / 64 * 64;
    void *p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p)
      return Error(ErrorCode::InvalidArgument, fmt::format("cannot allocate {} bytes", bytes));
    return DeviceBuffer(std::shared_ptr<void>(p, std::free), count, dtype, "cpu");
  }

  Error toDevice(const DeviceBuffer &dst, const void *host, size_t bytes, size_t offset) override {
    if (Error e = check(dst, host, bytes, offset))
      return e;
    std::memcpy(static_cast<char *>(dst.data()) + offset, host, bytes);
    return Error::success();
  }

  Error toHost(void *host, const DeviceBuffer &src, size_t bytes, size_t offset) override {
    if (Error e = check(src, host, bytes, offset))
      return e;
    std::memcpy(host, static_cast<const char *>(src.data()) + offset, bytes);
    return Error::success();
  }

  Error copy(const DeviceBuffer &dst, const DeviceBuffer &src, size_t bytes) override {
    if (Error e = checkCopy(dst, src, bytes))
      return e;
    std::memmove(dst.data(), src.data(), bytes);
    return Error::success();
  }

  Error synchronize() override { return Error::success(); } // CPU kernels return when done

  // /proc/meminfo's MemAvailable counts the page cache the kernel would give
  // back; where it cannot be read (a VM or container without /proc) the
  // figures come from sysinfo(2), which every Linux answers: free plus
  // buffer memory, a lower bound of the same quantity.
  Expected<MemoryInfo> memoryInfo() const override {
    std::ifstream in("/proc/meminfo");
    std::string key;
    size_t value = 0;
    std::string unit;
    MemoryInfo info;
    while (in >> key >> value >> unit) {
      if (key == "MemTotal:")
        info.total = value * 1024;
      else if (key == "MemAvailable:")
        info.free = value * 1024;
    }
    if (info.total && info.free)
      return info;
    struct sysinfo si {};
    if (::sysinfo(&si) != 0)
      return Error(ErrorCode::Unsupported, fmt::format("cannot read the memory figures: /proc/meminfo has none and "
                                                       "sysinfo(2) failed: {}",
                                                       std::strerror(errno)));
    info.total = size_t(si.totalram) * si.mem_unit;
    info.free = (size_t(si.freeram) + size_t(si.bufferram)) * si.mem_unit;
    return info;
  }

  bool supportsFeature(std::string_view f) const override { return f == "shared_memory"; }

private:
  Error check(const DeviceBuffer &buf, const void *host, size_t bytes, size_t offset) const {
    return checkCopy(buf, host, bytes, offset);
  }
};

} // namespace

Error Backend::checkCopy(const DeviceBuffer &buf, const void *host, size_t bytes, size_t offset) const {
  if (buf.backend() != name())
    return Error(ErrorCode::InvalidArgument, fmt::format("buffer belongs to backend {}, not {}", buf.backend(), name()));
  if (bytes && !host)
    return Error(ErrorCode::InvalidArgument, "null host pointer");
  if (bytes && !buf.data())
    return Error(ErrorCode::InvalidArgument, "the buffer has no memory (its data is null)");
  if (offset > buf.bytes() || bytes > buf.bytes() - offset)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("copy of {} bytes at offset {} overruns a buffer of {} bytes", bytes, offset, buf.bytes()));
  return Error::success();
}

Error Backend::checkCopy(const DeviceBuffer &dst, const DeviceBuffer &src, size_t bytes) const {
  if (Error e = checkCopy(dst, src.data(), bytes, 0))
    return e;
  return checkCopy(src, dst.data(), bytes, 0);
}

Expected<std::shared_ptr<Stream>> Backend::createStream() {
  return Error(ErrorCode::Unsupported, fmt::format("backend {} has no streams", name()));
}

Expected<std::shared_ptr<Stream>> Backend::borrowStream(std::uintptr_t) { return createStream(); }

namespace {
thread_local StreamScope *innermostScope = nullptr;
}

StreamScope::StreamScope(std::shared_ptr<Stream> stream) : stream_(std::move(stream)), outer_(innermostScope) {
  innermostScope = this;
}

StreamScope::~StreamScope() { innermostScope = outer_; }

Stream *StreamScope::current() { return innermostScope ? innermostScope->stream_.get() : nullptr; }

Error Backend::toDeviceAsync(const DeviceBuffer &dst, const void *host, size_t bytes, size_t offset, Stream &) {
  return toDevice(dst, host, bytes, offset);
}

Error Backend::toHostAsync(void *host, const DeviceBuffer &src, size_t bytes, size_t offset, Stream &) {
  return toHost(host, src, bytes, offset);
}

namespace detail {
std::shared_ptr<Backend> cpuBackend() {
  static auto cpu = std::make_shared<CpuBackend>();
  return cpu;
}
} // namespace detail

} // namespace hsnn
