//===- lib/CodeGen/IREmitter.cpp - Programs to LLVM IR --------------------===//
//
// Each kernel is a counted loop over vectors of elements whose body is the
// Program's instructions, in the same order and with the same IEEE
// operations as the interpreter (no fast-math flags, no contraction unless
// asked), applied lane by lane; math calls go to libmvec's vector functions.
//===----------------------------------------------------------------------===//
#include "IREmitter.h"
#include "Lowering.h"

#include <llvm/Analysis/VectorUtils.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>

#include <fmt/format.h>

namespace hsnn::detail {

namespace {

using namespace llvm;

class KernelBuilder {
public:
  KernelBuilder(Module &m, const EmitOptions &o) : m_(m), ctx_(m.getContext()), opt_(o), lowering_(m, o) {}

  llvm::Error build(const KernelRequest &r) {
    Type *et = r.dtype == DType::F32 ? Type::getFloatTy(ctx_) : Type::getDoubleTy(ctx_);
    Type *ptr = PointerType::getUnqual(ctx_);
    Type *i64 = Type::getInt64Ty(ctx_);
    bool loss = isLoss(r.kind);
    bool strided = r.strided && !loss;
    const bool multi = !r.units.empty();
    if (multi && (loss || kindInfo(r.kind).constants))
      return make_error<StringError>("several tapes in one kernel are for elementwise activation kinds",
                                     inconvertibleErrorCode());
    // After n: the stride (strided), then the unit (multi).
    std::vector<Type *> argTypes = {ptr, ptr, ptr, ptr, ptr, i64};
    if (strided)
      argTypes.push_back(i64);
    if (multi)
      argTypes.push_back(i64);
    // A loss's constant gradients are doubles, and so is their scale: a
    // mean's 1/n rounded to f32 would cost its digits.
    Type *scaleTy = r.kind == KernelKind::LossConstantGradient ? Type::getDoubleTy(ctx_) : et;
    Type *d = Type::getDoubleTy(ctx_);
    Type *sumTy = opt_.sumParts && r.kind != KernelKind::LossConstantGradient ? StructType::get(ctx_, {d, d}) : d;
    FunctionType *fty = loss ? FunctionType::get(sumTy, {ptr, ptr, ptr, ptr, i64, scaleTy}, false)
                             : FunctionType::get(Type::getVoidTy(ctx_), argTypes, false);
    if (m_.getFunction(r.symbol))
      return make_error<StringError>("duplicate kernel symbol " + r.symbol, inconvertibleErrorCode());
    Function *fn = Function::Create(fty, Function::ExternalLinkage, r.symbol, m_);
    setCpuKernelAttributes(*fn, opt_);
    unsigned paramsArg = loss ? 3 : 4, nArg = loss ? 4 : 5;
    fn->addParamAttr(paramsArg, Attribute::ReadOnly);

    unsigned elemBits = unsigned(et->getPrimitiveSizeInBits().getFixedValue());
    // Elementwise kinds run two registers' worth of lanes a step: the math
    // library's chains of dependent FMAs are long, and two independent ones
    // interleaved keep the FMA units busier (less time an element over the
    // math functions and gelu, both dtypes, AVX-512); four registers were a
    // little faster again but made the W1 layer's cold compile far longer.
    // f32 loss sums too: a step's terms are added in groups of one register
    // of doubles before the compensated sum (Sum), which then runs over one
    // register: its adds, on the two add ports, were what the loop waited
    // on (llvm-mca). With the groups mse's, huber's and bce's means took
    // much less time than with one register of terms a step and a sum as
    // wide (AVX2 and AVX-512; the DEVLOG has the runs). f64 sums keep one
    // register and no groups: a double add of two doubles rounds, which
    // the compensation would not see (4 ulp off in a sum of condition 6e4,
    // where it is within 1), and exact group adds cost what they save.
    // Where the terms call the math library (bce's log and log1p,
    // bce_with_logits' softplus), f64
    // sums take two registers a step all the same, the sum as wide (every
    // lane compensated, nothing grouped): bce's mean and a mean of log
    // measured faster so, but mse's slower on AVX-512, so
    // plain arithmetic keeps one. The constants' gradients keep one too.
    lowering_.setOutlineMath(outlinesMath(r));
    const bool groupedSum = kindInfo(r.kind).summing && et->isFloatTy();
    const unsigned lanes = elementwiseLanes(r, opt_.vectorBits);
    auto *vt = FixedVectorType::get(et, lanes);
    Align align(elemBits / 8);
    auto block = [&](const char *name) { return BasicBlock::Create(ctx_, name, fn); };
    BasicBlock *entry = block("entry"), *loop = block("loop"), *loadFull = block("load.full"),
               *loadPart = block("load.part"), *body = block("body"), *storeFull = block("store.full"),
               *storePart = block("store.part"), *latch = block("latch"), *exit = block("exit");
    IRBuilder<> b(entry);
    if (opt_.fastMath)
      b.setFastMathFlags(FastMathFlags::getFast());
    Value *n = fn->getArg(nArg);
    const Program &p = *r.program;
    const bool switched = r.units.size() > 1;

    // Constants and numbers once, before the loop (inside each case when
    // the tape is picked per call).
    std::vector<Value *> slot;
    if (!switched)
      lowering_.constants(b, p, fn->getArg(paramsArg), vt, slot);
    SmallVector<Constant *, 16> iotaLanes;
    for (unsigned l = 0; l < lanes; ++l)
      iotaLanes.push_back(b.getInt64(l));
    Constant *iota = ConstantVector::get(iotaLanes);
    Value *allLanes = ConstantInt::getTrue(VectorType::get(b.getInt1Ty(), vt->getElementCount()));
    b.CreateCondBr(b.CreateICmpSLT(b.getInt64(0), n), loop, exit);

    // Every element goes through the same vector code: whole vectors while
    // they last, then one masked vector for the rest. So an element's result
    // does not depend on its position, the batch size, the layout or the
    // entry point, and JIT and ahead-of-time objects agree bit for bit.
    b.SetInsertPoint(loop);
    PHINode *idx = b.CreatePHI(i64, 2, "i");
    idx->addIncoming(b.getInt64(0), entry);
    // Running sums: the loss (summing kinds), or one per constant (the
    // constant-gradient kinds, always compensated: their terms change sign).
    const bool reduces = kindInfo(r.kind).constants;
    size_t numSums = reduces ? p.outputs.size() : kindInfo(r.kind).summing ? 1 : 0;
    std::vector<Sum> sums;
    for (size_t j = 0; j < numSums; ++j)
      sums.emplace_back(b, groupedSum ? std::max(1u, opt_.vectorBits / 64) : lanes, true);
    for (Sum &sum : sums)
      sum.start(entry);
    Value *rem = b.CreateSub(n, idx, "rem");
    Value *full = b.CreateICmpSGE(rem, b.getInt64(lanes), "full");
    b.CreateCondBr(full, loadFull, loadPart);

    // Element addresses: contiguous from i, or i*stride apart (batch-major columns).
    auto addresses = [&](IRBuilder<> &bb, unsigned arg) {
      Value *at = bb.CreateAdd(bb.CreateVectorSplat(lanes, idx), iota);
      if (strided)
        at = bb.CreateMul(at, bb.CreateVectorSplat(lanes, fn->getArg(6)));
      return bb.CreateGEP(et, fn->getArg(arg), at);
    };
    unsigned inputs = kindInfo(r.kind).inputs;
    Value *loaded[2][2] = {};
    Value *partMask = nullptr;
    for (int part = 0; part < 2; ++part) {
      b.SetInsertPoint(part ? loadPart : loadFull);
      Value *mask = allLanes;
      if (part)
        mask = partMask = b.CreateICmpSLT(iota, b.CreateVectorSplat(lanes, rem), "mask");
      for (unsigned a = 0; a < inputs; ++a) {
        if (strided)
          loaded[part][a] = b.CreateMaskedGather(vt, addresses(b, a), align, mask, Constant::getNullValue(vt));
        else if (part)
          loaded[part][a] = b.CreateMaskedLoad(vt, b.CreateInBoundsGEP(et, fn->getArg(a), idx), align, mask,
                                               Constant::getNullValue(vt));
        else { // prefetch ahead of each whole vector: measured faster on W1's nodes-major forward
          Value *at = b.CreateInBoundsGEP(et, fn->getArg(a), idx);
          prefetchAhead(b, at);
          loaded[part][a] = b.CreateAlignedLoad(vt, at, align);
        }
      }
      b.CreateBr(body);
    }

    b.SetInsertPoint(body);
    ElementIO io{fn, idx, vt, 5};
    for (unsigned a = 0; a < inputs; ++a) {
      PHINode *v = b.CreatePHI(vt, 2);
      v->addIncoming(loaded[0][a], loadFull);
      v->addIncoming(loaded[1][a], loadPart);
      io.preloaded[a] = v;
    }
    PHINode *mask = b.CreatePHI(allLanes->getType(), 2, "lanes");
    mask->addIncoming(allLanes, loadFull);
    mask->addIncoming(partMask, loadPart);
    std::vector<std::pair<Value *, unsigned>> outputs;
    std::vector<Value *> terms(numSums); // added to the sums where the stores are
    io.store = [&](Value *v, unsigned arg) { outputs.emplace_back(v, arg); };
    if (reduces) {
      // sum_j += err * d/dc_j (layers) or d/dc_j (losses), lane by lane.
      Value *vars[3] = {nullptr, nullptr, nullptr};
      if (loss) {
        vars[size_t(Variable::YPred)] = io.preloaded[0];
        vars[size_t(Variable::YTrue)] = io.preloaded[1];
      } else {
        vars[size_t(Variable::Num)] = io.preloaded[0];
      }
      if (llvm::Error e = lowering_.evaluate(b, p, slot, vars, vt))
        return e;
      // In double, as the interpreter does: err * d/dc rounded once, in double.
      auto *dvt = FixedVectorType::get(b.getDoubleTy(), lanes);
      auto wide = [&](Value *v) { return et->isFloatTy() ? b.CreateFPExt(v, dvt) : v; };
      for (size_t j = 0; j < numSums; ++j) {
        Value *term = wide(slot[p.outputs[j]]);
        terms[j] = loss ? term : b.CreateFMul(wide(io.preloaded[1]), term);
      }
    } else if (switched) {
      // One case per tape; the outputs meet in PHIs (the same kind: the
      // same outputs in the same order).
      BasicBlock *merge = block("merge");
      std::vector<BasicBlock *> cases;
      for (size_t u = 0; u < r.units.size(); ++u)
        cases.push_back(BasicBlock::Create(ctx_, fmt::format("unit{}", u), fn, merge));
      SwitchInst *sw = b.CreateSwitch(fn->getArg(strided ? 7 : 6), cases[0], unsigned(r.units.size()));
      for (size_t u = 1; u < r.units.size(); ++u)
        sw->addCase(b.getInt64(u), cases[u]);
      std::vector<std::vector<std::pair<Value *, unsigned>>> caseOutputs(r.units.size());
      std::vector<BasicBlock *> ends;
      for (size_t u = 0; u < r.units.size(); ++u) {
        b.SetInsertPoint(cases[u]);
        std::vector<Value *> unitSlot;
        lowering_.constants(b, *r.units[u], fn->getArg(paramsArg), vt, unitSlot);
        io.store = [&](Value *v, unsigned arg) { caseOutputs[u].emplace_back(v, arg); };
        llvm::Expected<Value *> done = lowering_.element(b, r.kind, *r.units[u], unitSlot, io, nullptr);
        if (!done)
          return done.takeError();
        ends.push_back(b.GetInsertBlock());
        b.CreateBr(merge);
      }
      b.SetInsertPoint(merge);
      for (size_t k = 0; k < caseOutputs[0].size(); ++k) {
        PHINode *phi = b.CreatePHI(vt, unsigned(r.units.size()));
        for (size_t u = 0; u < r.units.size(); ++u)
          phi->addIncoming(caseOutputs[u][k].first, ends[u]);
        outputs.emplace_back(phi, caseOutputs[0][k].second);
      }
    } else {
      io.accumulate = [&](Value *value) { return terms.front() = value; };
      llvm::Expected<Value *> accNext = lowering_.element(b, r.kind, p, slot, io, nullptr);
      if (!accNext)
        return accNext.takeError();
    }
    b.CreateCondBr(full, storeFull, storePart);
    for (int part = 0; part < 2; ++part) {
      b.SetInsertPoint(part ? storePart : storeFull);
      // Whole vectors add their terms unmasked: the select (and, in AVX2,
      // widening the mask to each register of doubles) was as many
      // instructions as mse's own (f32 mean, 16 terms a step).
      for (size_t j = 0; j < numSums; ++j)
        sums[j].add(terms[j], part ? mask : nullptr);
      for (auto [v, arg] : outputs) {
        if (strided)
          b.CreateMaskedScatter(v, addresses(b, arg), align, part ? mask : allLanes);
        else if (part)
          b.CreateMaskedStore(v, b.CreateInBoundsGEP(et, fn->getArg(arg), idx), align, mask);
        else
          b.CreateAlignedStore(v, b.CreateInBoundsGEP(et, fn->getArg(arg), idx), align);
      }
      b.CreateBr(latch);
    }

    b.SetInsertPoint(latch);
    Value *next = b.CreateAdd(idx, b.getInt64(lanes), "i.next", true, true);
    idx->addIncoming(next, latch);
    for (Sum &sum : sums)
      sum.loop(latch);
    markNotVectorizable(b.CreateCondBr(b.CreateICmpSLT(next, n), loop, exit));

    b.SetInsertPoint(exit);
    for (Sum &sum : sums)
      sum.merge(entry, latch);
    Value *zero = ConstantFP::get(b.getDoubleTy(), 0.0);
    if (reduces) {
      // out[j] = the sum (times scale for a loss), as doubles.
      Value *scale = !loss ? nullptr : fn->getArg(5); // a double (above)
      for (size_t j = 0; j < numSums; ++j) {
        Value *v = sums[j].total();
        b.CreateStore(scale ? b.CreateFMul(v, scale) : v, b.CreateConstInBoundsGEP1_64(b.getDoubleTy(), fn->getArg(2), j));
      }
    }
    if (loss && sumTy != d) {
      auto [sum, residual] = !reduces && !sums.empty() ? sums.front().parts() : std::pair<Value *, Value *>{zero, zero};
      Value *pair = b.CreateInsertValue(PoisonValue::get(sumTy), sum, 0);
      b.CreateRet(b.CreateInsertValue(pair, residual, 1));
    } else if (loss)
      b.CreateRet(!reduces && !sums.empty() ? sums.front().total() : zero);
    else
      b.CreateRetVoid();
    return llvm::Error::success();
  }

private:
  // A running sum, lane by lane in double: a loss, or a constant's gradient.
  // Every sum carries a Neumaier compensation per lane (f32 losses' too: an
  // AOT _sum of 10^7 f32 terms drifted 4.5e3 ulp of the double), so a
  // sum of millions of elements stays within a few ulp of the exact sum; the
  // lanes are added in lane order at the end. A step of more f32 terms
  // than lanes adds them in groups of the sum's width first, plainly: the
  // sum of two floats in double is exact unless their exponents are 29
  // apart, and rounds by at most 2^-53 of the group's magnitudes anyway, so
  // the groups cost at most 2^-53 of the sum of |terms| (under an ulp of the
  // sum where the terms have one sign; 2^-29 of an f32 ulp for sums of
  // condition up to 2^24). Every step's order is fixed by n alone: the same
  // bits each run.
  class Sum {
  public:
    Sum(IRBuilder<> &b, unsigned lanes, bool compensated)
        : b_(b), compensated_(compensated), vt_(FixedVectorType::get(b.getDoubleTy(), lanes)) {}

