//===- lib/Runtime/GpuLayer.cpp - Layers and losses on an NVIDIA GPU ------===//
#include "GpuLayer.h"

#include "Cache/ObjectCache.h"
#include "Program/Stopwatch.h"

#include "hsnn/Runtime.h"

#if HSNN_HAS_NVPTX
#include "CUDA/PTXCompiler.h"
#endif

#include <algorithm>
#include <fmt/format.h>

#ifndef HSNN_VERSION
#define HSNN_VERSION "0.1.0"
#endif

namespace hsnn::detail {
namespace {

size_t elementSize(DType d) { return d == DType::F32 ? 4 : 8; }
constexpr unsigned kWarp = 32, kMaxGridY = 65535;
constexpr uint64_t kMaxGridX = 0x7fffffff;

template <class T> Expected<DeviceMemory> uploaded(int device, const std::vector<T> &values) {
  auto mem = DeviceMemory::allocate(device, std::max<size_t>(1, values.size()) * sizeof(T));
  if (!mem)
    return mem.takeError();
  if (!values.empty())
    if (Error e = mem->upload(values.data(), values.size() * sizeof(T)))
      return e;
  return mem;
}

Expected<const GpuDevice *> deviceInfo(int device) {
  auto d = CudaDriver::get();
  if (!d)
    return d.error();
  const auto &devices = (*d)->devices;
  if (device < 0 || size_t(device) >= devices.size())
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("GPU id {} is out of range: valid ids are 0..{}", device, int(devices.size()) - 1));
  return &devices[size_t(device)];
}

#if HSNN_HAS_NVPTX
// Everything that changes the image: the tapes and kernel shapes, the PTX
// generator, the architecture, and the device and driver it was assembled by.
CacheKey moduleKey(const GpuModuleSpec &spec, const GpuBuildOptions &options, const std::string &arch,
                   const GpuDevice &dev, const CudaDriver &d) {
  CacheKeyBuilder k;
  // Bump the format whenever the GPU kernels change the code they make.
  k.add("format", "hsnn-gpu-module-1")
      .add("hsnn", HSNN_VERSION)
      .add("generator", ptxGeneratorId())
      .add("arch", arch)
      .add("compute-capability", fmt::format("{}.{}", dev.ccMajor, dev.ccMinor))
      .add("driver", uint64_t(d.driverVersion))
      .add("image", d.cuLinkCreate ? "cubin" : "ptx")
      .add("opt", uint64_t(options.optLevel))
      .add("fast-math", uint64_t(options.fastMath));
  for (const GpuLayerKernel &l : spec.layers) {
    k.add("layer", l.symbol).add("shape", shapeName(l.shape)).add("dtype", to_string(l.dtype));
    k.add("layout", to_string(l.layout));
    for (const Program *p : l.units)
      k.add("unit", p->fingerprint());
  }
  for (const KernelRequest &r : spec.losses)
    k.add("loss", r.symbol).add("shape", shapeName(r.shape)).add("dtype", to_string(r.dtype)).add("tape",
                                                                                                   r.program->fingerprint());
  return k.add("sum", spec.sumKernel).finish();
}
#endif

} // namespace

