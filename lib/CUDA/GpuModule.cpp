//===- lib/CUDA/GpuModule.cpp - Code loaded on a device, and launches -----===//
#include "GpuModule.h"

#include "hsnn/Backend.h"

#include <algorithm>
#include <fmt/format.h>

namespace hsnn::detail {
namespace {

// cuda.h's CUjit_option and CUjitInputType values.
constexpr int kInfoLogBuffer = 3, kInfoLogBufferSize = 4, kErrorLogBuffer = 5, kErrorLogBufferSize = 6;
constexpr int kInputPtx = 1;
constexpr size_t kLogBytes = 16384;
constexpr unsigned kWarp = 32;

Error failed(const CudaDriver &d, const char *what, int device, CUresult r) {
  return Error(ErrorCode::Unsupported, fmt::format("{} on cuda:{} failed: {}", what, device, d.errorString(r)));
}

/// Error and info log buffers in the option layout the driver's JIT wants.
struct JitLogs {
  std::vector<char> error = std::vector<char>(kLogBytes, 0), info = std::vector<char>(kLogBytes, 0);
  int options[4] = {kErrorLogBuffer, kErrorLogBufferSize, kInfoLogBuffer, kInfoLogBufferSize};
  void *values[4] = {error.data(), reinterpret_cast<void *>(uintptr_t(kLogBytes - 1)), info.data(),
                     reinterpret_cast<void *>(uintptr_t(kLogBytes - 1))};
  std::string text() const { return error[0] ? std::string("\n") + error.data() : std::string(); }
};

} // namespace

Expected<const CudaDriver *> driverAt(int device) {
  auto d = CudaDriver::get();
  if (!d)
    return d.error();
  auto c = (*d)->context(device);
  if (!c)
    return c.takeError();
  if (CUresult r = (*d)->cuCtxSetCurrent(*c))
    return failed(**d, "cuCtxSetCurrent", device, r);
  return *d;
}

ContextRestorer::ContextRestorer() {
  auto d = CudaDriver::get();
  if (d && !(*d)->cuCtxGetCurrent(&saved_))
    driver_ = *d;
}

ContextRestorer::~ContextRestorer() {
  if (driver_ && !CudaDriver::exiting())
    driver_->cuCtxSetCurrent(saved_); // null (no context before) is a valid state to restore
}

Expected<DeviceMemory> DeviceMemory::allocate(int device, size_t bytes) {
  auto d = driverAt(device);
  if (!d)
    return d.error();
  DeviceMemory m;
  if (CUresult r = (*d)->cuMemAlloc(&m.ptr_, bytes ? bytes : 1))
    return failed(**d, "cuMemAlloc", device, r);
  m.device_ = device;
  m.bytes_ = bytes;
  return m;
}

DeviceMemory::~DeviceMemory() {
  if (!ptr_ || CudaDriver::exiting())
    return;
  ContextRestorer restore; // freed whenever the last owner lets go, on the caller's thread
  if (auto d = driverAt(device_))
    (*d)->cuMemFree(ptr_);
}

Error copyToDevice(int device, CUdeviceptr dst, const void *src, size_t bytes) {
  auto d = driverAt(device);
  if (!d)
    return d.error();
  if (CUresult r = (*d)->cuMemcpyHtoD(dst, src, bytes))
    return failed(**d, "cuMemcpyHtoD", device, r);
  return Error::success();
}

Error copyToHost(int device, void *dst, CUdeviceptr src, size_t bytes) {
  auto d = driverAt(device);
  if (!d)
    return d.error();
  if (CUresult r = (*d)->cuMemcpyDtoH(dst, src, bytes))
    return failed(**d, "cuMemcpyDtoH", device, r);
  return Error::success();
}

Error DeviceMemory::upload(const void *host, size_t bytes, size_t offset) const {
  return copyToDevice(device_, ptr_ + offset, host, bytes);
}

Error DeviceMemory::download(void *host, size_t bytes, size_t offset) const {
  return copyToHost(device_, host, ptr_ + offset, bytes);
}

Expected<CUdeviceptr> DeviceScratch::get(int device, size_t slot, size_t bytes) {
  if (buffers_.size() <= slot)
    buffers_.resize(slot + 1);
  DeviceMemory &b = buffers_[slot];
  if (!b.get() || b.device() != device || b.bytes() < bytes) {
    b = DeviceMemory(); // free first: the old one may be most of the device
    auto m = DeviceMemory::allocate(device, bytes);
    if (!m)
      return m.takeError();
    b = std::move(*m);
  }
  return b.get();
}

Expected<std::vector<char>> linkPtx(int device, const std::string &ptx) {
  auto d = driverAt(device);
  if (!d)
    return d.error();
  if (!(*d)->cuLinkCreate)
    return Error(ErrorCode::Unsupported, "the driver has no linker entry points");
  JitLogs logs;
  CUlinkState link = nullptr;
  if (CUresult r = (*d)->cuLinkCreate(4, logs.options, logs.values, &link))
    return Error(ErrorCode::Unsupported, fmt::format("cuLinkCreate on cuda:{} failed: {}", device, (*d)->errorString(r)));
  std::vector<char> cubin;
  CUresult r = (*d)->cuLinkAddData(link, kInputPtx, const_cast<char *>(ptx.c_str()), ptx.size() + 1, "hsnn.ptx", 0,
                                   nullptr, nullptr);
  const char *step = "cuLinkAddData";
  if (!r) {
    void *image = nullptr;
    size_t size = 0;
    step = "cuLinkComplete";
    r = (*d)->cuLinkComplete(link, &image, &size);
    if (!r) // the image belongs to the link state: copy it before destroying that
      cubin.assign(static_cast<const char *>(image), static_cast<const char *>(image) + size);
  }
  (*d)->cuLinkDestroy(link);
  if (r)
    return Error(ErrorCode::Unsupported,
                 fmt::format("{} on cuda:{} failed: {}{}", step, device, (*d)->errorString(r), logs.text()));
  return cubin;
}

Expected<std::shared_ptr<GpuModule>> GpuModule::load(int device, std::span<const char> image,
                                                     std::span<const std::string> kernels) {
  auto m = std::make_shared<GpuModule>();
  m->device_ = device;
  auto d = driverAt(device);
  if (!d)
    return d.error();
  // PTX must end in NUL; a cubin is read by its own header. One extra NUL
  // byte is harmless to both.
  std::vector<char> bytes(image.begin(), image.end());
  bytes.push_back('\0');
  JitLogs logs;
  if (CUresult r = (*d)->cuModuleLoadDataEx(&m->module_, bytes.data(), 4, logs.options, logs.values)) {
    m->module_ = nullptr;
    return Error(ErrorCode::Unsupported, fmt::format("cuModuleLoadDataEx on cuda:{} failed: {}{}", device,
                                                     (*d)->errorString(r), logs.text()));
  }
  for (const std::string &k : kernels) {
    CUfunction f = nullptr;
    if (CUresult r = (*d)->cuModuleGetFunction(&f, m->module_, k.c_str()))
      return Error(ErrorCode::Internal, fmt::format("kernel {} missing from the module: {}", k, (*d)->errorString(r)));
    int minGrid = 0, block = 0;
    if (CUresult r = (*d)->cuOccupancyMaxPotentialBlockSize(&minGrid, &block, f, nullptr, 0, 0))
      return failed(**d, "cuOccupancyMaxPotentialBlockSize", device, r);
    m->functions_.push_back(f);
    // Whole warps: loss kernels reduce across every lane of a warp.
    m->blockSize_.push_back(std::max(kWarp, unsigned(block) / kWarp * kWarp));
    m->fullGrid_.push_back(unsigned(std::max(minGrid, 1)));
  }
  return m;
}

GpuModule::~GpuModule() {
  if (!module_ || CudaDriver::exiting())
    return;
  ContextRestorer restore;
  if (auto d = driverAt(device_))
    (*d)->cuModuleUnload(module_);
}

Error GpuModule::launch(size_t kernel, void **args, unsigned gridX, unsigned gridY, unsigned block, Queue queue) const {
  auto d = driverAt(device_);
  if (!d)
    return d.error();
  if (CUresult r = (*d)->cuLaunchKernel(functions_[kernel], gridX, gridY, 1, block, 1, 1, 0, queue.value_or(nullptr),
                                        args, nullptr))
    return failed(**d, "cuLaunchKernel", device_, r);
  return Error::success();
}

Error GpuModule::finish(Queue queue) const {
  if (queue)
    return Error::success();
  auto d = driverAt(device_);
  if (!d)
    return d.error();
  if (CUresult r = (*d)->cuCtxSynchronize())
    return failed(**d, "cuCtxSynchronize", device_, r);
  return Error::success();
}

Error GpuModule::wait(Queue queue) const {
  if (!queue)
    return finish(queue);
  auto d = driverAt(device_);
  if (!d)
    return d.error();
  if (CUresult r = (*d)->cuStreamSynchronize(*queue))
    return failed(**d, "cuStreamSynchronize", device_, r);
  return Error::success();
}

Error GpuModule::toHost(void *dst, CUdeviceptr src, size_t bytes, Queue queue) const {
  auto d = driverAt(device_);
  if (!d)
    return d.error();
  if (!queue) { // synchronous on the legacy default stream: after everything before it
    if (CUresult r = (*d)->cuMemcpyDtoH(dst, src, bytes))
      return failed(**d, "cuMemcpyDtoH", device_, r);
    return Error::success();
  }
  if (CUresult r = (*d)->cuMemcpyDtoHAsync(dst, src, bytes, *queue))
    return failed(**d, "cuMemcpyDtoHAsync", device_, r);
  if (CUresult r = (*d)->cuStreamSynchronize(*queue))
    return failed(**d, "cuStreamSynchronize", device_, r);
  return Error::success();
}

Expected<Queue> currentQueue(int device) {
  Stream *s = StreamScope::current();
  if (!s)
    return Queue();
  std::string ours = fmt::format("cuda:{}", device);
  if (s->backend() != ours)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("the current stream belongs to {}; this layer runs on {}", s->backend(), ours));
  return Queue(reinterpret_cast<CUstream>(s->handle()));
}

} // namespace hsnn::detail
