//===- lib/CodeGen/GpuIR.h - What every GPU kernel's emitter uses -*- C++ -*-===//
//
// The pieces of NVPTX IR that the layers' and losses' kernels
// (GpuKernels.cpp) and the populations' interpreter (GpuPopulationKernel.cpp)
// share: kernel entry points, special registers, grid strides, read-only
// loads, shared memory and the warp's fixed-order sums. Internal to
// lib/CodeGen (it includes LLVM headers).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "IREmitter.h"
#include "Lowering.h"

#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

#include <functional>
#include <string>
#include <utility>

namespace hsnn::detail {

inline constexpr unsigned kWarp = 32, kMaxWarps = 1024 / kWarp;
inline constexpr unsigned kGlobalAddressSpace = 1; // NVPTX's global memory

/// array[at] through the read-only data cache: an ld.global.nc intrinsic.
inline llvm::Value *loadGlobal(llvm::IRBuilder<> &b, llvm::Type *t, llvm::Value *array, llvm::Value *at) {
  llvm::Type *globalPtr = llvm::PointerType::get(b.getContext(), kGlobalAddressSpace);
  llvm::Value *p = b.CreateAddrSpaceCast(b.CreateInBoundsGEP(t, array, at), globalPtr);
  return b.CreateIntrinsic(llvm::Intrinsic::nvvm_ldg_global_f, {t, globalPtr},
                           {p, b.getInt32(t->getPrimitiveSizeInBits() / 8)});
}

/// Adds a population's interpreter kernel (GpuPopulationKernel.cpp).
llvm::Error emitPopulationKernel(llvm::Module &module, const GpuPopulationKernel &kernel, const EmitOptions &options);

/// The module, the options and the element lowering a GPU kernel builder
/// emits with, and the helpers they share.
class GpuIR {
public:
  GpuIR(llvm::Module &m, const EmitOptions &o) : m_(m), ctx_(m.getContext()), opt_(o), lowering_(m, o) {}

protected:
  llvm::Type *elementType(DType d) {
    return d == DType::F32 ? llvm::Type::getFloatTy(ctx_) : llvm::Type::getDoubleTy(ctx_);
  }

  /// An array of `size` t in shared memory, as a generic pointer (the
  /// address-space inference pass turns its loads and stores into
  /// ld/st.shared).
  llvm::Value *sharedArray(llvm::IRBuilder<> &b, const std::string &name, llvm::Type *t, unsigned size) {
    constexpr unsigned kSharedAddressSpace = 3;
    auto *type = llvm::ArrayType::get(t, size);
    auto *g = new llvm::GlobalVariable(m_, type, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(type),
                                       name, nullptr, llvm::GlobalValue::NotThreadLocal, kSharedAddressSpace);
    g->setAlignment(llvm::Align(t->getPrimitiveSizeInBits() / 8));
    return b.CreateAddrSpaceCast(g, llvm::PointerType::getUnqual(ctx_));
  }

  /// if (cond) body(); continuing after it.
  void guarded(llvm::IRBuilder<> &b, llvm::Function *f, llvm::Value *cond, const std::function<void()> &body) {
    llvm::BasicBlock *then = llvm::BasicBlock::Create(ctx_, "then", f);
    llvm::BasicBlock *join = llvm::BasicBlock::Create(ctx_, "join", f);
    b.CreateCondBr(cond, then, join);
    b.SetInsertPoint(then);
    body();
    b.CreateBr(join);
    b.SetInsertPoint(join);
  }

  llvm::Value *sreg(llvm::IRBuilder<> &b, llvm::Intrinsic::ID id) {
    return b.CreateZExt(b.CreateIntrinsic(id, {}, {}), b.getInt64Ty());
  }

  /// The global thread id along x, and the grid's thread count along x.
  std::pair<llvm::Value *, llvm::Value *> gridStride(llvm::IRBuilder<> &b) {
    llvm::Value *ntid = sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
    llvm::Value *start = b.CreateAdd(b.CreateMul(sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x), ntid),
                               sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x));
    return {start, b.CreateMul(ntid, sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x))};
  }

  /// A kernel entry point; `threads`, where not 0, is the block size it
  /// must be launched with (reqntid).
  llvm::Expected<llvm::Function *> kernel(const std::string &symbol, llvm::FunctionType *fty, unsigned threads = 0) {
    if (m_.getFunction(symbol))
      return llvm::make_error<llvm::StringError>("duplicate kernel symbol " + symbol, llvm::inconvertibleErrorCode());
    llvm::Function *f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, m_);
    f->setDoesNotThrow();
    markArraysNoAlias(*f);
    auto annotate = [&](const char *key, unsigned value) {
      llvm::Metadata *md[] = {llvm::ValueAsMetadata::get(f), llvm::MDString::get(ctx_, key),
                        llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx_), value))};
      m_.getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(ctx_, md));
    };
    annotate("kernel", 1);
    if (threads)
      annotate("reqntidx", threads);
    return f;
  }

  /// v shifted down `delta` lanes across the warp (a double is two 32-bit
  /// shuffles). Every lane of the warp must take part.
  llvm::Value *shuffleDown(llvm::IRBuilder<> &b, llvm::Value *v, unsigned delta) {
    llvm::Value *bits = b.CreateBitCast(v, b.getInt64Ty());
    auto shfl = [&](llvm::Value *half) {
      // clamp operand 0x1f: the whole warp is one segment.
      return b.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_down_i32, {},
                               {b.getInt32(0xffffffffu), half, b.getInt32(delta), b.getInt32(0x1f)});
    };
    llvm::Value *lo = shfl(b.CreateTrunc(bits, b.getInt32Ty()));
    llvm::Value *hi = shfl(b.CreateTrunc(b.CreateLShr(bits, 32), b.getInt32Ty()));
    llvm::Value *joined =
        b.CreateOr(b.CreateShl(b.CreateZExt(hi, b.getInt64Ty()), 32), b.CreateZExt(lo, b.getInt64Ty()));
    return b.CreateBitCast(joined, b.getDoubleTy());
  }

  /// v added across the warp (lane l gets l + 16, then + 8, ...: a fixed
  /// tree); lane 0 holds the total.
  llvm::Value *warpSum(llvm::IRBuilder<> &b, llvm::Value *v) {
    for (unsigned delta = kWarp / 2; delta > 0; delta /= 2)
      v = b.CreateFAdd(v, shuffleDown(b, v, delta));
    return v;
  }

  /// Adds v across the warp (warpSum) and has lane 0 store the total at
  /// dst[index].
  void storeWarpSum(llvm::IRBuilder<> &b, llvm::Function *f, llvm::Value *v, llvm::Value *dst, llvm::Value *index) {
    v = warpSum(b, v);
    llvm::BasicBlock *store = llvm::BasicBlock::Create(ctx_, "lane0", f);
    llvm::BasicBlock *done = llvm::BasicBlock::Create(ctx_, "done", f);
    llvm::Value *lane = b.CreateAnd(sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x), b.getInt64(kWarp - 1));
    b.CreateCondBr(b.CreateICmpEQ(lane, b.getInt64(0)), store, done);
    b.SetInsertPoint(store);
    b.CreateStore(v, b.CreateInBoundsGEP(b.getDoubleTy(), dst, index));
    b.CreateBr(done);
    b.SetInsertPoint(done);
  }

  llvm::Module &m_;
  llvm::LLVMContext &ctx_;
  const EmitOptions &opt_;
  ElementLowering lowering_;
};

} // namespace hsnn::detail