    void start(BasicBlock *entry) {
      s_ = b_.CreatePHI(vt_, 2, "sum");
      s_->addIncoming(Constant::getNullValue(vt_), entry);
      if (compensated_) {
        c_ = b_.CreatePHI(vt_, 2, "comp");
        c_->addIncoming(Constant::getNullValue(vt_), entry);
      }
    }

    /// Adds a step's terms (the lanes in mask; all without one). Each
    /// block that adds ends in the latch, which takes the new sum from the
    /// block it came from.
    void add(Value *loss, Value *mask) {
      auto *terms = cast<FixedVectorType>(loss->getType());
      auto *wide = FixedVectorType::get(b_.getDoubleTy(), terms->getNumElements());
      Value *x = terms->getElementType()->isFloatTy() ? b_.CreateFPExt(loss, wide) : loss;
      if (mask)
        x = b_.CreateSelect(mask, x, Constant::getNullValue(wide));
      if (unsigned width = vt_->getNumElements(); width < wide->getNumElements()) {
        Value *group = x;
        x = b_.CreateShuffleVector(group, createSequentialMask(0, width, 0), "terms");
        for (unsigned from = width; from < wide->getNumElements(); from += width)
          x = b_.CreateFAdd(x, b_.CreateShuffleVector(group, createSequentialMask(from, width, 0)), "terms");
      }
      Value *s = b_.CreateFAdd(s_, x, "sum.next");
      Value *c = compensated_ ? b_.CreateFAdd(c_, neumaierError(s_, x, s), "comp.next") : nullptr;
      added_.push_back({b_.GetInsertBlock(), s, c});
    }

