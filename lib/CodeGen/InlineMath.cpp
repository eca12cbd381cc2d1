//===- lib/CodeGen/InlineMath.cpp - Math functions emitted as IR ----------===//
//
// erfcf: glibc's 16-wide erfcf costs ~65 cycles a vector on the reference
// machine (2.6x its erff), and the accurate gelu is built on it. This one
// measured 7.7 ms against 16.3 ms for 2^24 floats on one thread (both
// 16-wide, AVX-512), and 1.75 ulp worst against 3.1 for glibc's scalar erfcf.
//
// The method (after the rational-in-(a-c)/(a+c) forms of Juffa and of
// Cody): for a = |x|,
//   erfc(a) = exp(-a^2) * R(a) / (1 + 2a),
// where R(a) = (1 + 2a) exp(a^2) erfc(a) rises only from 1 to 1.29 over
// [0, 11], so its polynomial's rounding errors stay small next to 1:
//   R = 1 + t1 * P(t1 - 1),   t1 = 2a/(a + 2) in [0, 1.69],
// a degree-9 P fitted for relative error (0.32 ulp with the coefficients
// rounded to float). The factor t1 makes R - 1 vanish at a = 0 exactly, so
// erfc near 1 does not inherit P's absolute error. Every other factor is
// carried as 1 + (small term) and multiplied out once:
//   - 1/(1 + 2a): d = 1/s for s = fl(1 + 2a), with e = 1 - (s + err) d
//     (err: the exact rounding error of s, d's own error: both exact with
//     an FMA), so 1/(1 + 2a) = d (1 + e) to second order;
//   - exp(-a^2): a^2 = hi + lo exactly (FMA), exp(-hi) = 2^k (1 + u) with
//     Cody-Waite reduction (ln2 in two parts) and a degree-6 polynomial,
//     exp(-lo) = 1 - lo folded into e;
//   - m = d + d w, w = (1 + p)(1 + e)(1 + u) - 1: one rounding near d.
// 2^k (k down to -175) is applied as 2^(k+64) then 2^-64, so results in
// the subnormal range round once. Inputs past 11 are 11 (erfc is 0 in
// float from 10.06), NaN passes through, x < 0 gives 2 - erfc(|x|).
//===----------------------------------------------------------------------===//
#include "InlineMath.h"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>

namespace hsnn::detail {

using namespace llvm;

namespace {

// P(t), t = t1 - 1 in [-1, 0.69], lowest degree first.
constexpr float kErfcP[] = {0x1.1ba03ap-2f,  -0x1.7a9dbap-2f, 0x1.a13314p-3f,  -0x1.44dff4p-5f, -0x1.dc9becp-7f,
                            0x1.aa215cp-8f,  0x1.16d2b2p-9f,  -0x1.c50444p-11f, -0x1.905738p-12f, 0x1.07c89cp-15f};
// (exp(r) - 1)/r on [-ln2/2, ln2/2], lowest degree first.
constexpr float kExpP[] = {1.0f, 0x1.fffff8p-2f, 0x1.55548ep-3f, 0x1.555b96p-5f, 0x1.123bccp-7f, 0x1.68532cp-10f};
// The same in double: Taylor's 1/(n+1)! to n = 12, whose remainder
// (ln2/2)^13/13! is 2^-58 of the result.
constexpr double kExpP64[] = {1.0,
                              0x1.0000000000000p-1,
                              0x1.5555555555555p-3,
                              0x1.5555555555555p-5,
                              0x1.1111111111111p-7,
                              0x1.6c16c16c16c17p-10,
                              0x1.a01a01a01a01ap-13,
                              0x1.a01a01a01a01ap-16,
                              0x1.71de3a556c734p-19,
                              0x1.27e4fb7789f5cp-22,
                              0x1.ae64567f544e4p-26,
                              0x1.1eed8eff8d898p-29,
                              0x1.6124613a86d09p-33};

// (log1p(f) - f)/f^2 on [sqrt(1/2) - 1, sqrt(2) - 1], lowest degree first:
// a degree-8 fit for the relative error of f + f^2 Q(f) (2^-27.9 before
// the coefficients were rounded to float).
constexpr float kLog1pQ[] = {-0x1.fffff8p-2f, 0x1.55555p-2f,   -0x1.000428p-2f, 0x1.99a402p-3f, -0x1.54274p-3f,
                             0x1.22708ap-3f,  -0x1.0f379ep-3f, 0x1.084e74p-3f,  -0x1.383d74p-4f};

class Emitter {
public:
  Emitter(IRBuilder<> &b, Type *t)
      : b_(b), t_(t), fma_(Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(), Intrinsic::fma, {t})) {}