Error GpuCode::build(int device, CompileInfo *info) {
#if HSNN_HAS_NVPTX
  auto dev = deviceInfo(device);
  if (!dev)
    return dev.takeError();
  const CudaDriver &driver = **CudaDriver::get();
  auto arch = ptxArchFor((*dev)->ccMajor, (*dev)->ccMinor);
  if (!arch)
    return arch.takeError();
  CacheKey key = moduleKey(spec_, options_, *arch, **dev, driver);
  std::optional<ObjectCache> cache = ObjectCache::open();
  if (cache)
    if (auto image = cache->load(CacheCategory::Gpu, key)) {
      auto t = Clock::now();
      // An entry that verifies but does not load (a driver update the key
      // did not see, say) is rebuilt like any other miss.
      if (auto m = GpuModule::load(device, *image, kernels_)) {
        module_ = std::move(*m);
        image_ = std::move(*image);
        if (info) {
          info->cacheHit = true;
          info->loadMs = msSince(t);
          info->objectBytes = image_.size();
        }
        ccMajor_ = (*dev)->ccMajor, ccMinor_ = (*dev)->ccMinor;
        return Error::success();
      }
    }

  CompileStats stats;
  auto ptx = compilePtx(spec_, {.arch = *arch, .optLevel = options_.optLevel, .fastMath = options_.fastMath}, &stats);
  if (!ptx)
    return ptx.takeError();
  int isa = ptxIsaVersion(*ptx), supported = maxPtxIsa(driver.driverVersion);
  if (isa > supported)
    return Error(ErrorCode::Unsupported,
                 fmt::format("the CUDA driver ({}, CUDA {}) loads PTX ISA up to {}.{}, but code for {} needs {}.{}: "
                             "update the NVIDIA driver",
                             driver.library, driverVersionString(driver.driverVersion), supported / 10, supported % 10,
                             *arch, isa / 10, isa % 10));
  auto t = Clock::now();
  std::vector<char> image;
  if (driver.cuLinkCreate) {
    auto cubin = linkPtx(device, *ptx);
    if (!cubin)
      return cubin.takeError();
    image = std::move(*cubin);
  } else {
    image.assign(ptx->begin(), ptx->end());
  }
  auto m = GpuModule::load(device, image, kernels_);
  if (!m)
    return m.takeError();
  if (info) {
    info->cacheHit = false;
    info->emitMs = stats.emitMs;
    info->optimizeMs = stats.optimizeMs;
    info->codegenMs = stats.codegenMs;
    info->loadMs = msSince(t);
    info->objectBytes = image.size();
  }
  if (cache)
    cache->store(CacheCategory::Gpu, key, image);
  module_ = std::move(*m);
  image_ = std::move(image);
  ccMajor_ = (*dev)->ccMajor, ccMinor_ = (*dev)->ccMinor;
  return Error::success();
#else
  (void)device, (void)info;
  return Error(ErrorCode::Unsupported, "this build has no NVPTX code generator (HSNN_ENABLE_JIT=OFF)");
#endif
}

Error GpuCode::init(int device, DType dtype, GpuBuildOptions options, GpuModuleSpec spec,
                    std::vector<std::string> kernels, const std::vector<double> &params, CompileInfo *info) {
  options_ = options;
  spec_ = std::move(spec);
  kernels_ = std::move(kernels);
  dtype_ = dtype;
  if (Error e = build(device, info))
    return e;
  auto p = uploaded(device, params);
  if (!p)
    return p.takeError();
  params_ = std::move(*p);
  return uploadTables();
}

Error GpuCode::uploadParams(const std::vector<double> &params) {
  if (params.empty())
    return Error::success();
  return params_.upload(params.data(), params.size() * sizeof(double));
}

Error GpuCode::moveTo(int device, const std::vector<double> &params, CompileInfo *info) {
  auto dev = deviceInfo(device);
  if (!dev)
    return dev.takeError();
  if (device == this->device())
    return Error::success();
  std::shared_ptr<GpuModule> old = module_;
  if ((*dev)->ccMajor == ccMajor_ && (*dev)->ccMinor == ccMinor_) {
    auto m = GpuModule::load(device, image_, kernels_);
    if (!m)
      return m.takeError();
    module_ = std::move(*m);
  } else if (Error e = build(device, info)) {
    module_ = old;
    return e;
  }
  auto p = uploaded(device, params);
  if (!p) {
    module_ = old;
    return p.takeError();
  }
  params_ = std::move(*p);
  return uploadTables();
}

