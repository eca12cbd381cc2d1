//===- lib/Program/OpKernels.h - Every op over arrays, as the JIT made it -*- C++ -*-===//
//
// The interpreter (BlockCode.h) runs a tape one instruction at a time over
// a block of elements. Where the host JIT is at hand, each numeric op's loop
// is one of its kernels, made from a one-instruction tape by the layers' own
// emitter at the host's vector width (CPU/OpKernels.cpp): hsnn's math
// library and the same lowering, so an interpreted value has the bits of the
// same formula compiled. They are compiled once per host and dtype (the cache
// keeps them linked, so later processes load them without LLVM), never per
// formula, and installed here for the process. Without them the op table's
// evaluation (OpTable.h) runs: the same values within the numerics guide's
// bounds, not the same bits.
//
// LLVM-free: the table is function pointers of KernelSpec.h's C signatures.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Launch.h"
#include "Program.h"

#include "hsnn/Expr.h"

#include <array>
#include <cstdint>

namespace hsnn::detail {

/// Integer exponents that compiled kernels square instead of calling pow
/// (Lowering.cpp's kMaxSquaredPower): each has its own kernel.
inline constexpr int kMaxKernelPower = 16;

template <class T> struct OpKernels {
  /// KernelSpec.h's ActivationFn: out0[i] = f(z[i]) (constants from params).
  using Unary = void (*)(const T *z, const T *err, T *out0, T *out1, const double *params, int64_t n);
  /// KernelSpec.h's LossFn (its sum unused here).
  using Binary = SumParts (*)(const T *a, const T *b, T *out, const double *params, int64_t n, T scale);

  /// out[i] = op(a[i]): unary[op](a, nullptr, out, nullptr, nullptr, n).
  std::array<Unary, kNumOps> unary{};
  /// out[i] = op(a[i], b[i]): binary[op](a, b, out, nullptr, n, 1).
  std::array<Binary, kNumOps> binary{};
  /// out[i] = op(a[i], c) and op(c, a[i]) for a scalar c:
  /// f(a, nullptr, out, nullptr, &c, n).
  std::array<Unary, kNumOps> vectorScalar{}, scalarVector{};
  /// out[i] = a[i]**k for the integer k = index - kMaxKernelPower.
  std::array<Unary, 2 * kMaxKernelPower + 1> power{};
};

/// Whether `op` has kernels of its own: a numeric op of one or two operands
/// (conditions and Piecewise are selections, exact in any code).
inline bool hasOpKernel(Op op) {
  const OpInfo &info = opInfo(op);
  return !info.isBool && info.syntax != OpSyntax::Leaf && (info.arity == 1 || info.arity == 2);
}

/// How an op kernel's operands come: arrays (an activation's z; a binary
/// op's two arrays, y_pred and y_true), one array and a scalar (constant 0
/// of the kernel) on either side, or an integer power's exponent as a number.
enum class OpOperands { Arrays, VectorScalar, ScalarVector, Power };

/// The one-instruction tape of `op` with operands `how` (`power`: the
/// exponent of OpOperands::Power): what the CPU's op kernels are compiled
/// from, and the GPU interpreter's cases (DeviceCode.h) lowered from.
Program opKernelTape(Op op, OpOperands how, int power = 0);

/// The kernels installed for the process (they stay loaded for its life),
/// or null where none are yet. Installing is once per type.
template <class T> const OpKernels<T> *installedOpKernels();
template <class T> void installOpKernels(const OpKernels<T> *kernels);

} // namespace hsnn::detail
