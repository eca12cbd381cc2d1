//===- lib/CodeGen/InlineMath.cpp - exp, log and their kin as IR ----------===//
//
// The exponential and logarithm family of hsnn's math library, and the
// dispatch from a libm name to the library's function. Every function is
// written once over MathEmitter, so the CPU's vectors and the GPU's scalars
// run the same IEEE operations in the same order and get the same bits.
//
// exp: k = round(x/ln2), r = x - k ln2 (Cody-Waite, exact for the k that
// occur), exp(r) = 1 + r P(r) rounded once, times 2^k applied as two powers
// of two (scaleByPow2). 0.89 ulp worst over every float, and faster than
// glibc's _ZGVeN16v_expf and _ZGVeN8v_exp on one thread, sigmoid most of
// all (the DEVLOG has the runs).
//
// log and log1p: v = 2^k m with m in [sqrt(1/2), sqrt(2)), f = m - 1 exact
// by Sterbenz, log(v) = k ln2 + log1p(f). Floats: f + f^2 Q(f), a degree-8
// fit (every float checked against glibc's double log and log1p: 1 ulp
// worst). Doubles: s = f/(2 + f), log1p(f) = f - (f^2/2 - s (f^2/2 + R(s^2)))
// with R the series of 2 atanh(s)/s - 2 (Taylor's terms to s^28). log1p first
// writes 1 + x = hi + lo exactly (TwoSum) and
// adds lo 2^-k to f: what rounding hi dropped.
//
// expm1: the same reduction as exp, expm1(r) = r + r^2 Q(r) with exp's
// polynomial shifted by one degree, and 2^k (1 + p) - 1 = 2^k p + (2^k - 1)
// with both terms exact, so the one rounding is the last one.
//===----------------------------------------------------------------------===//
#include "InlineMath.h"
#include "MathEmitter.h"

#include <llvm/IR/MDBuilder.h>

#include <fmt/format.h>

#include <bit>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>

