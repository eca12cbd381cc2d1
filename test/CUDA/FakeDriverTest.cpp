//===- test/CUDA/FakeDriverTest.cpp - The GPU engine against a stand-in driver ---===//
//
// Runs with HSNN_CUDA_LIBRARY pointing at FakeDriver.cpp's library, which
// reports four devices (compute capability 9.0, 9.0, 8.0 and 10.0), keeps
// "device" memory in host memory and runs no kernel. What this checks is
// everything around the kernels: devices, contexts, memory and streams,
// module loading and linking (with ptxas on the exact PTX when available),
// launch shapes, the GPU cache, setGpuId, driver-version errors, and that
// nothing leaks. Kernel results are checked on a real GPU by GpuTest.cpp.
//===----------------------------------------------------------------------===//
#include "FakeDriver.h"
#include "TestUtil.h"

#include "hsnn/Backend.h"
#include "hsnn/Cache.h"
#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <unistd.h>

using namespace hsnn;
using namespace hsnn::test;

namespace {

std::vector<NodeSpec> threeNodes() {
  return {{"relu", {}}, {"sin(num)*alpha", {{"alpha", 2}}}, {"relu", {}}};
}

} // namespace

TEST_CASE("the fake driver is seen as four GPUs") {
  Fake fake;
  const RuntimeInfo &info = runtimeInfo();
  REQUIRE(info.numGpus == 4);
  CHECK(info.gpus[0].arch == "sm_90");
  CHECK(info.gpus[2].arch == "sm_80");
  CHECK(info.gpus[3].arch == "sm_100");
#if HSNN_HAS_NVPTX
  CHECK(info.gpus[0].codeArch == "sm_90");
  CHECK(info.gpus[2].codeArch == "sm_80");
  CHECK(info.gpus[3].codeArch == "sm_90"); // newer than LLVM 19 knows: sm_90 PTX, assembled by the driver
#endif
  CHECK(info.gpus[1].name == "hsnn fake GPU (sm_90)");
  CHECK(info.cudaDriverVersion == std::atoi(std::getenv("HSNN_FAKE_CUDA_DRIVER") ? std::getenv("HSNN_FAKE_CUDA_DRIVER")
                                                                                  : "12040"));
#if HSNN_HAS_NVPTX
  CHECK(info.gpuEnabled);
  CHECK(info.defaultMethod == Method::Cuda);
#else
  CHECK_FALSE(info.gpuEnabled);
  CHECK(info.gpuUnavailableReason == "this build has no NVPTX code generator (HSNN_ENABLE_JIT=OFF)");
#endif
}