Expected<std::unique_ptr<GpuActivation>> GpuActivation::build(int device, DType dtype, GpuBuildOptions options,
                                                              Layout layout,
                                                              const std::vector<std::array<const Program *, 3>> &units,
                                                              std::initializer_list<int> kinds,
                                                              const std::vector<uint32_t> &unitOf,
                                                              const std::vector<double> &params,
                                                              const std::vector<uint64_t> &offsets, CompileInfo *info) {
  GpuModuleSpec spec;
  std::vector<std::string> names;
  for (int k : kinds) {
    GpuLayerKernel kernel{fmt::format("hsnn_layer_{}{}", shapeName(KernelShape(k)),
                                      layout == Layout::BatchMajor ? "_batch_major" : ""),
                          KernelShape(k), dtype, layout, {}};
    for (const auto &programs : units)
      kernel.units.push_back(programs[size_t(k)]);
    names.push_back(kernel.symbol);
    spec.layers.push_back(std::move(kernel));
  }
  auto g = std::make_unique<GpuActivation>();
  g->layout_ = layout;
  g->units_ = units;
  g->unitOf_ = unitOf;
  g->offsets_ = offsets;
  g->hostParams_ = params;
  if (Error e = g->init(device, dtype, options, std::move(spec), std::move(names), params, info))
    return e;
  return g;
}

Expected<std::unique_ptr<GpuActivation>> GpuActivation::create(int device, DType dtype, GpuBuildOptions options,
                                                               Layout layout,
                                                               const std::vector<std::array<const Program *, 3>> &units,
                                                               const std::vector<uint32_t> &unitOf,
                                                               const std::vector<double> &params,
                                                               const std::vector<uint64_t> &offsets, CompileInfo *info) {
  return build(device, dtype, options, layout, units, {0, 1}, unitOf, params, offsets, info);
}

const GpuActivation *GpuActivation::fused() const {
  std::lock_guard lock(fusedMutex_);
  if (!fused_ && !fusedError_) {
    auto f = build(device(), dtype_, options_, layout_, units_, {2}, unitOf_, hostParams_, offsets_, nullptr);
    if (f)
      fused_ = std::move(*f);
    else
      fusedError_ = f.takeError();
  }
  return fused_.get();
}

Error GpuActivation::uploadParams(const std::vector<double> &params) {
  hostParams_ = params;
  if (Error e = GpuCode::uploadParams(params))
    return e;
  std::lock_guard lock(fusedMutex_);
  return fused_ ? fused_->uploadParams(params) : Error::success();
}

Error GpuActivation::moveTo(int device, const std::vector<double> &params, CompileInfo *info) {
  {
    std::lock_guard lock(hostMutex_);
    hostScratch_.clear();
  }
  if (Error e = GpuCode::moveTo(device, params, info))
    return e;
  std::lock_guard lock(fusedMutex_);
  return fused_ ? fused_->moveTo(device, params, nullptr) : Error::success();
}

Error GpuActivation::uploadTables() {
  int dev = device();
  auto units = uploaded(dev, unitOf_);
  if (!units)
    return units.takeError();
  auto offsets = uploaded(dev, offsets_);
  if (!offsets)
    return offsets.takeError();
  unitTable_ = std::move(*units);
  offsetTable_ = std::move(*offsets);
  return Error::success();
}

Error GpuActivation::run(int kind, CUdeviceptr z, CUdeviceptr err, CUdeviceptr out0, CUdeviceptr out1,
                         size_t batch) const {
  if (kind != 2)
    return launch(size_t(kind), z, err, out0, out1, batch);
  const GpuActivation *f = fused();
  if (!f)
    return fusedError_;
  return f->launch(0, z, err, out0, out1, batch);
}