  Value *c(double v) { return ConstantFP::get(t_, v); }
  Value *fma(Value *x, Value *y, Value *z) { return b_.CreateCall(fma_, {x, y, z}); }
  /// x limited to [lo, hi]; NaN stays NaN.
  Value *clamp(Value *x, double lo, double hi) {
    x = b_.CreateSelect(b_.CreateFCmpOLT(x, c(lo)), c(lo), x);
    return b_.CreateSelect(b_.CreateFCmpOGT(x, c(hi)), c(hi), x);
  }
  template <class C> Value *horner(Value *x, ArrayRef<C> coef) {
    Value *acc = c(coef.back());
    for (size_t i = coef.size() - 1; i-- > 0;)
      acc = fma(acc, x, c(coef[i]));
    return acc;
  }

  /// Cody-Waite: x = k ln2 + r with |r| <= ln2/2, r exact for the |k| <= 175
  /// that occur here (ln2's high part has 21 bits). Returns {kf, r}, where kf
  /// holds k in its low mantissa bits (0x1.8p23 + k).
  std::pair<Value *, Value *> reduceLn2(Value *x) {
    Value *kf = fma(x, c(0x1.715476p+0f), c(0x1.8p23f));
    Value *k = b_.CreateFSub(kf, c(0x1.8p23f));
    Value *r = fma(k, c(-0x1.62e43p-1f), x);
    return {kf, fma(k, c(0x1.05c61p-29f), r)};
  }
  /// kf's k as an integer vector.
  Value *exponentOf(Value *kf, Type *it) {
    return b_.CreateSub(b_.CreateBitCast(kf, it), ConstantInt::get(it, 0x4B400000));
  }
  /// p 2^k as p 2^(k/2) 2^(k - k/2): the first product exact, one rounding
  /// in the second, also into the subnormal range and to inf. k's integer
  /// type `it` sets where the exponent field starts and its bias.
  Value *scaleByPow2(Value *p, Value *k, Type *it, unsigned mantissaBits, int bias) {
    Value *k1 = b_.CreateAShr(k, 1), *k2 = b_.CreateSub(k, k1);
    auto pow2 = [&](Value *e) {
      return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(e, ConstantInt::get(it, bias)), mantissaBits), t_);
    };
    return b_.CreateFMul(b_.CreateFMul(p, pow2(k1)), pow2(k2));
  }

private:
  IRBuilder<> &b_;
  Type *t_;
  Function *fma_;
};

} // namespace

Value *emitErfcF32(IRBuilder<> &b, Value *x) {
  IRBuilder<>::FastMathFlagGuard keep(b);
  b.clearFastMathFlags(); // the error terms below are exact only in IEEE arithmetic
  Type *t = x->getType();
  Emitter m(b, t);
  Module *mod = b.GetInsertBlock()->getModule();
  Value *a = b.CreateCall(Intrinsic::getDeclaration(mod, Intrinsic::fabs, {t}), {x});
  a = b.CreateSelect(b.CreateFCmpOLT(m.c(11), a), m.c(11), a); // NaN stays NaN

  Value *t1 = b.CreateFDiv(b.CreateFAdd(a, a), b.CreateFAdd(a, m.c(2)));
  Value *p = b.CreateFMul(m.horner(b.CreateFSub(t1, m.c(1)), ArrayRef(kErfcP)), t1);

  Value *s = m.fma(a, m.c(2), m.c(1));
  Value *err = m.fma(a, m.c(2), b.CreateFSub(m.c(1), s)); // 1 - s is exact for s >= 1
  Value *d = b.CreateFDiv(m.c(1), s);
  Value *e = m.fma(b.CreateFNeg(s), d, m.c(1));
  e = m.fma(b.CreateFNeg(err), d, e);

  Value *hi = b.CreateFMul(a, a);
  Value *lo = m.fma(a, a, b.CreateFNeg(hi));
  e = b.CreateFSub(e, lo); // (1 + e)(1 - lo): e*lo is below 2^-40
  auto [kf, r] = m.reduceLn2(b.CreateFNeg(hi));
  Value *u = b.CreateFMul(m.horner(r, ArrayRef(kExpP)), r);

  Value *v = b.CreateFAdd(m.fma(p, e, p), e);
  Value *w = b.CreateFAdd(m.fma(v, u, v), u);
  Value *res = m.fma(d, w, d);

  Type *it = t->getWithNewType(b.getInt32Ty());
  Value *biased = b.CreateAdd(m.exponentOf(kf, it), ConstantInt::get(it, 64 + 127));
  Value *scale = b.CreateBitCast(b.CreateShl(biased, 23), t);
  res = b.CreateFMul(b.CreateFMul(res, scale), m.c(0x1p-64f));
  return b.CreateSelect(b.CreateFCmpOLT(x, m.c(0)), b.CreateFSub(m.c(2), res), res);
}

