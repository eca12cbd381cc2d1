//===- test/Runtime/BackendTest.cpp - Backends and getBackend -------------===//
#include "hsnn/Backend.h"
#include "hsnn/Layer.h"

#include <cmath>
#include <cstring>
#include "hsnn/Runtime.h"

#include <doctest/doctest.h>
#include <vector>

using namespace hsnn;

TEST_CASE("the CPU backend allocates, copies and reports memory") {
  auto cpu = getBackend("cpu");
  REQUIRE(cpu);
  CHECK((*cpu)->name() == "cpu");
  CHECK((*cpu)->deviceId() == -1);
  CHECK_FALSE((*cpu)->deviceName().empty());
  CHECK((*cpu)->computeCapability() == std::pair{0, 0});
  CHECK((*cpu)->isAvailable());
  auto buf = (*cpu)->allocate(1000, DType::F32);
  REQUIRE(buf);
  CHECK(buf->bytes() == 4000);
  CHECK(reinterpret_cast<uintptr_t>(buf->data()) % 64 == 0);
  std::vector<float> in(1000), out(1000);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = float(i) * 0.5f;
  CHECK_FALSE(static_cast<bool>((*cpu)->toDevice(*buf, in.data(), 4000)));
  CHECK_FALSE(static_cast<bool>((*cpu)->toHost(out.data(), *buf, 4000)));
  CHECK(in == out);
  CHECK_FALSE(static_cast<bool>((*cpu)->synchronize()));
  CHECK((*cpu)->toHost(out.data(), *buf, 4000, 8).message() ==
        "copy of 4000 bytes at offset 8 overruns a buffer of 4000 bytes");
  auto mem = (*cpu)->memoryInfo();
  REQUIRE(mem);
  CHECK(mem->total > 0);
  CHECK(mem->free <= mem->total);
  CHECK((*cpu)->supportsFeature("shared_memory"));
  CHECK_FALSE((*cpu)->supportsFeature("streams"));

  auto copy = (*cpu)->allocate(1000, DType::F32);
  REQUIRE(copy);
  CHECK_FALSE(static_cast<bool>((*cpu)->copy(*copy, *buf, 4000)));
  CHECK(std::memcmp(copy->data(), in.data(), 4000) == 0);
  CHECK((*cpu)->copy(*copy, *buf, 4001).message() == "copy of 4001 bytes at offset 0 overruns a buffer of 4000 bytes");
  CHECK((*cpu)->createStream().error().message() == "backend cpu has no streams");
}

TEST_CASE("layers run on buffers from the CPU backend") {
  auto cpu = getBackend("cpu");
  REQUIRE(cpu);
  auto layer = ActivationLayer::compile({{"sin(num)*alpha", {{"alpha", 2}}}, {"relu", {}}}, {.dtype = DType::F64});
  REQUIRE(layer);
  auto z = (*cpu)->allocate(2 * 3, DType::F64), a = (*cpu)->allocate(2 * 3, DType::F64);
  REQUIRE(z);
  REQUIRE(a);
  double in[6] = {1, 0, -1, 1, 0, -1}, out[6];
  REQUIRE_FALSE(static_cast<bool>((*cpu)->toDevice(*z, in, sizeof in)));
  REQUIRE_FALSE(static_cast<bool>(layer->forward(*z, *a, 3)));
  REQUIRE_FALSE(static_cast<bool>((*cpu)->toHost(out, *a, sizeof out)));
  CHECK(out[0] == doctest::Approx(2 * std::sin(1.0)));
  CHECK(out[5] == 0);
  auto small = (*cpu)->allocate(2, DType::F64);
  CHECK(layer->forward(*z, *small, 3).message() == "'a' holds 2 elements; 2 nodes x batch 3 needs exactly 6");
}

TEST_CASE("losses run on buffers from the CPU backend") {
  auto cpu = getBackend("cpu");
  REQUIRE(cpu);
  auto loss = Loss::compile("mse", {}, {.dtype = DType::F32, .reduction = Reduction::Mean});
  REQUIRE(loss);
  auto p = (*cpu)->allocate(4, DType::F32), t = (*cpu)->allocate(4, DType::F32), g = (*cpu)->allocate(4, DType::F32);
  float yp[4] = {1, 2, 3, 4}, yt[4] = {0, 0, 0, 0}, grad[4];
  REQUIRE_FALSE(static_cast<bool>((*cpu)->toDevice(*p, yp, sizeof yp)));
  REQUIRE_FALSE(static_cast<bool>((*cpu)->toDevice(*t, yt, sizeof yt)));
  CHECK(*loss->forward(*p, *t) == doctest::Approx(7.5));
  auto fused = loss->fused(*p, *t, *g);
  REQUIRE(fused);
  CHECK(*fused == doctest::Approx(7.5));
  REQUIRE_FALSE(static_cast<bool>(loss->gradient(*p, *t, *g)));
  REQUIRE_FALSE(static_cast<bool>((*cpu)->toHost(grad, *g, sizeof grad)));
  CHECK(grad[3] == doctest::Approx(2.0)); // 2*(4-0)/4
  auto five = (*cpu)->allocate(5, DType::F32);
  CHECK(loss->forward(*p, *five).error().message() == "'y_true' holds 5 elements; y_pred of 4 elements needs exactly 4");

  // The value left in a buffer: the returning overloads' value, converted.
  auto value = (*cpu)->allocate(1, DType::F32);
  REQUIRE(value);
  float got = -1;
  REQUIRE_FALSE(static_cast<bool>(loss->fused(*p, *t, *g, *value)));
  REQUIRE_FALSE(static_cast<bool>((*cpu)->toHost(&got, *value, sizeof got)));
  CHECK(got == float(*fused));
  REQUIRE_FALSE(static_cast<bool>((*cpu)->toDevice(*value, yp, sizeof got)));
  REQUIRE_FALSE(static_cast<bool>(loss->forward(*p, *t, *value)));
  REQUIRE_FALSE(static_cast<bool>((*cpu)->toHost(&got, *value, sizeof got)));
  CHECK(got == 7.5f);
  CHECK(loss->forward(*p, *t, *g).message() == "'value' holds 4 elements; the reduced loss needs exactly 1");
  DeviceBuffer insideGrad(std::shared_ptr<void>(g->data(), [](void *) {}), 1, DType::F32, "cpu");
  CHECK(loss->fused(*p, *t, *g, insideGrad).message() == "'value' and 'grad' are both outputs and share memory");
}

TEST_CASE("asking for an absent backend is an error that says why") {
  const RuntimeInfo &info = runtimeInfo();
  if (info.gpuEnabled) {
    MESSAGE("skipped: a GPU is present; this case covers machines without one (the GPU tests cover the rest)");
    return;
  }
  auto cuda = getBackend("cuda:1");
  REQUIRE_FALSE(cuda);
  CHECK(cuda.error().message() == "backend 'cuda:1' is unavailable: " + info.gpuUnavailableReason);
  CHECK(getBackend("tpu").error().message() == "unknown backend 'tpu'; use auto, cpu, cuda or cuda:N");
  CHECK(getBackend("cuda:x").error().message() == "bad backend 'cuda:x': expected cuda:N with N a device number");
  auto a = getBackend("auto");
  REQUIRE(a);
  CHECK((*a)->name() == "cpu");
}