Error GpuActivation::launch(size_t k, CUdeviceptr z, CUdeviceptr err, CUdeviceptr out0, CUdeviceptr out1,
                            size_t batch) const {
  uint64_t nodes = unitOf_.size();
  if (!batch || !nodes)
    return Error::success();
  uint64_t block = module_->blockSize(k), full = module_->fullGrid(k);
  CUdeviceptr prm = params_.get(), units = unitTable_.get(), offs = offsetTable_.get();
  int64_t b64 = int64_t(batch), n64 = int64_t(nodes), first = 0;
  void *args[] = {&z, &err, &out0, &out1, &prm, &units, &offs, &b64, &n64, &first};
  if (layout_ == Layout::NodesMajor) {
    // grid.y walks the nodes (65535 per launch); x fills the device.
    for (uint64_t f = 0; f < nodes; f += kMaxGridY) {
      uint64_t chunk = std::min<uint64_t>(kMaxGridY, nodes - f);
      uint64_t gx = std::clamp<uint64_t>((full + chunk - 1) / chunk, 1, (batch + block - 1) / block);
      first = int64_t(f);
      if (Error e = module_->launch(k, args, unsigned(std::min(gx, kMaxGridX)), unsigned(chunk), unsigned(block)))
        return e;
    }
  } else {
    uint64_t total = uint64_t(batch) * nodes;
    uint64_t gx = std::clamp<uint64_t>((total + block - 1) / block, 1, full);
    if (Error e = module_->launch(k, args, unsigned(gx), 1, unsigned(block)))
      return e;
  }
  return module_->synchronize();
}

Error GpuActivation::runHost(int kind, const void *z, const void *err, void *out0, void *out1, size_t batch) const {
  size_t bytes = unitOf_.size() * batch * elementSize(dtype_);
  if (!bytes)
    return Error::success();
  int dev = device();
  std::lock_guard lock(hostMutex_);
  CUdeviceptr d[4] = {0, 0, 0, 0};
  const void *inputs[2] = {z, err};
  for (size_t slot = 0; slot < 4; ++slot) {
    if (slot == 1 && !err)
      continue;
    if (slot == 3 && !out1)
      continue;
    auto p = hostScratch_.get(dev, slot, bytes);
    if (!p)
      return p.takeError();
    d[slot] = *p;
  }
  for (size_t slot = 0; slot < 2; ++slot)
    if (inputs[slot])
      if (Error e = copyToDevice(dev, d[slot], inputs[slot], bytes))
        return e;
  if (Error e = run(kind, d[0], d[1], d[2], d[3], batch))
    return e;
  void *outputs[2] = {out0, out1};
  for (size_t k = 0; k < 2; ++k)
    if (outputs[k])
      if (Error e = copyToHost(dev, outputs[k], d[2 + k], bytes))
        return e;
  return Error::success();
}

Expected<std::unique_ptr<GpuLoss>> GpuLoss::create(int device, DType dtype, GpuBuildOptions options,
                                                   const std::array<const Program *, 4> &programs,
                                                   const std::vector<double> &params, CompileInfo *info) {
  static const KernelShape shapes[4] = {KernelShape::LossElements, KernelShape::LossReduce, KernelShape::LossGradient,
                                        KernelShape::LossFused};
  static const char *names4[4] = {"elements", "sum", "gradient", "fused"};
  GpuModuleSpec spec;
  std::vector<std::string> names;
  for (size_t k = 0; k < 4; ++k) {
    spec.losses.push_back({fmt::format("hsnn_loss_{}", names4[k]), programs[k], shapes[k], dtype});
    names.push_back(spec.losses.back().symbol);
  }
  spec.sumKernel = "hsnn_loss_add_partials";
  names.push_back(spec.sumKernel);
  auto g = std::make_unique<GpuLoss>();
  if (Error e = g->init(device, dtype, options, std::move(spec), std::move(names), params, info))
    return e;
  return g;
}

Error GpuLoss::moveTo(int device, const std::vector<double> &params, CompileInfo *info) {
  {
    std::lock_guard lock(scratchMutex_);
    scratch_.clear();
  }
  return GpuCode::moveTo(device, params, info);
}

