//===- lib/CUDA/GpuEngine.cpp - Models run on an NVIDIA GPU --------------===//
#include "GpuEngine.h"

#include "GpuCode.h"

#include <algorithm>
#include <fmt/format.h>
#include <mutex>

namespace hsnn::detail {
namespace {

// A layer's kernels for a set of activation kinds (forward + backward, or
// fused) in one module; kernel i of the module is kinds[i].
class GpuActivation : public GpuCode {
public:
  static Expected<std::unique_ptr<GpuActivation>> create(const CompiledModel &model, int device,
                                                         const GpuBuildOptions &options,
                                                         std::vector<KernelKind> kinds, CompileInfo *info) {
    GpuModuleSpec spec;
    std::vector<std::string> names;
    Layout layout = model.options.layout;
    for (KernelKind k : kinds) {
      GpuLayerKernel kernel{fmt::format("hsnn_layer_{}{}", kindName(k), layout == Layout::BatchMajor ? "_batch_major" : ""),
                            k, model.options.dtype, layout, {}};
      for (const CodeUnit &u : model.units)
        kernel.units.push_back(u.programs[size_t(k)]);
      names.push_back(kernel.symbol);
      spec.layers.push_back(std::move(kernel));
    }
    // The constant gradient's sums need the kernel that adds the partials.
    if (std::find(kinds.begin(), kinds.end(), KernelKind::ConstantGradient) != kinds.end()) {
      spec.sumKernel = "hsnn_add_partials";
      names.push_back(spec.sumKernel);
    }
    auto g = std::make_unique<GpuActivation>();
    g->kinds_ = std::move(kinds);
    g->layout_ = layout;
    g->nodes_ = model.numNodes();
    g->description_ = model.describe(fmt::format("cuda {}", device), g->kinds_);
    if (Error e = g->init(device, model.options.dtype, options, std::move(spec), std::move(names), info))
      return e;
    if (Error e = g->uploadTables(model))
      return e;
    return g;
  }

  Expected<std::unique_ptr<GpuActivation>> moveTo(const CompiledModel &model, int device, CompileInfo *info) const {
    auto g = std::make_unique<GpuActivation>();
    g->kinds_ = kinds_;
    g->layout_ = layout_;
    g->nodes_ = nodes_;
    if (Error e = g->initFrom(*this, device, info))
      return e;
    if (Error e = g->uploadTables(model))
      return e;
    return g;
  }

  /// Device pointers (0 when unused).
  Error run(KernelKind kind, CUdeviceptr z, CUdeviceptr err, CUdeviceptr out0, CUdeviceptr out1, size_t batch,
            CUdeviceptr params, Queue queue = {}) const;
  /// Host pointers: copied to the device and back (slower).
  Error runHost(KernelKind kind, const void *z, const void *err, void *out0, void *out1, size_t batch,
                CUdeviceptr params) const;
  /// The constant gradient (a module built with only that kind) on host
  /// arrays: grads[offsets[node] + c] = sum over the batch of err * df/dc.
  Error runConstantGradient(const CompiledModel &model, const void *z, const void *err, double *grads, size_t batch,
                            CUdeviceptr params) const;

private:
  Error uploadTables(const CompiledModel &model) {
    int dev = device();
    auto units = uploaded(dev, model.unitOf);
    if (!units)
      return units.takeError();
    auto offsets = uploaded(dev, model.offsets);
    if (!offsets)
      return offsets.takeError();
    unitTable_ = std::move(*units);
    offsetTable_ = std::move(*offsets);
    return Error::success();
  }