TEST_CASE("cuda backends move memory, check every copy and free what they allocate") {
  Fake fake;
  int baseline = fake.count("live_allocations");
  {
    auto b0 = getBackend("cuda:0"), b1 = getBackend("cuda:1");
    REQUIRE(b0);
    REQUIRE(b1);
    CHECK((*b1)->name() == "cuda:1");
    CHECK((*b1)->deviceId() == 1);
    CHECK((*b1)->deviceName() == "hsnn fake GPU (sm_90)");
    CHECK((*b1)->computeCapability() == std::pair{9, 0});
    auto b2 = getBackend("cuda:2");
    REQUIRE(b2);
    CHECK((*b2)->computeCapability() == std::pair{8, 0});
    CHECK((*b1)->isAvailable());
    auto buf = (*b1)->allocate(1000, DType::F32);
    REQUIRE(buf);
    CHECK(buf->backend() == "cuda:1");
    CHECK(fake.count("live_allocations") == baseline + 1);
    std::vector<float> in(1000), out(1000);
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = float(i) * 0.5f;
    REQUIRE_OK((*b1)->toDevice(*buf, in.data(), 4000));
    REQUIRE_OK((*b1)->toHost(out.data(), *buf, 4000));
    CHECK(in == out);
    // Part of a buffer, at an offset.
    REQUIRE_OK((*b1)->toHost(out.data(), *buf, 40, 400));
    CHECK(out[0] == in[100]);
    CHECK((*b1)->toDevice(*buf, in.data(), 4000, 4).message() ==
          "copy of 4000 bytes at offset 4 overruns a buffer of 4000 bytes");
    CHECK((*b0)->toDevice(*buf, in.data(), 4).message() == "buffer belongs to backend cuda:1, not cuda:0");
    CHECK((*b1)->toDevice(*buf, nullptr, 4).message() == "null host pointer");
    auto copy = (*b1)->allocate(1000, DType::F32);
    REQUIRE(copy);
    int dtod = fake.count("dtod");
    REQUIRE_OK((*b1)->copy(*copy, *buf, 4000));
    CHECK(fake.count("dtod") == dtod + 1);
    REQUIRE_OK((*b1)->toHost(out.data(), *copy, 4000));
    CHECK(out == in);
    CHECK((*b1)->copy(*copy, *buf, 4004).message() == "copy of 4004 bytes at offset 0 overruns a buffer of 4000 bytes");

    auto mem = (*b1)->memoryInfo();
    REQUIRE(mem);
    CHECK(mem->total == (size_t(1) << 30));
    CHECK(mem->free <= mem->total);
    for (const char *f : {"async", "streams", "shared_memory"})
      CHECK((*b1)->supportsFeature(f));
    CHECK_FALSE((*b1)->supportsFeature("tensor_cores"));

    auto stream = (*b1)->createStream();
    REQUIRE(stream);
    CHECK((*stream)->backend() == "cuda:1");
    int async = fake.count("async");
    std::vector<float> back(1000);
    REQUIRE_OK((*b1)->toDeviceAsync(*buf, in.data(), 4000, 0, **stream));
    REQUIRE_OK((*b1)->toHostAsync(back.data(), *buf, 4000, 0, **stream));
    REQUIRE_OK((*stream)->synchronize());
    CHECK(back == in);
    CHECK(fake.count("async") == async + 2);
    CHECK((*b0)->toDeviceAsync(*buf, in.data(), 4, 0, **stream).message() ==
          "stream belongs to backend cuda:1, not cuda:0");
    REQUIRE_OK((*b1)->synchronize());
  }
  CHECK(fake.count("live_allocations") == baseline);
  CHECK(fake.count("streams") == 0);

  CHECK(getBackend("cuda:4").error().message() == "backend 'cuda:4': device 4 does not exist; valid devices are 0..3");
  CHECK(getBackend("cuda:x").error().message() == "bad backend 'cuda:x': expected cuda:N with N a device number");
  auto cpu = getBackend("cpu");
  REQUIRE(cpu);
  CHECK((*cpu)->createStream().error().message() == "backend cpu has no streams");
  CHECK_FALSE((*cpu)->supportsFeature("streams"));
}

