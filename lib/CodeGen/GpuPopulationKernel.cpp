//===- lib/CodeGen/GpuPopulationKernel.cpp - A population's interpreter on the GPU ===//
//
// One kernel runs every formula of a population (KernelSpec.h's
// GpuPopulationKernel): a block row per formula, its threads striding over
// the rows, each thread walking the formula's steps (Program/DeviceCode.h)
// for its row with the values in a small register file in local memory.
// Every thread of a block runs the same formula, so the switch over a
// step's case never diverges within a warp; only the data differ.
//
// Each case is an op kernel's one-instruction tape (OpKernels.h) lowered by
// the same element lowering as every compiled kernel, so the GPU's values
// have the bits of the CPU's interpreter and cpu_jit. The math library's
// functions are emitted once in the module and called from the cases
// (ElementLowering::setOutlineMath): inlined, the ~140 cases would carry a
// copy of exp or sin each.
//
//===----------------------------------------------------------------------===//
#include "GpuIR.h"

#include "Program/DeviceCode.h"

namespace hsnn::detail {
namespace {

using namespace llvm;

class PopulationKernelBuilder : public GpuIR {
public:
  PopulationKernelBuilder(Module &m, const EmitOptions &o) : GpuIR(m, o) { lowering_.setOutlineMath(true); }

