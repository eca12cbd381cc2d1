//===- lib/CodeGen/InlineMath.h - Math functions emitted as IR --*- C++ -*-===//
//
// Functions whose library versions are too slow for the kernels, written
// out as IR so they inline into the vector loop. Internal to lib/CodeGen.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace hsnn::detail {

/// erfc of a float or a vector of floats, within 1.75 ulp of the true value
/// everywhere (every float checked against glibc's double erfc), with no
/// fast-math whatever the builder's flags. Needs a target with FMA: the
/// error terms it computes are exact only when fused.
llvm::Value *emitErfcF32(llvm::IRBuilder<> &b, llvm::Value *x);

} // namespace hsnn::detail