    void loop(BasicBlock *latch) {
      IRBuilder<> front(latch, latch->begin());
      auto merged = [&](Value *Added::*v) {
        if (added_.size() == 1)
          return added_.front().*v;
        PHINode *phi = front.CreatePHI(vt_, unsigned(added_.size()));
        for (const Added &a : added_)
          phi->addIncoming(a.*v, a.block);
        return static_cast<Value *>(phi);
      };
      sNext_ = merged(&Added::s);
      if (c_)
        cNext_ = merged(&Added::c);
      s_->addIncoming(sNext_, latch);
      if (c_)
        c_->addIncoming(cNext_, latch);
    }

    // The exit block's PHIs (all sums' PHIs before any other instruction).
    void merge(BasicBlock *entry, BasicBlock *latch) {
      auto merged = [&](Value *v) {
        PHINode *phi = b_.CreatePHI(vt_, 2);
        phi->addIncoming(Constant::getNullValue(vt_), entry);
        phi->addIncoming(v, latch);
        return phi;
      };
      sExit_ = merged(sNext_);
      cExit_ = c_ ? merged(cNext_) : nullptr;
    }

    // The lanes added in lane order (compensated too, when this sum is):
    // the running sum and its residual, not yet added.
    std::pair<Value *, Value *> parts() {
      Value *zero = ConstantFP::get(b_.getDoubleTy(), 0.0);
      Value *s = sExit_, *c = cExit_;
      Value *total = zero, *comp = zero;
      for (unsigned l = 0; l < vt_->getNumElements(); ++l) {
        Value *x = b_.CreateExtractElement(s, l), *t = b_.CreateFAdd(total, x);
        if (c)
          comp = b_.CreateFAdd(b_.CreateFAdd(comp, neumaierError(total, x, t)), b_.CreateExtractElement(c, l));
        total = t;
      }
      return {total, comp};
    }

