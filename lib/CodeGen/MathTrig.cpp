//===- lib/CodeGen/MathTrig.cpp - sin, cos, tan and the arc functions as IR ===//
//
// sin, cos, tan: x = q pi/2 + r, |r| <= pi/4, r as a pair hi + lo, then
// polynomials in r^2 fitted for relative error (tools/math-coefficients.py)
// and the quadrant q mod 4 picks and signs them (fdlibm's kernels' shape:
// cos(r) = w + ((1 - w) - r^2/2 + ...) with w = 1 - r^2/2 keeps the
// rounding of w). sin and cos evaluate one polynomial per lane, its
// coefficients picked by the quadrant (tan needs both).
// The reduction: below |x| = 2^19 (doubles) or 2^14 (floats), Cody-Waite in
// the type itself to hi + lo, pi/2 in three parts (reduceShort): k times
// the second part is exact, so hi rounds once and its error is exact.
// The pair is good to 2^-120 (doubles) at the doubles nearest a multiple
// of pi/2 (r ~ 2^-60.5), and every float below 2^14 is within 0.81 ulp (r
// rounded to one float gave 1.49). Seven operations where double-double
// with four parts took 22, and 8 floats no longer make two registers of
// doubles: sin measured faster so, f64 and f32, on AVX2 and AVX-512 (one
// thread, in cache). Floats from 2^14 to 2^19 take full-length
// parts with TwoProd and TwoSum (reduceMediumFloat, 16 operations; every
// float there within 0.79 ulp): for such inputs a little slower than the
// old reduction in double, where reducing them in double again after the
// short path cost far more. Past 2^19,
// Payne-Hanek on integers: x = m 2^e times the 256 bits of 2/pi that
// matter at e (the bits above them give multiples of 4), 128 fraction bits
// kept. Both run only when some lane needs them (branches in a small
// always-inlined function, so the common case pays one compare), and
// give floats a float pair too.
//
// atan2 on magnitudes: a = min/max in [0, 1], atan(a) = pi/4 + atan((a - 1)/(a + 1))
// above tan(pi/8), then atan(u) = u + u^3 P(u^2); quadrants by adding to
// or subtracting from pi/2 and pi held in two parts. atan(x) = atan2(x, 1),
// asin(x) = atan2(x, sqrt((1 - x)(1 + x))), acos(x) = atan2(sqrt(...), x):
// (1 - x) is exact where it matters (|x| >= 1/2), so nothing cancels.
//===----------------------------------------------------------------------===//
#include "InlineMath.h"
#include "MathEmitter.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/MDBuilder.h>

#include <cmath>

#include <fmt/format.h>

