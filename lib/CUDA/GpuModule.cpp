//===- lib/CUDA/GpuModule.cpp - PTX loaded on a device, and launches ------===//
#include "GpuModule.h"

#include <algorithm>
#include <fmt/format.h>

namespace hsnn::detail {
namespace {

// cuda.h's CUjit_option values for the logs.
constexpr int kInfoLogBuffer = 3, kInfoLogBufferSize = 4, kErrorLogBuffer = 5, kErrorLogBufferSize = 6;

Expected<const CudaDriver *> driverAt(int device, CUcontext *ctx) {
  auto d = CudaDriver::get();
  if (!d)
    return d.error();
  auto c = (*d)->context(device);
  if (!c)
    return c.takeError();
  if (CUresult r = (*d)->cuCtxSetCurrent(*c))
    return Error(ErrorCode::Unsupported, fmt::format("cuCtxSetCurrent on cuda:{} failed: {}", device, (*d)->errorString(r)));
  if (ctx)
    *ctx = *c;
  return *d;
}

Error failed(const CudaDriver &d, const char *what, int device, CUresult r) {
  return Error(ErrorCode::Unsupported, fmt::format("{} on cuda:{} failed: {}", what, device, d.errorString(r)));
}

} // namespace

Expected<DeviceMemory> DeviceMemory::allocate(int device, size_t bytes) {
  auto d = driverAt(device, nullptr);
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
  if (!ptr_)
    return;
  if (auto d = driverAt(device_, nullptr))
    (*d)->cuMemFree(ptr_);
}

Error DeviceMemory::upload(const void *host, size_t bytes, size_t offset) const {
  auto d = driverAt(device_, nullptr);
  if (!d)
    return d.error();
  if (CUresult r = (*d)->cuMemcpyHtoD(ptr_ + offset, host, bytes))
    return failed(**d, "cuMemcpyHtoD", device_, r);
  return Error::success();
}

Error DeviceMemory::download(void *host, size_t bytes, size_t offset) const {
  auto d = driverAt(device_, nullptr);
  if (!d)
    return d.error();
  if (CUresult r = (*d)->cuMemcpyDtoH(host, ptr_ + offset, bytes))
    return failed(**d, "cuMemcpyDtoH", device_, r);
  return Error::success();
}

Expected<std::string> gpuArch(int device) {
  auto d = CudaDriver::get();
  if (!d)
    return d.error();
  if (device < 0 || size_t(device) >= (*d)->devices.size())
    return Error(ErrorCode::InvalidArgument, fmt::format("device {} does not exist; valid devices are 0..{}", device,
                                                         int((*d)->devices.size()) - 1));
  return (*d)->devices[size_t(device)].arch();
}

Expected<std::shared_ptr<GpuModule>> GpuModule::load(int device, const std::string &ptx,
                                                     std::span<const std::string> kernels) {
  auto m = std::make_shared<GpuModule>();
  m->device_ = device;
  auto d = driverAt(device, &m->ctx_);
  if (!d)
    return d.error();
  std::vector<char> errorLog(8192, 0), infoLog(8192, 0);
  int options[] = {kErrorLogBuffer, kErrorLogBufferSize, kInfoLogBuffer, kInfoLogBufferSize};
  void *values[] = {errorLog.data(), reinterpret_cast<void *>(uintptr_t(errorLog.size())), infoLog.data(),
                    reinterpret_cast<void *>(uintptr_t(infoLog.size()))};
  if (CUresult r = (*d)->cuModuleLoadDataEx(&m->module_, ptx.c_str(), 4, options, values))
    return Error(ErrorCode::Unsupported, fmt::format("cuModuleLoadDataEx on cuda:{} failed: {}\n{}", device,
                                                     (*d)->errorString(r), errorLog.data()));
  for (const std::string &k : kernels) {
    CUfunction f = nullptr;
    if (CUresult r = (*d)->cuModuleGetFunction(&f, m->module_, k.c_str()))
      return Error(ErrorCode::Internal, fmt::format("kernel {} missing from the module: {}", k, (*d)->errorString(r)));
    int minGrid = 0, block = 0;
    if (CUresult r = (*d)->cuOccupancyMaxPotentialBlockSize(&minGrid, &block, f, nullptr, 0, 0))
      return failed(**d, "cuOccupancyMaxPotentialBlockSize", device, r);
    m->functions_.push_back(f);
    m->blockSize_.push_back(std::max(block, 32));
    m->maxGrid_.push_back(std::max(minGrid, 1));
  }
  return m;
}

GpuModule::~GpuModule() {
  if (!module_)
    return;
  if (auto d = driverAt(device_, nullptr))
    (*d)->cuModuleUnload(module_);
}

size_t GpuModule::threads(size_t kernel, int64_t n) const {
  int64_t block = blockSize_[kernel];
  int64_t grid = std::clamp<int64_t>((n + block - 1) / block, 1, maxGrid_[kernel]);
  return size_t(grid * block);
}

Error GpuModule::launch(size_t kernel, void **args, int64_t n) const {
  auto d = driverAt(device_, nullptr);
  if (!d)
    return d.error();
  unsigned block = unsigned(blockSize_[kernel]);
  unsigned grid = unsigned(threads(kernel, n) / block);
  if (CUresult r = (*d)->cuLaunchKernel(functions_[kernel], grid, 1, 1, block, 1, 1, 0, nullptr, args, nullptr))
    return failed(**d, "cuLaunchKernel", device_, r);
  return Error::success();
}

Error GpuModule::synchronize() const {
  auto d = driverAt(device_, nullptr);
  if (!d)
    return d.error();
  if (CUresult r = (*d)->cuCtxSynchronize())
    return failed(**d, "cuCtxSynchronize", device_, r);
  return Error::success();
}

} // namespace hsnn::detail
