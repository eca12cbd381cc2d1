//===- lib/CodeGen/IREmitter.cpp - Programs to LLVM IR --------------------===//
//
// Each kernel is a counted loop over contiguous elements whose body is the
// Program's instructions, in the same order and with the same IEEE
// operations as the interpreter (no fast-math flags, no contraction unless
// asked), so the loop vectorizer can widen it and results match the oracle.
// Math calls carry "vector-function-abi-variant" so that libmvec's vector
// versions are used when the loop is vectorized.
//===----------------------------------------------------------------------===//
#include "IREmitter.h"
#include "Lowering.h"

#include <llvm/IR/IRBuilder.h>
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
    Type *t = r.dtype == DType::F32 ? Type::getFloatTy(ctx_) : Type::getDoubleTy(ctx_);
    Type *ptr = PointerType::getUnqual(ctx_);
    Type *i64 = Type::getInt64Ty(ctx_);
    bool loss = isLoss(r.kind);
    bool strided = r.strided && !loss;
    FunctionType *fty = loss      ? FunctionType::get(Type::getDoubleTy(ctx_), {ptr, ptr, ptr, ptr, i64, t}, false)
                        : strided ? FunctionType::get(Type::getVoidTy(ctx_), {ptr, ptr, ptr, ptr, ptr, i64, i64}, false)
                                  : FunctionType::get(Type::getVoidTy(ctx_), {ptr, ptr, ptr, ptr, ptr, i64}, false);
    if (m_.getFunction(r.symbol))
      return make_error<StringError>("duplicate kernel symbol " + r.symbol, inconvertibleErrorCode());
    Function *fn = Function::Create(fty, Function::ExternalLinkage, r.symbol, m_);
    fn->setDoesNotThrow();
    fn->addFnAttr(Attribute::NoFree);
    fn->addFnAttr(Attribute::NoSync);
    // LLVM's tuning for AVX-512 CPUs prefers 256-bit vectors (for clock
    // throttling in mixed code); these kernels are pure vector math, and
    // 512-bit vectors measured 10-35% faster on bench W1-W4.
    if (opt_.preferVectorWidth)
      fn->addFnAttr("prefer-vector-width", std::to_string(opt_.preferVectorWidth));
    // noalias: arrays may be the same array (in-place, element i read before
    // it is written) but never partially overlap, so the vectorizer needs no
    // runtime alias checks and every full block takes the vector path.
    markArraysNoAlias(*fn);
    unsigned paramsArg = loss ? 3 : 4, nArg = loss ? 4 : 5;
    fn->addParamAttr(paramsArg, Attribute::ReadOnly);

    BasicBlock *entry = BasicBlock::Create(ctx_, "entry", fn);
    BasicBlock *loop = BasicBlock::Create(ctx_, "loop", fn);
    BasicBlock *exit = BasicBlock::Create(ctx_, "exit", fn);
    IRBuilder<> b(entry);
    if (opt_.fastMath)
      b.setFastMathFlags(FastMathFlags::getFast());
    Value *n = fn->getArg(nArg);
    const Program &p = *r.program;

    // Constants and numbers once, before the loop.
    std::vector<Value *> slot;
    lowering_.constants(b, p, fn->getArg(paramsArg), t, slot);
    b.CreateCondBr(b.CreateICmpSLT(b.getInt64(0), n), loop, exit);

    b.SetInsertPoint(loop);
    PHINode *idx = b.CreatePHI(i64, 2, "i");
    idx->addIncoming(b.getInt64(0), entry);
    PHINode *acc = nullptr;
    if (kindInfo(r.kind).summing) {
      acc = b.CreatePHI(b.getDoubleTy(), 2, "sum");
      acc->addIncoming(ConstantFP::get(b.getDoubleTy(), 0.0), entry);
    }
    Value *at = strided ? b.CreateMul(idx, fn->getArg(6)) : idx;
    ElementIO io{fn, at, t, 5};
    llvm::Expected<Value *> accNext = lowering_.element(b, r.kind, p, slot, io, acc);
    if (!accNext)
      return accNext.takeError();
    Value *next = b.CreateAdd(idx, b.getInt64(1), "i.next", true, true);
    idx->addIncoming(next, loop);
    if (acc)
      acc->addIncoming(*accNext, loop);
    BranchInst *latch = b.CreateCondBr(b.CreateICmpEQ(next, n), exit, loop);
    if (opt_.interleave > 0) {
      // Interleaving transcendental-heavy bodies buys little and multiplies
      // code size (and so compile time); the count is an option.
      MDNode *count = MDNode::get(ctx_, {MDString::get(ctx_, "llvm.loop.interleave.count"),
                                         ConstantAsMetadata::get(b.getInt32(unsigned(opt_.interleave)))});
      MDNode *loopId = MDNode::getDistinct(ctx_, {nullptr, count});
      loopId->replaceOperandWith(0, loopId);
      latch->setMetadata(LLVMContext::MD_loop, loopId);
    }

    b.SetInsertPoint(exit);
    if (loss) {
      if (acc) {
        PHINode *res = b.CreatePHI(b.getDoubleTy(), 2);
        res->addIncoming(ConstantFP::get(b.getDoubleTy(), 0.0), entry);
        res->addIncoming(*accNext, loop);
        b.CreateRet(res);
      } else {
        b.CreateRet(ConstantFP::get(b.getDoubleTy(), 0.0));
      }
    } else {
      b.CreateRetVoid();
    }
    return llvm::Error::success();
  }

