//===- python/src/RawRun.cpp - Layers and losses on raw host memory -------===//
//
// hsnn._torch's way into the engine (RawRun.h): the tensors' own memory, no
// NumPy arrays made, no GIL, the kernels spread over the caller's pool.
//
//===----------------------------------------------------------------------===//
#include "RawRun.h"

#include "OutputPool.h"

#include "hsnn/Backend.h"
#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <cstdio>
#include <span>
#include <string>

namespace hsnn::python {
namespace {

int fail(char *message, size_t size, const std::string &what) {
  std::snprintf(message, size, "%s", what.c_str());
  return 1;
}

template <class T> std::span<T> span(const void *p, size_t n) { return {static_cast<T *>(const_cast<void *>(p)), n}; }

// The tensor's dtype against the object's: an error naming `what`, or "".
std::string dtypeMismatch(const char *what, DType dtype, int f64) {
  if ((dtype == DType::F64) == bool(f64))
    return {};
  return std::string("the ") + what + " is " + std::string(to_string(dtype)) + "; the tensor is not";
}

int runLayerFused(const void *layer, int f64, const void *z, void *a, void *dfdz, int64_t batch,
                  RawParallelFor parallelFor, char *message, size_t size) {
  const auto &l = *static_cast<const ActivationLayer *>(layer);
  if (std::string why = dtypeMismatch("layer", l.dtype(), f64); !why.empty())
    return fail(message, size, why);
  ScopedParallelFor pool({parallelFor, nullptr});
  const size_t n = l.numNodes() * size_t(batch);
  auto run = [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    return l.fused(span<const T>(z, n), span<T>(a, n), span<T>(dfdz, n), size_t(batch));
  };
  Error e = f64 ? run(static_cast<double *>(nullptr)) : run(static_cast<float *>(nullptr));
  return e ? fail(message, size, e.message()) : 0;
}

int runLossFused(const void *loss, int f64, const void *yPred, const void *yTrue, void *grad, int64_t n,
                 double *value, RawParallelFor parallelFor, char *message, size_t size) {
  const auto &l = *static_cast<const Loss *>(loss);
  if (std::string why = dtypeMismatch("loss", l.dtype(), f64); !why.empty())
    return fail(message, size, why);
  ScopedParallelFor pool({parallelFor, nullptr});
  auto run = [&](auto *type) {
    using T = std::remove_pointer_t<decltype(type)>;
    return l.fused(span<const T>(yPred, size_t(n)), span<const T>(yTrue, size_t(n)), span<T>(grad, size_t(n)));
  };
  Expected<double> v = f64 ? run(static_cast<double *>(nullptr)) : run(static_cast<float *>(nullptr));
  if (!v)
    return fail(message, size, v.error().message());
  *value = *v;
  return 0;
}

// Device memory the caller owns, as the C++ API's buffers: no ownership.
DeviceBuffer onDevice(const void *data, size_t n, DType dtype, const std::string &backend) {
  return DeviceBuffer(std::shared_ptr<void>(const_cast<void *>(data), [](void *) {}), n, dtype, backend);
}

// Runs `call` inside a StreamScope on `stream` of the object's device.
template <class Call> Error onStream(int gpu, uintptr_t stream, Call &&call, std::string &backendName) {
  backendName = "cuda:" + std::to_string(gpu);
  auto backend = getBackend(backendName);
  if (!backend)
    return backend.error();
  auto s = (*backend)->borrowStream(stream);
  if (!s)
    return s.error();
  StreamScope scope(std::move(*s));
  return call();
}

int runLayerDevice(const void *layer, int kind, int f64, const void *z, const void *err, void *out0, void *out1,
                   int64_t batch, uintptr_t stream, char *message, size_t size) {
  const auto &l = *static_cast<const ActivationLayer *>(layer);
  if (std::string why = dtypeMismatch("layer", l.dtype(), f64); !why.empty())
    return fail(message, size, why);
  if (l.method() != Method::Cuda)
    return fail(message, size, "the layer runs on the CPU (" + std::string(to_string(l.method())) + "), not on CUDA memory");
  const size_t n = l.numNodes() * size_t(batch);
  std::string where;
  Error e = onStream(l.gpuId(), stream, [&] {
    DeviceBuffer zb = onDevice(z, n, l.dtype(), where), o0 = onDevice(out0, n, l.dtype(), where);
    if (kind == 0)
      return l.forward(zb, o0, size_t(batch));
    if (kind == 1)
      return l.backward(zb, onDevice(err, n, l.dtype(), where), o0, size_t(batch));
    return l.fused(zb, o0, onDevice(out1, n, l.dtype(), where), size_t(batch));
  }, where);
  return e ? fail(message, size, e.message()) : 0;
}

int runLossDevice(const void *loss, int f64, const void *yPred, const void *yTrue, void *grad, void *value, int64_t n,
                  uintptr_t stream, char *message, size_t size) {
  const auto &l = *static_cast<const Loss *>(loss);
  if (std::string why = dtypeMismatch("loss", l.dtype(), f64); !why.empty())
    return fail(message, size, why);
  if (l.method() != Method::Cuda)
    return fail(message, size, "the loss runs on the CPU (" + std::string(to_string(l.method())) + "), not on CUDA memory");
  std::string where;
  Error e = onStream(l.gpuId(), stream, [&] {
    return l.fused(onDevice(yPred, size_t(n), l.dtype(), where), onDevice(yTrue, size_t(n), l.dtype(), where),
                   onDevice(grad, size_t(n), l.dtype(), where), onDevice(value, 1, l.dtype(), where));
  }, where);
  return e ? fail(message, size, e.message()) : 0;
}

} // namespace

RawEntries rawEntries(ObjectOfFn layerOf, ObjectOfFn lossOf) {
  return {layerOf,        lossOf,         runLayerFused, runLossFused, runLayerDevice,
          runLossDevice,  kMinPooledBytes, takeData,      giveData};
}

} // namespace hsnn::python