  llvm::Error build(const GpuPopulationKernel &k) {
    t_ = elementType(k.dtype);
    Type *ptr = PointerType::getUnqual(ctx_), *i64 = Type::getInt64Ty(ctx_), *f64 = Type::getDoubleTy(ctx_);
    std::vector<Type *> params = {ptr, i64, i64, ptr, ptr, ptr, ptr, ptr, i64, i64, ptr, ptr, ptr, ptr, ptr};
    auto fn = kernel(k.symbol, FunctionType::get(Type::getVoidTy(ctx_), params, false));
    if (!fn)
      return fn.takeError();
    Function *f = f_ = *fn;
    for (unsigned readOnly : {0u, 3u, 4u, 5u, 6u, 7u, 11u, 12u, 13u})
      f->addParamAttr(readOnly, Attribute::ReadOnly);
    Value *x = f->getArg(0), *rowStride = f->getArg(1), *varStride = f->getArg(2), *steps = f->getArg(3);
    Value *rows = f->getArg(8);

    BasicBlock *entry = BasicBlock::Create(ctx_, "entry", f), *rowLoop = BasicBlock::Create(ctx_, "row", f),
               *stepHead = BasicBlock::Create(ctx_, "step.head", f), *stepBody = BasicBlock::Create(ctx_, "step", f),
               *store = BasicBlock::Create(ctx_, "step.store", f), *stepNext = BasicBlock::Create(ctx_, "step.next", f),
               *rowDone = BasicBlock::Create(ctx_, "row.done", f), *exit = BasicBlock::Create(ctx_, "exit", f);
    IRBuilder<> b(entry);
    if (opt_.fastMath)
      b.setFastMathFlags(FastMathFlags::getFast());
    registers_ = b.CreateAlloca(ArrayType::get(t_, kDeviceRegisters), nullptr, "registers");
    auto [start, step] = gridStride(b);
    Value *formula = b.CreateAdd(f->getArg(9), sreg(b, Intrinsic::nvvm_read_ptx_sreg_ctaid_y), "formula");
    auto index = [&](Value *array, Value *at) {
      return b.CreateLoad(i64, b.CreateInBoundsGEP(i64, array, at));
    };
    Value *first = index(f->getArg(4), formula), *last = index(f->getArg(4), b.CreateAdd(formula, b.getInt64(1)));
    scalars_ = b.CreateInBoundsGEP(f64, f->getArg(5), index(f->getArg(6), formula), "scalars");
    Value *output = b.CreateLoad(b.getInt32Ty(), b.CreateInBoundsGEP(b.getInt32Ty(), f->getArg(7), formula), "output");
    std::vector<Value *> lossConstants;
    if (k.loss)
      lowering_.constants(b, *k.loss, f->getArg(13), t_, lossConstants);
    b.CreateCondBr(b.CreateICmpSLT(start, rows), rowLoop, exit);

    // for each of the thread's rows
    b.SetInsertPoint(rowLoop);
    PHINode *r = b.CreatePHI(i64, 2, "r");
    r->addIncoming(start, entry);
    PHINode *acc = nullptr;
    if (k.loss) {
      acc = b.CreatePHI(f64, 2, "sum");
      acc->addIncoming(ConstantFP::get(f64, 0.0), entry);
    }
    row_ = b.CreateInBoundsGEP(t_, x, b.CreateMul(r, rowStride), "row");
    varStride_ = varStride;
    b.CreateBr(stepHead);

    // for each of the formula's steps: registers[dst] = case(a, b)
    b.SetInsertPoint(stepHead);
    PHINode *s = b.CreatePHI(i64, 2, "s");
    s->addIncoming(first, rowLoop);
    b.CreateCondBr(b.CreateICmpULT(s, last), stepBody, rowDone);

    b.SetInsertPoint(stepBody);
    Value *word = b.CreateInBoundsGEP(b.getInt32Ty(), steps, b.CreateShl(s, 2));
    auto wordAt = [&](int j) {
      return b.CreateLoad(b.getInt32Ty(), b.CreateConstInBoundsGEP1_64(b.getInt32Ty(), word, j));
    };
    Value *caseId = wordAt(0), *dst = b.CreateZExt(wordAt(1), i64), *refA = wordAt(2), *refB = wordAt(3);
    Value *va = fetch(b, refA), *vb = fetch(b, refB);
    SwitchInst *sw = b.CreateSwitch(caseId, stepNext, device_case::kCount);
    b.SetInsertPoint(store);
    PHINode *result = b.CreatePHI(t_, device_case::kCount, "result");
    b.CreateStore(result, registerAt(b, dst));
    b.CreateBr(stepNext);
    if (llvm::Error e = cases(sw, store, result, va, vb, dst))
      return e;

    b.SetInsertPoint(stepNext);
    Value *sNext = b.CreateAdd(s, b.getInt64(1));
    s->addIncoming(sNext, stepNext);
    b.CreateBr(stepHead);

    // the row's value: stored, or its loss added to the thread's sum
    b.SetInsertPoint(rowDone);
    Value *value = fetch(b, output);
    Value *accNext = nullptr;
    if (!k.loss) {
      b.CreateStore(value, b.CreateInBoundsGEP(t_, f->getArg(10), b.CreateAdd(b.CreateMul(formula, rows), r)));
    } else {
      std::vector<Value *> slot = lossConstants;
      Value *vars[3] = {nullptr, value, loadGlobal(b, t_, f->getArg(11), r)};
      if (llvm::Error e = lowering_.evaluate(b, *k.loss, slot, vars, t_))
        return e;
      Value *term = slot[k.loss->outputs.at(0)];
      if (t_->isFloatTy())
        term = b.CreateFPExt(term, f64);
      // weights: null for none (the same for every thread, so no divergence)
      Value *weights = f->getArg(12);
      BasicBlock *from = b.GetInsertBlock(), *weighted = BasicBlock::Create(ctx_, "weighted", f),
                 *join = BasicBlock::Create(ctx_, "weighted.join", f);
      b.CreateCondBr(b.CreateIsNull(weights), join, weighted);
      b.SetInsertPoint(weighted);
      Value *w = loadGlobal(b, t_, weights, r);
      Value *termW = b.CreateFMul(term, t_->isFloatTy() ? b.CreateFPExt(w, f64) : w);
      b.CreateBr(join);
      b.SetInsertPoint(join);
      PHINode *picked = b.CreatePHI(f64, 2, "term");
      picked->addIncoming(term, from);
      picked->addIncoming(termW, weighted);
      accNext = b.CreateFAdd(acc, picked, "sum.next");
    }
    Value *rNext = b.CreateAdd(r, step, "r.next", true, true);
    BasicBlock *latch = b.GetInsertBlock();
    r->addIncoming(rNext, latch);
    if (acc)
      acc->addIncoming(accNext, latch);
    b.CreateCondBr(b.CreateICmpSLT(rNext, rows), rowLoop, exit);

    b.SetInsertPoint(exit);
    if (k.loss) {
      // Every lane reaches the shuffles, with rows or without.
      PHINode *mine = b.CreatePHI(f64, 2, "mine");
      mine->addIncoming(ConstantFP::get(f64, 0.0), entry);
      mine->addIncoming(accNext, latch);
      Value *warps = b.CreateLShr(step, b.getInt64(5));
      Value *at = b.CreateAdd(b.CreateMul(formula, warps), b.CreateLShr(start, b.getInt64(5)));
      storeWarpSum(b, f, mine, f->getArg(14), at);
    }
    b.CreateRetVoid();
    return llvm::Error::success();
  }

private:
  Value *registerAt(IRBuilder<> &b, Value *index) {
    return b.CreateInBoundsGEP(ArrayType::get(t_, kDeviceRegisters), registers_, {b.getInt64(0), index});
  }

