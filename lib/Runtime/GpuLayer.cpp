//===- lib/Runtime/GpuLayer.cpp - Layers and losses on an NVIDIA GPU ------===//
#include "GpuLayer.h"

#include "CodeGen/KernelSpec.h"

#if HSNN_HAS_NVPTX
#include "CUDA/PTXCompiler.h"
#endif

#include <fmt/format.h>

namespace hsnn::detail {
namespace {

size_t elementSize(DType d) { return d == DType::F32 ? 4 : 8; }

Expected<std::string> ptxFor(int device, std::span<const KernelRequest> requests) {
#if HSNN_HAS_NVPTX
  auto arch = gpuArch(device);
  if (!arch)
    return arch.takeError();
  return compilePtx(requests, {.arch = *arch});
#else
  (void)device, (void)requests;
  return Error(ErrorCode::Unsupported, "this build has no NVPTX code generator (HSNN_ENABLE_JIT=OFF)");
#endif
}

Expected<DeviceMemory> uploaded(int device, const std::vector<double> &values) {
  auto mem = DeviceMemory::allocate(device, std::max<size_t>(1, values.size()) * sizeof(double));
  if (!mem)
    return mem.takeError();
  if (!values.empty())
    if (Error e = mem->upload(values.data(), values.size() * sizeof(double)))
      return e;
  return mem;
}

} // namespace

Expected<std::unique_ptr<GpuActivation>> GpuActivation::create(int device, DType dtype, Layout layout,
                                                               const std::vector<std::array<const Program *, 3>> &units,
                                                               const std::vector<uint32_t> &unitOf,
                                                               const std::vector<double> &params,
                                                               const std::vector<uint64_t> &offsets) {
  std::vector<KernelRequest> requests;
  for (size_t k = 0; k < 3; ++k)
    for (size_t u = 0; u < units.size(); ++u)
      requests.push_back({fmt::format("hsnn_gpu_u{}_{}", u, shapeName(KernelShape(k))), units[u][k], KernelShape(k),
                          dtype, layout == Layout::BatchMajor});
  auto g = std::make_unique<GpuActivation>();
  if (Error e = g->init(device, dtype, requests, params))
    return e;
  g->layout_ = layout;
  g->unitOf_ = unitOf;
  g->offsets_ = offsets;
  g->units_ = units.size();
  return g;
}

Error GpuActivation::run(int kind, CUdeviceptr z, CUdeviceptr err, CUdeviceptr out0, CUdeviceptr out1,
                         size_t batch) const {
  size_t nodes = unitOf_.size(), es = elementSize(dtype_);
  bool strided = layout_ == Layout::BatchMajor;
  for (size_t n = 0; n < nodes; ++n) {
    // Node n's elements start at n*batch (nodes-major) or n (batch-major, stride = nodes).
    CUdeviceptr base = (strided ? n : n * batch) * es;
    CUdeviceptr a0 = z + base, a1 = err ? err + base : 0, a2 = out0 + base, a3 = out1 ? out1 + base : 0;
    CUdeviceptr prm = params_.get() + offsets_[n] * sizeof(double);
    int64_t count = int64_t(batch), stride = int64_t(nodes);
    void *args[] = {&a0, &a1, &a2, &a3, &prm, &count, &stride};
    if (Error e = module_->launch(size_t(kind) * units_ + unitOf_[n], args, count))
      return e;
  }
  return module_->synchronize();
}

Error GpuActivation::runHost(int kind, const void *z, const void *err, void *out0, void *out1, size_t batch) const {
  size_t bytes = unitOf_.size() * batch * elementSize(dtype_);
  int dev = module_->device();
  auto dz = DeviceMemory::allocate(dev, bytes), d0 = DeviceMemory::allocate(dev, bytes);
  if (!dz)
    return dz.takeError();
  if (!d0)
    return d0.takeError();
  Expected<DeviceMemory> de = err ? DeviceMemory::allocate(dev, bytes) : Expected<DeviceMemory>(DeviceMemory());
  Expected<DeviceMemory> d1 = out1 ? DeviceMemory::allocate(dev, bytes) : Expected<DeviceMemory>(DeviceMemory());
  if (!de)
    return de.takeError();
  if (!d1)
    return d1.takeError();
  if (Error e = dz->upload(z, bytes))
    return e;
  if (err)
    if (Error e = de->upload(err, bytes))
      return e;
  if (Error e = run(kind, dz->get(), de->get(), d0->get(), d1->get(), batch))
    return e;
  if (Error e = d0->download(out0, bytes))
    return e;
  if (out1)
    if (Error e = d1->download(out1, bytes))
      return e;
  return Error::success();
}

Expected<std::unique_ptr<GpuLoss>> GpuLoss::create(int device, DType dtype, const std::array<const Program *, 4> &programs,
                                                   const std::vector<double> &params) {
  static const KernelShape shapes[4] = {KernelShape::LossElements, KernelShape::LossReduce, KernelShape::LossGradient,
                                        KernelShape::LossFused};
  std::vector<KernelRequest> requests;
  for (size_t k = 0; k < 4; ++k)
    requests.push_back({fmt::format("hsnn_gpu_{}", shapeName(shapes[k])), programs[k], shapes[k], dtype});
  auto g = std::make_unique<GpuLoss>();
  if (Error e = g->init(device, dtype, requests, params))
    return e;
  return g;
}

Error GpuCode::init(int device, DType dtype, std::span<const KernelRequest> requests, const std::vector<double> &params) {
  auto ptx = ptxFor(device, requests);
  if (!ptx)
    return ptx.takeError();
  std::vector<std::string> names;
  for (const KernelRequest &r : requests)
    names.push_back(r.symbol);
  auto module = GpuModule::load(device, *ptx, names);
  if (!module)
    return module.takeError();
  module_ = std::move(*module);
  dtype_ = dtype;
  auto p = uploaded(device, params);
  if (!p)
    return p.takeError();
  params_ = std::move(*p);
  return Error::success();
}

Error GpuCode::uploadParams(const std::vector<double> &params) {
  if (params.empty())
    return Error::success();
  return params_.upload(params.data(), params.size() * sizeof(double));
}

Expected<double> GpuLoss::run(int kind, CUdeviceptr yp, CUdeviceptr yt, CUdeviceptr out, double scale, size_t n) const {
  int dev = module_->device();
  size_t threads = module_->threads(size_t(kind), int64_t(n));
  auto partials = DeviceMemory::allocate(dev, threads * sizeof(double));
  if (!partials)
    return partials.takeError();
  CUdeviceptr a0 = yp, a1 = yt, a2 = out, a3 = params_.get(), a6 = partials->get();
  int64_t count = int64_t(n);
  float scale32 = float(scale);
  void *args[] = {&a0, &a1, &a2, &a3, &count, dtype_ == DType::F32 ? static_cast<void *>(&scale32) : &scale, &a6};
  if (Error e = module_->launch(size_t(kind), args, count))
    return e;
  if (Error e = module_->synchronize())
    return e;
  if (kind != 1 && kind != 3)
    return 0.0;
  std::vector<double> sums(threads);
  if (Error e = partials->download(sums.data(), threads * sizeof(double)))
    return e;
  double total = 0;
  for (double v : sums) // fixed order: the same input gives the same bits
    total += v;
  return total;
}

Expected<double> GpuLoss::runHost(int kind, const void *yp, const void *yt, void *out, double scale, size_t n) const {
  size_t bytes = n * elementSize(dtype_);
  int dev = module_->device();
  auto dp = DeviceMemory::allocate(dev, bytes), dt = DeviceMemory::allocate(dev, bytes),
       dout = DeviceMemory::allocate(dev, bytes);
  for (auto *m : {&dp, &dt, &dout})
    if (!*m)
      return m->takeError();
  if (Error e = dp->upload(yp, bytes))
    return e;
  if (Error e = dt->upload(yt, bytes))
    return e;
  auto sum = run(kind, dp->get(), dt->get(), dout->get(), scale, n);
  if (!sum)
    return sum;
  if (kind != 1 && out)
    if (Error e = dout->download(out, bytes))
      return e;
  return sum;
}

} // namespace hsnn::detail