namespace hsnn::detail {

using namespace llvm;

namespace {

// (exp(r) - 1)/r on [-ln2/2, ln2/2], lowest degree first.
constexpr float kExpP[] = {1.0f, 0x1.fffff8p-2f, 0x1.55548ep-3f, 0x1.555b96p-5f, 0x1.123bccp-7f, 0x1.68532cp-10f};
// The same in double, 1 + r Q(r) with Q = (expm1(r) - r)/r^2 fitted for
// relative error (tools/math-coefficients.py expq64): P within 2^-59.7 of
// itself and Q, which expm1 uses, within 2^-57.2, with one coefficient fewer
// than Taylor's 1/(n+1)! to n = 12 (2^-58).
constexpr double kExpP64[] = {1.0,
                              0x1p-1,
                              0x1.5555555555557p-3,
                              0x1.555555555554ep-5,
                              0x1.11111111100eep-7,
                              0x1.6c16c16c1a07ep-10,
                              0x1.a01a01abdeff1p-13,
                              0x1.a01a01905e698p-16,
                              0x1.71de024b46d83p-19,
                              0x1.27e510e396201p-22,
                              0x1.af4db89e3bc2ap-26,
                              0x1.1f19e523470d3p-29};

// (log1p(f) - f)/f^2 on [sqrt(1/2) - 1, sqrt(2) - 1], lowest degree first:
// a degree-8 fit for the relative error of f + f^2 Q(f) (2^-27.9 before
// the coefficients were rounded to float).
constexpr float kLog1pQ[] = {-0x1.fffff8p-2f, 0x1.55555p-2f,   -0x1.000428p-2f, 0x1.99a402p-3f, -0x1.54274p-3f,
                             0x1.22708ap-3f,  -0x1.0f379ep-3f, 0x1.084e74p-3f,  -0x1.383d74p-4f};
// 2/(2j + 3) for j = 0..13: 2 atanh(s)/s - 2 = s^2 R(s^2), the remainder
// below 2^-70 of the sum for |s| <= 0.172 (pow's double-double log needs
// that much); log takes the first kLogTerms, whose remainder is 2^-58.
constexpr double kAtanhSeries[] = {2.0 / 3,  2.0 / 5,  2.0 / 7,  2.0 / 9,  2.0 / 11, 2.0 / 13, 2.0 / 15,
                                   2.0 / 17, 2.0 / 19, 2.0 / 21, 2.0 / 23, 2.0 / 25, 2.0 / 27, 2.0 / 29};
constexpr size_t kLogTerms = 10;

const double kInf = std::numeric_limits<double>::infinity(), kNaN = std::numeric_limits<double>::quiet_NaN();

} // namespace

Value *withRareLanes(MathEmitter &m, StringRef name, Value *x, MathBody special, MathBody ordinary, MathBody full) {
  Module &mod = *m.module();
  LLVMContext &ctx = mod.getContext();
  Type *t = m.t;
  auto *vt = dyn_cast<FixedVectorType>(t);
  std::string base = fmt::format("hsnn.math.{}.{}{}", std::string_view(name), m.isF32() ? "f" : "d",
                                 vt ? vt->getNumElements() : 1u);
  auto *type = FunctionType::get(t, {t}, false);
  auto define = [&](const std::string &fname) {
    Function *f = Function::Create(type, GlobalValue::InternalLinkage, fname, mod);
    f->setDoesNotThrow();
    return f;
  };
  Function *slow = mod.getFunction(base + ".full");
  if (!slow) {
    slow = define(base + ".full");
    slow->addFnAttr(Attribute::NoInline);
    slow->addFnAttr(Attribute::Cold);
    IRBuilder<> b(BasicBlock::Create(ctx, "entry", slow));
    MathEmitter sm(b, t);
    b.CreateRet(full(sm, slow->getArg(0)));
  }
  Function *f = mod.getFunction(base);
  if (!f) {
    f = define(base);
    f->addFnAttr(Attribute::AlwaysInline);
    BasicBlock *entry = BasicBlock::Create(ctx, "entry", f), *rare = BasicBlock::Create(ctx, "special", f),
               *done = BasicBlock::Create(ctx, "done", f);
    IRBuilder<> b(entry);
    MathEmitter fm(b, t);
    Value *fx = f->getArg(0);
    Value *fast = ordinary(fm, fx);
    Value *any = special(fm, fx);
    if (vt)
      any = b.CreateOrReduce(any);
    b.CreateCondBr(any, rare, done, MDBuilder(ctx).createBranchWeights(1, 1000));
    b.SetInsertPoint(rare);
    Value *all = b.CreateCall(slow, {fx});
    b.CreateBr(done);
    b.SetInsertPoint(done);
    PHINode *phi = b.CreatePHI(t, 2);
    phi->addIncoming(fast, entry);
    phi->addIncoming(all, rare);
    b.CreateRet(phi);
  }
  return m.b.CreateCall(f, {x});
}

Value *withRareLanes(MathEmitter &m, StringRef name, Value *x, MathBody special, RestrictableBody body) {
  return withRareLanes(
      m, name, x, special, [body](MathEmitter &e, Value *v) { return body(e, v, true); },
      [body](MathEmitter &e, Value *v) { return body(e, v, false); });
}

Value *expm1OverR(MathEmitter &m, Value *r) {
  return m.isF32() ? m.horner(r, ArrayRef(kExpP)) : m.hornerEvenOdd(r, ArrayRef(kExpP64));
}

namespace {
Value *expFull(MathEmitter &m, Value *x) {
  // Past these, the result is 0 or inf anyway; NaN passes through.
  x = m.isF32() ? m.clamp(x, -104, 89) : m.clamp(x, -746, 710);
  auto [k, r] = m.reduceLn2(x);
  return m.scaleByPow2(m.fma(expm1OverR(m, r), r, m.c(1)), k);
}
} // namespace

// Where |x| <= 87 (floats) or 708 (doubles), and for NaN, the result and
// 2^k are normal: no clamps, and 2^k in one factor, as exact as
// scaleByPow2's two there. Past those, expFull, rarely.
Value *emitExp(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  return withRareLanes(
      m, "exp", x, [](MathEmitter &e, Value *v) { return e.gt(e.fabs(v), e.c(e.isF32() ? 87 : 708)); },
      [](MathEmitter &e, Value *v) {
        auto [k, r] = e.reduceLn2(v);
        return e.mul(e.fma(expm1OverR(e, r), r, e.c(1)), e.pow2(k));
      },
      expFull);
}

namespace {
/// expm1 reduced: x = k ln2 + r, expm1(r) = p (one rounding in p's last
/// FMA).
std::pair<Value *, Value *> expm1Reduced(MathEmitter &m, Value *x) {
  auto [k, r] = m.reduceLn2(x);
  Value *q = m.isF32() ? m.horner(r, ArrayRef(kExpP).drop_front()) : m.hornerEvenOdd(r, ArrayRef(kExpP64).drop_front());
  return {k, m.fma(m.mul(r, r), q, r)};
}
/// 2^k (1 + p) - 1 as 2^k p + (2^k - 1), both terms exact (k <= mantissa
/// + 1), so the one rounding is the last.
Value *expm1Small(MathEmitter &m, Value *k, Value *p) {
  Value *two = m.pow2(k);
  return m.fma(two, p, m.sub(two, m.c(1)));
}
} // namespace

Value *expm1NonPositive(MathEmitter &m, Value *x) {
  auto [k, p] = expm1Reduced(m, x);
  return expm1Small(m, k, p);
}

Value *emitExpm1(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  bool f32 = m.isF32();
  // Below these, expm1 rounds to -1; above them it is inf.
  x = f32 ? m.clamp(x, -18, 89) : m.clamp(x, -40, 710);
  auto [k, p] = expm1Reduced(m, x);
  // 2^k - 1 is exact up to k = mantissa + 1; past a few more the -1 is
  // below half an ulp and 2^k (1 + p) is the answer.
  int exactUpTo = int(m.mantissaBits()) + 4;
  Value *large = b.CreateICmpSGT(k, m.ci(exactUpTo));
  Value *small = expm1Small(m, b.CreateSelect(large, m.ci(exactUpTo), k), p);
  Value *res = m.select(large, m.scaleByPow2(m.add(p, m.c(1)), k), small);
  return m.select(m.eq(x, m.c(0)), x, res); // -0 stays -0
}

namespace {
struct NearOne {
  Value *k, *mant; // v = 2^k mant, mant in [sqrt(1/2), sqrt(2))
};
NearOne splitNearOne(MathEmitter &m, Value *v) {
  int64_t sqrtHalf = m.isF32() ? int64_t(std::bit_cast<uint32_t>(0x1.6a09e6p-1f))
                               : int64_t(std::bit_cast<uint64_t>(0x1.6a09e667f3bcdp-1));
  Value *bits = m.bits(v);
  Value *k = m.b.CreateAShr(m.b.CreateSub(bits, m.ci(sqrtHalf)), m.mantissaBits());
  return {k, m.fromBits(m.b.CreateSub(bits, m.b.CreateShl(k, m.mantissaBits())))};
}

/// log(2^k (1 + f)) for f in [sqrt(1/2) - 1, sqrt(2) - 1].
Value *logOfSplit(MathEmitter &m, Value *k, Value *f) {
  Value *kf = m.b.CreateSIToFP(k, m.t);
  if (m.isF32()) {
    Value *r = m.fma(m.mul(f, f), m.hornerEvenOdd(f, ArrayRef(kLog1pQ)), f);
    return m.fma(kf, m.c(0x1.62e43p-1f), m.fma(kf, m.c(-0x1.05c61p-29f), r));
  }
  Value *s = m.div(f, m.add(m.c(2), f));
  Value *z = m.mul(s, s);
  Value *hfsq = m.mul(m.mul(m.c(0.5), f), f);
  Value *rz = m.mul(z, m.hornerEvenOdd(z, ArrayRef(kAtanhSeries).take_front(kLogTerms)));
  Value *tail = m.fma(s, m.add(hfsq, rz), m.mul(kf, m.c(0x1.ef35793c76730p-45))); // s (hfsq + R) + k ln2lo
  return m.fma(kf, m.c(0x1.62e42fefa3800p-1), m.sub(f, m.sub(hfsq, tail)));
}
} // namespace

namespace {
// Below this, log1p's 2^-k is normal (k < bias), so it needs no clamp.
double log1pHugeFrom(const MathEmitter &m) { return m.isF32() ? 0x1p100 : 0x1p1000; }

/// log1p(x) from 1 + x = hi + lo (exact) for x > -1 but -0, NaN and inf
/// (which give +0, NaN and NaN); for x below log1pHugeFrom unless `huge`.
Value *log1pOfSum(MathEmitter &m, DoubleWord onePlusX, bool huge) {
  IRBuilder<> &b = m.b;
  Value *hi = onePlusX.hi, *lo = onePlusX.lo;
  NearOne s = splitNearOne(m, hi);
  // lo 2^-k, with 2^-k = 0 where k is past the exponent's range (lo no
  // longer counts there).
  Value *e = b.CreateSub(m.ci(m.bias()), s.k);
  if (huge)
    e = b.CreateSelect(b.CreateICmpSLT(e, m.ci(0)), m.ci(0), e);
  Value *f = m.add(m.sub(s.mant, m.c(1)), m.mul(lo, m.fromBits(b.CreateShl(e, m.mantissaBits()))));
  return logOfSplit(m, s.k, f); // NaN passes through lo
}

Value *log1pOrdinary(MathEmitter &m, Value *x, bool huge) {
  return log1pOfSum(m, m.twoSum(x, m.c(1)), huge); // what rounding hi dropped, exactly
}

/// log1p with its limits: x = -0, inf, -1 and below -1.
Value *log1pFull(MathEmitter &m, Value *x) {
  Value *r = log1pOrdinary(m, x, true);
  r = m.select(m.eq(x, m.c(0)), x, r); // -0 stays -0
  r = m.select(m.eq(x, m.c(kInf)), x, r);
  r = m.select(m.eq(x, m.c(-1)), m.c(-kInf), r);
  return m.select(m.lt(x, m.c(-1)), m.c(kNaN), r);
}
} // namespace

// 1 >= x, so Fast2Sum gives TwoSum's pair; no lane is special (NaN passes
// through lo). softplus measured faster so, f32 more than f64, on AVX2 and
// AVX-512, and mish and bce_with_logits with it.
Value *emitLog1pOfUnit(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  return log1pOfSum(m, m.fastTwoSum(m.c(1), x), false);
}

// The limits but -0 apply only to x <= -1, inf and NaN, which go through
// log1pFull with x past log1pHugeFrom (the clamp of 2^-k); zeros are
// common data (relu's), so -0's select stays.
Value *emitLog1p(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  return withRareLanes(
      m, "log1p", x,
      [](MathEmitter &e, Value *v) {
        return e.b.CreateOr(e.b.CreateFCmpULE(v, e.c(-1)), e.b.CreateFCmpUGE(v, e.c(log1pHugeFrom(e))));
      },
      [](MathEmitter &e, Value *v) { return e.select(e.eq(v, e.c(0)), v, log1pOrdinary(e, v, false)); }, log1pFull);
}

namespace {
// Subnormal inputs are scaled by 2^mantissa first, so their exponent field counts.
Value *logFull(MathEmitter &m, Value *x) {
  IRBuilder<> &b = m.b;
  bool f32 = m.isF32();
  Value *tiny = m.lt(x, m.c(f32 ? 0x1p-126 : 0x1p-1022));
  NearOne s = splitNearOne(m, m.select(tiny, m.mul(x, m.c(f32 ? 0x1p23 : 0x1p52)), x));
  Value *k = b.CreateSub(s.k, b.CreateSelect(tiny, m.ci(m.mantissaBits()), m.ci(0)));
  Value *r = logOfSplit(m, k, m.sub(s.mant, m.c(1)));
  r = m.select(m.eq(x, m.c(0)), m.c(-kInf), r);
  r = m.select(m.eq(x, m.c(kInf)), x, r);
  r = m.select(m.lt(x, m.c(0)), m.c(kNaN), r);
  return m.select(m.isNaN(x), x, r);
}
} // namespace

// Only positive normal x take the straight path (the same operations as
// logFull's there); zeros, subnormals, negatives, inf and NaN are one
// unsigned compare of the bits away from it. The special cases' selects
// and the subnormal scaling took about as long as the rest of log (both
// dtypes, AVX-512).
Value *emitLog(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  return withRareLanes(
      m, "log", x,
      [](MathEmitter &e, Value *v) {
        Value *least = e.bits(e.c(e.isF32() ? 0x1p-126 : 0x1p-1022)), *inf = e.bits(e.c(kInf));
        return e.b.CreateICmpUGE(e.b.CreateSub(e.bits(v), least), e.b.CreateSub(inf, least));
      },
      [](MathEmitter &e, Value *v) {
        NearOne s = splitNearOne(e, v);
        return logOfSplit(e, s.k, e.sub(s.mant, e.c(1)));
      },
      logFull);
}

// pow(x, y) = exp(y log|x|) with C99's special cases by selects. Floats:
// in double, where log's error (an ulp of a double) times |y| stays far
// below a float's ulp for every y log|x| whose exp is a float, and the one
// rounding to float is the last. Doubles: log|x| as a double-double
// (logDoubleWord, about 2^-64 relative), y times it as a double-double
// hi + lo, and exp(hi) (1 + lo): an error of |y log x| 2^-64 in the
// exponent, a fraction of an ulp up to the overflow threshold.
namespace {
DoubleWord logDoubleWord(IRBuilder<> &b, MathEmitter &m, Value *x) {
  Value *tiny = m.lt(x, m.c(0x1p-1022));
  NearOne sp = splitNearOne(m, m.select(tiny, m.mul(x, m.c(0x1p52)), x));
  Value *k = b.CreateSIToFP(b.CreateSub(sp.k, b.CreateSelect(tiny, m.ci(52), m.ci(0))), m.t);
  Value *f = m.sub(sp.mant, m.c(1));
  // s = f/(2 + f) as hi + lo: 2 + f = t + tlo exactly, then the residual
  // f - shi (t + tlo) with an FMA.
  DoubleWord t = m.fastTwoSum(m.c(2), f);
  Value *shi = m.div(f, t.hi);
  Value *slo = m.div(m.sub(m.fma(m.neg(shi), t.hi, f), m.mul(shi, t.lo)), t.hi);
  // log1p(f) = 2s + (2/3) s^3 + s^5 R(s^2), the middle term in
  // double-double too: it is up to 1% of the sum, and its rounding would
  // limit the whole to 2^-58.
  DoubleWord z = m.twoProd(shi, shi);
  DoubleWord cube = m.twoProd(z.hi, shi);
  Value *cubeLo = m.fma(m.mul(m.c(3), z.hi), slo, m.fma(z.lo, shi, cube.lo));
  DoubleWord third = m.twoProd(cube.hi, m.c(0x1.5555555555555p-1)); // 2/3 = hi + lo
  Value *thirdLo = m.fma(cube.hi, m.c(0x1.5555555555555p-55), m.fma(cubeLo, m.c(0x1.5555555555555p-1), third.lo));
  Value *rest = m.mul(m.mul(z.hi, cube.hi), m.horner(z.hi, ArrayRef(kAtanhSeries).drop_front()));
  DoubleWord head = m.twoSum(m.add(shi, shi), third.hi);
  Value *tail = m.add(head.lo, m.add(m.add(slo, slo), m.add(thirdLo, rest)));
  DoubleWord sum = m.twoSum(m.mul(k, m.c(0x1.62e42fefa3800p-1)), head.hi);
  Value *lo = m.add(sum.lo, m.fma(k, m.c(0x1.ef35793c76730p-45), tail));
  DoubleWord r = m.fastTwoSum(sum.hi, lo);
  // 0, inf and NaN: log's limits, with no low part.
  Value *limit = b.CreateOr(m.eq(x, m.c(0)), b.CreateFCmpUEQ(x, m.c(kInf)));
  Value *limitValue = m.select(m.eq(x, m.c(0)), m.c(-kInf), x);
  return {m.select(limit, limitValue, r.hi), m.select(limit, m.c(0), r.lo)};
}
} // namespace

Value *emitPow(IRBuilder<> &b, Value *x, Value *y) {
  Type *type = x->getType();
  bool f32 = type->getScalarType()->isFloatTy();
  MathEmitter m(b, type->getWithNewType(b.getDoubleTy()));
  Value *xd = f32 ? b.CreateFPExt(x, m.t) : x, *yd = f32 ? b.CreateFPExt(y, m.t) : y;
  Value *r;
  if (f32) {
    r = emitExp(b, m.mul(yd, emitLog(b, m.fabs(xd))));
  } else {
    DoubleWord l = logDoubleWord(b, m, m.fabs(xd));
    DoubleWord p = m.twoProd(yd, l.hi);
    Value *plo = m.fma(yd, l.lo, p.lo);
    Value *e = emitExp(b, p.hi);
    // Where exp(hi) is 0 or inf (or hi is), lo is no correction (it may be NaN).
    Value *corrected = m.fma(e, plo, e);
    r = m.select(b.CreateAnd(m.lt(m.fabs(e), m.c(kInf)), b.CreateFCmpONE(e, m.c(0))), corrected, e);
  }
  Value *half = m.mul(yd, m.c(0.5));
  Value *yInteger = m.eq(m.floor(yd), yd); // infinities count as even integers
  Value *yOdd = b.CreateAnd(yInteger, b.CreateFCmpUNE(m.floor(half), half));
  r = m.select(b.CreateAnd(m.signBit(xd), yOdd), m.neg(r), r);
  Value *finiteNegative = b.CreateAnd(m.lt(xd, m.c(0)), m.gt(xd, m.c(-kInf)));
  r = m.select(b.CreateAnd(finiteNegative, b.CreateNot(yInteger)), m.c(kNaN), r);
  r = m.select(b.CreateAnd(m.eq(m.fabs(xd), m.c(1)), m.eq(m.fabs(yd), m.c(kInf))), m.c(1), r);
  r = m.select(m.eq(xd, m.c(1)), m.c(1), r);
  r = m.select(m.eq(yd, m.c(0)), m.c(1), r);
  return f32 ? b.CreateFPTrunc(r, type) : r;
}

namespace {
// base^k by repeated squaring with `mul`; none for k = 0.
template <class T, class Mul> std::optional<T> bySquaring(unsigned k, T base, Mul mul) {
  std::optional<T> acc;
  for (; k; k >>= 1) {
    if (k & 1)
      acc = acc ? mul(*acc, base) : base;
    if (k > 1)
      base = mul(base, base);
  }
  return acc;
}

// u**n of floats in double, rounded to float once: at most 8 double
// roundings for |n| <= 16, so within 1 ulp of the true power where glibc's
// vector powf is a call costing many times its expf an element, and more
// again on a negative base. Past float's range in either direction the
// double result is still inf or 0 where the float one is.
Value *floatPowerInDouble(IRBuilder<> &b, Value *u, int n) {
  Type *t = u->getType(), *dt = t->getWithNewType(b.getDoubleTy());
  std::optional<Value *> acc = bySquaring<Value *>(unsigned(std::abs(n)), b.CreateFPExt(u, dt),
                                                   [&](Value *x, Value *y) { return b.CreateFMul(x, y); });
  Value *one = ConstantFP::get(dt, 1.0);
  Value *v = !acc ? one : n < 0 ? b.CreateFDiv(one, *acc) : *acc; // u**0 is 1 for every u, NaN included
  return b.CreateFPTrunc(v, t);
}

// x^n by squaring in double-double: each product carries its rounding
// error exactly (TwoProd with an FMA) to 2^-104 of the value, so the one
// final rounding leaves the result within 1 ulp; x^-n is (1/x)^n with 1/x
// a double-double too (its remainder 1 - qx is exact with an FMA). Where
// that sum is not finite (an infinity, NaN, or a product past DBL_MAX,
// whose error term is then NaN) or the plain product chain alongside it is
// a zero, the plain chain is the answer: it carries C99 pow's infinities,
// zeros and signs. glibc's vector pow is a costly call here (the DEVLOG has
// its time).
Value *doublePowerInDoubleDouble(IRBuilder<> &b, Value *x, int n) {
  Type *t = x->getType();
  MathEmitter m(b, t); // TwoProd's error term is exact only in IEEE arithmetic
  struct Double2 {
    Value *hi, *lo, *plain;
  };
  auto mul = [&](const Double2 &a, const Double2 &c) -> Double2 {
    Value *p = b.CreateFMul(a.hi, c.hi);
    Value *e = m.fma(a.hi, c.hi, b.CreateFNeg(p));
    e = m.fma(a.lo, c.hi, m.fma(a.hi, c.lo, e));
    Value *hi = b.CreateFAdd(p, e);
    return {hi, b.CreateFAdd(b.CreateFSub(p, hi), e), b.CreateFMul(a.plain, c.plain)}; // Fast2Sum: |e| < |p|
  };
  Double2 base{x, m.c(0), x};
  if (n < 0) {
    Value *q = b.CreateFDiv(m.c(1), x);
    base = {q, b.CreateFMul(q, m.fma(b.CreateFNeg(q), x, m.c(1))), q};
  }
  std::optional<Double2> acc = bySquaring(unsigned(std::abs(n)), base, mul);
  if (!acc)
    return m.c(1); // x**0 is 1 for every x, NaN included
  Value *sum = b.CreateFAdd(acc->hi, acc->lo);
  Value *magnitude = m.fabs(sum);
  Value *usable = b.CreateAnd(b.CreateFCmpOLT(magnitude, m.c(kInf)), b.CreateFCmpUNE(acc->plain, m.c(0)));
  return b.CreateSelect(usable, sum, acc->plain);
}
} // namespace

Value *emitIntegerPower(IRBuilder<> &b, Value *x, int n) {
  return x->getType()->getScalarType()->isFloatTy() ? floatPowerInDouble(b, x, n) : doublePowerInDoubleDouble(b, x, n);
}

Value *inDouble(IRBuilder<> &b, Value *x, const std::function<Value *(Value *)> &f) {
  Type *t = x->getType();
  return b.CreateFPTrunc(f(b.CreateFPExt(x, t->getWithNewType(b.getDoubleTy()))), t);
}

Value *emitInlineMath(IRBuilder<> &b, std::string_view name, ArrayRef<Value *> args) {
  using Unary = Value *(IRBuilder<> &, Value *);
  // The float functions computed in double and rounded once: within half
  // an ulp, where a float algorithm of their own is not worth its code.
  static const struct {
    std::string_view name;
    Unary *fn;
    bool floatInDouble;
  } kUnary[] = {{"exp", emitExp, false},     {"expm1", emitExpm1, false}, {"log", emitLog, false},
                {"log1p", emitLog1p, false}, {"erf", emitErf, false},     {"erfc", emitErfc, false},
                {"sin", emitSin, false},     {"cos", emitCos, false},     {"tan", emitTan, true},
                {"tanh", emitTanh, false},   {"sinh", emitSinh, true},    {"cosh", emitCosh, true},
                {"asinh", emitAsinh, true},  {"acosh", emitAcosh, true},  {"atanh", emitAtanh, true},
                {"atan", emitAtan, true},    {"asin", emitAsin, true},    {"acos", emitAcos, true}};
  bool f32 = args[0]->getType()->getScalarType()->isFloatTy();
  if (args.size() == 1)
    for (const auto &u : kUnary)
      if (u.name == name)
        return f32 && u.floatInDouble ? inDouble(b, args[0], [&](Value *v) { return u.fn(b, v); }) : u.fn(b, args[0]);
  if (args.size() == 2 && name == "atan2") {
    if (!f32)
      return emitAtan2(b, args[0], args[1]);
    Type *dt = args[0]->getType()->getWithNewType(b.getDoubleTy());
    return b.CreateFPTrunc(emitAtan2(b, b.CreateFPExt(args[0], dt), b.CreateFPExt(args[1], dt)), args[0]->getType());
  }
  if (args.size() == 2 && name == "pow")
    return emitPow(b, args[0], args[1]);
  return nullptr;
}

} // namespace hsnn::detail