TEST_CASE("a cuda layer runs every node in one launch, in either layout") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  TempCache cache;
  int allocations = fake.count("live_allocations"), modules = fake.count("live_modules");
  {
    auto layer = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda});
    REQUIRE_OK_EXPECTED(layer);
    CHECK(layer->method() == Method::Cuda);
    CHECK(layer->gpuId() == 0);
    CHECK(fake.count("live_modules") == modules + 1);
    std::vector<float> z(3 * 1000, 1.0f), a(z.size()), d(z.size()), err(z.size(), 1.0f);
    fake.clearLaunches();
    REQUIRE_OK(layer->forward(z, a, 1000));
    // grid.y = 3 nodes; x: 8 blocks fill the fake device, so ceil(8 / 3).
    CHECK(fake.launches() == "hsnn_layer_forward 3,3 256;");
    fake.clearLaunches();
    REQUIRE_OK(layer->backward(z, err, d, 1000));
    CHECK(fake.count("live_modules") == modules + 1); // the fused kernel is built at its first use
    REQUIRE_OK(layer->fused(z, a, d, 1000));
    CHECK(fake.count("live_modules") == modules + 2);
    CHECK(fake.launches() == "hsnn_layer_backward 3,3 256;hsnn_layer_fused 3,3 256;");
    // Constants are one device array, read by both modules.
    int uploads = fake.count("htod");
    REQUIRE_OK(layer->setConstant(1, "alpha", 0.5));
    CHECK(fake.count("htod") == uploads + 1);
    fake.clearLaunches();
    REQUIRE_OK(layer->forward(std::span<const float>(), std::span<float>(), 0));
    CHECK(fake.launches().empty());

    // Device buffers: no copies, and buffers of another device are refused.
    auto b0 = getBackend("cuda:0"), b1 = getBackend("cuda:1");
    REQUIRE(b0);
    REQUIRE(b1);
    auto dz = (*b0)->allocate(3000, DType::F32), da = (*b0)->allocate(3000, DType::F32),
         other = (*b1)->allocate(3000, DType::F32);
    REQUIRE(dz);
    REQUIRE(da);
    REQUIRE(other);
    int copies = fake.count("htod") + fake.count("dtoh");
    fake.clearLaunches();
    REQUIRE_OK(layer->forward(*dz, *da, 1000));
    CHECK(fake.launches() == "hsnn_layer_forward 3,3 256;");
    CHECK(fake.count("htod") + fake.count("dtoh") == copies);
    CHECK(layer->forward(*dz, *other, 1000).message() == "buffer 'a' on backend cuda:1 given to a layer that runs on cuda:0");
    CHECK(layer->forward(*dz, *da, 1001).message() ==
          "'z' holds 3000 elements; 3 nodes x batch 1001 needs exactly 3003");
    // A batch whose byte size wraps around (to 0 for a 1-node layer) is an
    // overflow, refused before anything reaches the driver.
    auto one = ActivationLayer::compile({{"relu", {}}}, {.method = Method::Cuda});
    REQUIRE_OK_EXPECTED(one);
    fake.clearLaunches();
    size_t wraps = size_t(1) << 62;
    CHECK(one->forward(*dz, *da, wraps).message() == fmt::format("1 nodes x batch {} overflows the address space", wraps));
    CHECK(one->forward(std::span<const float>(z), std::span<float>(a), wraps).message() ==
          fmt::format("1 nodes x batch {} overflows the address space", wraps));
    CHECK(fake.launches().empty());

    auto batchMajor = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda, .layout = Layout::BatchMajor});
    REQUIRE_OK_EXPECTED(batchMajor);
    fake.clearLaunches();
    REQUIRE_OK(batchMajor->forward(z, a, 1000));
    // Tiles of 64 rows x 32 nodes: 16, in blocks of 256 threads, capped at the 8 that fill the device.
    CHECK(fake.launches() == "hsnn_layer_forward_batch_major 8,1 256;");
  }
  CHECK(fake.count("live_allocations") == allocations);
  CHECK(fake.count("live_modules") == modules);
}

TEST_CASE("inside a StreamScope, device calls queue on its stream and return without waiting for the device") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  TempCache cache;
  auto layer = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda});
  REQUIRE_OK_EXPECTED(layer);
  auto loss = Loss::compile("mse", {}, {.method = Method::Cuda});
  REQUIRE_OK_EXPECTED(loss);
  auto b0 = getBackend("cuda:0"), b1 = getBackend("cuda:1");
  REQUIRE(b0);
  REQUIRE(b1);
  auto dz = (*b0)->allocate(3000, DType::F32), da = (*b0)->allocate(3000, DType::F32);
  REQUIRE(dz);
  REQUIRE(da);
  // A stream another library made (PyTorch's current stream, say): borrowed.
  auto theirs = (*b0)->borrowStream(0x5000);
  REQUIRE_OK_EXPECTED(theirs);
  CHECK((*theirs)->handle() == 0x5000);
  int streams = fake.count("streams");
  {
    StreamScope scope(*theirs);
    CHECK(StreamScope::current() == theirs->get());
    int syncs = fake.count("synchronize"), streamSyncs = fake.count("stream_synchronize");
    REQUIRE_OK(layer->forward(*dz, *da, 1000));
    CHECK(fake.lastStream() == 0x5000);
    CHECK(fake.count("synchronize") == syncs); // queued, not waited for
    REQUIRE_OK(loss->gradient(*dz, *dz, *da));
    CHECK(fake.lastStream() == 0x5000);
    CHECK(fake.count("stream_synchronize") == streamSyncs);
    REQUIRE_OK_EXPECTED(loss->forward(*dz, *dz)); // a value for the host: waits for its stream only
    CHECK(fake.count("stream_synchronize") == streamSyncs + 1);
    CHECK(fake.count("synchronize") == syncs);
    // Host arrays are copied on the legacy default stream and waited for.
    std::vector<float> z(3000), a(3000);
    REQUIRE_OK(layer->forward(z, a, 1000));
    CHECK(fake.lastStream() == 0);
    // Another device's stream is refused, naming both.
    auto other = (*b1)->borrowStream(0x6000);
    REQUIRE_OK_EXPECTED(other);
    StreamScope inner(*other);
    CHECK(layer->forward(*dz, *da, 1000).message() == "the current stream belongs to cuda:1; this layer runs on cuda:0");
  }
  CHECK(StreamScope::current() == nullptr);
  CHECK(fake.count("streams") == streams); // borrowed streams are not destroyed
  int syncs = fake.count("synchronize");
  REQUIRE_OK(layer->forward(*dz, *da, 1000));
  CHECK(fake.lastStream() == 0);
  CHECK(fake.count("synchronize") == syncs + 1);
  // An owned stream works the same way.
  auto mine = (*b0)->createStream();
  REQUIRE_OK_EXPECTED(mine);
  {
    StreamScope scope(*mine);
    REQUIRE_OK(layer->forward(*dz, *da, 1000));
    CHECK(fake.lastStream() == (*mine)->handle());
    CHECK(fake.lastStream() != 0);
  }
  auto cpu = getBackend("cpu");
  REQUIRE(cpu);
  auto none = (*cpu)->borrowStream(0x5000);
  REQUIRE_FALSE(none);
  CHECK(none.error().message() == "backend cpu has no streams");
}

