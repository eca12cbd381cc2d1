//===- lib/CodeGen/Lowering.cpp - One Program's instructions as IR --------===//
//
// No fast-math flags and no contraction unless asked, so results match the
// interpreter. The CPU kernels lower whole vectors (one value per lane), the
// GPU kernels scalars, and math functions are hsnn's own library
// (InlineMath.h) on both, so both give the same bits; libmvec's vector
// functions only on CPUs without FMA (or when asked for, to compare).
//===----------------------------------------------------------------------===//
#include "Lowering.h"
#include "InlineMath.h"

#include <llvm/Analysis/VectorUtils.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fmt/format.h>

namespace hsnn::detail {

using namespace llvm;

void ElementLowering::constants(IRBuilder<> &b, const Program &p, Value *params, Type *t, std::vector<Value *> &slot,
                                const std::function<Value *(unsigned param)> &laneParam) {
  slot.assign(p.code.size(), nullptr);
  auto *vt = dyn_cast<FixedVectorType>(t);
  Type *et = t->getScalarType();
  for (size_t i = 0; i < p.code.size(); ++i) {
    const Instr &in = p.code[i];
    if (in.op == Op::Number && in.isBool) {
      Constant *c = ConstantInt::getBool(ctx_, in.number != 0);
      slot[i] = vt ? ConstantVector::getSplat(vt->getElementCount(), c) : c;
    } else if (in.op == Op::Number) {
      slot[i] = ConstantFP::get(t, in.number);
    } else if (in.op == Op::Param && laneParam) {
      slot[i] = laneParam(in.param);
    } else if (in.op == Op::Param) {
      Value *addr = b.CreateConstInBoundsGEP1_64(b.getDoubleTy(), params, in.param);
      Value *v = b.CreateLoad(b.getDoubleTy(), addr, "param");
      if (et->isFloatTy())
        v = b.CreateFPTrunc(v, et);
      slot[i] = vt ? b.CreateVectorSplat(vt->getElementCount(), v) : v;
    }
  }
}

llvm::Error ElementLowering::evaluate(IRBuilder<> &b, const Program &p, std::vector<Value *> &slot,
                                      Value *const vars[3], Type *t) {
  for (size_t i = 0; i < p.code.size(); ++i)
    if (!slot[i]) {
      llvm::Expected<Value *> v = lower(b, p, p.code[i], slot, vars, t);
      if (!v)
        return v.takeError();
      slot[i] = *v;
    }
  return llvm::Error::success();
}

void markArraysNoAlias(Function &fn) {
  for (unsigned i = 0; i < fn.arg_size(); ++i)
    if (fn.getArg(i)->getType()->isPointerTy()) {
      fn.addParamAttr(i, Attribute::NoCapture);
      fn.addParamAttr(i, Attribute::NoAlias);
    }
}

void prefetchAhead(IRBuilder<> &b, Value *at, int64_t bytes) {
  Module *m = b.GetInsertBlock()->getModule();
  b.CreateCall(Intrinsic::getDeclaration(m, Intrinsic::prefetch, {at->getType()}),
               {b.CreateConstGEP1_64(b.getInt8Ty(), at, bytes), b.getInt32(0) /* read */,
                b.getInt32(3) /* keep in all levels */, b.getInt32(1) /* data */});
}

void setCpuKernelAttributes(Function &fn, const EmitOptions &o) {
  fn.setDoesNotThrow();
  fn.addFnAttr(Attribute::NoFree);
  fn.addFnAttr(Attribute::NoSync);
  // LLVM's tuning for AVX-512 CPUs prefers 256-bit vectors (for clock
  // throttling in mixed code); these kernels are pure vector math, and
  // 512-bit vectors measured faster on each of bench W1-W4.
  fn.addFnAttr("prefer-vector-width", std::to_string(o.vectorBits));
  fn.addFnAttr("min-legal-vector-width", std::to_string(o.vectorBits));
  // The stack aligned to 64 bytes on entry, so that vector spills (row
  // kernels spill around every vector math call) never straddle two cache
  // lines: without it LLVM had given rbp to the register allocator, could
  // not realign once it spilled zmm registers, and used unaligned moves, so
  // a kernel's speed hung on the caller's stack pointer mod 64: W1's
  // batch-major forward ran slow in some processes and not in others (the
  // DEVLOG has the runs).
  fn.addFnAttr("stackrealign");
  // noalias: arrays may be the same array (in place: each element is read
  // before it is written) but never partially overlap.
  markArraysNoAlias(fn);
}

void markNotVectorizable(Instruction *backEdge) {
  LLVMContext &ctx = backEdge->getContext();
  MDNode *off = MDNode::get(ctx, {MDString::get(ctx, "llvm.loop.vectorize.enable"),
                                  ConstantAsMetadata::get(ConstantInt::getFalse(ctx))});
  MDNode *loopId = MDNode::getDistinct(ctx, {nullptr, off});
  loopId->replaceOperandWith(0, loopId);
  backEdge->setMetadata(LLVMContext::MD_loop, loopId);
}

llvm::Expected<Value *> ElementLowering::element(IRBuilder<> &b, KernelKind kind, const Program &p,
                                                 std::vector<Value *> &slot, const ElementIO &io, Value *acc) {
  Type *t = io.t;
  auto load = [&](unsigned arg) -> Value * {
    if (arg < 2 && io.preloaded[arg])
      return io.preloaded[arg];
    return b.CreateLoad(t, b.CreateInBoundsGEP(t, io.fn->getArg(arg), io.at));
  };
  auto store = [&](Value *v, unsigned arg) {
    if (io.store)
      io.store(v, arg);
    else
      b.CreateStore(v, b.CreateInBoundsGEP(t, io.fn->getArg(arg), io.at));
  };
  auto sum = [&](Value *loss) { return io.accumulate ? io.accumulate(loss) : addToSum(b, acc, loss, t); };
  Value *vars[3] = {nullptr, nullptr, nullptr};
  if (isLoss(kind)) {
    vars[size_t(Variable::YPred)] = load(0);
    vars[size_t(Variable::YTrue)] = load(1);
  } else {
    vars[size_t(Variable::Num)] = load(0);
  }
  if (llvm::Error e = evaluate(b, p, slot, vars, t))
    return e;
  auto out = [&](size_t k) { return slot[p.outputs[k]]; };
  auto scale = [&]() -> Value * {
    Value *s = io.fn->getArg(io.scaleArg);
    auto *vt = dyn_cast<FixedVectorType>(t);
    return vt ? b.CreateVectorSplat(vt->getElementCount(), s) : s;
  };
  switch (kind) {
  case KernelKind::Forward:
  case KernelKind::LossElements:
    store(out(0), 2);
    return nullptr;
  case KernelKind::Backward:
    store(b.CreateFMul(load(1), out(0)), 2);
    return nullptr;
  case KernelKind::Fused:
    store(out(0), 2);
    store(out(1), 3);
    return nullptr;
  case KernelKind::LossSum:
    return sum(out(0));
  case KernelKind::LossGradient:
    store(b.CreateFMul(out(0), scale()), 2);
    return nullptr;
  case KernelKind::LossFused:
    store(b.CreateFMul(out(1), scale()), 2);
    return sum(out(0));
  case KernelKind::ConstantGradient:
  case KernelKind::LossConstantGradient:
    // Reductions, not elementwise: the CPU kernels sum them in IREmitter;
    // there is no GPU kernel for them yet (the runtime uses the interpreter).
    return make_error<StringError>(fmt::format("no compiled kernel for kind {}", kindName(kind)),
                                   inconvertibleErrorCode());
  }
  return nullptr;
}

Value *ElementLowering::addToSum(IRBuilder<> &b, Value *acc, Value *v, Type *t) {
  Value *wide = t->isFloatTy() ? b.CreateFPExt(v, b.getDoubleTy()) : v;
  auto *add = cast<Instruction>(b.CreateFAdd(acc, wide, "sum.next"));
  FastMathFlags fmf = add->getFastMathFlags();
  fmf.setAllowReassoc();
  add->setFastMathFlags(fmf);
  return add;
}

namespace {
// Integer powers up to this |n| are computed by squaring (emitIntegerPower).
constexpr double kMaxSquaredPower = 16;
} // namespace

llvm::Expected<Value *> ElementLowering::lower(IRBuilder<> &b, const Program &p, const Instr &in,
                                             const std::vector<Value *> &slot, Value *const vars[3], Type *t) {
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
    // 1/den or e/den: the numerator picked first, so one division (the
    // costliest instruction here) serves both.
    return b.CreateFDiv(b.CreateSelect(b.CreateFCmpOGE(a, fp(0)), fp(1), e), den);
  }
  case Op::Pow: {
    // u**n for a constant integer n as |u|**n, u's sign put back for odd n:
    // the same value for every u (C99 F.9.4.4), and glibc's vector pow
    // takes a scalar path for a negative base, several times slower an
    // element, and slow even where one lane of 16 is negative.
    auto *c = dyn_cast<Constant>(arg(1));
    auto *n = c ? dyn_cast_or_null<ConstantFP>(c->getType()->isVectorTy() ? c->getSplatValue() : c) : nullptr;
    if (!n || !n->getValueAPF().isInteger())
      break;
    double exponent = n->getValueAPF().convertToDouble();
    // f64's double-double products need exact FMAs (every GPU has them);
    // f32's squarings in double do not.
    if (std::fabs(exponent) <= kMaxSquaredPower && (t->getScalarType()->isFloatTy() || inlineMath()))
      return emitIntegerPower(b, arg(0), int(exponent));
    Value *mag = callMath(b, "pow", {callMath(b, "llvm.fabs", {arg(0)}, t), arg(1)}, t);
    bool odd = std::fmod(exponent, 2) != 0;
    return odd ? callMath(b, "llvm.copysign", {mag, arg(0)}, t) : mag;
  }
  case Op::Softplus: {
    Value *a = arg(0);
    Value *e = callMath(b, "exp", {b.CreateFNeg(callMath(b, "llvm.fabs", {a}, t))}, t);
    Value *pos = b.CreateSelect(b.CreateFCmpOGT(a, fp(0)), a, fp(0));
    if (!inlineMath())
      return b.CreateFAdd(pos, callMath(b, "log1p", {e}, t));
    if (!outlineMath_)
      return b.CreateFAdd(pos, emitLog1pOfUnit(b, e));
    return b.CreateFAdd(pos, callOutlined(b, "log1p_unit", {e}));
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

namespace {
// The math library's function `name` (MathCalls.h) of args.
Value *mathBody(IRBuilder<> &b, std::string_view name, ArrayRef<Value *> args) {
  return name == "log1p_unit" ? emitLog1pOfUnit(b, args[0]) : emitInlineMath(b, name, args);
}
} // namespace

Function *ElementLowering::mathFunction(const MathFunction &fn, bool define) {
  std::string symbol = fn.symbol();
  if (Function *f = m_.getFunction(symbol); f && (!define || !f->isDeclaration()))
    return f;
  Type *et = fn.dtype == DType::F32 ? Type::getFloatTy(ctx_) : Type::getDoubleTy(ctx_);
  Type *t = fn.lanes > 1 ? FixedVectorType::get(et, fn.lanes) : et;
  Function *f = m_.getFunction(symbol);
  if (!f) {
    SmallVector<Type *, 2> params(fn.arity(), t);
    bool internal = define && !opt_.externalMath;
    f = Function::Create(FunctionType::get(t, params, false),
                         internal ? GlobalValue::InternalLinkage : GlobalValue::ExternalLinkage, symbol, m_);
    if (!internal)
      f->setVisibility(GlobalValue::HiddenVisibility);
    // The kernels' vector width on both sides, so that caller and callee
    // pass vectors alike.
    f->addFnAttr("prefer-vector-width", std::to_string(opt_.vectorBits));
    f->addFnAttr("min-legal-vector-width", std::to_string(opt_.vectorBits));
    f->setDoesNotThrow();
    f->addFnAttr(Attribute::NoFree);
    f->addFnAttr(Attribute::NoSync);
    f->addFnAttr(Attribute::WillReturn);
    f->addFnAttr(Attribute::NoInline);
  }
  if (!define)
    return f;
  IRBuilder<> fb(BasicBlock::Create(ctx_, "entry", f));
  SmallVector<Value *, 2> args;
  for (Argument &a : f->args())
    args.push_back(&a);
  Value *v = mathBody(fb, fn.name, args);
  if (!v) {
    f->eraseFromParent();
    return nullptr;
  }
  fb.CreateRet(v);
  return f;
}

llvm::Error ElementLowering::defineMathFunction(const MathFunction &fn) {
  if (!mathFunction(fn, true))
    return make_error<StringError>(fmt::format("the math library has no function '{}'", fn.name),
                                   inconvertibleErrorCode());
  return llvm::Error::success();
}

Value *ElementLowering::callOutlined(IRBuilder<> &b, std::string_view name, ArrayRef<Value *> args) {
  Type *t = args[0]->getType();
  auto *vt = dyn_cast<FixedVectorType>(t);
  MathFunction fn{std::string(name), t->getScalarType()->isFloatTy() ? DType::F32 : DType::F64,
                  vt ? vt->getNumElements() : 1u};
  Function *f = mathFunction(fn, !opt_.externalMath);
  return f ? b.CreateCall(f, args) : nullptr;
}

// An LLVM intrinsic ("llvm.fabs") or a libm function ("exp" -> exp/expf).
// On a vector, libmvec's variant of the vector's width when it exists
// (_ZGVeN16v_expf is 16 floats in AVX-512 registers), else the scalar
// function lane by lane: every element of a kernel goes through the same
// code whatever its position, so results do not depend on where it sits.
Value *ElementLowering::callMath(IRBuilder<> &b, std::string_view base, ArrayRef<Value *> args, Type *t) {
  if (base.starts_with("llvm.")) {
    Intrinsic::ID id = Function::lookupIntrinsicID(StringRef(base.data(), base.size()));
    return b.CreateCall(Intrinsic::getDeclaration(&m_, id, {t}), args);
  }
  // hsnn's own math library (InlineMath.h): the same IR on the CPU and the
  // GPU; libmvec only where the CPU has no FMA. (A GPU function left
  // undefined here is refused by compilePtx.)
  if (inlineMath())
    if (Value *v = outlineMath_ ? callOutlined(b, base, args) : emitInlineMath(b, base, args))
      return v;
  Type *et = t->getScalarType();
  std::string name = std::string(base) + (et->isFloatTy() ? "f" : "");
  auto *vt = dyn_cast<FixedVectorType>(t);
  if (!vt)
    return callScalar(b, name, args, t);
  unsigned lanes = vt->getNumElements(), bits = lanes * et->getPrimitiveSizeInBits();
  // The kernels' vectors span two registers (IREmitter.cpp); libmvec's
  // variants take one: a register's worth of lanes a call.
  if (unsigned part = opt_.vectorBits / unsigned(et->getPrimitiveSizeInBits());
      part > 1 && lanes > part && lanes % part == 0) {
    SmallVector<Value *, 4> parts;
    for (unsigned first = 0; first < lanes; first += part) {
      SmallVector<Value *, 2> partArgs;
      for (Value *a : args)
        partArgs.push_back(b.CreateShuffleVector(a, createSequentialMask(first, part, 0)));
      parts.push_back(callMath(b, base, partArgs, FixedVectorType::get(et, part)));
    }
    return concatenateVectors(b, parts);
  }
  char isa = bits == 512 ? 'e' : bits == 256 ? 'd' : 'b';
  std::string vname = fmt::format("_ZGV{}N{}{}_{}", isa, lanes, std::string(args.size(), 'v'), name);
  if (opt_.vectorISAs.find(isa) != std::string::npos && opt_.hasVectorVariant && opt_.hasVectorVariant(vname))
    return callScalar(b, vname, args, t);
  Value *result = PoisonValue::get(t);
  for (unsigned l = 0; l < lanes; ++l) {
    SmallVector<Value *, 2> laneArgs;
    for (Value *a : args)
      laneArgs.push_back(b.CreateExtractElement(a, l));
    result = b.CreateInsertElement(result, callScalar(b, name, laneArgs, et), l);
  }
  return result;
}

// A call to an external function of type t(t, ...) that reads no memory.
Value *ElementLowering::callScalar(IRBuilder<> &b, const std::string &name, ArrayRef<Value *> args, Type *t) {
  SmallVector<Type *, 2> params(args.size(), t);
  FunctionCallee callee = m_.getOrInsertFunction(name, FunctionType::get(t, params, false));
  auto *decl = cast<Function>(callee.getCallee());
  decl->setDoesNotAccessMemory();
  decl->setDoesNotThrow();
  decl->setWillReturn();
  CallInst *call = b.CreateCall(callee, args);
  call->setDoesNotAccessMemory();
  return call;
}

} // namespace hsnn::detail
