//===- lib/Runtime/InterpreterKernels.cpp - The interpreter's op kernels --===//
#include "InterpreterKernels.h"

#include "LayerState.h"

#include "CPU/OpKernels.h"
#include "CodeGen/HostJIT.h"

namespace hsnn::detail {

template <class T> const OpKernels<T> *runtimeOpKernels(std::string *why) {
  if (!HostJIT::available())
    return nullptr;
  // Asked once: a failure (no code generator module) stays; the op table's
  // evaluation runs then, as in a build without the JIT.
  static std::string failure;
  static const OpKernels<T> *kernels = [] {
    auto k = compiledOpKernels<T>(cacheConfig());
    if (k)
      return *k;
    failure = k.error().message();
    return static_cast<const OpKernels<T> *>(nullptr);
  }();
  if (!kernels && why)
    *why = failure;
  return kernels;
}
template const OpKernels<float> *runtimeOpKernels<float>(std::string *);
template const OpKernels<double> *runtimeOpKernels<double>(std::string *);

void prepareOpKernels(DType dtype) {
  if (dtype == DType::F32)
    (void)runtimeOpKernels<float>();
  else
    (void)runtimeOpKernels<double>();
}

} // namespace hsnn::detail