TEST_CASE("a loss can leave its value on the device: queued on the caller's stream, nothing waited for") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  TempCache cache;
  const bool streamOrdered = runtimeInfo().cudaDriverVersion >= 11020;
  // Below CUDA 11.2 (ctest fake_cuda_driver_11_1) sm_90 code cannot load: device 2 is an sm_80.
  const int gpu = streamOrdered ? 0 : 2;
  auto loss = Loss::compile("mse", {}, {.method = Method::Cuda, .gpuId = gpu});
  REQUIRE_OK_EXPECTED(loss);
  auto backend = getBackend("cuda:" + std::to_string(gpu));
  REQUIRE(backend);
  auto yp = (*backend)->allocate(5000, DType::F32), grad = (*backend)->allocate(5000, DType::F32);
  auto value = (*backend)->allocate(1, DType::F32), wide = (*backend)->allocate(1, DType::F64);
  REQUIRE(yp);
  REQUIRE(grad);
  REQUIRE(value);
  REQUIRE(wide);
  auto stream = (*backend)->borrowStream(0x7000);
  REQUIRE_OK_EXPECTED(stream);
  {
    StreamScope scope(*stream);
    int syncs = fake.count("synchronize"), streamSyncs = fake.count("stream_synchronize"),
        copies = fake.count("async"), allocs = fake.count("alloc_async"), frees = fake.count("free_async");
    fake.clearLaunches();
    REQUIRE_OK(loss->fused(*yp, *yp, *grad, *value));
    REQUIRE_OK(loss->forward(*yp, *yp, *value));
    CHECK(fake.lastStream() == 0x7000);
    CHECK(fake.count("synchronize") == syncs);
    CHECK(fake.count("async") == copies); // no copy to the host
    // 5000 elements: 20 blocks of 256 wanted, 8 fill the device; 64 partials.
    CHECK(fake.launches() == "hsnn_loss_fused 8,1 256;hsnn_loss_value 1,1 64;hsnn_loss_sum 8,1 256;hsnn_loss_value 1,1 64;");
    if (streamOrdered) { // partials from the stream-ordered allocator: no wait at all
      CHECK(fake.count("stream_synchronize") == streamSyncs);
      CHECK(fake.count("alloc_async") == allocs + 2);
      CHECK(fake.count("free_async") == frees + 2);
    } else { // the loss's own scratch: each call waits for its stream
      CHECK(fake.count("stream_synchronize") == streamSyncs + 2);
      CHECK(fake.count("alloc_async") == allocs);
    }
    // A sum of no elements is 0, written by the value kernel alone.
    auto sum = Loss::compile("mse", {}, {.method = Method::Cuda, .reduction = Reduction::Sum, .gpuId = gpu});
    REQUIRE_OK_EXPECTED(sum);
    auto empty = (*backend)->allocate(0, DType::F32);
    REQUIRE(empty);
    fake.clearLaunches();
    REQUIRE_OK(sum->forward(*empty, *empty, *value));
    CHECK(fake.launches() == "hsnn_loss_value 1,1 32;");
  }
  // What is checked: the value's size, dtype, memory; the reduction.
  CHECK(loss->forward(*yp, *yp, *wide).message() == "buffer 'value' holds f64 elements; the loss runs on f32");
  CHECK(loss->forward(*yp, *yp, *yp).message() == "'value' holds 5000 elements; the reduced loss needs exactly 1");
  auto host = getBackend("cpu");
  REQUIRE(host);
  auto onHost = (*host)->allocate(1, DType::F32);
  REQUIRE(onHost);
  CHECK(loss->forward(*yp, *yp, *onHost).message() ==
        "buffer 'value' on backend cpu given to a loss that runs on cuda:" + std::to_string(gpu));
  auto none = Loss::compile("mse", {}, {.method = Method::Cuda, .reduction = Reduction::None, .gpuId = gpu});
  REQUIRE_OK_EXPECTED(none);
  CHECK(none->fused(*yp, *yp, *grad, *value).message() ==
        "reduction is none: there is no reduced loss to leave in 'value'");
}