Expected<double> GpuLoss::run(int kind, CUdeviceptr yp, CUdeviceptr yt, CUdeviceptr out, double scale, size_t n) const {
  std::lock_guard lock(scratchMutex_);
  return runLocked(kind, yp, yt, out, scale, n);
}

Expected<double> GpuLoss::runLocked(int kind, CUdeviceptr yp, CUdeviceptr yt, CUdeviceptr out, double scale,
                                    size_t n) const {
  if (n == 0)
    return 0.0;
  size_t k = size_t(kind);
  uint64_t block = module_->blockSize(k);
  uint64_t grid = std::clamp<uint64_t>((n + block - 1) / block, 1, module_->fullGrid(k));
  int64_t warps = int64_t(grid * block / kWarp);
  auto scratch = scratch_.get(device(), 0, (size_t(warps) + 1) * sizeof(double)); // partials, then the total
  if (!scratch)
    return scratch.takeError();
  CUdeviceptr partials = *scratch, total = partials + size_t(warps) * sizeof(double), prm = params_.get();
  int64_t count = int64_t(n);
  float scale32 = float(scale);
  void *args[] = {&yp, &yt, &out, &prm, &count, dtype_ == DType::F32 ? static_cast<void *>(&scale32) : &scale, &partials};
  if (Error e = module_->launch(k, args, unsigned(grid), 1, unsigned(block)))
    return e;
  if (kind != 1 && kind != 3) {
    if (Error e = module_->synchronize())
      return e;
    return 0.0;
  }
  void *sumArgs[] = {&partials, &warps, &total};
  if (Error e = module_->launch(4, sumArgs, 1, 1, kWarp))
    return e;
  double result = 0;
  // A synchronous copy on the default stream: it waits for both kernels.
  if (Error e = copyToHost(device(), &result, total, sizeof result))
    return e;
  return result;
}

Expected<double> GpuLoss::runHost(int kind, const void *yp, const void *yt, void *out, double scale, size_t n) const {
  size_t bytes = n * elementSize(dtype_);
  if (!bytes)
    return 0.0;
  int dev = device();
  std::lock_guard lock(scratchMutex_);
  CUdeviceptr d[3];
  for (size_t slot = 0; slot < 3; ++slot) {
    auto p = scratch_.get(dev, slot + 1, bytes);
    if (!p)
      return p.takeError();
    d[slot] = *p;
  }
  if (Error e = copyToDevice(dev, d[0], yp, bytes))
    return e;
  if (Error e = copyToDevice(dev, d[1], yt, bytes))
    return e;
  auto sum = runLocked(kind, d[0], d[1], d[2], scale, n);
  if (!sum)
    return sum;
  if (kind != 1 && out)
    if (Error e = copyToHost(dev, out, d[2], bytes))
      return e;
  return sum;
}

namespace {
Error outOfRange(int id) {
  const RuntimeInfo &rt = runtimeInfo();
  return Error(ErrorCode::InvalidArgument,
               rt.numGpus ? fmt::format("GPU id {} is out of range: valid ids are 0..{}", id, rt.numGpus - 1)
                          : fmt::format("GPU id {} is out of range: this machine has no usable GPU ({})", id,
                                        rt.gpuUnavailableReason));
}
} // namespace

Error checkGpuId(Method method, int gpuId) {
  if (method == Method::Cuda && (gpuId < 0 || gpuId >= runtimeInfo().numGpus))
    return outOfRange(gpuId);
  return Error::success();
}

Error moveGpuCode(GpuCode *gpu, int id, const std::vector<double> &params, CompileInfo &info, const char *what) {
  if (id < 0 || id >= runtimeInfo().numGpus)
    return outOfRange(id);
  if (!gpu)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("this {} runs on the CPU ({}); compile it with method cuda to run it on a GPU", what,
                             to_string(info.method)));
  return gpu->moveTo(id, params, &info);
}

} // namespace hsnn::detail
