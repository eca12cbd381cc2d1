//===- python/src/RawRun.cpp - Layers and losses on raw host memory -------===//
//
// hsnn._torch's way into the engine (RawRun.h): the tensors' own memory, no
// NumPy arrays made, no GIL, the kernels spread over the caller's pool.
//
//===----------------------------------------------------------------------===//
#include "RawRun.h"

#include "OutputPool.h"

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

} // namespace

RawEntries rawEntries(ObjectOfFn layerOf, ObjectOfFn lossOf) {
  return {layerOf, lossOf, runLayerFused, runLossFused, kMinPooledBytes, takeData, giveData};
}

} // namespace hsnn::python