TEST_CASE("hsnn's GPU calls leave the thread's current context as they found it") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  TempCache cache;
  using Ctx = void *;
  auto retain = reinterpret_cast<int (*)(Ctx *, int)>(::dlsym(fake.lib, "cuDevicePrimaryCtxRetain"));
  auto setCurrent = reinterpret_cast<int (*)(Ctx)>(::dlsym(fake.lib, "cuCtxSetCurrent"));
  auto getCurrent = reinterpret_cast<int (*)(Ctx *)>(::dlsym(fake.lib, "cuCtxGetCurrent"));
  REQUIRE((retain && setCurrent && getCurrent));
  // What PyTorch leaves on its thread: its current device's primary context (cuda:0); hsnn runs on cuda:1.
  Ctx mine = nullptr;
  REQUIRE(retain(&mine, 0) == 0);
  auto current = [&] {
    Ctx now = nullptr;
    REQUIRE(getCurrent(&now) == 0);
    return now;
  };
  REQUIRE(setCurrent(mine) == 0);
  auto layer = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda, .gpuId = 1});
  REQUIRE_OK_EXPECTED(layer);
  auto loss = Loss::compile("mse", {}, {.method = Method::Cuda, .gpuId = 1});
  REQUIRE_OK_EXPECTED(loss);
  CHECK(current() == mine);
  auto b1 = getBackend("cuda:1");
  REQUIRE(b1);
  auto z = (*b1)->allocate(3000, DType::F32), a = (*b1)->allocate(3000, DType::F32), d = (*b1)->allocate(3000, DType::F32),
       v = (*b1)->allocate(1, DType::F32);
  REQUIRE((z && a && d && v));
  REQUIRE(setCurrent(mine) == 0); // the backend's own calls are the caller's to place
  REQUIRE_OK(layer->fused(*z, *a, *d, 1000));
  CHECK(current() == mine);
  REQUIRE_OK(layer->setConstant(1, "alpha", 3.0));
  CHECK(current() == mine);
  REQUIRE_OK(loss->fused(*z, *z, *a, *v));
  CHECK(current() == mine);
  REQUIRE_OK(layer->setGpuId(2));
  CHECK(current() == mine);
}

TEST_CASE("layers with more nodes than grid.y holds launch in chunks") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  TempCache cache;
  std::vector<NodeSpec> nodes(70000, NodeSpec{"tanh", {}});
  auto layer = ActivationLayer::compile(nodes, {.method = Method::Cuda});
  REQUIRE_OK_EXPECTED(layer);
  std::vector<float> z(nodes.size()), a(nodes.size());
  fake.clearLaunches();
  REQUIRE_OK(layer->forward(z, a, 1));
  CHECK(fake.launches() == "hsnn_layer_forward 1,65535 256;hsnn_layer_forward 1,4465 256;");
}