  std::vector<KernelKind> kinds_;
  Layout layout_ = Layout::NodesMajor;
  size_t nodes_ = 0;
  DeviceMemory unitTable_, offsetTable_;
  // Device copies of host arrays for runHost; host-pointer runs take turns.
  mutable std::mutex hostMutex_;
  mutable DeviceScratch hostScratch_;
};

// A loss's kernels: module kernel i is kLossKinds[i], then the kernel that
// adds the per-warp partial sums.
class GpuLoss : public GpuCode {
public:
  /// The elementwise and summing kinds; or, with `constantGradient`, only
  /// the sums of dl/dc (built at first use).
  static Expected<std::unique_ptr<GpuLoss>> create(const CompiledModel &model, int device,
                                                   const GpuBuildOptions &options, CompileInfo *info,
                                                   bool constantGradient = false) {
    GpuModuleSpec spec;
    std::vector<std::string> names;
    std::vector<KernelKind> kinds(kLossKinds.begin(), kLossKinds.end());
    if (constantGradient)
      kinds = {KernelKind::LossConstantGradient};
    for (KernelKind k : kinds) {
      spec.losses.push_back({fmt::format("hsnn_{}", kindName(k)), model.units[0].programs[size_t(k)], k,
                             model.options.dtype});
      names.push_back(spec.losses.back().symbol);
    }
    spec.sumKernel = "hsnn_loss_add_partials";
    names.push_back(spec.sumKernel);
    if (!constantGradient) {
      spec.valueKernel = "hsnn_loss_value";
      spec.valueType = model.options.dtype;
      names.push_back(spec.valueKernel);
    }
    auto g = std::make_unique<GpuLoss>();
    g->sumKernel_ = kinds.size();
    g->description_ = model.describe(fmt::format("cuda {}", device), kinds);
    if (Error e = g->init(device, model.options.dtype, options, std::move(spec), std::move(names), info))
      return e;
    return g;
  }

  Expected<std::unique_ptr<GpuLoss>> moveTo(int device, CompileInfo *info) const {
    auto g = std::make_unique<GpuLoss>();
    g->sumKernel_ = sumKernel_;
    if (Error e = g->initFrom(*this, device, info))
      return e;
    return g;
  }

