//===- lib/CUDA/GpuCode.cpp - A module of GPU kernels, built or cached, loaded ===//
#include "GpuCode.h"

#include "Program/Stopwatch.h"

#include "hsnn/Version.h"

#include "CodeGenToken.h"

#if HSNN_HAS_NVPTX
#include "CodeGen/PTXCompiler.h"
#endif

#include <fmt/format.h>

namespace hsnn::detail {

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

namespace {
#if HSNN_HAS_NVPTX
// Everything that changes the image: the tapes and kernel kinds, the PTX
// generator, the architecture, and the device and driver it was assembled by.
CacheKey moduleKey(const GpuModuleSpec &spec, const GpuBuildOptions &options, const std::string &arch,
                   const GpuDevice &dev, const CudaDriver &d) {
  CacheKeyBuilder k;
  k.add("format", "hsnn-gpu-module-3")
      .add("code-generator", HSNN_CODEGEN_TOKEN)
      .add("hsnn", HSNN_VERSION)
      .add("generator", ptxGeneratorId())
      .add("arch", arch)
      .add("compute-capability", fmt::format("{}.{}", dev.ccMajor, dev.ccMinor))
      .add("driver", uint64_t(d.driverVersion))
      .add("image", d.cuLinkCreate ? "cubin" : "ptx")
      .add("opt", uint64_t(options.optLevel))
      .add("fast-math", uint64_t(options.fastMath));
  for (const GpuLayerKernel &l : spec.layers) {
    k.add("layer", l.symbol).add("kind", kindName(l.kind)).add("dtype", to_string(l.dtype));
    k.add("layout", to_string(l.layout));
    for (const Program *p : l.units)
      k.add("unit", p->fingerprint());
  }
  for (const KernelRequest &r : spec.losses)
    k.add("loss", r.symbol).add("kind", kindName(r.kind)).add("dtype", to_string(r.dtype)).add("tape", r.program->fingerprint());
  for (const GpuPopulationKernel &p : spec.populations)
    k.add("population", p.symbol).add("dtype", to_string(p.dtype)).add("loss", p.loss ? p.loss->fingerprint() : "");
  return k.add("sum", spec.sumKernel).add("value", spec.valueKernel).finish();
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
  std::optional<ObjectCache> cache = ObjectCache::open(options_.cache);
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
    cache->store(CacheCategory::Gpu, key, image, description_);
  module_ = std::move(*m);
  image_ = std::move(image);
  ccMajor_ = (*dev)->ccMajor, ccMinor_ = (*dev)->ccMinor;
  return Error::success();
#else
  (void)device, (void)info;
  return Error(ErrorCode::Unsupported, "this build has no NVPTX code generator (HSNN_ENABLE_JIT=OFF)");
#endif
}

} // namespace hsnn::detail