// exp: k = round(x/ln2), r = x - k ln2 (Cody-Waite, exact for the k that
// occur), exp(r) = 1 + r P(r) rounded once, times 2^k applied as two powers
// of two (scaleByPow2). Inputs are clamped to [-104, 89], past which the
// result is 0 or inf anyway; NaN passes through. Measured against glibc's
// _ZGVeN16v_expf, 2^24 floats, one thread: 4.3-4.7 ms against 5.2-5.9, and
// 0.89 ulp worst over every float.
Value *emitExpF32(IRBuilder<> &b, Value *x) {
  IRBuilder<>::FastMathFlagGuard keep(b);
  b.clearFastMathFlags();
  Type *t = x->getType();
  Emitter m(b, t);
  auto [kf, r] = m.reduceLn2(m.clamp(x, -104, 89));
  Value *p = m.fma(m.horner(r, ArrayRef(kExpP)), r, m.c(1));
  Type *it = t->getWithNewType(b.getInt32Ty());
  return m.scaleByPow2(p, m.exponentOf(kf, it), it, 23, 127);
}

// The same method in double: ln2's high part has 11 trailing zero bits, so
// k ln2hi is exact for the |k| <= 1076 of inputs clamped to [-746, 710].
// Against glibc's _ZGVeN8v_exp, 2^24 doubles (hsnn-jit bench, math): 7.6
// against 8.6 ms (both near the copy's time), sigmoid 9.1 against 21.7; and
// in a batch-major row kernel one call fewer to spill the block around.
Value *emitExpF64(IRBuilder<> &b, Value *x) {
  IRBuilder<>::FastMathFlagGuard keep(b);
  b.clearFastMathFlags();
  Type *t = x->getType();
  Emitter m(b, t);
  x = m.clamp(x, -746, 710);
  Value *kf = m.fma(x, m.c(0x1.71547652b82fep+0), m.c(0x1.8p52));
  Value *k = b.CreateFSub(kf, m.c(0x1.8p52));
  Value *r = m.fma(k, m.c(-0x1.62e42fefa3800p-1), x);
  r = m.fma(k, m.c(-0x1.ef35793c76730p-45), r);
  Value *p = m.fma(m.horner(r, ArrayRef(kExpP64)), r, m.c(1));
  Type *it = t->getWithNewType(b.getInt64Ty());
  Value *ki = b.CreateSub(b.CreateBitCast(kf, it), ConstantInt::get(it, 0x4338000000000000));
  return m.scaleByPow2(p, ki, it, 52, 1023);
}

// log and log1p: v = 2^k m with m in [sqrt(1/2), sqrt(2)), then
// log(v) = k ln2 + f + f^2 Q(f) for f = m - 1, exact by Sterbenz. log1p
// first writes 1 + x = hi + lo exactly (Fast2Sum, the larger operand first)
// and adds lo 2^-k to f: what rounding hi dropped (tiny x come out as x;
// 2^-k is 0 past k = 127, where lo no longer counts). Every float checked
// against glibc's double log and log1p: 1 ulp worst. Alone they run at about
// libmvec's speed; softplus and the log-losses no longer call out.
namespace {
struct NearOne {
  Value *k, *mant; // v = 2^k mant
};
NearOne splitNearOne(IRBuilder<> &b, Value *v, Type *it) {
  Value *bits = b.CreateBitCast(v, it);
  Value *k = b.CreateAShr(b.CreateSub(bits, ConstantInt::get(it, 0x3f3504f3)), 23); // sqrt(1/2)'s bits
  return {k, b.CreateBitCast(b.CreateSub(bits, b.CreateShl(k, 23)), v->getType())};
}
Value *logOfSplit(IRBuilder<> &b, Emitter &m, Value *k, Value *f) {
  Value *r = m.fma(b.CreateFMul(f, f), m.horner(f, ArrayRef(kLog1pQ)), f);
  Value *kf = b.CreateSIToFP(k, f->getType());
  return m.fma(kf, m.c(0x1.62e43p-1f), m.fma(kf, m.c(-0x1.05c61p-29f), r));
}
const double kInf = std::numeric_limits<double>::infinity(), kNaN = std::numeric_limits<double>::quiet_NaN();
} // namespace