  /// Returns the sum of the losses for the summing kinds (deterministic:
  /// see KernelSpec.h). Device pointers; out may be 0 for LossSum.
  Expected<double> run(KernelKind kind, CUdeviceptr yp, CUdeviceptr yt, CUdeviceptr out, double scale, size_t n,
                       CUdeviceptr params, Queue queue) const {
    std::lock_guard lock(scratchMutex_);
    return runLocked(kind, yp, yt, out, scale, n, params, queue);
  }
  /// A summing kind whose result stays on the device: value[0] = T(sum /
  /// divisor), queued on `queue` with nothing waited for. The partial sums
  /// then come from the driver's stream-ordered allocator, so calls on
  /// other streams cannot overwrite them while the kernels wait in line;
  /// a driver without it (before CUDA 11.2) gets the loss's own scratch and
  /// the call waits for its stream.
  Error runToDevice(KernelKind kind, CUdeviceptr yp, CUdeviceptr yt, CUdeviceptr out, double scale, size_t n,
                    CUdeviceptr params, Queue queue, CUdeviceptr value, double divisor) const;
  /// The same on host arrays (copied to the device and back).
  Expected<double> runHost(KernelKind kind, const void *yp, const void *yt, void *out, double scale, size_t n,
                           CUdeviceptr params) const;
  /// grads[c] = scale * the sum of dl/dc over n host elements (a module
  /// made with constantGradient).
  Error runConstantGradient(const void *yp, const void *yt, double *grads, size_t constants, double scale, size_t n,
                            CUdeviceptr params) const;

private:
  Expected<double> runLocked(KernelKind kind, CUdeviceptr yp, CUdeviceptr yt, CUdeviceptr out, double scale, size_t n,
                             CUdeviceptr params, Queue queue = {}) const;
  /// The loss kernel's launch shape for n elements, and its warps (one
  /// partial sum each).
  struct Shape {
    unsigned grid, block;
    int64_t warps;
  };
  Shape shape(size_t kernel, size_t n) const {
    uint64_t block = module_->blockSize(kernel);
    uint64_t grid = std::clamp<uint64_t>((n + block - 1) / block, 1, module_->fullGrid(kernel));
    return {unsigned(grid), unsigned(block), int64_t(grid * block / kWarp)};
  }
  /// The loss kernel `kernel` over n elements, a partial sum per warp into
  /// `partials` (summing kinds).
  Error launchLoss(size_t kernel, const Shape &s, CUdeviceptr yp, CUdeviceptr yt, CUdeviceptr out, CUdeviceptr prm,
                   size_t n, double scale, CUdeviceptr partials, Queue queue) const {
    int64_t count = int64_t(n);
    float scale32 = float(scale);
    void *args[] = {&yp, &yt, &out, &prm, &count, dtype_ == DType::F32 ? static_cast<void *>(&scale32) : &scale, &partials};
    return module_->launch(kernel, args, s.grid, 1, s.block, queue);
  }
  /// The value kernel: value[0] = T(the sum of `warps` partials / divisor).
  Error launchValue(CUdeviceptr partials, int64_t warps, CUdeviceptr value, double divisor, Queue queue) const {
    void *args[] = {&partials, &warps, &value, &divisor};
    return module_->launch(sumKernel_ + 1, args, 1, 1, sumKernelThreads(uint64_t(warps)), queue);
  }
  size_t sumKernel_ = kLossKinds.size(); // then the value kernel
  // Partial sums (slot 0) and device copies of host arrays (1-3); runs of
  // one loss take turns.
  mutable std::mutex scratchMutex_;
  mutable DeviceScratch scratch_;
};

} // namespace

Error GpuActivation::run(KernelKind kind, CUdeviceptr z, CUdeviceptr err, CUdeviceptr out0, CUdeviceptr out1,
                         size_t batch, CUdeviceptr prm, Queue queue) const {
  uint64_t nodes = nodes_;
  if (!batch || !nodes)
    return Error::success();
  size_t k = size_t(std::find(kinds_.begin(), kinds_.end(), kind) - kinds_.begin());
  uint64_t block = module_->blockSize(k), full = module_->fullGrid(k);
  CUdeviceptr units = unitTable_.get(), offs = offsetTable_.get();
  int64_t b64 = int64_t(batch), n64 = int64_t(nodes), first = 0;
  void *args[] = {&z, &err, &out0, &out1, &prm, &units, &offs, &b64, &n64, &first};
  if (layout_ == Layout::NodesMajor) {
    // grid.y walks the nodes (65535 per launch); x fills the device.
    for (uint64_t f = 0; f < nodes; f += kMaxGridY) {
      uint64_t chunk = std::min<uint64_t>(kMaxGridY, nodes - f);
      uint64_t gx = std::clamp<uint64_t>((full + chunk - 1) / chunk, 1, (batch + block - 1) / block);
      first = int64_t(f);
      if (Error e = module_->launch(k, args, unsigned(std::min(gx, kMaxGridX)), unsigned(chunk), unsigned(block), queue))
        return e;
    }
  } else {
    // Tiles of rows x nodes, each through one block of the size the kernel
    // requires (KernelSpec.h); as many blocks as fill the device, or tiles.
    uint64_t tiles = (uint64_t(batch) + kBatchMajorTileRows - 1) / kBatchMajorTileRows *
                     ((nodes + kBatchMajorTileNodes - 1) / kBatchMajorTileNodes);
    uint64_t gx = std::clamp<uint64_t>(tiles, 1, std::min<uint64_t>(full * block / kBatchMajorBlock, kMaxGridX));
    if (Error e = module_->launch(k, args, unsigned(gx), 1, kBatchMajorBlock, queue))
      return e;
  }
  return module_->finish(queue);
}

Error GpuActivation::runHost(KernelKind kind, const void *z, const void *err, void *out0, void *out1, size_t batch,
                             CUdeviceptr params) const {
  size_t bytes = nodes_ * batch * elementSize(dtype_);
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
  if (Error e = run(kind, d[0], d[1], d[2], d[3], batch, params))
    return e;
  void *outputs[2] = {out0, out1};
  for (size_t k = 0; k < 2; ++k)
    if (outputs[k])
      if (Error e = copyToHost(dev, outputs[k], d[2 + k], bytes))
        return e;
  return Error::success();
}

Expected<double> GpuLoss::runLocked(KernelKind kind, CUdeviceptr yp, CUdeviceptr yt, CUdeviceptr out, double scale,
                                    size_t n, CUdeviceptr prm, Queue queue) const {
  if (n == 0)
    return 0.0;
  size_t k = groupIndex(kind);
  Shape s = shape(k, n);
  int64_t warps = s.warps;
  auto scratch = scratch_.get(device(), 0, (size_t(warps) + 1) * sizeof(double)); // partials, then the total
  if (!scratch)
    return scratch.takeError();
  CUdeviceptr partials = *scratch, total = partials + size_t(warps) * sizeof(double);
  if (Error e = launchLoss(k, s, yp, yt, out, prm, n, scale, partials, queue))
    return e;
  if (!kindInfo(kind).summing) {
    if (Error e = module_->finish(queue))
      return e;
    return 0.0;
  }
  void *sumArgs[] = {&partials, &warps, &total};
  if (Error e = module_->launch(sumKernel_, sumArgs, 1, 1, sumKernelThreads(uint64_t(warps)), queue))
    return e;
  double result = 0;
  // After both kernels on their stream (the value is the host's).
  if (Error e = module_->toHost(&result, total, sizeof result, queue))
    return e;
  return result;
}

Error GpuLoss::runToDevice(KernelKind kind, CUdeviceptr yp, CUdeviceptr yt, CUdeviceptr out, double scale, size_t n,
                           CUdeviceptr prm, Queue queue, CUdeviceptr value, double divisor) const {
  if (!kindInfo(kind).summing)
    return Error(ErrorCode::Internal, "runToDevice is for summing kinds");
  auto d = driverAt(device());
  if (!d)
    return d.error();
  const CudaDriver &driver = **d;
  if (n == 0) { // a sum of nothing: the value kernel alone writes its 0
    if (Error e = launchValue(0, 0, value, divisor, queue))
      return e;
    return module_->finish(queue);
  }
  size_t k = groupIndex(kind);
  Shape s = shape(k, n);
  size_t bytes = size_t(s.warps) * sizeof(double);
  std::unique_lock lock(scratchMutex_, std::defer_lock);
  CUdeviceptr partials = 0;
  // (The version, not only the symbols: a driver reports what it supports.)
  bool streamOrdered = queue && driver.cuMemAllocAsync && driver.cuMemFreeAsync && driver.driverVersion >= 11020;
  if (streamOrdered) {
    if (CUresult r = driver.cuMemAllocAsync(&partials, bytes, *queue))
      return Error(ErrorCode::Unsupported, fmt::format("cuMemAllocAsync of {} bytes on cuda:{} failed: {}", bytes,
                                                       device(), driver.errorString(r)));
  } else {
    lock.lock();
    auto scratch = scratch_.get(device(), 0, bytes);
    if (!scratch)
      return scratch.takeError();
    partials = *scratch;
  }
  Error e = launchLoss(k, s, yp, yt, out, prm, n, scale, partials, queue);
  if (!e)
    e = launchValue(partials, s.warps, value, divisor, queue);
  if (streamOrdered) {
    // Freed in stream order, after the kernels, even when a launch failed.
    if (CUresult r = driver.cuMemFreeAsync(partials, *queue); r && !e)
      e = Error(ErrorCode::Internal, fmt::format("cuMemFreeAsync on cuda:{} failed: {}", device(), driver.errorString(r)));
    return e;
  }
  if (e)
    return e;
  // The shared scratch is free again only once the kernels ran.
  return module_->wait(queue);
}

Expected<double> GpuLoss::runHost(KernelKind kind, const void *yp, const void *yt, void *out, double scale, size_t n,
                                  CUdeviceptr params) const {
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
  auto sum = runLocked(kind, d[0], d[1], d[2], scale, n, params);
  if (!sum)
    return sum;
  if (kindInfo(kind).outputs && out)
    if (Error e = copyToHost(dev, out, d[2], bytes))
      return e;
  return sum;
}

namespace {
// A constant-gradient run on host arrays, on the device: slots 0 and 1 of
// `scratch` receive the two inputs, 2 holds `segments` x `warps` partials, 3
// the segments' sums.
Error constantGradientScratch(DeviceScratch &scratch, int dev, const void *a, const void *b, size_t bytes,
                              size_t segments, int64_t warps, CUdeviceptr d[4]) {
  size_t sizes[4] = {bytes, bytes, segments * size_t(warps) * sizeof(double), segments * sizeof(double)};
  for (size_t slot = 0; slot < 4; ++slot) {
    auto p = scratch.get(dev, slot, sizes[slot]);
    if (!p)
      return p.takeError();
    d[slot] = *p;
  }
  if (Error e = copyToDevice(dev, d[0], a, bytes))
    return e;
  return copyToDevice(dev, d[1], b, bytes);
}

// Adds each segment's partials (a block per segment) and copies the sums out.
Error sumSegments(const GpuModule &module, size_t sumKernel, int dev, CUdeviceptr d[4], int64_t warps,
                  size_t segments, double *out) {
  void *sumArgs[] = {&d[2], &warps, &d[3]};
  if (Error e = module.launch(sumKernel, sumArgs, unsigned(segments), 1, sumKernelThreads(uint64_t(warps)), {}))
    return e;
  return copyToHost(dev, out, d[3], segments * sizeof(double));
}
} // namespace

Error GpuActivation::runConstantGradient(const CompiledModel &model, const void *z, const void *err, double *grads,
                                        size_t batch, CUdeviceptr prm) const {
  size_t K = 0;
  for (const CodeUnit &u : model.units)
    K = std::max(K, u.programs[size_t(KernelKind::ConstantGradient)]->outputs.size());
  uint64_t nodes = nodes_;
  if (!batch || !nodes || !K)
    return Error::success();
  int dev = device();
  std::lock_guard lock(hostMutex_);
  size_t bytes = nodes * batch * elementSize(dtype_);
  // One grid shape for every chunk of nodes, so each node's partials are
  // as many and in the same place: x fills the device, at most one thread
  // per element.
  uint64_t block = module_->blockSize(0), full = module_->fullGrid(0);
  uint64_t chunkMax = std::min<uint64_t>(kMaxGridY, nodes);
  uint64_t gx = std::clamp<uint64_t>((full + chunkMax - 1) / chunkMax, 1, (batch + block - 1) / block);
  int64_t warps = int64_t(gx * block / kWarp);
  size_t segments = nodes * K;
  CUdeviceptr d[4];
  if (Error e = constantGradientScratch(hostScratch_, dev, z, err, bytes, segments, warps, d))
    return e;
  CUdeviceptr units = unitTable_.get(), offs = offsetTable_.get();
  int64_t b64 = int64_t(batch), n64 = int64_t(nodes), first = 0;
  void *args[] = {&d[0], &d[1], &d[2], &prm, &units, &offs, &b64, &n64, &first};
  for (uint64_t f = 0; f < nodes; f += kMaxGridY) {
    first = int64_t(f);
    if (Error e = module_->launch(0, args, unsigned(gx), unsigned(std::min<uint64_t>(kMaxGridY, nodes - f)), unsigned(block), {}))
      return e;
  }
  std::vector<double> sums(segments);
  if (Error e = sumSegments(*module_, 1, dev, d, warps, segments, sums.data()))
    return e;
  for (size_t j = 0; j < nodes; ++j) {
    size_t kj = model.units[model.unitOf[j]].programs[size_t(KernelKind::ConstantGradient)]->outputs.size();
    for (size_t c = 0; c < kj; ++c)
      grads[model.offsets[j] + c] = sums[j * K + c];
  }
  return Error::success();
}

Error GpuLoss::runConstantGradient(const void *yp, const void *yt, double *grads, size_t constants, double scale,
                                   size_t n, CUdeviceptr prm) const {
  if (!n || !constants)
    return Error::success();
  int dev = device();
  std::lock_guard lock(scratchMutex_);
  size_t bytes = n * elementSize(dtype_);
  uint64_t block = module_->blockSize(0);
  uint64_t grid = std::clamp<uint64_t>((n + block - 1) / block, 1, module_->fullGrid(0));
  int64_t warps = int64_t(grid * block / kWarp);
  CUdeviceptr d[4];
  if (Error e = constantGradientScratch(scratch_, dev, yp, yt, bytes, constants, warps, d))
    return e;
  int64_t count = int64_t(n);
  void *args[] = {&d[0], &d[1], &d[2], &prm, &count};
  if (Error e = module_->launch(0, args, unsigned(grid), 1, unsigned(block), {}))
    return e;
  if (Error e = sumSegments(*module_, sumKernel_, dev, d, warps, constants, grads))
    return e;
  for (size_t c = 0; c < constants; ++c)
    grads[c] *= scale;
  return Error::success();
}

namespace {

// Constants in device memory, made once per set of values.
struct GpuParamSet final : ParamSet {
  DeviceMemory device;
};

class GpuEngine final : public Engine {
public:
  GpuEngine(std::shared_ptr<const CompiledModel> m, GpuBuildOptions options) : Engine(std::move(m)), options_(options) {}