TEST_CASE("cuda losses reduce on the device: one launch, then a block of a thread per partial adds them") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  TempCache cache;
  auto loss = Loss::compile("mse", {}, {.method = Method::Cuda});
  REQUIRE_OK_EXPECTED(loss);
  CHECK(loss->method() == Method::Cuda);
  std::vector<float> yp(100000, 1.0f), yt(100000, 0.0f), g(100000);
  fake.clearLaunches();
  auto value = loss->forward({yp.data(), 1000}, {yt.data(), 1000});
  REQUIRE_OK_EXPECTED(value);
  // The fake runs no kernel: its zeroed memory sums to 0.
  CHECK(*value == 0.0);
  CHECK(fake.launches() == "hsnn_loss_sum 4,1 256;hsnn_loss_add_partials 1,1 32;");
  fake.clearLaunches();
  REQUIRE_OK(loss->gradient({yp.data(), 1000}, {yt.data(), 1000}, {g.data(), 1000}));
  CHECK(fake.launches() == "hsnn_loss_gradient 4,1 256;");
  fake.clearLaunches();
  REQUIRE_OK_EXPECTED(loss->fused({yp.data(), 100000}, {yt.data(), 100000}, {g.data(), 100000}));
  // 100000 elements: 391 blocks wanted, 8 fill the device; their 64 warps'
  // partials are added by 64 threads.
  CHECK(fake.launches() == "hsnn_loss_fused 8,1 256;hsnn_loss_add_partials 1,1 64;");
}

TEST_CASE("cuda constant gradients reduce on the device: a kernel built at first use, then a block per sum") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  TempCache cache;
  for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
    auto layer = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda, .layout = layout});
    REQUIRE_OK_EXPECTED(layer);
    std::vector<float> z(3 * 1000, 1.0f), err(3 * 1000, 1.0f);
    std::vector<double> grads(1, -1.0);
    fake.clearLaunches();
    REQUIRE_OK(layer->constantGradients(z, err, grads, 1000));
    CHECK(grads[0] == 0.0); // the fake runs no kernel: its zeroed memory sums to 0
    // y: the 3 nodes; x: the device's 8 blocks shared among them (3 each, of the 4 that
    // 1000 elements would take); then one warp per (node, constant).
    std::string symbol = layout == Layout::NodesMajor ? "hsnn_layer_constant_gradient" : "hsnn_layer_constant_gradient_batch_major";
    CHECK(fake.launches() == symbol + " 3,3 256;hsnn_add_partials 3,1 32;");
  }
  auto loss = Loss::compile("huber", {}, {.method = Method::Cuda});
  REQUIRE_OK_EXPECTED(loss);
  std::vector<float> yp(1000, 1.0f), yt(1000, 0.0f);
  std::vector<double> grads(1, -1.0);
  fake.clearLaunches();
  REQUIRE_OK(loss->constantGradients(yp, yt, grads));
  CHECK(grads[0] == 0.0);
  CHECK(fake.launches() == "hsnn_loss_constant_gradient 4,1 256;hsnn_loss_add_partials 1,1 32;");
}

TEST_CASE("GPU code is cached under the gpu category and a corrupt entry is rebuilt") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  TempCache cache;
  int links = fake.count("link"), cubins = fake.count("load_cubin");
  auto first = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda});
  REQUIRE_OK_EXPECTED(first);
  CHECK_FALSE(first->compileInfo().cacheHit);
  CHECK(fake.count("link") == links + 1);
  CHECK(first->compileInfo().objectBytes > 0);

  auto second = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda});
  REQUIRE_OK_EXPECTED(second);
  CHECK(second->compileInfo().cacheHit);
  CHECK(fake.count("link") == links + 1);
  CHECK(fake.count("load_cubin") == cubins + 2);

  auto entries = listKernelCache();
  REQUIRE(entries);
  std::vector<CacheEntryInfo> gpu;
  for (const auto &e : *entries)
    if (e.category == "gpu")
      gpu.push_back(e);
  REQUIRE(gpu.size() == 1);

  // Flip the last byte: the entry fails its checksum and is rebuilt.
  {
    std::fstream f(gpu[0].path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-1, std::ios::end);
    f.put(char(c ^ 0x5a));
  }
  auto third = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda});
  REQUIRE_OK_EXPECTED(third);
  CHECK_FALSE(third->compileInfo().cacheHit);
  CHECK(fake.count("link") == links + 2);

  // Another device with the same compute capability shares the entry; one
  // with another compute capability has its own.
  auto onTwo = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda, .gpuId = 2});
  REQUIRE_OK_EXPECTED(onTwo);
  CHECK_FALSE(onTwo->compileInfo().cacheHit);
  auto onOne = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda, .gpuId = 1});
  REQUIRE_OK_EXPECTED(onOne);
  CHECK(onOne->compileInfo().cacheHit);

  REQUIRE_OK(clearKernelCache(CacheCategory::Gpu));
  entries = listKernelCache();
  REQUIRE(entries);
  for (const auto &e : *entries)
    CHECK(e.category != "gpu");
}