Value *emitLog1pF32(IRBuilder<> &b, Value *x) {
  IRBuilder<>::FastMathFlagGuard keep(b);
  b.clearFastMathFlags(); // Fast2Sum's error term is exact only in IEEE arithmetic
  Type *t = x->getType(), *it = t->getWithNewType(b.getInt32Ty());
  Emitter m(b, t);
  Module *mod = b.GetInsertBlock()->getModule();
  Value *hi = b.CreateFAdd(x, m.c(1));
  Value *ax = b.CreateCall(Intrinsic::getDeclaration(mod, Intrinsic::fabs, {t}), {x});
  Value *lo = b.CreateSelect(b.CreateFCmpOLE(ax, m.c(1)), b.CreateFAdd(b.CreateFSub(m.c(1), hi), x),
                             b.CreateFAdd(b.CreateFSub(x, hi), m.c(1)));
  NearOne s = splitNearOne(b, hi, it);
  Value *e = b.CreateSub(ConstantInt::get(it, 127), s.k);
  e = b.CreateSelect(b.CreateICmpSLT(e, ConstantInt::get(it, 0)), ConstantInt::get(it, 0), e);
  Value *f = b.CreateFAdd(b.CreateFSub(s.mant, m.c(1)), b.CreateFMul(lo, b.CreateBitCast(b.CreateShl(e, 23), t)));
  Value *r = logOfSplit(b, m, s.k, f); // NaN passes through lo
  r = b.CreateSelect(b.CreateFCmpOEQ(x, m.c(0)), x, r); // -0 stays -0
  r = b.CreateSelect(b.CreateFCmpOEQ(x, m.c(kInf)), x, r);
  r = b.CreateSelect(b.CreateFCmpOEQ(x, m.c(-1)), m.c(-kInf), r);
  return b.CreateSelect(b.CreateFCmpOLT(x, m.c(-1)), m.c(kNaN), r);
}

// Subnormal inputs are scaled by 2^23 first, so their exponent field counts.
Value *emitLogF32(IRBuilder<> &b, Value *x) {
  IRBuilder<>::FastMathFlagGuard keep(b);
  b.clearFastMathFlags();
  Type *t = x->getType(), *it = t->getWithNewType(b.getInt32Ty());
  Emitter m(b, t);
  Value *tiny = b.CreateFCmpOLT(x, m.c(0x1p-126));
  NearOne s = splitNearOne(b, b.CreateSelect(tiny, b.CreateFMul(x, m.c(0x1p23)), x), it);
  Value *k = b.CreateSub(s.k, b.CreateSelect(tiny, ConstantInt::get(it, 23), ConstantInt::get(it, 0)));
  Value *r = logOfSplit(b, m, k, b.CreateFSub(s.mant, m.c(1)));
  r = b.CreateSelect(b.CreateFCmpOEQ(x, m.c(0)), m.c(-kInf), r);
  r = b.CreateSelect(b.CreateFCmpOEQ(x, m.c(kInf)), x, r);
  r = b.CreateSelect(b.CreateFCmpOLT(x, m.c(0)), m.c(kNaN), r);
  return b.CreateSelect(b.CreateFCmpUNO(x, x), x, r);
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
// vector powf is a call costing 2.5 ns an element (0.3 for expf), 13 on a
// negative base. Past float's range in either direction the double result
// is still inf or 0 where the float one is.
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
// zeros and signs. glibc's vector pow took 2.4-2.5 ns an element here.
Value *doublePowerInDoubleDouble(IRBuilder<> &b, Value *x, int n) {
  IRBuilder<>::FastMathFlagGuard keep(b);
  b.clearFastMathFlags(); // TwoProd's error term is exact only in IEEE arithmetic
  Type *t = x->getType();
  Emitter m(b, t);
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
  Value *magnitude =
      b.CreateCall(Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(), Intrinsic::fabs, {t}), {sum});
  Value *usable = b.CreateAnd(b.CreateFCmpOLT(magnitude, m.c(kInf)), b.CreateFCmpUNE(acc->plain, m.c(0)));
  return b.CreateSelect(usable, sum, acc->plain);
}
} // namespace

Value *emitIntegerPower(IRBuilder<> &b, Value *x, int n) {
  return x->getType()->getScalarType()->isFloatTy() ? floatPowerInDouble(b, x, n) : doublePowerInDoubleDouble(b, x, n);
}

Value *emitInlineMath(IRBuilder<> &b, std::string_view name, Value *x) {
  Type *et = x->getType()->getScalarType();
  if (et->isFloatTy()) {
    if (name == "exp")
      return emitExpF32(b, x);
    if (name == "erfc")
      return emitErfcF32(b, x);
    if (name == "log")
      return emitLogF32(b, x);
    if (name == "log1p")
      return emitLog1pF32(b, x);
  }
  if (et->isDoubleTy() && name == "exp")
    return emitExpF64(b, x);
  return nullptr;
}

} // namespace hsnn::detail