private:
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

llvm::Error emitLayerEntryPoints(llvm::Module &m, const LayerEntryPoints &layer) {
  LLVMContext &ctx = m.getContext();
  Type *ptr = PointerType::getUnqual(ctx), *i64 = Type::getInt64Ty(ctx);
  Type *t = layer.dtype == DType::F32 ? Type::getFloatTy(ctx) : Type::getDoubleTy(ctx);
  size_t nodes = layer.offsets.size();
  if (llvm::Error e = emitDefaultParams(m, layer.name, layer.defaultParams))
    return e;
  std::vector<uint64_t> offsets = layer.offsets;
  GlobalVariable *offsetTable = constantArray(m, layer.name + "_param_offsets", ConstantDataArray::get(ctx, offsets));
  bool strided = layer.layout == Layout::BatchMajor;

  static const char *kinds[3] = {"forward", "backward", "fused"};
  for (int k = 0; k < 3; ++k) {
    // The node -> kernel table, resolved at link time.
    std::vector<Constant *> fns;
    for (const std::string &sym : layer.nodeKernel[k]) {
      Function *f = m.getFunction(sym);
      if (!f)
        return make_error<StringError>("missing kernel " + sym, inconvertibleErrorCode());
      fns.push_back(f);
    }
    auto *tableTy = ArrayType::get(ptr, nodes);
    auto *table = new GlobalVariable(m, tableTy, true, GlobalValue::InternalLinkage, ConstantArray::get(tableTy, fns),
                                     layer.name + "_" + kinds[k] + "_kernels");

    // NAME_KIND_range(a0, a1, a2, batch, params, begin, end): forward (z, a),
    // backward (z, err, delta), fused (z, a, dfdz); forward has no a2.
    unsigned arrays = k == 0 ? 2 : 3;
    std::vector<Type *> params(arrays, ptr);
    params.insert(params.end(), {i64, ptr, i64, i64});
    auto *rangeTy = FunctionType::get(Type::getVoidTy(ctx), params, false);
    Function *range = Function::Create(rangeTy, Function::ExternalLinkage, layer.name + "_" + kinds[k] + "_range", m);
    range->setDoesNotThrow();
    BasicBlock *entry = BasicBlock::Create(ctx, "entry", range), *loop = BasicBlock::Create(ctx, "loop", range),
               *done = BasicBlock::Create(ctx, "done", range);
    IRBuilder<> b(entry);
    Value *batch = range->getArg(arrays), *prm = range->getArg(arrays + 1), *begin = range->getArg(arrays + 2),
          *end = range->getArg(arrays + 3);
    b.CreateCondBr(b.CreateICmpSLT(begin, end), loop, done);
    b.SetInsertPoint(loop);
    PHINode *n = b.CreatePHI(i64, 2, "node");
    n->addIncoming(begin, entry);
    Value *fnPtr = b.CreateLoad(ptr, b.CreateInBoundsGEP(tableTy, table, {b.getInt64(0), n}));
    Value *off = b.CreateLoad(i64, b.CreateInBoundsGEP(i64, offsetTable, n));
    Value *base = strided ? n : b.CreateMul(n, batch);
    auto arr = [&](unsigned i) { return b.CreateGEP(t, range->getArg(i), base); };
    Value *null = ConstantPointerNull::get(cast<PointerType>(ptr));
    Value *z = arr(0), *err = k == 1 ? arr(1) : null, *o0 = k == 1 ? arr(2) : arr(1), *o1 = k == 2 ? arr(2) : null;
    std::vector<Value *> args = {z, err, o0, o1, b.CreateGEP(b.getDoubleTy(), prm, off), batch};
    std::vector<Type *> kernelParams = {ptr, ptr, ptr, ptr, ptr, i64};
    if (strided) {
      args.push_back(b.getInt64(nodes));
      kernelParams.push_back(i64);
    }
    b.CreateCall(FunctionType::get(Type::getVoidTy(ctx), kernelParams, false), fnPtr, args);
    Value *next = b.CreateAdd(n, b.getInt64(1));
    n->addIncoming(next, loop);
    b.CreateCondBr(b.CreateICmpEQ(next, end), done, loop);
    b.SetInsertPoint(done);
    b.CreateRetVoid();

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
  return llvm::Error::success();
}

llvm::Error emitKernels(llvm::Module &module, std::span<const KernelRequest> requests, const EmitOptions &options) {
  KernelBuilder kb(module, options);
  for (const KernelRequest &r : requests)
    if (llvm::Error e = kb.build(r))
      return e;
  return llvm::Error::success();
}

} // namespace hsnn::detail