TEST_CASE("setGpuId reloads the code, recompiling only for another compute capability") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  TempCache cache(false);
  auto layer = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda});
  REQUIRE_OK_EXPECTED(layer);
  int links = fake.count("link"), modules = fake.count("live_modules");
  REQUIRE_OK(layer->setGpuId(1)); // 9.0 like device 0: the same cubin
  CHECK(layer->gpuId() == 1);
  CHECK(fake.count("link") == links);
  CHECK(fake.count("live_modules") == modules);
  std::vector<float> z(3, 0.5f), a(3);
  fake.clearLaunches();
  REQUIRE_OK(layer->forward(z, a, 1));
  CHECK(fake.launches() == "hsnn_layer_forward 1,3 256;");

  REQUIRE_OK(layer->setGpuId(2)); // 8.0: compiled again, for sm_80
  CHECK(layer->gpuId() == 2);
  CHECK(fake.count("link") == links + 1);
  CHECK(fake.lastTarget() == "sm_80");
  REQUIRE_OK(layer->setGpuId(3)); // 10.0: this LLVM's newest, sm_90, which the driver assembles for it
  CHECK(fake.lastTarget() == "sm_90");
  CHECK(layer->constant(1, "alpha").value() == 2);
  REQUIRE_OK(layer->setConstant(1, "alpha", 3));
  REQUIRE_OK(layer->setGpuId(0));
  CHECK(layer->constant(1, "alpha").value() == 3);

  CHECK(layer->setGpuId(4).message() == "GPU id 4 is out of range: valid ids are 0..3");
  CHECK(layer->setGpuId(-1).message() == "GPU id -1 is out of range: valid ids are 0..3");
  CHECK(layer->gpuId() == 0);
  auto bad = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda, .gpuId = 7});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message() == "GPU id 7 is out of range: valid ids are 0..3");

  auto cpu = ActivationLayer::compile(threeNodes(), {.method = Method::CpuInterp});
  REQUIRE_OK_EXPECTED(cpu);
  CHECK(cpu->gpuId() == -1);
  CHECK(cpu->setGpuId(0).message() ==
        "this layer runs on the CPU (cpu_interp); compile it with method cuda to run it on a GPU");

  // After a move, nothing of the old device is used (the fake refuses
  // another device's memory in copies and launches).
  REQUIRE_OK(layer->setGpuId(2));
  REQUIRE_OK(layer->forward(z, a, 1));
  std::vector<float> dfdz(a.size());
  REQUIRE_OK(layer->fused(z, a, dfdz, 1));
  REQUIRE_OK(layer->setGpuId(1));
  REQUIRE_OK(layer->fused(z, a, dfdz, 1));
  auto loss = Loss::compile("huber", {{"delta", 0.5}}, {.method = Method::Cuda});
  REQUIRE_OK_EXPECTED(loss);
  std::vector<float> yp(100, 1.0f), yt(100, 0.0f);
  REQUIRE_OK_EXPECTED(loss->forward({yp.data(), 100}, {yt.data(), 100}));
  REQUIRE_OK(loss->setGpuId(2));
  CHECK(loss->gpuId() == 2);
  REQUIRE_OK_EXPECTED(loss->forward({yp.data(), 100}, {yt.data(), 100}));
  CHECK(loss->setGpuId(9).message() == "GPU id 9 is out of range: valid ids are 0..3");
}