  Method method() const override { return Method::Cuda; }
  int gpuId() const override { return device_; }

  Error init(int device, CompileInfo &info) {
    device_ = device;
    if (model().isLoss) {
      auto l = GpuLoss::create(model(), device, options_, &info);
      if (!l)
        return l.takeError();
      loss_ = std::move(*l);
      return Error::success();
    }
    auto a = GpuActivation::create(model(), device, options_, {KernelKind::Forward, KernelKind::Backward}, &info);
    if (!a)
      return a.takeError();
    layer_ = std::move(*a);
    return Error::success();
  }

  Expected<std::shared_ptr<const ParamSet>> makeParams(std::vector<double> values) const override {
    ContextRestorer restore;
    auto p = std::make_shared<GpuParamSet>();
    auto mem = uploaded(device_, values);
    if (!mem)
      return mem.takeError();
    p->device = std::move(*mem);
    p->values = std::move(values);
    return std::shared_ptr<const ParamSet>(std::move(p));
  }

  Error runActivation(KernelKind kind, const ActivationArgs &a, const ParamSet &params) const override {
    ContextRestorer restore;
    CUdeviceptr prm = static_cast<const GpuParamSet &>(params).device.get();
    if (kind == KernelKind::ConstantGradient) {
      // Host arrays: the API's constantGradients takes spans.
      const GpuActivation *code = lazy<GpuActivation>(constantGradient_, [&] {
        return GpuActivation::create(model(), device_, options_, {KernelKind::ConstantGradient}, nullptr);
      });
      if (!code)
        return constantGradient_.error;
      return code->runConstantGradient(model(), a.z, a.err, static_cast<double *>(a.out0), a.batch, prm);
    }
    const GpuActivation *code = layer_.get();
    if (kind == KernelKind::Fused) {
      code = lazy<GpuActivation>(fused_, [&] {
        return GpuActivation::create(model(), device_, options_, {KernelKind::Fused}, nullptr);
      });
      if (!code)
        return fused_.error;
    }
    if (!a.onDevice)
      return code->runHost(kind, a.z, a.err, a.out0, a.out1, a.batch, prm);
    auto queue = currentQueue(device_);
    if (!queue)
      return queue.takeError();
    return code->run(kind, ptr(a.z), ptr(a.err), ptr(a.out0), ptr(a.out1), a.batch, prm, *queue);
  }