  /// An operand (DeviceCode.h's references): a register, the row's
  /// variable, or a scalar in double. Branches, not selects: a reference's
  /// index is only in bounds for its own kind (the branch is the same for
  /// every thread of the warp).
  Value *fetch(IRBuilder<> &b, Value *ref) {
    Type *i64 = b.getInt64Ty();
    Value *kind = b.CreateLShr(ref, 30), *at = b.CreateZExt(b.CreateAnd(ref, device_ref::kIndexMask), i64);
    BasicBlock *reg = BasicBlock::Create(ctx_, "ref.register", f_), *var = BasicBlock::Create(ctx_, "ref.variable", f_),
               *scalar = BasicBlock::Create(ctx_, "ref.scalar", f_), *join = BasicBlock::Create(ctx_, "ref", f_);
    SwitchInst *sw = b.CreateSwitch(kind, scalar, 2);
    sw->addCase(b.getInt32(device_ref::kRegister >> 30), reg);
    sw->addCase(b.getInt32(device_ref::kVariable >> 30), var);
    b.SetInsertPoint(reg);
    Value *vr = b.CreateLoad(t_, registerAt(b, at));
    b.CreateBr(join);
    b.SetInsertPoint(var);
    Value *vv = loadGlobal(b, t_, row_, b.CreateMul(at, varStride_));
    b.CreateBr(join);
    b.SetInsertPoint(scalar);
    Value *vs = b.CreateLoad(b.getDoubleTy(), b.CreateInBoundsGEP(b.getDoubleTy(), scalars_, at));
    if (t_->isFloatTy())
      vs = b.CreateFPTrunc(vs, t_);
    b.CreateBr(join);
    b.SetInsertPoint(join);
    PHINode *v = b.CreatePHI(t_, 3, "operand");
    v->addIncoming(vr, reg);
    v->addIncoming(vv, var);
    v->addIncoming(vs, scalar);
    return v;
  }

  /// Every case of the switch, each ending in a branch to `store` with its
  /// result.
  llvm::Error cases(SwitchInst *sw, BasicBlock *store, PHINode *result, Value *a, Value *bv, Value *dst) {
    IRBuilder<> b(ctx_);
    if (opt_.fastMath)
      b.setFastMathFlags(FastMathFlags::getFast());
    auto open = [&](uint32_t id, const std::string &name) {
      BasicBlock *bb = BasicBlock::Create(ctx_, name, f_, store);
      sw->addCase(b.getInt32(id), bb);
      b.SetInsertPoint(bb);
    };
    auto close = [&](Value *v) {
      result->addIncoming(v, b.GetInsertBlock());
      b.CreateBr(store);
    };
    auto truth = [&](Value *v) { return b.CreateFCmpUNE(v, ConstantFP::get(t_, 0.0)); };
    // A tape's value: numbers from the tape, the operands as its variables.
    auto tape = [&](const Program &p, Value *x, Value *y) -> llvm::Expected<Value *> {
      std::vector<Value *> slot;
      lowering_.constants(b, p, nullptr, t_, slot);
      Value *vars[3] = {x, x, y};
      if (llvm::Error e = lowering_.evaluate(b, p, slot, vars, t_))
        return std::move(e);
      return slot[p.outputs[0]];
    };
    for (int o = 0; o < kNumOps; ++o) {
      Op op = Op(o);
      if (!isDeviceOp(op))
        continue;
      const OpInfo &info = opInfo(op);
      open(uint32_t(o), std::string(info.name));
      // Logic takes truth values; comparisons and logic give 1 or 0.
      bool logic = info.syntax == OpSyntax::Logic;
      auto v = tape(opKernelTape(op, OpOperands::Arrays), logic ? truth(a) : a, logic ? truth(bv) : bv);
      if (!v)
        return v.takeError();
      Value *out = *v;
      if (out->getType()->isIntegerTy(1))
        out = b.CreateSelect(out, ConstantFP::get(t_, 1.0), ConstantFP::get(t_, 0.0));
      close(out);
    }
    for (int k = -kMaxKernelPower; k <= kMaxKernelPower; ++k) {
      if (k == 0) // folded by the front end, as on the CPU
        continue;
      open(device_case::kPowerBase + uint32_t(k + kMaxKernelPower), "pow" + std::to_string(k));
      auto v = tape(opKernelTape(Op::Pow, OpOperands::Power, k), a, nullptr);
      if (!v)
        return v.takeError();
      close(*v);
    }
    open(device_case::kCopy, "copy");
    close(a);
    open(device_case::kSelect, "select");
    close(b.CreateSelect(truth(a), bv, b.CreateLoad(t_, registerAt(b, dst))));
    open(device_case::kCopySign, "copysign");
    close(b.CreateBinaryIntrinsic(Intrinsic::copysign, a, bv));
    return llvm::Error::success();
  }

  Type *t_ = nullptr;
  Function *f_ = nullptr;
  Value *registers_ = nullptr, *scalars_ = nullptr, *row_ = nullptr, *varStride_ = nullptr;
};

} // namespace

llvm::Error emitPopulationKernel(Module &module, const GpuPopulationKernel &kernel, const EmitOptions &options) {
  return PopulationKernelBuilder(module, options).build(kernel);
}

} // namespace hsnn::detail