    Value *total() {
      auto [total, comp] = parts();
      if (!cExit_)
        return total;
      // An infinite or NaN sum is already right; its compensation is NaN.
      Value *finite = b_.CreateFCmpOLT(b_.CreateUnaryIntrinsic(Intrinsic::fabs, total),
                                       ConstantFP::getInfinity(b_.getDoubleTy()));
      return b_.CreateSelect(finite, b_.CreateFAdd(total, comp), total);
    }

  private:
    // The rounding error of s + x = t, exactly (Neumaier's branch-free form).
    Value *neumaierError(Value *s, Value *x, Value *t) {
      Value *bigS = b_.CreateFCmpOGE(b_.CreateUnaryIntrinsic(Intrinsic::fabs, s),
                                     b_.CreateUnaryIntrinsic(Intrinsic::fabs, x));
      Value *fromS = b_.CreateFAdd(b_.CreateFSub(s, t), x), *fromX = b_.CreateFAdd(b_.CreateFSub(x, t), s);
      return b_.CreateSelect(bigS, fromS, fromX);
    }

    IRBuilder<> &b_;
    bool compensated_;
    FixedVectorType *vt_;
    PHINode *s_ = nullptr, *c_ = nullptr;
    Value *sNext_ = nullptr, *cNext_ = nullptr, *sExit_ = nullptr, *cExit_ = nullptr;
    struct Added {
      BasicBlock *block;
      Value *s, *c;
    };
    SmallVector<Added, 2> added_;
  };