  Expected<double> runLoss(KernelKind kind, const LossArgs &a, const ParamSet &params) const override {
    ContextRestorer restore;
    CUdeviceptr prm = static_cast<const GpuParamSet &>(params).device.get();
    if (kind == KernelKind::LossConstantGradient) {
      const GpuLoss *code = lazy<GpuLoss>(lossConstantGradient_, [&] {
        return GpuLoss::create(model(), device_, options_, nullptr, /*constantGradient=*/true);
      });
      if (!code)
        return lossConstantGradient_.error;
      size_t constants = model().group(0).formula.constants.size();
      if (Error e = code->runConstantGradient(a.yPred, a.yTrue, static_cast<double *>(a.out), constants, a.scale, a.n, prm))
        return e;
      return 0.0;
    }
    if (!a.onDevice)
      return loss_->runHost(kind, a.yPred, a.yTrue, a.out, a.scale, a.n, prm);
    auto queue = currentQueue(device_);
    if (!queue)
      return queue.takeError();
    if (a.value) {
      if (Error e = loss_->runToDevice(kind, ptr(a.yPred), ptr(a.yTrue), ptr(a.out), a.scale, a.n, prm, *queue,
                                       ptr(a.value), a.divisor))
        return e;
      return 0.0;
    }
    return loss_->run(kind, ptr(a.yPred), ptr(a.yTrue), ptr(a.out), a.scale, a.n, prm, *queue);
  }