TEST_CASE("every PTX the engine loads passes ptxas for the device's architecture") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  if (!std::getenv("HSNN_FAKE_CUDA_PTXAS")) {
    MESSAGE("skipped: ptxas not found (install the CUDA toolkit at /usr/local/cuda)");
    return;
  }
  TempCache cache(false);
  std::vector<NodeSpec> nodes;
  for (const char *f : {"relu", "gelu", "sigmoid", "softplus", "mish", "elu", "selu", "gelu_tanh", "hardswish",
                        "Piecewise((num, num > 0), (beta*num, True))"})
    nodes.push_back({f, std::string(f).find("beta") != std::string::npos ? std::map<std::string, double>{{"beta", 0.1}}
                                                                          : std::map<std::string, double>{}});
  int assembled = fake.count("ptxas");
  for (DType dtype : {DType::F32, DType::F64})
    for (int gpu : {0, 2}) {
      for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor})
        REQUIRE_OK_EXPECTED(ActivationLayer::compile(nodes, {.method = Method::Cuda, .dtype = dtype, .layout = layout,
                                                             .gpuId = gpu}));
      for (const char *name : {"mse", "bce", "huber", "poisson_nll"})
        REQUIRE_OK_EXPECTED(Loss::compile(name, {}, {.method = Method::Cuda, .dtype = dtype, .gpuId = gpu}));
    }
  CHECK(fake.count("ptxas") == assembled + 24);
}

TEST_CASE("IEEE by default on the GPU too, fast math opt-in") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  TempCache cache(false);
  REQUIRE_OK_EXPECTED(ActivationLayer::compile({{"gelu", {}}, {"tanh", {}}}, {.method = Method::Cuda}));
  // The math is hsnn's library, IEEE inside whatever the flags: no
  // flush-to-zero anywhere. Fast math lets the other multiplies contract
  // into FMAs.
  auto count = [](const std::string &s, const std::string &what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
      ++n;
    return n;
  };
  std::string ieee = fake.lastPtx();
  CHECK(count(ieee, "mul.rn.f32") > 0); // rounded as written: no contraction into fma
  CHECK(count(ieee, ".ftz") == 0);
  REQUIRE_OK_EXPECTED(ActivationLayer::compile({{"gelu", {}}, {"tanh", {}}}, {.method = Method::Cuda, .fastMath = true}));
  std::string fast = fake.lastPtx();
  CHECK(fast != ieee);
  CHECK(count(fast, "mul.rn.f32") < count(ieee, "mul.rn.f32"));
}

TEST_CASE("an old driver is a clear error, and other methods take over") {
  Fake fake;
  if (!cudaMethodAvailable())
    return;
  if (runtimeInfo().cudaDriverVersion >= 11080) {
    MESSAGE("skipped here: the fake_cuda_old_driver ctest entry runs this with a CUDA 11.4 driver");
    return;
  }
  TempCache cache(false);
  {
    ScopedRuntimeFlags strict({.useKernelCache = false, .strict = true, .cacheDir = cache.dir.string()});
    auto layer = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda});
    REQUIRE_FALSE(layer);
    CHECK(layer.error().message() ==
          "cuda failed (strict mode): the CUDA driver (" + std::string(HSNN_FAKE_CUDA_LIBRARY) +
              ", CUDA 11.4) loads PTX ISA up to 7.4, but code for sm_90 needs 7.8: update the NVIDIA driver");
  }
  std::vector<std::string> warnings;
  auto previous = setWarningHandler([&](std::string_view w) { warnings.emplace_back(w); });
  auto layer = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda});
  setWarningHandler(previous);
  REQUIRE_OK_EXPECTED(layer);
  CHECK(layer->method() != Method::Cuda);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("loads PTX ISA up to 7.4") != std::string::npos);
  // sm_80 code needs PTX ISA 7.0, which this driver loads.
  auto onAmpere = ActivationLayer::compile(threeNodes(), {.method = Method::Cuda, .gpuId = 2});
  REQUIRE_OK_EXPECTED(onAmpere);
  CHECK(onAmpere->method() == Method::Cuda);
}
