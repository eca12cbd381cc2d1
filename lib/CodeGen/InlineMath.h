//===- lib/CodeGen/InlineMath.h - Math functions emitted as IR --*- C++ -*-===//
//
// Functions written out as IR so they inline into the vector loop: where
// the library's version is slow (erfc), or where a call costs more than the
// function (exp: every vector register is caller-saved across a libmvec
// call, so a loop holding many values spills them all). Internal to
// lib/CodeGen.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <string_view>

namespace hsnn::detail {

/// erfc of a float or a vector of floats, within 1.75 ulp of the true value
/// everywhere (every float checked against glibc's double erfc), with no
/// fast-math whatever the builder's flags. Needs a target with FMA: the
/// error terms it computes are exact only when fused.
llvm::Value *emitErfcF32(llvm::IRBuilder<> &b, llvm::Value *x);

/// exp of a float or a vector of floats, within 0.9 ulp of the true value
/// (every float checked), subnormal results rounded once, with no
/// fast-math whatever the builder's flags. Needs FMA like emitErfcF32.
llvm::Value *emitExpF32(llvm::IRBuilder<> &b, llvm::Value *x);

/// exp of a double or a vector of doubles, the same way (within 1 ulp).
llvm::Value *emitExpF64(llvm::IRBuilder<> &b, llvm::Value *x);

/// log1p of a float or a vector of floats, within 1 ulp of the true value
/// (every float checked), -inf at -1, NaN below. Needs FMA.
llvm::Value *emitLog1pF32(llvm::IRBuilder<> &b, llvm::Value *x);

/// log of a float or a vector of floats, the same way: within 1 ulp, -inf
/// at 0, NaN below. Needs FMA.
llvm::Value *emitLogF32(llvm::IRBuilder<> &b, llvm::Value *x);

/// x^n for a constant n (|n| <= 16 keeps the bounds), floats or doubles,
/// scalar or vector: floats by squaring in double rounded once, doubles in
/// double-double, both within 1 ulp, with C99 pow's zeros, infinities and
/// signs. Doubles need FMA.
llvm::Value *emitIntegerPower(llvm::IRBuilder<> &b, llvm::Value *x, int n);

/// The one-argument function `name` ("exp", as libm names it for double) of
/// x's element type as inline IR, or nullptr where libm's is used: exp (f32,
/// f64), erfc, log and log1p (f32). Needs FMA.
llvm::Value *emitInlineMath(llvm::IRBuilder<> &b, std::string_view name, llvm::Value *x);

} // namespace hsnn::detail
