//===- lib/CodeGen/Lowering.h - One Program's instructions as IR -*- C++ -*-===//
//
// Shared by the CPU loops (IREmitter.cpp) and the GPU kernels
// (GpuKernels.cpp): the op table's lowering of each instruction, with the
// same IEEE operations, in the same order, as the interpreter. Internal to
// lib/CodeGen (it includes LLVM headers).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "IREmitter.h"
#include "MathCalls.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>

#include <functional>
#include <string>
#include <vector>

namespace hsnn::detail {

/// Where one element's inputs come from and its outputs go: the kernel's
/// array arguments in KernelSpec.h's order (activation z, err, out0, out1;
/// loss yPred, yTrue, out), at element index `at`.
struct ElementIO {
  llvm::Function *fn = nullptr;
  llvm::Value *at = nullptr;
  llvm::Type *t = nullptr;
  unsigned scaleArg = 0; ///< Loss kernels: the argument holding `scale`.
  /// Inputs already loaded (arrays 0 and 1: z and err, or yPred and yTrue),
  /// for kernels that load ahead; null: load at `at`.
  llvm::Value *preloaded[2] = {nullptr, nullptr};
  /// Where output array `arg` receives `v`; null: a store at `at`.
  std::function<void(llvm::Value *v, unsigned arg)> store = nullptr;
  /// Summing kinds: adds one element's loss to the running sum and returns
  /// the new sum; null: acc + loss through addToSum.
  std::function<llvm::Value *(llvm::Value *loss)> accumulate = nullptr;
};

/// noalias + nocapture on every pointer argument: arrays may be the same
/// array (in place) but never partially overlap.
void markArraysNoAlias(llvm::Function &fn);

/// The attributes of every CPU kernel: no throw, no free, no sync, the
/// options' vector width, noalias arrays.
void setCpuKernelAttributes(llvm::Function &fn, const EmitOptions &o);

/// How far ahead the CPU kernels prefetch what they read: a loop that
/// starts a stream per call (a node's slice of a batch, a row kernel's
/// rows) or computes long between loads left the hardware prefetchers
/// behind (measured where RowKernel.cpp and IREmitter.cpp prefetch; the
/// DEVLOG has the runs).
inline constexpr int64_t kPrefetchBytes = 4096;

/// A prefetch for reading of the cache line `bytes` after `at`.
void prefetchAhead(llvm::IRBuilder<> &b, llvm::Value *at, int64_t bytes = kPrefetchBytes);

/// Marks the loop whose back edge this is as already vectorized.
void markNotVectorizable(llvm::Instruction *backEdge);

/// Adds a batch-major row kernel (KernelSpec.h's RowKernelFn) for a request
/// with rowSlots (RowKernel.cpp).
llvm::Error emitRowKernel(llvm::Module &m, const KernelRequest &r, const EmitOptions &o);

class ElementLowering {
public:
  ElementLowering(llvm::Module &m, const EmitOptions &o) : m_(m), ctx_(m.getContext()), opt_(o) {}

  /// Fills `slot` (one value per instruction) with the program's numbers and
  /// constants, the latter loaded from `params` (a double array). `t` may be
  /// a vector type: every value is then that many elements, lane by lane.
  /// With `laneParam`, constant j is laneParam(j) instead (one value per
  /// lane, of type t: row kernels, whose lanes are different nodes).
  void constants(llvm::IRBuilder<> &b, const Program &p, llvm::Value *params, llvm::Type *t,
                 std::vector<llvm::Value *> &slot,
                 const std::function<llvm::Value *(unsigned param)> &laneParam = nullptr);
  /// Lowers every instruction `slot` does not hold yet. `vars` are the
  /// element's variables, indexed by Variable (null: not in this kernel).
  llvm::Error evaluate(llvm::IRBuilder<> &b, const Program &p, std::vector<llvm::Value *> &slot,
                       llvm::Value *const vars[3], llvm::Type *t);
  /// One element of a kernel of `shape` (KernelSpec.h's semantics): loads
  /// the inputs, evaluates (slot holds the constants), stores the outputs.
  /// Returns acc plus the element's loss for summing shapes, else null.
  llvm::Expected<llvm::Value *> element(llvm::IRBuilder<> &b, KernelKind kind, const Program &p,
                                        std::vector<llvm::Value *> &slot, const ElementIO &io, llvm::Value *acc);
  /// acc + v in double, reassociable (so a CPU loop vectorizes); the order
  /// is still fixed by the code, so sums stay deterministic.
  llvm::Value *addToSum(llvm::IRBuilder<> &b, llvm::Value *acc, llvm::Value *v, llvm::Type *t);
  /// Whether lowering `p` calls a math function (exp, log, erf, ...: a libm
  /// name in Ops.def, or sigmoid and softplus, which lower to exp and log1p),
  /// not only arithmetic, selects and intrinsics.
  static bool callsMath(const Program &p) { return mathCallSites(p) > 0; }
  /// Math functions called (MathCalls.h) instead of inlined at every use,
  /// for the kernels built next: declared, where EmitOptions::externalMath,
  /// else defined once in the module.
  void setOutlineMath(bool outline) { outlineMath_ = outline; }
  /// Adds `fn`'s definition, a hidden external function (MathCalls.h).
  llvm::Error defineMathFunction(const MathFunction &fn);

private:
  llvm::Expected<llvm::Value *> lower(llvm::IRBuilder<> &b, const Program &p, const Instr &in,
                                      const std::vector<llvm::Value *> &slot, llvm::Value *const vars[3], llvm::Type *t);
  llvm::Value *callMath(llvm::IRBuilder<> &b, std::string_view base, llvm::ArrayRef<llvm::Value *> args, llvm::Type *t);
  /// Whether math is hsnn's own library (InlineMath.h): on every GPU, and on
  /// CPUs with FMA.
  bool inlineMath() const { return opt_.gpu || (opt_.hasFMA && opt_.ownMath); }
  llvm::Value *callScalar(llvm::IRBuilder<> &b, const std::string &name, llvm::ArrayRef<llvm::Value *> args,
                          llvm::Type *t);
  /// A call of math function `name` (MathCalls.h) on args, declared or
  /// defined at its first use in the module.
  llvm::Value *callOutlined(llvm::IRBuilder<> &b, std::string_view name, llvm::ArrayRef<llvm::Value *> args);
  /// The function, declared (or with `define`, defined) in the module.
  llvm::Function *mathFunction(const MathFunction &fn, bool define);

  llvm::Module &m_;
  llvm::LLVMContext &ctx_;
  const EmitOptions &opt_;
  bool outlineMath_ = false;
};

} // namespace hsnn::detail
