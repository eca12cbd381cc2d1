// The C entry hsnn._core hands hsnn._torch (as a capsule, _core._raw_run()):
// run an ActivationLayer on host arrays given as raw pointers, so that the
// torch extension needs neither hsnn's headers nor NumPy arrays per call.
#pragma once

#include <Python.h>
#include <cstddef>
#include <cstdint>

namespace hsnn::python {

inline constexpr const char *kRawRunCapsule = "hsnn._core.raw_run";

/// kind 0: o0 = f(z); 1: o0 = err * f'(z); 2: o0 = f(z), o1 = f'(z). `layer`
/// is an hsnn._core.ActivationLayer in the batch-major layout, each array
/// holds numNodes * batch elements of its dtype (f64: double, else float).
/// Returns 0, or 1 with the error in `message`. Call with the GIL held.
using RawRunFn = int (*)(PyObject *layer, int kind, int f64, const void *z, const void *err, void *o0, void *o1,
                         int64_t batch, char *message, size_t messageSize);

} // namespace hsnn::python
