//===- lib/CodeGen/InlineMath.h - hsnn's math library, as IR ---*- C++ -*-===//
//
// Every function of the formula language written out as IR over a float or
// a double, scalar or vector: the CPU kernels inline them into their vector
// loops (a libmvec call spills every vector register the loop holds, and
// glibc's AVX2 variants ran much slower than its AVX-512 ones), and the GPU
// kernels use the same IR at one lane instead of libdevice, so CPU and GPU
// compute the same operations in the same order and give the same bits.
// FMA where an algorithm wants one (an exact error term), no contraction
// elsewhere, no fast-math whatever the builder's flags, subnormals neither
// flushed nor produced by anything but a final rounding. Needs FMA (every
// GPU, x86 since Haswell): without it the CPU kernels call libmvec.
// Accuracy: docs/guide/numerics.md. Internal to lib/CodeGen.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <functional>
#include <string_view>

namespace hsnn::detail {

/// The function libm calls `name` ("exp", "atan2": the double one's name)
/// applied to args (1 or 2 values of one float or double type, scalar or
/// vector), or nullptr where the library has none and libm's is used.
llvm::Value *emitInlineMath(llvm::IRBuilder<> &b, std::string_view name, llvm::ArrayRef<llvm::Value *> args);

/// x^n for a constant n (|n| <= 16 keeps the bounds), floats or doubles,
/// scalar or vector: floats by squaring in double rounded once, doubles in
/// double-double, both within 1 ulp, with C99 pow's zeros, infinities and
/// signs.
llvm::Value *emitIntegerPower(llvm::IRBuilder<> &b, llvm::Value *x, int n);

/// f(x) for a float x computed in double and rounded once.
llvm::Value *inDouble(llvm::IRBuilder<> &b, llvm::Value *x, const std::function<llvm::Value *(llvm::Value *)> &f);

// The functions, each for float and double (InlineMath.cpp, MathErf.cpp,
// MathHyperbolic.cpp, MathTrig.cpp).
llvm::Value *emitExp(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitExpm1(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitLog(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitLog1p(llvm::IRBuilder<> &b, llvm::Value *x);
/// log1p(x) for x in [0, 1] or NaN (softplus's log1p(exp(-|u|))): emitLog1p's
/// bits there without its special lanes or its test for -0.
llvm::Value *emitLog1pOfUnit(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitErf(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitErfc(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitSinh(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitCosh(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitTanh(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitAsinh(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitAcosh(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitAtanh(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitSin(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitCos(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitTan(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitAtan(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitAsin(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitAcos(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *emitAtan2(llvm::IRBuilder<> &b, llvm::Value *y, llvm::Value *x);
/// pow(x, y) with C99's special cases, as exp(y log|x|) carried in double
/// (floats) or double-double (doubles).
llvm::Value *emitPow(llvm::IRBuilder<> &b, llvm::Value *x, llvm::Value *y);

} // namespace hsnn::detail
