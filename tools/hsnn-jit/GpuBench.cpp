//===- tools/hsnn-jit/GpuBench.cpp - hsnn-jit bench --device cuda ---------===//
//
// The workloads of the CPU bench on device memory: layers and losses run on
// DeviceBuffers (no host copies), each timed next to a cuMemcpyDtoD of the
// same bytes (Backend::copy) measured right after it, so x_limit compares
// with what the device's memory system does in that moment. Every call
// synchronizes, so the times include one launch and one synchronization,
// as the reference's do.
//===----------------------------------------------------------------------===//
#include "BenchCommon.h"

#include "hsnn/Backend.h"
#include "hsnn/Cache.h"
#include "hsnn/Runtime.h"

#include <filesystem>
#include <stdlib.h>

namespace hsnn::cli {
namespace {

template <class T> class GpuBench {
public:
  GpuBench(const BenchOptions &o, std::vector<BenchResult> &out) : o_(o), out_(out) {}

  Error run() {
    auto backend = getBackend(o_.device);
    if (!backend)
      return backend.takeError();
    backend_ = *backend;
    gpuId_ = o_.device == "cuda" ? 0 : std::stoi(o_.device.substr(5));
    for (DeviceBuffer *b : {&s0_, &s1_}) {
      auto m = backend_->allocate(kBenchElements, kDType);
      if (!m)
        return m.takeError();
      *b = *m;
    }
    std::string w = o_.workload;
    if (w == "all" || w == "W1" || w == "W2")
      if (Error e = layers())
        return e;
    if (w == "all" || w == "W3")
      if (Error e = gelu())
        return e;
    if (w == "all" || w == "W4")
      if (Error e = losses())
        return e;
    if (w == "all" || w == "latency")
      if (Error e = latency())
        return e;
    return Error::success();
  }

private:
  static constexpr DType kDType = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  static constexpr size_t kBytes = kBenchElements * sizeof(T);

  Expected<DeviceBuffer> upload(const std::vector<T> &host) {
    auto m = backend_->allocate(host.size(), kDType);
    if (!m)
      return m.takeError();
    if (Error e = backend_->toDevice(*m, host.data(), host.size() * sizeof(T)))
      return e;
    return m;
  }

  Expected<std::vector<T>> download(const DeviceBuffer &b) {
    std::vector<T> host(b.bytes() / sizeof(T));
    if (Error e = backend_->toHost(host.data(), b, b.bytes()))
      return e;
    return host;
  }

  // Times `kernel` (which must synchronize), then a device-to-device copy
  // scaled to the kernel's traffic. A failing kernel stops the bench.
  Error record(std::string workload, std::string variant, int readArrays, int writeArrays,
               const std::function<Error()> &kernel, size_t bytes = kBytes) {
    Error failure;
    double ms = medianMs(o_.reps, [&] {
      if (Error e = kernel(); e && !failure)
        failure = e;
    });
    if (failure)
      return failure;
    double copyMs = medianMs(o_.reps, [&] {
      if (Error e = backend_->copy(s1_, s0_, bytes); e && !failure)
        failure = e;
      if (Error e = backend_->synchronize(); e && !failure)
        failure = e;
    });
    if (failure)
      return failure;
    double kernelBytes = double(readArrays + writeArrays) * double(bytes);
    double scaled = copyMs * kernelBytes / (2.0 * double(bytes));
    out_.push_back({std::move(workload), std::move(variant), std::string(to_string(kDType)), ms, kernelBytes / ms / 1e6,
                    scaled, ms / scaled});
    return Error::success();
  }

  // Per-call time where launch and synchronization are most of it (a small
  // layer) and where the kernel is (W1), nodes x batch, both layouts; each
  // beside a device-to-device copy of the same bytes.
  Error latency() {
    std::vector<NodeSpec> all = w1Nodes();
    for (auto [n, batch] : {std::pair<size_t, size_t>{64, 32}, {256, 1024}, {256, 65536}}) {
      std::vector<NodeSpec> nodes(all.begin(), all.begin() + std::ptrdiff_t(n));
      auto dz = upload(randomArray<T>(n * batch, -4, 4, 3)), da = upload(std::vector<T>(n * batch));
      for (auto *b : {&dz, &da})
        if (!*b)
          return b->takeError();
      for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
        auto layer = ActivationLayer::compile(nodes, {.method = Method::Cuda, .dtype = kDType, .layout = layout, .gpuId = gpuId_});
        if (!layer)
          return layer.takeError();
        if (Error e = record("latency", fmt::format("forward {} {}x{}", to_string(layout), n, batch), 1, 1,
                             [&] { return layer->forward(*dz, *da, batch); }, n * batch * sizeof(T)))
          return e;
      }
    }
    return Error::success();
  }

