// The C entries hsnn._core hands hsnn._torch (as a capsule, _core._raw_run()):
// run an ActivationLayer or a Loss on host arrays given as raw pointers, so
// that the torch extension needs neither hsnn's headers nor NumPy arrays per
// call, and its backward (on autograd's thread) no GIL.
#pragma once

#include <Python.h>
#include <cstddef>
#include <cstdint>

namespace hsnn::python {

inline constexpr const char *kRawRunCapsule = "hsnn._core.raw_entries";

/// A thread pool to run the kernels on (hsnn::ParallelFor's run; null:
/// hsnn's own threads).
using RawParallelFor = void (*)(void *pool, size_t tasks, size_t grain,
                                void (*body)(void *ctx, size_t begin, size_t end), void *ctx);

struct RawEntries {
  /// The engine object behind an hsnn._core.ActivationLayer (batch-major) or
  /// Loss, valid while that Python object lives; nullptr with the reason in
  /// `message` for anything else. Call with the GIL held.
  const void *(*layerOf)(PyObject *layer, char *message, size_t messageSize);
  const void *(*lossOf)(PyObject *loss, char *message, size_t messageSize);
  /// The layer's fused kernel: a = f(z), dfdz = f'(z), each numNodes * batch
  /// elements of its dtype (f64: double, else float). Returns 0, or 1 with
  /// the error in `message`. No GIL needed.
  int (*runLayerFused)(const void *layer, int f64, const void *z, void *a, void *dfdz, int64_t batch,
                       RawParallelFor parallelFor, char *message, size_t messageSize);
  /// The loss's fused kernel over n elements: *value = the reduced loss,
  /// grad = its gradient (already scaled, as Loss::fused). No GIL needed.
  int (*runLossFused)(const void *loss, int f64, const void *yPred, const void *yTrue, void *grad, int64_t n,
                      double *value, RawParallelFor parallelFor, char *message, size_t messageSize);
  /// The same on CUDA memory of the layer's or loss's device (Method::Cuda),
  /// queued on `stream` (a CUstream handle; 0 the legacy default stream)
  /// with nothing waited for: the layer's kind 0 forward (z -> out0), 1
  /// backward (z, err -> out0) or 2 fused (z -> out0 = f, out1 = f'); the
  /// loss's fused kernel (grad, and the reduced loss into `value`, one
  /// element of its dtype, still on the device). No GIL needed.
  int (*runLayerDevice)(const void *layer, int kind, int f64, const void *z, const void *err, void *out0, void *out1,
                        int64_t batch, uintptr_t stream, char *message, size_t messageSize);
  int (*runLossDevice)(const void *loss, int f64, const void *yPred, const void *yTrue, void *grad, void *value,
                       int64_t n, uintptr_t stream, char *message, size_t messageSize);
  /// Outputs of at least minPooledBytes come from _core's pool
  /// (OutputPool.h): poolTake's memory (64-byte aligned) goes back with
  /// poolGive, from any thread.
  size_t minPooledBytes;
  void *(*poolTake)(size_t bytes);
  void (*poolGive)(void *data);
};

using ObjectOfFn = const void *(*)(PyObject *object, char *message, size_t messageSize);

/// _core's entries, given its two lookups (which need its Python classes):
/// the rest run the C++ objects (RawRun.cpp).
RawEntries rawEntries(ObjectOfFn layerOf, ObjectOfFn lossOf);

} // namespace hsnn::python