  Module &m_;
  LLVMContext &ctx_;
  const EmitOptions &opt_;
  ElementLowering lowering_;
};

} // namespace

namespace {

GlobalVariable *constantArray(Module &m, const std::string &name, Constant *init) {
  auto *g = new GlobalVariable(m, init->getType(), /*isConstant=*/true, GlobalValue::ExternalLinkage, init, name);
  g->setAlignment(Align(8));
  return g;
}

} // namespace

llvm::Error emitDefaultParams(llvm::Module &m, const std::string &name, const std::vector<double> &params) {
  LLVMContext &ctx = m.getContext();
  std::vector<double> values = params.empty() ? std::vector<double>{0.0} : params; // C has no empty arrays
  constantArray(m, name + "_default_params", ConstantDataArray::get(ctx, values));
  return llvm::Error::success();
}

namespace {

// The node -> kernel table of one kind, resolved at link time.
llvm::Expected<GlobalVariable *> kernelTable(Module &m, const std::vector<std::string> &symbols, const std::string &name) {
  std::vector<Constant *> fns;
  for (const std::string &sym : symbols) {
    Function *f = m.getFunction(sym);
    if (!f)
      return make_error<StringError>("missing kernel " + sym, inconvertibleErrorCode());
    fns.push_back(f);
  }
  auto *tableTy = ArrayType::get(PointerType::getUnqual(m.getContext()), symbols.size());
  return new GlobalVariable(m, tableTy, true, GlobalValue::InternalLinkage, ConstantArray::get(tableTy, fns), name);
}

// The body of an entry point: for n in [begin, end), calls table[n] with the
// kernel ABI (z, err, out0, out1, params + offsets[n], batch [, nodes]);
// `arrays(base, offset)` gives the four array arguments for node n, whose
// elements start at `base` (n*batch nodes-major, n batch-major) and whose
// constants at `offset`.
void emitNodeDispatch(Function *fn, GlobalVariable *table, GlobalVariable *offsetTable, GlobalVariable *caseTable,
                      const LayerEntryPoints &layer, Value *batch, Value *params, Value *begin, Value *end,
                      const std::function<std::array<Value *, 4>(IRBuilder<> &, Value *base, Value *offset)> &arrays) {
  LLVMContext &ctx = fn->getContext();
  Type *ptr = PointerType::getUnqual(ctx), *i64 = Type::getInt64Ty(ctx);
  bool strided = layer.layout == Layout::BatchMajor;
  BasicBlock *entry = BasicBlock::Create(ctx, "entry", fn), *loop = BasicBlock::Create(ctx, "loop", fn),
             *done = BasicBlock::Create(ctx, "done", fn);
  IRBuilder<> b(entry);
  b.CreateCondBr(b.CreateICmpSLT(begin, end), loop, done);
  b.SetInsertPoint(loop);
  PHINode *n = b.CreatePHI(i64, 2, "node");
  n->addIncoming(begin, entry);
  Value *kernel = b.CreateLoad(ptr, b.CreateInBoundsGEP(table->getValueType(), table, {b.getInt64(0), n}));
  Value *off = b.CreateLoad(i64, b.CreateInBoundsGEP(i64, offsetTable, n));
  std::array<Value *, 4> a = arrays(b, strided ? n : b.CreateMul(n, batch), off);
  std::vector<Value *> args = {a[0], a[1], a[2], a[3], b.CreateGEP(b.getDoubleTy(), params, off), batch};
  std::vector<Type *> types = {ptr, ptr, ptr, ptr, ptr, i64};
  if (strided) {
    args.push_back(b.getInt64(layer.offsets.size()));
    types.push_back(i64);
  }
  if (caseTable) { // the node's formula in a kernel of several
    args.push_back(b.CreateLoad(i64, b.CreateInBoundsGEP(i64, caseTable, n)));
    types.push_back(i64);
  }
  b.CreateCall(FunctionType::get(Type::getVoidTy(ctx), types, false), kernel, args);
  Value *next = b.CreateAdd(n, b.getInt64(1));
  n->addIncoming(next, loop);
  b.CreateCondBr(b.CreateICmpEQ(next, end), done, loop);
  b.SetInsertPoint(done);
  b.CreateRetVoid();
}

// NAME_constant_gradient(z, err, grads, batch, params): node n's kernel sums
// err * d/dc over its batch into grads[offsets[n] ...] (one call per node).
llvm::Error emitConstantGradientEntry(Module &m, const LayerEntryPoints &layer, GlobalVariable *offsetTable) {
  LLVMContext &ctx = m.getContext();
  Type *ptr = PointerType::getUnqual(ctx), *i64 = Type::getInt64Ty(ctx);
  Type *t = layer.dtype == DType::F32 ? Type::getFloatTy(ctx) : Type::getDoubleTy(ctx);
  auto table = kernelTable(m, layer.constantKernel, layer.name + "_constant_gradient_kernels");
  if (!table)
    return table.takeError();
  Function *fn = Function::Create(FunctionType::get(Type::getVoidTy(ctx), {ptr, ptr, ptr, i64, ptr}, false),
                                  Function::ExternalLinkage, layer.name + "_constant_gradient", m);
  fn->setDoesNotThrow();
  Value *null = ConstantPointerNull::get(cast<PointerType>(ptr));
  emitNodeDispatch(fn, *table, offsetTable, nullptr, layer, fn->getArg(3), fn->getArg(4), ConstantInt::get(i64, 0),
                   ConstantInt::get(i64, layer.offsets.size()), [&](IRBuilder<> &b, Value *base, Value *off) {
                     return std::array<Value *, 4>{b.CreateGEP(t, fn->getArg(0), base), b.CreateGEP(t, fn->getArg(1), base),
                                                   b.CreateGEP(b.getDoubleTy(), fn->getArg(2), off), null};
                   });
  return llvm::Error::success();
}

// NAME_KIND_range of a layer with row kernels (activation kind k): fills
// the constants table from params, runs the whole periods of each segment
// inside [begin, end) through its row kernel over every row and the nodes
// left at the ends through `perNode`, frees the table. The table is
// malloc'd (a wide layer's would not fit a small thread stack); when
// malloc fails, everything goes through `perNode`.
llvm::Error emitRowRange(Module &m, const LayerEntryPoints &layer, int k, Function *range, Function *perNode) {
  LLVMContext &ctx = m.getContext();
  Type *ptr = PointerType::getUnqual(ctx), *i64 = Type::getInt64Ty(ctx);
  Type *t = layer.dtype == DType::F32 ? Type::getFloatTy(ctx) : Type::getDoubleTy(ctx);
  const uint64_t elemBytes = t->getPrimitiveSizeInBits() / 8;
  const std::vector<uint64_t> &source = layer.rowTableSource[k];
  const unsigned arrays = k == 0 ? 2 : 3;
  Value *batch = range->getArg(arrays), *params = range->getArg(arrays + 1), *begin = range->getArg(arrays + 2),
        *end = range->getArg(arrays + 3);
  BasicBlock *entry = BasicBlock::Create(ctx, "entry", range), *fill = BasicBlock::Create(ctx, "table.fill", range),
             *run = BasicBlock::Create(ctx, "rows", range), *noTable = BasicBlock::Create(ctx, "no.table", range);
  IRBuilder<> b(entry);
  auto callPerNode = [&](Value *from, Value *to) {
    std::vector<Value *> args;
    for (unsigned i = 0; i < arrays + 2; ++i)
      args.push_back(range->getArg(i));
    args.push_back(from);
    args.push_back(to);
    b.CreateCall(perNode, args);
  };
  FunctionCallee mallocFn = m.getOrInsertFunction("malloc", FunctionType::get(ptr, {i64}, false));
  FunctionCallee freeFn = m.getOrInsertFunction("free", FunctionType::get(Type::getVoidTy(ctx), {ptr}, false));
  Value *table = b.CreateCall(mallocFn, {b.getInt64((source.size() + kRowTablePadding) * elemBytes)}, "table");
  b.CreateCondBr(b.CreateIsNull(table), noTable, fill);

  b.SetInsertPoint(noTable);
  callPerNode(begin, end);
  b.CreateRetVoid();

  // table[i] = params[source[i]] as T; the padding zero.
  b.SetInsertPoint(fill);
  b.CreateMemSet(b.CreateConstInBoundsGEP1_64(t, table, source.size()), b.getInt8(0), kRowTablePadding * elemBytes,
                 Align(4));
  if (!source.empty()) {
    auto *src = new GlobalVariable(m, ArrayType::get(i64, source.size()), true, GlobalValue::InternalLinkage,
                                   ConstantDataArray::get(ctx, source), fmt::format("{}_row_table_{}", layer.name, k));
    BasicBlock *loop = BasicBlock::Create(ctx, "table.loop", range, run);
    b.CreateBr(loop);
    b.SetInsertPoint(loop);
    PHINode *i = b.CreatePHI(i64, 2, "i");
    i->addIncoming(b.getInt64(0), fill);
    Value *from = b.CreateLoad(i64, b.CreateInBoundsGEP(src->getValueType(), src, {b.getInt64(0), i}));
    Value *v = b.CreateLoad(b.getDoubleTy(), b.CreateInBoundsGEP(b.getDoubleTy(), params, from));
    b.CreateStore(t->isFloatTy() ? b.CreateFPTrunc(v, t) : v, b.CreateInBoundsGEP(t, table, i));
    Value *next = b.CreateAdd(i, b.getInt64(1));
    i->addIncoming(next, loop);
    b.CreateCondBr(b.CreateICmpULT(next, b.getInt64(source.size())), loop, run);
  } else {
    b.CreateBr(run);
  }

  // Segment [F, F + W) of period P meets [begin, end) in [lo, hi); its
  // whole periods there are q0 .. q1 (none when q1 <= q0), and the nodes
  // of [lo, hi) outside them go node by node (empty ranges do nothing).
  b.SetInsertPoint(run);
  Value *null = ConstantPointerNull::get(cast<PointerType>(ptr));
  auto *kernelTy = FunctionType::get(Type::getVoidTy(ctx), {ptr, ptr, ptr, ptr, ptr, i64, i64, i64, i64}, false);
  for (const LayerEntryPoints::RowSegmentEntry &seg : layer.rowSegments) {
    Function *kernel = m.getFunction(seg.kernel[k]);
    if (!kernel)
      return make_error<StringError>("missing row kernel " + seg.kernel[k], inconvertibleErrorCode());
    const uint64_t P = seg.slots, F = seg.first, W = seg.periods * P;
    Value *lo = b.CreateBinaryIntrinsic(Intrinsic::smax, begin, b.getInt64(F));
    Value *hi = b.CreateBinaryIntrinsic(Intrinsic::smax, b.CreateBinaryIntrinsic(Intrinsic::smin, end, b.getInt64(F + W)), lo);
    Value *q0 = b.CreateUDiv(b.CreateAdd(b.CreateSub(lo, b.getInt64(F)), b.getInt64(P - 1)), b.getInt64(P));
    Value *q1 = b.CreateBinaryIntrinsic(Intrinsic::umax, b.CreateUDiv(b.CreateSub(hi, b.getInt64(F)), b.getInt64(P)), q0);
    Value *wholeFrom = b.CreateAdd(b.getInt64(F), b.CreateMul(q0, b.getInt64(P)));
    Value *wholeTo = b.CreateAdd(b.getInt64(F), b.CreateMul(q1, b.getInt64(P)));
    auto arr = [&](unsigned a) { return b.CreateGEP(t, range->getArg(a), wholeFrom); };
    Value *z = arr(0), *err = k == 1 ? arr(1) : null, *o0 = k == 1 ? arr(2) : arr(1), *o1 = k == 2 ? arr(2) : null;
    b.CreateCall(kernelTy, kernel,
                 {z, err, o0, o1, b.CreateGEP(t, table, b.CreateAdd(b.getInt64(seg.tableAt[k]), q0)), batch,
                  b.getInt64(layer.offsets.size()), b.CreateSub(q1, q0), b.getInt64(seg.periods)});
    callPerNode(lo, b.CreateBinaryIntrinsic(Intrinsic::smin, hi, wholeFrom));
    callPerNode(b.CreateBinaryIntrinsic(Intrinsic::smax, lo, wholeTo), hi);
  }
  b.CreateCall(freeFn, {table});
  b.CreateRetVoid();
  return llvm::Error::success();
}

} // namespace

llvm::Error emitLayerEntryPoints(llvm::Module &m, const LayerEntryPoints &layer) {
  LLVMContext &ctx = m.getContext();
  Type *ptr = PointerType::getUnqual(ctx), *i64 = Type::getInt64Ty(ctx);
  Type *t = layer.dtype == DType::F32 ? Type::getFloatTy(ctx) : Type::getDoubleTy(ctx);
  size_t nodes = layer.offsets.size();
  if (llvm::Error e = emitDefaultParams(m, layer.name, layer.defaultParams))
    return e;
  std::vector<uint64_t> offsets = layer.offsets;
  GlobalVariable *offsetTable = constantArray(m, layer.name + "_param_offsets", ConstantDataArray::get(ctx, offsets));

  static const char *kinds[3] = {"forward", "backward", "fused"};
  for (int k = 0; k < 3; ++k) {
    auto table = kernelTable(m, layer.nodeKernel[k], layer.name + "_" + kinds[k] + "_kernels");
    if (!table)
      return table.takeError();

    // NAME_KIND_range(a0, a1, a2, batch, params, begin, end): forward (z, a),
    // backward (z, err, delta), fused (z, a, dfdz); forward has no a2.
    unsigned arrays = k == 0 ? 2 : 3;
    std::vector<Type *> params(arrays, ptr);
    params.insert(params.end(), {i64, ptr, i64, i64});
    auto *rangeTy = FunctionType::get(Type::getVoidTy(ctx), params, false);
    // With row kernels, the per-node dispatch serves the range's nodes that
    // do not fill a whole period.
    bool rows = !layer.rowSegments.empty();
    std::string rangeName = layer.name + "_" + kinds[k] + "_range";
    Function *perNode = Function::Create(rangeTy, rows ? Function::InternalLinkage : Function::ExternalLinkage,
                                         rows ? layer.name + "_" + kinds[k] + "_per_node" : rangeName, m);
    perNode->setDoesNotThrow();
    Function *range = perNode;
    Value *null = ConstantPointerNull::get(cast<PointerType>(ptr));
    GlobalVariable *caseTable = nullptr;
    if (!layer.nodeCase[k].empty()) {
      std::vector<uint64_t> cases(layer.nodeCase[k].begin(), layer.nodeCase[k].end());
      caseTable = new GlobalVariable(m, ArrayType::get(i64, cases.size()), true, GlobalValue::InternalLinkage,
                                     ConstantDataArray::get(ctx, cases), layer.name + "_" + kinds[k] + "_cases");
    }
    emitNodeDispatch(perNode, *table, offsetTable, caseTable, layer, perNode->getArg(arrays), perNode->getArg(arrays + 1),
                     perNode->getArg(arrays + 2), perNode->getArg(arrays + 3), [&](IRBuilder<> &b, Value *base, Value *) {
                       auto arr = [&](unsigned i) { return b.CreateGEP(t, perNode->getArg(i), base); };
                       Value *z = arr(0), *err = k == 1 ? arr(1) : null, *o0 = k == 1 ? arr(2) : arr(1),
                             *o1 = k == 2 ? arr(2) : null;
                       return std::array<Value *, 4>{z, err, o0, o1};
                     });
    if (rows) {
      range = Function::Create(rangeTy, Function::ExternalLinkage, rangeName, m);
      range->setDoesNotThrow();
      if (llvm::Error e = emitRowRange(m, layer, k, range, perNode))
        return e;
    }

    // NAME_KIND(a0, a1, a2, batch, params): every node.
    std::vector<Type *> wholeParams(arrays, ptr);
    wholeParams.insert(wholeParams.end(), {i64, ptr});
    Function *whole = Function::Create(FunctionType::get(Type::getVoidTy(ctx), wholeParams, false),
                                       Function::ExternalLinkage, layer.name + "_" + kinds[k], m);
    whole->setDoesNotThrow();
    IRBuilder<> wb(BasicBlock::Create(ctx, "entry", whole));
    std::vector<Value *> fwd;
    for (unsigned i = 0; i < arrays + 2; ++i)
      fwd.push_back(whole->getArg(i));
    fwd.push_back(wb.getInt64(0));
    fwd.push_back(wb.getInt64(nodes));
    wb.CreateCall(range, fwd);
    wb.CreateRetVoid();
  }
  if (!layer.constantKernel.empty())
    return emitConstantGradientEntry(m, layer, offsetTable);
  return llvm::Error::success();
}

llvm::Error emitMathFunctions(Module &module, std::span<const MathFunction> functions, const EmitOptions &options) {
  EmitOptions o = options;
  o.externalMath = true; // hidden external definitions, for the kernels' objects to link
  ElementLowering lowering(module, o);
  for (const MathFunction &fn : functions)
    if (llvm::Error e = lowering.defineMathFunction(fn))
      return e;
  return llvm::Error::success();
}

llvm::Error emitKernels(llvm::Module &module, std::span<const KernelRequest> requests, const EmitOptions &options) {
  KernelBuilder kb(module, options);
  for (const KernelRequest &r : requests)
    if (llvm::Error e = r.rowSlots.empty() ? kb.build(r) : emitRowKernel(module, r, options))
      return e;
  return llvm::Error::success();
}

} // namespace hsnn::detail
