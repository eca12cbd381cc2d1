//===- lib/CodeGen/IREmitter.h - Programs to LLVM IR ------------*- C++ -*-===//
//
// One emitter for every target: it lowers a Program's instructions to IR
// through the op table (Ops.def's Libm column names the libm function or
// LLVM intrinsic) and wraps them in the loops of KernelSpec.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "KernelSpec.h"
#include "MathCalls.h"
#include "RowShape.h"

#include <functional>
#include <span>
#include <string>

namespace llvm {
class Module;
class Error;
} // namespace llvm

namespace hsnn::detail {

struct EmitOptions {
  /// Whether a vector variant of a libm function exists, by its vector-ABI
  /// name (e.g. "_ZGVdN8v_expf"); such variants are offered to the loop
  /// vectorizer. Null: none (scalar calls only).
  std::function<bool(const std::string &)> hasVectorVariant;
  /// Vector ISA letters of the libmvec variants available, widest first:
  /// 'e' AVX-512, 'd' AVX2, 'b' SSE (reported in the target description).
  std::string vectorISAs;
  /// Width of the CPU kernels' vectors in bits (512 with AVX-512, 256 with
  /// AVX, else 128): each loop iteration computes this many bits of elements.
  unsigned vectorBits = 128;
  /// LLVM's name for the target CPU (znver4, sapphirerapids, generic):
  /// for the choices measured per microarchitecture (RowKernel.cpp).
  std::string cpu;
  /// The row kernels' shape (RowKernel.cpp): measured on the host
  /// (RowShape.h) or fixed by `cpu`.
  RowShape rowShape;
  /// Whether the target fuses multiply-adds in hardware: math is then
  /// hsnn's own library emitted inline (InlineMath.h), which needs exact
  /// FMAs and would otherwise call a libm fma per operation.
  bool hasFMA = false;
  /// hsnn's math library where there is FMA; false (HSNN_CPU_MATH=libmvec):
  /// libmvec's, for comparison.
  bool ownMath = true;
  /// Opt-in fast math (reassociation, no NaN/inf); off means IEEE.
  bool fastMath = false;
  /// NVPTX: scalar values, math always hsnn's own library.
  bool gpu = false;
  /// Math functions that a kernel calls (MathCalls.h) are declarations,
  /// linked from objects of their own (the host JIT's); otherwise each
  /// module defines those it calls (ahead-of-time objects).
  bool externalMath = false;
  /// Loss kernels return their sum as {sum, residual} (SumParts, KernelSpec.h)
  /// for the host JIT to add across blocks; otherwise (AOT) as one double.
  bool sumParts = false;
};

/// Adds one function per request to `module` (whose data layout and triple
/// are already set). The functions have external linkage and C names.
llvm::Error emitKernels(llvm::Module &module, std::span<const KernelRequest> requests, const EmitOptions &options);

/// Adds the definitions of math functions that kernels emitted with
/// EmitOptions::externalMath call (MathCalls.h).
llvm::Error emitMathFunctions(llvm::Module &module, std::span<const MathFunction> functions, const EmitOptions &options);

/// Adds the GPU kernels of `spec` (see KernelSpec.h) to an NVPTX module,
/// marked as kernels (nvvm.annotations). `options.gpu` must be set.
llvm::Error emitGpuKernels(llvm::Module &module, const GpuModuleSpec &spec, const EmitOptions &options);

/// Adds a layer's C entry points (NAME_forward, NAME_forward_range, ...,
/// NAME_default_params, NAME_param_offsets) that dispatch each node to its
/// kernel; the kernels must already be in the module.
llvm::Error emitLayerEntryPoints(llvm::Module &module, const LayerEntryPoints &layer);

/// Adds NAME_default_params for a loss.
llvm::Error emitDefaultParams(llvm::Module &module, const std::string &name, const std::vector<double> &params);

} // namespace hsnn::detail