  Error layers() {
    std::vector<NodeSpec> nodes = w1Nodes();
    std::vector<T> z = randomArray<T>(kBenchElements, -4, 4, 1), err = randomArray<T>(kBenchElements, -1, 1, 2);
    std::vector<T> ref(kBenchElements);
    auto dz = upload(z), de = upload(err), da = upload(ref), dd = upload(ref);
    for (auto *b : {&dz, &de, &da, &dd})
      if (!*b)
        return b->takeError();
    for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
      auto layer = ActivationLayer::compile(nodes, {.method = Method::Cuda, .dtype = kDType, .layout = layout, .gpuId = gpuId_});
      auto oracle = ActivationLayer::compile(nodes, {.method = Method::CpuInterp, .dtype = kDType, .layout = layout});
      if (!layer)
        return layer.takeError();
      if (!oracle)
        return oracle.takeError();
      if (layer->method() != Method::Cuda)
        return Error(ErrorCode::Unsupported, "the layer did not compile for the GPU");
      std::string lay(to_string(layout));
      if (o_.workload != "W2") {
        if (Error e = layer->forward(*dz, *da, kBenchBatch))
          return e;
        auto got = download(*da);
        if (!got)
          return got.takeError();
        if (Error e = oracle->forward(z, ref, kBenchBatch))
          return e;
        if (Error e = checkAgainst(*got, ref, "W1 forward " + lay))
          return e;
        if (Error e = record("W1", "forward " + lay, 1, 1, [&] { return layer->forward(*dz, *da, kBenchBatch); }))
          return e;
      }
      if (o_.workload != "W1") {
        if (Error e = layer->backward(*dz, *de, *dd, kBenchBatch))
          return e;
        auto got = download(*dd);
        if (!got)
          return got.takeError();
        if (Error e = oracle->backward(z, err, ref, kBenchBatch))
          return e;
        if (Error e = checkAgainst(*got, ref, "W2 backward " + lay))
          return e;
        if (Error e = record("W2", "backward " + lay, 2, 1, [&] { return layer->backward(*dz, *de, *dd, kBenchBatch); }))
          return e;
        if (Error e = record("W2", "fused " + lay, 1, 2, [&] { return layer->fused(*dz, *da, *dd, kBenchBatch); }))
          return e;
      }
    }
    return Error::success();
  }

  Error gelu() {
    auto layer = ActivationLayer::compile({{"gelu", {}}}, {.method = Method::Cuda, .dtype = kDType, .gpuId = gpuId_});
    if (!layer)
      return layer.takeError();
    auto dz = upload(randomArray<T>(kBenchElements, -4, 4, 3)), de = upload(randomArray<T>(kBenchElements, -1, 1, 4)),
         da = upload(std::vector<T>(kBenchElements));
    for (auto *b : {&dz, &de, &da})
      if (!*b)
        return b->takeError();
    if (Error e = record("W3", "gelu forward", 1, 1, [&] { return layer->forward(*dz, *da, kBenchElements); }))
      return e;
    return record("W3", "gelu backward", 2, 1, [&] { return layer->backward(*dz, *de, *da, kBenchElements); });
  }