namespace hsnn::detail {

using namespace llvm;

namespace {

// sin(r) = r + r^3 S(r^2), cos(r) = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4.
constexpr double kSinF64[] = {-0x1.5555555555555p-3,  0x1.111111111111p-7,   -0x1.a01a01a01992ap-13,
                              0x1.71de3a545f19ap-19,  -0x1.ae64541073dd8p-26, 0x1.61217d6032aa5p-33,
                              -0x1.ab16ed4213974p-41};
constexpr double kCosF64[] = {0x1.5555555555555p-5,   -0x1.6c16c16c16c16p-10, 0x1.a01a01a019d06p-16,
                              -0x1.27e4fb7712685p-22, 0x1.1eed8deaebd79p-29,  -0x1.9394b915611b5p-37,
                              0x1.ab77d556f29bbp-45};
constexpr float kSinF32[] = {-0x1.555556p-3f, 0x1.11110ep-7f, -0x1.a013a2p-13f, 0x1.6dbc44p-19f};
constexpr float kCosF32[] = {0x1.555556p-5f, -0x1.6c16cp-10f, 0x1.a015c2p-16f, -0x1.25238ep-22f};
// atan(u) = u + u^3 P(u^2), |u| <= tan(pi/8): 2^-57.9.
constexpr double kAtanF64[] = {-0x1.5555555555555p-2, 0x1.9999999999955p-3,  -0x1.249249248d93fp-3, 0x1.c71c71c3139abp-4,
                               -0x1.745d1660a6dc7p-4, 0x1.3b139322fe5a2p-4,  -0x1.110e8cdd15a52p-4, 0x1.e19a7c66a2365p-5,
                               -0x1.ac7d6d8102f14p-5, 0x1.74ea2dc4f3487p-5,  -0x1.1b51f60771571p-5, 0x1.0b135dad78767p-6};

// pi/2 = kPio2Medium32[0] + kPio2Medium32[1] + kPio2Medium32[2] + 2^-76.3, each
// rounded to float (floats from kFloatLimit to kMediumLimit; tools/
// math-coefficients.py pio2f32medium).
constexpr float kPio2Medium32[] = {0x1.921fb6p+0f, -0x1.777a5cp-25f, -0x1.ee59dap-50f};
// pi/2, pi/4 and pi as hi + lo.
constexpr double kPio2Hi = 0x1.921fb54442d18p+0, kPio2Lo = 0x1.1a62633145c07p-54;
constexpr double kPio4Hi = 0x1.921fb54442d18p-1, kPio4Lo = 0x1.1a62633145c07p-55;
constexpr double kPiHi = 0x1.921fb54442d18p+1, kPiLo = 0x1.1a62633145c07p-53;
constexpr double kTanPiOver8 = 0x1.a827999fcef32p-2;
// Past this |x| the reduction takes the Payne-Hanek path.
constexpr double kMediumLimit = 0x1p19;
// Past this |x| floats take reduceMediumFloat.
constexpr double kFloatLimit = 0x1p14;
// pi/2 = p0 + p1 + p2 + 2^-63.4 (floats) or 2^-142.2 (doubles), p1 of 10
// or 34 bits so that k p1 is exact for |k| < 2^14 or 2^19 (tools/
// math-coefficients.py pio2f32, pio2f64).
constexpr float kPio2Short32[] = {0x1.921fb6p+0f, -0x1.778p-25f, 0x1.68c234p-39f};
constexpr double kPio2Short64[] = {0x1.921fb54442d18p+0, 0x1.1a6263318p-54, -0x1.d1fc8f8cbb5bfp-89};

// The bits of 2/pi after the binary point, 32 to a word: words j0..j0+7
// are read for x = m 2^e, j0 = (e - 2)/32, e <= 971.
constexpr uint32_t kTwoOverPi[] = {
    0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0, 0xdb629599, 0x3c439041, 0xfe5163ab, 0xdebbc561,
    0xb7246e3a, 0x424dd2e0, 0x06492eea, 0x09d1921c, 0xfe1deb1c, 0xb129a73e, 0xe88235f5, 0x2ebb4484,
    0xe99c7026, 0xb45f7e41, 0x3991d639, 0x835339f4, 0x9c845f8b, 0xbdf9283b, 0x1ff897ff, 0xde05980f,
    0xef2f118b, 0x5a0a6d1f, 0x6d367ecf, 0x27cb09b7, 0x4f463f66, 0x9e5fea2d, 0x7527bac7, 0xebe5f17b,
    0x3d0739f7, 0x8a5292ea, 0x6bfb5fb1, 0x1f8d5d08, 0x56033046, 0xfc7b6bab, 0xf0cfbc20, 0x9af4361d};

/// x = q pi/2 + hi + lo, q an integer of MathEmitter::it's type (only q
/// mod 4 counts).
struct Reduced {
  Value *hi, *lo, *q;
};

/// k = x 2/pi rounded to an integer, as -k in x's type and as q = k in its
/// integer type: the magic constant 1.5 2^m leaves k in the low mantissa
/// bits. 2/pi rounded to the type can make k one off near a half-integer:
/// r then passes pi/4 by less than 2^-9 below the limits the callers have,
/// where the polynomials still hold.
std::pair<Value *, Value *> nearestQuadrant(MathEmitter &m, Value *x) {
  bool f32 = m.isF32();
  Value *magic = m.c(f32 ? 0x1.8p23 : 0x1.8p52);
  Value *kf = m.fma(x, m.c(f32 ? 0x1.45f306p-1 : 0x1.45f306dc9c883p-1), magic);
  return {m.neg(m.sub(kf, magic)), m.b.CreateSub(m.bits(kf), m.bits(magic))};
}

/// Cody-Waite for |x| below kFloatLimit (floats) or kMediumLimit (doubles)
/// in x's type (see the header): x - k p0 is exact (a multiple of the
/// ulp of 1 below 1 in magnitude), so is k p1, so hi = r0 - k p1 rounds
/// once and its error r0 - hi - k p1 is exact too (Sterbenz, or hi itself
/// exact where r0 and k p1 cancel); k p2 joins the error in lo. p1 of 8
/// bits and a limit of 2^16 left floats 20 ulp off.
Reduced reduceShort(MathEmitter &m, Value *x) {
  bool f32 = m.isF32();
  auto pio2 = [&](int i) { return m.c(f32 ? double(kPio2Short32[i]) : kPio2Short64[i]); };
  auto [nk, q] = nearestQuadrant(m, x);
  Value *r0 = m.fma(nk, pio2(0), x);
  Value *hi = m.fma(nk, pio2(1), r0);
  Value *lo = m.fma(nk, pio2(1), m.sub(r0, hi)); // hi's rounding error
  lo = m.fma(nk, pio2(2), lo);
  return {hi, lo, q};
}

/// The Payne-Hanek reduction of one double, finite with |x| >= 2^19, as a
/// function of the module: {hi, lo, q}.
Function *largeReduction(Module &mod) {
  const char *name = "hsnn.math.rem_pio2.large";
  if (Function *f = mod.getFunction(name))
    return f;
  LLVMContext &ctx = mod.getContext();
  Type *d = Type::getDoubleTy(ctx), *i64 = Type::getInt64Ty(ctx), *i32 = Type::getInt32Ty(ctx);
  auto *ret = StructType::get(ctx, {d, d, i64});
  Function *f = Function::Create(FunctionType::get(ret, {d}, false), GlobalValue::InternalLinkage, name, mod);
  f->setDoesNotThrow();
  f->addFnAttr(Attribute::NoInline); // cold: keep it out of the kernels' loops
  auto *tableType = ArrayType::get(i32, std::size(kTwoOverPi));
  auto *table = new GlobalVariable(mod, tableType, true, GlobalValue::InternalLinkage,
                                   ConstantDataArray::get(ctx, ArrayRef(kTwoOverPi)), "hsnn.math.two_over_pi");
  IRBuilder<> b(BasicBlock::Create(ctx, "entry", f));
  MathEmitter m(b, d);
  auto u64 = [&](uint64_t v) { return b.getInt64(v); };
  Value *x = f->getArg(0);
  Value *bits = m.bits(m.fabs(x));
  Value *e = b.CreateSub(b.CreateLShr(bits, 52), u64(1075)); // x = mant 2^e
  Value *mant = b.CreateOr(b.CreateAnd(bits, u64((1ull << 52) - 1)), u64(1ull << 52));
  Value *j0 = b.CreateSelect(b.CreateICmpSGE(e, u64(2)), b.CreateAShr(b.CreateSub(e, u64(2)), 5), u64(0));
  // The 256-bit window w0 (most significant) .. w7 times mant, in 32-bit
  // digits D0 (least significant) .. D9: every partial product below 2^64.
  Value *mlo = b.CreateAnd(mant, u64(0xffffffff)), *mhi = b.CreateLShr(mant, 32);
  Value *lowProducts[8], *highProducts[8];
  for (unsigned i = 0; i < 8; ++i) {
    Value *at = b.CreateAdd(j0, u64(7 - i)); // digit position i holds word 7 - i
    Value *w = b.CreateZExt(
        b.CreateLoad(i32, b.CreateInBoundsGEP(tableType, table, {b.getInt64(0), at})), i64);
    lowProducts[i] = b.CreateMul(mlo, w);
    highProducts[i] = b.CreateMul(mhi, w);
  }
  auto lo32 = [&](Value *v) { return b.CreateAnd(v, u64(0xffffffff)); };
  auto hi32 = [&](Value *v) { return b.CreateLShr(v, 32); };
  auto *digitsType = ArrayType::get(i64, 11);
  Value *digits = b.CreateAlloca(digitsType);
  Value *carry = u64(0);
  for (unsigned dgt = 0; dgt < 11; ++dgt) {
    Value *sum = carry;
    if (dgt < 8)
      sum = b.CreateAdd(sum, lo32(lowProducts[dgt]));
    if (dgt >= 1 && dgt - 1 < 8)
      sum = b.CreateAdd(b.CreateAdd(sum, hi32(lowProducts[dgt - 1])), lo32(highProducts[dgt - 1]));
    if (dgt >= 2 && dgt - 2 < 8)
      sum = b.CreateAdd(sum, hi32(highProducts[dgt - 2]));
    b.CreateStore(lo32(sum), b.CreateInBoundsGEP(digitsType, digits, {b.getInt64(0), b.getInt64(dgt)}));
    carry = hi32(sum);
  }
  // x 2/pi = P 2^-sh: bits [sh, sh + 2) are q mod 4, the 128 below the fraction.
  Value *sh = b.CreateSub(b.CreateShl(b.CreateAdd(j0, u64(8)), 5), e);
  auto bitsAt = [&](Value *p, unsigned width) { // bits [p, p + width) of P, width <= 32
    Value *di = b.CreateLShr(p, 5), *bo = b.CreateAnd(p, u64(31));
    auto digit = [&](Value *i) {
      return b.CreateLoad(i64, b.CreateInBoundsGEP(digitsType, digits, {b.getInt64(0), i}));
    };
    Value *pair = b.CreateOr(b.CreateShl(digit(b.CreateAdd(di, u64(1))), 32), digit(di));
    return b.CreateAnd(b.CreateLShr(pair, bo), u64((1ull << width) - 1));
  };
  Value *q = bitsAt(sh, 2);
  Value *f3 = bitsAt(b.CreateSub(sh, u64(32)), 32), *f2 = bitsAt(b.CreateSub(sh, u64(64)), 32);
  Value *f1 = bitsAt(b.CreateSub(sh, u64(96)), 32), *f0 = bitsAt(b.CreateSub(sh, u64(128)), 32);
  // The fraction as a signed 128-bit number A 2^64 + B in [-1/2, 1/2)
  // turns: where its top bit is set it is read as f - 1 and q counts one more.
  Value *a = b.CreateOr(b.CreateShl(f3, 32), f2), *bLow = b.CreateOr(b.CreateShl(f1, 32), f0);
  q = b.CreateAdd(q, b.CreateLShr(a, 63));
  auto exact = [&](Value *v, bool isSigned, double scale) {
    return m.mul(isSigned ? b.CreateSIToFP(v, d) : b.CreateUIToFP(v, d), m.c(scale));
  };
  Value *aHi = exact(b.CreateAShr(a, 22), true, 0x1p-42), *aLo = exact(b.CreateAnd(a, u64(0x3fffff)), false, 0x1p-64);
  Value *bHi = exact(b.CreateLShr(bLow, 22), false, 0x1p-106), *bLo = exact(b.CreateAnd(bLow, u64(0x3fffff)), false, 0x1p-128);
  DoubleWord t = m.twoSum(aHi, aLo);
  DoubleWord t2 = m.twoSum(t.hi, bHi);
  DoubleWord frac = m.fastTwoSum(t2.hi, m.add(m.add(t.lo, t2.lo), bLo));
  // times pi/2 in double-double
  DoubleWord p = m.twoProd(frac.hi, m.c(kPio2Hi));
  Value *plo = m.add(p.lo, m.fma(frac.hi, m.c(kPio2Lo), m.mul(frac.lo, m.c(kPio2Hi))));
  DoubleWord r = m.fastTwoSum(p.hi, plo);
  Value *negative = m.signBit(x);
  Value *out = UndefValue::get(ret);
  out = b.CreateInsertValue(out, m.select(negative, m.neg(r.hi), r.hi), 0);
  out = b.CreateInsertValue(out, m.select(negative, m.neg(r.lo), r.lo), 1);
  out = b.CreateInsertValue(out, b.CreateSelect(negative, b.CreateNeg(q), q), 2);
  b.CreateRet(out);
  return f;
}

/// Cody-Waite for floats from kFloatLimit to kMediumLimit, in float: pi/2
/// in three full-length parts, x - k p0 exact as in reduceShort, k p1
/// taken exactly as TwoProd and subtracted as TwoSum (either may be the
/// larger), k p2 and the error terms summed into lo.
Reduced reduceMediumFloat(MathEmitter &m, Value *x) {
  auto [nk, q] = nearestQuadrant(m, x);
  Value *r0 = m.fma(nk, m.c(kPio2Medium32[0]), x);
  DoubleWord t = m.twoProd(nk, m.c(kPio2Medium32[1]));
  DoubleWord s = m.twoSum(r0, t.hi);
  Value *lo = m.fma(nk, m.c(kPio2Medium32[2]), m.add(s.lo, t.lo));
  DoubleWord r = m.fastTwoSum(s.hi, lo);
  return {r.hi, r.lo, q};
}

/// {hi, lo, q} with the lanes of x past kMediumLimit reduced again by
/// largeReduction (in double; a double-float for floats), the others kept: a
/// function of its own, out of line and cold, so that each use of sin or cos
/// inlines only the test and a call.
Function *largeLanes(Module &mod, Type *t, Type *it, const std::string &name, StructType *ret) {
  if (Function *f = mod.getFunction(name))
    return f;
  LLVMContext &ctx = mod.getContext();
  Function *f = Function::Create(FunctionType::get(ret, {t, t, t, it}, false), GlobalValue::InternalLinkage, name, mod);
  f->setDoesNotThrow();
  f->addFnAttr(Attribute::NoInline);
  f->addFnAttr(Attribute::Cold);
  IRBuilder<> b(BasicBlock::Create(ctx, "entry", f));
  MathEmitter m(b, t);
  bool f32 = m.isF32();
  auto *vt = dyn_cast<FixedVectorType>(t);
  Value *x = f->getArg(0), *hi = f->getArg(1), *lo = f->getArg(2), *q = f->getArg(3);
  Value *ax = m.fabs(x);
  Value *large = b.CreateAnd(b.CreateFCmpOGE(ax, m.c(kMediumLimit)), b.CreateFCmpOLT(ax, m.c(HUGE_VAL)));
  Function *one = largeReduction(mod);
  unsigned lanes = vt ? vt->getNumElements() : 1;
  for (unsigned l = 0; l < lanes; ++l) {
    auto lane = [&](Value *v) { return vt ? b.CreateExtractElement(v, l) : v; };
    auto put = [&](Value *into, Value *v) { return vt ? b.CreateInsertElement(into, v, l) : v; };
    Value *isLarge = lane(large);
    // Lanes not past the limit ask for a harmless input and keep Cody-Waite's answer.
    Value *in = b.CreateSelect(isLarge, b.CreateFPExt(lane(x), b.getDoubleTy()),
                               ConstantFP::get(b.getDoubleTy(), kMediumLimit));
    Value *res = b.CreateCall(one, {in});
    Value *rhi = b.CreateExtractValue(res, 0), *rlo = b.CreateExtractValue(res, 1);
    Value *rq = b.CreateExtractValue(res, 2);
    if (f32) {
      Value *hiF = b.CreateFPTrunc(rhi, b.getFloatTy());
      rlo = b.CreateFPTrunc(b.CreateFAdd(b.CreateFSub(rhi, b.CreateFPExt(hiF, b.getDoubleTy())), rlo), b.getFloatTy());
      rhi = hiF;
      rq = b.CreateTrunc(rq, b.getInt32Ty());
    }
    hi = put(hi, b.CreateSelect(isLarge, rhi, lane(hi)));
    lo = put(lo, b.CreateSelect(isLarge, rlo, lane(lo)));
    q = put(q, b.CreateSelect(isLarge, rq, lane(q)));
  }
  Value *out = UndefValue::get(ret);
  out = b.CreateInsertValue(out, hi, 0);
  out = b.CreateInsertValue(out, lo, 1);
  b.CreateRet(b.CreateInsertValue(out, q, 2));
  return f;
}

/// x = q pi/2 + hi + lo for floats or doubles (scalar or vector): Cody-Waite,
/// and where a lane is past kMediumLimit, that lane again through
/// largeReduction (in double; a double-float for floats); a float lane past
/// kFloatLimit first by reduceMediumFloat. The branches live in
/// an always-inlined function of its own, so the kernels' emitters see
/// straight-line code.
Reduced reduce(MathEmitter &m, Value *x) {
  Module &mod = *m.module();
  Type *t = m.t;
  bool f32 = m.isF32();
  auto *vt = dyn_cast<FixedVectorType>(t);
  std::string name = fmt::format("hsnn.math.rem_pio2.{}{}", f32 ? "f" : "d", vt ? vt->getNumElements() : 1u);
  Function *f = mod.getFunction(name);
  Type *it = m.it;
  auto *ret = StructType::get(t->getContext(), {t, t, it});
  if (!f) {
    LLVMContext &ctx = mod.getContext();
    f = Function::Create(FunctionType::get(ret, {t}, false), GlobalValue::InternalLinkage, name, mod);
    f->setDoesNotThrow();
    f->addFnAttr(Attribute::AlwaysInline);
    IRBuilder<> b(BasicBlock::Create(ctx, "entry", f));
    MathEmitter fm(b, t);
    Value *fx = f->getArg(0);
    // |x| at or past `limit` (and below inf) as one unsigned compare of
    // its bits (the integer units have room; the FMA units, which take
    // float compares, do not).
    Value *magnitude = b.CreateAnd(fm.bits(fx), fm.ci(f32 ? 0x7fffffff : 0x7fffffffffffffff));
    auto atLeast = [&](double limit) {
      Value *lim = fm.bits(fm.c(limit)), *inf = fm.bits(fm.c(HUGE_VAL));
      return b.CreateICmpULT(b.CreateSub(magnitude, lim), b.CreateSub(inf, lim));
    };
    MDNode *rare = MDBuilder(ctx).createBranchWeights(1, 1000);
    // `in`, or slowPath(in) where some lane is in `lanes`: a rarely taken block.
    auto rarely = [&](Value *lanes, Reduced in, function_ref<Reduced(Reduced)> slowPath) -> Reduced {
      BasicBlock *from = b.GetInsertBlock(), *slow = BasicBlock::Create(ctx, "large", f),
                 *done = BasicBlock::Create(ctx, "done", f);
      b.CreateCondBr(vt ? b.CreateOrReduce(lanes) : lanes, slow, done, rare);
      b.SetInsertPoint(slow);
      Reduced out = slowPath(in);
      BasicBlock *slowEnd = b.GetInsertBlock();
      b.CreateBr(done);
      b.SetInsertPoint(done);
      auto merge = [&](Value *fast, Value *fromSlow) {
        PHINode *phi = b.CreatePHI(fast->getType(), 2);
        phi->addIncoming(fast, from);
        phi->addIncoming(fromSlow, slowEnd);
        return phi;
      };
      return {merge(in.hi, out.hi), merge(in.lo, out.lo), merge(in.q, out.q)}; // the phis first
    };
    auto payneHanek = [&](Reduced in) -> Reduced {
      Value *fromLanes = b.CreateCall(largeLanes(mod, t, it, name + ".lanes", ret), {fx, in.hi, in.lo, in.q});
      return {b.CreateExtractValue(fromLanes, 0), b.CreateExtractValue(fromLanes, 1), b.CreateExtractValue(fromLanes, 2)};
    };
    Reduced r;
    if (f32) {
      Value *wide = atLeast(kFloatLimit);
      r = rarely(wide, reduceShort(fm, fx), [&](Reduced in) {
        Reduced d = reduceMediumFloat(fm, fx);
        Reduced mixed{fm.select(wide, d.hi, in.hi), fm.select(wide, d.lo, in.lo), b.CreateSelect(wide, d.q, in.q)};
        return rarely(atLeast(kMediumLimit), mixed, payneHanek);
      });
    } else {
      r = rarely(atLeast(kMediumLimit), reduceShort(fm, fx), payneHanek);
    }
    Value *parts[] = {r.hi, r.lo, r.q};
    Value *out = UndefValue::get(ret);
    for (unsigned k = 0; k < 3; ++k)
      out = b.CreateInsertValue(out, parts[k], k);
    b.CreateRet(out);
  }
  Value *res = m.b.CreateCall(f, {x});
  return {m.b.CreateExtractValue(res, 0), m.b.CreateExtractValue(res, 1), m.b.CreateExtractValue(res, 2)};
}

/// sin(r) and cos(r) for r = hi + lo, |r| <= pi/4 (lo may be 0).
std::pair<Value *, Value *> sinCosKernel(MathEmitter &m, Value *hi, Value *lo) {
  bool f32 = m.isF32();
  Value *z = m.mul(hi, hi);
  Value *sz = f32 ? m.horner(z, ArrayRef(kSinF32)) : m.horner(z, ArrayRef(kSinF64));
  Value *cz = f32 ? m.horner(z, ArrayRef(kCosF32)) : m.horner(z, ArrayRef(kCosF64));
  // sin(hi + lo) = sin(hi) + lo cos(hi), cos(hi + lo) = cos(hi) - lo sin(hi), to first order in lo.
  Value *hz = m.mul(m.c(0.5), z);
  Value *sinTail = m.fma(m.mul(hi, z), sz, m.fma(m.neg(hz), lo, lo));
  Value *sin = m.add(hi, sinTail);
  Value *w = m.sub(m.c(1), hz);
  Value *cosTail = m.add(m.sub(m.sub(m.c(1), w), hz), m.fma(m.mul(z, z), cz, m.neg(m.mul(hi, lo))));
  Value *cos = m.add(w, cosTail);
  return {sin, cos};
}

/// sin(r) where `useCos` is false, else cos(r), for r = hi + lo, |r| <= pi/4:
/// sinCosKernel's forms with one polynomial per lane, its coefficients
/// chosen by the lane, as
///   sin: hi + fma(hi z, S(z), lo - hz lo),
///   cos: w  + fma(z^2, C(z), ((1 - w) - hz) - hi lo).
/// Half the polynomial work of computing both (measured faster on sin f32).
Value *sinOrCosKernel(MathEmitter &m, Value *hi, Value *lo, Value *useCos) {
  bool f32 = m.isF32();
  Value *z = m.mul(hi, hi);
  size_t n = f32 ? std::size(kSinF32) : std::size(kSinF64);
  static_assert(std::size(kSinF32) == std::size(kCosF32) && std::size(kSinF64) == std::size(kCosF64));
  auto coefficient = [&](size_t i) {
    return m.select(useCos, m.c(f32 ? kCosF32[i] : kCosF64[i]), m.c(f32 ? kSinF32[i] : kSinF64[i]));
  };
  Value *p = coefficient(n - 1);
  for (size_t i = n - 1; i-- > 0;)
    p = m.fma(p, z, coefficient(i));
  Value *hz = m.mul(m.c(0.5), z);
  Value *w = m.sub(m.c(1), hz);
  Value *cosB = m.sub(m.sub(m.sub(m.c(1), w), hz), m.mul(hi, lo));
  Value *sinB = m.fma(m.neg(hz), lo, lo);
  Value *mul = m.select(useCos, m.mul(z, z), m.mul(hi, z));
  return m.add(m.select(useCos, w, hi), m.fma(mul, p, m.select(useCos, cosB, sinB)));
}

enum class Trig { Sin, Cos, Tan };

Value *trig(IRBuilder<> &b, Value *x, Trig which) {
  MathEmitter m(b, x->getType());
  auto [hi, lo, q] = reduce(m, x);
  if (which == Trig::Cos)
    q = b.CreateAdd(q, m.ci(1)); // cos(x) = sin(x + pi/2)
  Value *odd = b.CreateICmpNE(b.CreateAnd(q, m.ci(1)), m.ci(0));
  if (which == Trig::Tan) {
    auto [s, c] = sinCosKernel(m, hi, lo);
    // -c/s or s/c with one division: the operands picked first.
    return m.select(m.eq(x, m.c(0)), x, m.div(m.select(odd, m.neg(c), s), m.select(odd, s, c)));
  }
  Value *v = sinOrCosKernel(m, hi, lo, odd);
  // Negated in quadrants 2 and 3: q's bit 1 moved to the sign (integer
  // operations, as the test for +-0 below).
  unsigned width = m.it->getScalarSizeInBits();
  v = m.fromBits(b.CreateXor(m.bits(v), b.CreateShl(b.CreateAnd(q, m.ci(2)), width - 2)));
  if (which == Trig::Cos)
    return v;
  Value *zero = b.CreateICmpEQ(b.CreateShl(m.bits(x), 1), m.ci(0));
  return m.select(zero, x, v); // sin(-0) = -0
}

/// atan2(y, x) for y >= 0 given as its magnitude, x's sign as a flag: in [0, pi].
Value *atan2OfMagnitudes(MathEmitter &m, Value *ay, Value *ax, Value *xNegative) {
  Value *swap = m.gt(ay, ax);
  Value *num = m.select(swap, ax, ay), *den = m.select(swap, ay, ax);
  Value *a = m.div(num, den);
  a = m.select(m.eq(num, m.c(0)), m.c(0), a); // atan2(0, 0)
  a = m.select(m.b.CreateAnd(m.eq(num, m.c(HUGE_VAL)), m.eq(den, m.c(HUGE_VAL))), m.c(1), a); // atan2(inf, inf)
  Value *shifted = m.gt(a, m.c(kTanPiOver8));
  Value *u = m.select(shifted, m.div(m.sub(a, m.c(1)), m.add(a, m.c(1))), a);
  Value *z = m.mul(u, u);
  Value *atanU = m.add(u, m.fma(m.mul(u, z), m.hornerEvenOdd(z, ArrayRef(kAtanF64)), m.select(shifted, m.c(kPio4Lo), m.c(0))));
  Value *t = m.add(m.select(shifted, m.c(kPio4Hi), m.c(0)), atanU);
  // base + sign t: atan2 = t, pi/2 - t, pi - t or pi/2 + t by quadrant.
  Value *baseHi = m.select(swap, m.c(kPio2Hi), m.select(xNegative, m.c(kPiHi), m.c(0)));
  Value *baseLo = m.select(swap, m.c(kPio2Lo), m.select(xNegative, m.c(kPiLo), m.c(0)));
  Value *minus = m.b.CreateXor(swap, xNegative);
  Value *r = m.add(baseHi, m.add(m.select(minus, m.neg(t), t), baseLo));
  return m.select(m.b.CreateFCmpUNO(ay, ax), m.c(NAN), r);
}

/// sqrt((1 - x)(1 + x)) = sqrt(1 - x^2) without cancellation.
Value *cosOfArcsin(MathEmitter &m, Value *x) { return m.sqrt(m.mul(m.sub(m.c(1), x), m.add(m.c(1), x))); }

} // namespace

Value *emitSin(IRBuilder<> &b, Value *x) { return trig(b, x, Trig::Sin); }
Value *emitCos(IRBuilder<> &b, Value *x) { return trig(b, x, Trig::Cos); }
Value *emitTan(IRBuilder<> &b, Value *x) { return trig(b, x, Trig::Tan); }

Value *emitAtan2(IRBuilder<> &b, Value *y, Value *x) {
  MathEmitter m(b, y->getType());
  return m.copysign(atan2OfMagnitudes(m, m.fabs(y), m.fabs(x), m.signBit(x)), y);
}

Value *emitAtan(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  return m.copysign(atan2OfMagnitudes(m, m.fabs(x), m.c(1), ConstantInt::getFalse(m.it->getWithNewType(b.getInt1Ty()))),
                    x);
}

Value *emitAsin(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  Value *noSign = ConstantInt::getFalse(m.it->getWithNewType(b.getInt1Ty()));
  return m.copysign(atan2OfMagnitudes(m, m.fabs(x), cosOfArcsin(m, x), noSign), x);
}

Value *emitAcos(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  return atan2OfMagnitudes(m, cosOfArcsin(m, x), m.fabs(x), m.signBit(x));
}

} // namespace hsnn::detail
