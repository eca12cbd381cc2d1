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

#include <llvm/ADT/StringExtras.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

#include <fmt/format.h>

namespace hsnn::detail {

namespace {

using namespace llvm;

class KernelBuilder {
public:
  KernelBuilder(Module &m, const EmitOptions &o) : m_(m), ctx_(m.getContext()), opt_(o) {}

  llvm::Error build(const KernelRequest &r) {
    Type *t = r.dtype == DType::F32 ? Type::getFloatTy(ctx_) : Type::getDoubleTy(ctx_);
    Type *ptr = PointerType::getUnqual(ctx_);
    Type *i64 = Type::getInt64Ty(ctx_);
    bool loss = isLossShape(r.shape);
    bool strided = r.strided && !loss;
    bool gpu = opt_.gpu;
    // GPU loss kernels return nothing: each thread writes its partial sum to
    // partials[global thread id], which the host adds in a fixed order.
    FunctionType *fty = loss && gpu ? FunctionType::get(Type::getVoidTy(ctx_), {ptr, ptr, ptr, ptr, i64, t, ptr}, false)
                        : loss      ? FunctionType::get(Type::getDoubleTy(ctx_), {ptr, ptr, ptr, ptr, i64, t}, false)
                        : strided   ? FunctionType::get(Type::getVoidTy(ctx_), {ptr, ptr, ptr, ptr, ptr, i64, i64}, false)
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
    for (unsigned i = 0; i < fn->arg_size(); ++i)
      if (fn->getArg(i)->getType()->isPointerTy()) {
        fn->addParamAttr(i, Attribute::NoCapture);
        fn->addParamAttr(i, Attribute::NoAlias);
      }
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
    std::vector<Value *> slot(p.code.size(), nullptr);
    for (size_t i = 0; i < p.code.size(); ++i) {
      const Instr &in = p.code[i];
      if (in.op == Op::Number)
        slot[i] = in.isBool ? ConstantInt::getBool(ctx_, in.number != 0) : ConstantFP::get(t, in.number);
      else if (in.op == Op::Param) {
        Value *addr = b.CreateConstInBoundsGEP1_64(b.getDoubleTy(), fn->getArg(paramsArg), in.param);
        Value *v = b.CreateLoad(b.getDoubleTy(), addr, "param");
        slot[i] = t->isFloatTy() ? b.CreateFPTrunc(v, t) : v;
      }
    }
    // CPU: i = 0, 1, ..., n-1. GPU: a grid-stride loop from the global thread id.
    Value *start = b.getInt64(0), *step = b.getInt64(1);
    if (gpu) {
      auto sreg = [&](Intrinsic::ID id) { return b.CreateZExt(b.CreateIntrinsic(id, {}, {}), i64); };
      Value *ntid = sreg(Intrinsic::nvvm_read_ptx_sreg_ntid_x);
      start = b.CreateAdd(b.CreateMul(sreg(Intrinsic::nvvm_read_ptx_sreg_ctaid_x), ntid), sreg(Intrinsic::nvvm_read_ptx_sreg_tid_x));
      step = b.CreateMul(ntid, sreg(Intrinsic::nvvm_read_ptx_sreg_nctaid_x));
    }
    b.CreateCondBr(b.CreateICmpSLT(start, n), loop, exit);

    b.SetInsertPoint(loop);
    PHINode *idx = b.CreatePHI(i64, 2, "i");
    idx->addIncoming(start, entry);
    PHINode *acc = nullptr;
    if (r.shape == KernelShape::LossReduce || r.shape == KernelShape::LossFused) {
      acc = b.CreatePHI(b.getDoubleTy(), 2, "sum");
      acc->addIncoming(ConstantFP::get(b.getDoubleTy(), 0.0), entry);
    }
    Value *at = strided ? b.CreateMul(idx, fn->getArg(6)) : idx;
    auto element = [&](unsigned arg) { return b.CreateLoad(t, b.CreateInBoundsGEP(t, fn->getArg(arg), at)); };
    auto store = [&](Value *v, unsigned arg) { b.CreateStore(v, b.CreateInBoundsGEP(t, fn->getArg(arg), at)); };

    Value *vars[3] = {nullptr, nullptr, nullptr};
    if (loss) {
      vars[size_t(Variable::YPred)] = element(0);
      vars[size_t(Variable::YTrue)] = element(1);
    } else {
      vars[size_t(Variable::Num)] = element(0);
    }
    for (size_t i = 0; i < p.code.size(); ++i)
      if (!slot[i]) {
        llvm::Expected<Value *> v = lower(b, p, p.code[i], slot, vars, t);
        if (!v)
          return v.takeError();
        slot[i] = *v;
      }
    auto out = [&](size_t k) { return slot[p.outputs[k]]; };
    Value *accNext = nullptr;
    switch (r.shape) {
    case KernelShape::ActivationForward:
    case KernelShape::LossElements:
      store(out(0), 2);
      break;
    case KernelShape::ActivationBackward:
      store(b.CreateFMul(element(1), out(0)), 2);
      break;
    case KernelShape::ActivationFused:
      store(out(0), 2);
      store(out(1), 3);
      break;
    case KernelShape::LossReduce:
      accNext = addToSum(b, acc, out(0), t);
      break;
    case KernelShape::LossGradient:
      store(b.CreateFMul(out(0), fn->getArg(5)), 2);
      break;
    case KernelShape::LossFused:
      store(b.CreateFMul(out(1), fn->getArg(5)), 2);
      accNext = addToSum(b, acc, out(0), t);
      break;
    }
    Value *next = b.CreateAdd(idx, step, "i.next", true, true);
    idx->addIncoming(next, loop);
    if (acc)
      acc->addIncoming(accNext, loop);
    BranchInst *latch = b.CreateCondBr(gpu ? b.CreateICmpSGE(next, n) : b.CreateICmpEQ(next, n), exit, loop);
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
    if (gpu) {
      if (acc) {
        PHINode *res = b.CreatePHI(b.getDoubleTy(), 2);
        res->addIncoming(ConstantFP::get(b.getDoubleTy(), 0.0), entry);
        res->addIncoming(accNext, loop);
        b.CreateStore(res, b.CreateInBoundsGEP(b.getDoubleTy(), fn->getArg(6), start));
      }
      b.CreateRetVoid();
      // Mark it a kernel (an entry point callable from the host).
      Metadata *md[] = {ValueAsMetadata::get(fn), MDString::get(ctx_, "kernel"),
                        ConstantAsMetadata::get(b.getInt32(1))};
      m_.getOrInsertNamedMetadata("nvvm.annotations")->addOperand(MDNode::get(ctx_, md));
    } else if (loss) {
      if (acc) {
        PHINode *res = b.CreatePHI(b.getDoubleTy(), 2);
        res->addIncoming(ConstantFP::get(b.getDoubleTy(), 0.0), entry);
        res->addIncoming(accNext, loop);
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
  // The sum may be reassociated (so the loop vectorizes); it stays
  // deterministic because the order is fixed by the code, not by timing.
  Value *addToSum(IRBuilder<> &b, Value *acc, Value *v, Type *t) {
    Value *wide = t->isFloatTy() ? b.CreateFPExt(v, b.getDoubleTy()) : v;
    auto *add = cast<Instruction>(b.CreateFAdd(acc, wide, "sum.next"));
    FastMathFlags fmf = add->getFastMathFlags();
    fmf.setAllowReassoc();
    add->setFastMathFlags(fmf);
    return add;
  }

  llvm::Expected<Value *> lower(IRBuilder<> &b, const Program &p, const Instr &in, const std::vector<Value *> &slot,
                          Value *const vars[3], Type *t) {
    auto ops = p.operands(in);
    auto arg = [&](size_t k) { return slot[ops[k]]; };
    auto fp = [&](double v) { return ConstantFP::get(t, v); };
    switch (in.op) {
    case Op::Var:
      if (!vars[size_t(in.var)])
        return make_error<StringError>(fmt::format("variable '{}' is not available in this kernel",
                                                   variableName(in.var)),
                                       inconvertibleErrorCode());
      return vars[size_t(in.var)];
    case Op::Add: return b.CreateFAdd(arg(0), arg(1));
    case Op::Sub: return b.CreateFSub(arg(0), arg(1));
    case Op::Mul: return b.CreateFMul(arg(0), arg(1));
    case Op::Div: return b.CreateFDiv(arg(0), arg(1));
    case Op::Neg: return b.CreateFNeg(arg(0));
    case Op::Lt: return b.CreateFCmpOLT(arg(0), arg(1));
    case Op::Le: return b.CreateFCmpOLE(arg(0), arg(1));
    case Op::Gt: return b.CreateFCmpOGT(arg(0), arg(1));
    case Op::Ge: return b.CreateFCmpOGE(arg(0), arg(1));
    case Op::Eq: return b.CreateFCmpOEQ(arg(0), arg(1));
    case Op::Ne: return b.CreateFCmpUNE(arg(0), arg(1));
    case Op::And: return b.CreateAnd(arg(0), arg(1));
    case Op::Or: return b.CreateOr(arg(0), arg(1));
    case Op::Not: return b.CreateNot(arg(0));
    case Op::Piecewise: {
      // First true condition wins: select from the default back to the front.
      Value *v = arg(ops.size() - 1);
      for (int k = int(ops.size()) - 3; k >= 0; k -= 2)
        v = b.CreateSelect(arg(k + 1), arg(k), v);
      return v;
    }
    case Op::Max:
    case Op::Min: {
      Value *a = arg(0), *c = arg(1);
      Value *pick = in.op == Op::Max ? b.CreateFCmpOGE(a, c) : b.CreateFCmpOLE(a, c);
      return b.CreateSelect(b.CreateFCmpUNO(a, c), fp(std::nan("")), b.CreateSelect(pick, a, c));
    }
    case Op::Heaviside:
      return b.CreateSelect(b.CreateFCmpOGT(arg(0), fp(0)), fp(1),
                            b.CreateSelect(b.CreateFCmpOLE(arg(0), fp(0)), fp(0), arg(0)));
    case Op::Sign:
      return b.CreateSelect(b.CreateFCmpOGT(arg(0), fp(0)), fp(1),
                            b.CreateSelect(b.CreateFCmpOLT(arg(0), fp(0)), fp(-1), arg(0)));
    case Op::Sigmoid: {
      Value *a = arg(0);
      Value *e = callMath(b, "exp", {b.CreateFNeg(callMath(b, "llvm.fabs", {a}, t))}, t);
      Value *den = b.CreateFAdd(fp(1), e);
      return b.CreateSelect(b.CreateFCmpOGE(a, fp(0)), b.CreateFDiv(fp(1), den), b.CreateFDiv(e, den));
    }
    case Op::Softplus: {
      Value *a = arg(0);
      Value *e = callMath(b, "exp", {b.CreateFNeg(callMath(b, "llvm.fabs", {a}, t))}, t);
      Value *pos = b.CreateSelect(b.CreateFCmpOGT(a, fp(0)), a, fp(0));
      return b.CreateFAdd(pos, callMath(b, "log1p", {e}, t));
    }
    default:
      break;
    }
    std::string_view libm = opInfo(in.op).libm;
    if (libm.empty())
      return make_error<StringError>(fmt::format("no lowering for op {}", opInfo(in.op).name), inconvertibleErrorCode());
    std::vector<Value *> args;
    for (size_t k = 0; k < ops.size(); ++k)
      args.push_back(arg(k));
    return callMath(b, libm, args, t);
  }

  // An LLVM intrinsic ("llvm.fabs") or a libm function ("exp" -> exp/expf),
  // the latter marked pure and offered with its vector variants.
  Value *callMath(IRBuilder<> &b, std::string_view base, ArrayRef<Value *> args, Type *t) {
    if (base.starts_with("llvm.")) {
      Intrinsic::ID id = Function::lookupIntrinsicID(StringRef(base.data(), base.size()));
      return b.CreateCall(Intrinsic::getDeclaration(&m_, id, {t}), args);
    }
    // libdevice names its functions __nv_exp, __nv_expf, ...
    std::string name = (opt_.gpu ? "__nv_" : "") + std::string(base) + (t->isFloatTy() ? "f" : "");
    SmallVector<Type *, 2> params(args.size(), t);
    FunctionCallee callee = m_.getOrInsertFunction(name, FunctionType::get(t, params, false));
    auto *decl = cast<Function>(callee.getCallee());
    decl->setDoesNotAccessMemory();
    decl->setDoesNotThrow();
    decl->setWillReturn();
    CallInst *call = b.CreateCall(callee, args);
    call->setDoesNotAccessMemory();
    std::string variants = vectorVariants(name, args.size(), t);
    if (!variants.empty())
      call->addFnAttr(Attribute::get(ctx_, "vector-function-abi-variant", variants));
    return call;
  }

  std::string vectorVariants(const std::string &name, size_t arity, Type *t) {
    if (!opt_.hasVectorVariant)
      return "";
    std::vector<std::string> mappings;
    for (char isa : opt_.vectorISAs) {
      unsigned bits = isa == 'e' ? 512 : isa == 'd' ? 256 : 128;
      unsigned lanes = bits / t->getPrimitiveSizeInBits();
      std::string vs(arity, 'v');
      std::string vname = fmt::format("_ZGV{}N{}{}_{}", isa, lanes, vs, name);
      if (!opt_.hasVectorVariant(vname))
        continue;
      if (!m_.getFunction(vname)) {
        auto *vt = FixedVectorType::get(t, lanes);
        SmallVector<Type *, 2> params(arity, vt);
        Function *vf = Function::Create(FunctionType::get(vt, params, false), Function::ExternalLinkage, vname, m_);
        vf->setDoesNotAccessMemory();
        vf->setDoesNotThrow();
        appendToCompilerUsed(m_, {vf});
      }
      mappings.push_back(fmt::format("_ZGV_LLVM_N{}{}_{}({})", lanes, vs, name, vname));
    }
    return join(mappings, ",");
  }

  Module &m_;
  LLVMContext &ctx_;
  const EmitOptions &opt_;
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