  Error losses() {
    std::vector<T> yp = randomArray<T>(kBenchElements, 0.01, 0.99, 5), yt = randomArray<T>(kBenchElements, 0, 1, 6);
    auto dp = upload(yp), dt = upload(yt), dg = upload(std::vector<T>(kBenchElements));
    for (auto *b : {&dp, &dt, &dg})
      if (!*b)
        return b->takeError();
    for (const char *name : {"mse", "huber", "bce"}) {
      auto loss = Loss::compile(name, {}, {.method = Method::Cuda, .dtype = kDType, .gpuId = gpuId_});
      auto oracle = Loss::compile(name, {}, {.method = Method::CpuInterp, .dtype = kDType});
      if (!loss)
        return loss.takeError();
      if (!oracle)
        return oracle.takeError();
      auto got = loss->forward(*dp, *dt);
      if (!got)
        return got.takeError();
      double want = *oracle->forward(yp, yt);
      if (!(std::fabs(*got - want) <= (std::is_same_v<T, float> ? 1e-5 : 1e-12) * std::max(1.0, std::fabs(want))))
        return Error(ErrorCode::Internal, fmt::format("W4 {} mean: the GPU says {}, the interpreter {}", name, *got, want));
      std::string n(name);
      auto asError = [](Expected<double> v) { return v ? Error::success() : v.takeError(); };
      if (Error e = record("W4", n + " mean forward", 2, 0, [&] { return asError(loss->forward(*dp, *dt)); }))
        return e;
      if (Error e = record("W4", n + " gradient", 2, 1, [&] { return loss->gradient(*dp, *dt, *dg); }))
        return e;
      if (Error e = record("W4", n + " fused", 2, 1, [&] { return asError(loss->fused(*dp, *dt, *dg)); }))
        return e;
    }
    return Error::success();
  }

  const BenchOptions &o_;
  std::vector<BenchResult> &out_;
  std::shared_ptr<Backend> backend_;
  int gpuId_ = 0;
  DeviceBuffer s0_, s1_;
};

} // namespace

Error runGpuBench(const BenchOptions &o, DType dtype, std::vector<BenchResult> &out) {
  return dtype == DType::F32 ? GpuBench<float>(o, out).run() : GpuBench<double>(o, out).run();
}

Error runGpuCompileBench(const BenchOptions &o, GpuCompileResult &r) {
  r.ran = true;
  int gpuId = o.device == "cuda" ? 0 : std::stoi(o.device.substr(5));
  char tmpl[] = "/tmp/hsnn-bench-gpu-cache-XXXXXX";
  if (!::mkdtemp(tmpl))
    return Error(ErrorCode::Internal, "cannot create a temporary cache directory");
  RuntimeFlags f = runtimeFlags();
  f.cacheDir = std::string(tmpl) + "/cache";
  ScopedRuntimeFlags scoped(RuntimeFlagsOverride::from(f));
  std::vector<double> cold, ptx, load, hit, hitLoad;
  for (int i = 0; i < std::max(3, o.reps / 2); ++i) {
    if (Error e = clearKernelCache(CacheCategory::Gpu))
      return e;
    auto t0 = BenchClock::now();
    auto layer = ActivationLayer::compile(w1Nodes(), {.method = Method::Cuda, .gpuId = gpuId});
    cold.push_back(msSince(t0));
    if (!layer)
      return layer.takeError();
    if (layer->method() != Method::Cuda || layer->compileInfo().cacheHit)
      return Error(ErrorCode::Unsupported, "the GPU compile workload needs the cuda method and an empty cache");
    const CompileInfo &c = layer->compileInfo();
    ptx.push_back(c.emitMs + c.optimizeMs + c.codegenMs);
    load.push_back(c.loadMs);
    auto t1 = BenchClock::now();
    auto again = ActivationLayer::compile(w1Nodes(), {.method = Method::Cuda, .gpuId = gpuId});
    hit.push_back(msSince(t1));
    if (!again)
      return again.takeError();
    if (!again->compileInfo().cacheHit)
      return Error(ErrorCode::Internal, "the second compile of the W1 layer missed the GPU cache");
    hitLoad.push_back(again->compileInfo().loadMs);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  r.coldMs = median(cold);
  r.ptxMs = median(ptx);
  r.coldLoadMs = median(load);
  r.cacheHitMs = median(hit);
  r.cacheHitLoadMs = median(hitLoad);
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  return Error::success();
}

} // namespace hsnn::cli
