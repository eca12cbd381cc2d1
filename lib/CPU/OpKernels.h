//===- lib/CPU/OpKernels.h - Every op over arrays, compiled once -*- C++ -*-===//
//
// The population interpreter (Runtime/PopulationEval.cpp) runs a formula one
// instruction at a time over a block of rows. Each numeric op's loop is a
// kernel of the host JIT, made from a one-instruction tape by the layers'
// own emitter at the host's vector width: hsnn's math library, the same
// lowering, so an interpreted value has the bits of the same formula in a
// compiled layer. They are compiled once per host and dtype (the cache
// keeps them linked, so later processes load them without LLVM) and never
// per formula. Where there is no JIT, the op table's scalar evaluation
// (OpTable.h) stands in: the same values within the numerics guide's
// bounds, not the same bits.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Cache/ObjectCache.h"
#include "CodeGen/HostJIT.h"
#include "CodeGen/KernelSpec.h"

#include "hsnn/Error.h"
#include "hsnn/Expr.h"

#include <array>
#include <memory>

namespace hsnn::detail {

/// Integer exponents that layers' kernels square instead of calling pow
/// (Lowering.cpp's kMaxSquaredPower): each has its own kernel.
inline constexpr int kMaxKernelPower = 16;

template <class T> struct OpKernels {
  /// out[i] = op(a[i]): an activation kernel's signature, called as
  /// unary[op](a, nullptr, out, nullptr, nullptr, n).
  std::array<ActivationFn<T>, kNumOps> unary{};
  /// out[i] = op(a[i], b[i]): a loss-elements kernel, called as
  /// binary[op](a, b, out, nullptr, n, 1).
  std::array<LossFn<T>, kNumOps> binary{};
  /// out[i] = op(a[i], c) and op(c, a[i]) for a scalar c: activation
  /// kernels whose constant 0 is c, called as f(a, nullptr, out, nullptr, &c, n).
  std::array<ActivationFn<T>, kNumOps> vectorScalar{}, scalarVector{};
  /// out[i] = a[i]**k for the integer k = index - kMaxKernelPower.
  std::array<ActivationFn<T>, 2 * kMaxKernelPower + 1> power{};
  /// Whether they are the host JIT's (the compiled layers' bits).
  bool compiled = false;
  /// Keeps the kernels loaded.
  std::shared_ptr<KernelLibrary> library;
};

/// Whether `op` has a kernel of its own: a numeric op of one or two
/// operands (conditions and Piecewise are selections, run in place).
bool hasOpKernel(Op op);

/// The host JIT's op kernels for T, compiled or loaded at the first call
/// and kept for the process; the reason when there is no JIT.
template <class T> Expected<const OpKernels<T> *> compiledOpKernels(const CacheConfig &cache);

} // namespace hsnn::detail