  Expected<std::shared_ptr<const Engine>> moveTo(int device, CompileInfo *info) const override {
    ContextRestorer restore;
    auto g = std::make_shared<GpuEngine>(model_, options_);
    g->device_ = device;
    if (loss_) {
      auto l = loss_->moveTo(device, info);
      if (!l)
        return l.takeError();
      g->loss_ = std::move(*l);
    } else {
      auto a = layer_->moveTo(model(), device, info);
      if (!a)
        return a.takeError();
      g->layer_ = std::move(*a);
    }
    return std::shared_ptr<const Engine>(std::move(g));
  }

private:
  static CUdeviceptr ptr(const void *p) { return reinterpret_cast<CUdeviceptr>(p); }

  // Modules built at their first use (fused, constant gradients), with the
  // error of a failed build kept so it is not retried on every call.
  template <class Code> struct Lazy {
    std::mutex mutex;
    std::unique_ptr<Code> code;
    Error error;
  };
  template <class Code, class Build> const Code *lazy(Lazy<Code> &slot, Build &&build) const {
    std::lock_guard lock(slot.mutex);
    if (!slot.code && !slot.error) {
      auto c = build();
      if (c)
        slot.code = std::move(*c);
      else
        slot.error = c.takeError();
    }
    return slot.code.get();
  }

  GpuBuildOptions options_;
  int device_ = 0;
  std::unique_ptr<GpuActivation> layer_;
  std::unique_ptr<GpuLoss> loss_;
  mutable Lazy<GpuActivation> fused_, constantGradient_;
  mutable Lazy<GpuLoss> lossConstantGradient_;
};

} // namespace

Expected<std::shared_ptr<const Engine>> makeGpuEngine(std::shared_ptr<const CompiledModel> model, int device,
                                                      const GpuBuildOptions &options, CompileInfo &info) {
  ContextRestorer restore;
  auto g = std::make_shared<GpuEngine>(std::move(model), options);
  if (Error e = g->init(device, info))
    return e;
  return std::shared_ptr<const Engine>(std::move(g));
}

} // namespace hsnn::detail
