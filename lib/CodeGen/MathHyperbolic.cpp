//===- lib/CodeGen/MathHyperbolic.cpp - sinh, cosh, tanh and inverses as IR ===//
//
// The forms of fdlibm's algorithms, written over the library's expm1, exp,
// log and log1p (InlineMath.cpp), so that nothing cancels: for a = |x|,
//   tanh  = -e/(e + 2),            e = expm1(-2a)   (e in (-1, 0]: the
//           quotient's condition number is at most 2);
//   sinh  = (2e - e^2/(e + 1))/2 below 1, (e + e/(e + 1))/2 up to the point
//           where e^-a no longer counts, e = expm1(a); past it
//           (exp(a/2)/2) exp(a/2), finite up to sinh's own overflow;
//   cosh  = 1 + e^2/(2(1 + e)) below ln2/2, E/2 + 1/(2E) up to that point,
//           E = exp(a), then as sinh;
//   asinh = log1p(a + a^2/(1 + sqrt(1 + a^2))), log(a) + ln2 past 2^28;
//   acosh = log1p(t + sqrt(t (t + 2))), t = x - 1, log(x) + ln2 past 2^28;
//   atanh = log1p(2a + 2a^2/(1 - a))/2 below 1/2, log1p(2a/(1 - a))/2 above.
// Odd functions take x's sign back with copysign, so -0 stays -0.
//===----------------------------------------------------------------------===//
#include "InlineMath.h"
#include "MathEmitter.h"

#include <cmath>

namespace hsnn::detail {

using namespace llvm;

namespace {
// Where e^-a is below half an ulp of e^a.
double farTail(const MathEmitter &m) { return m.isF32() ? 9 : 22; }
constexpr double kLn2 = 0x1.62e42fefa39efp-1;

/// (exp(a/2)/2) exp(a/2): e^a/2 without overflowing before it must.
Value *halfExpLarge(IRBuilder<> &b, MathEmitter &m, Value *a) {
  Value *h = emitExp(b, m.mul(a, m.c(0.5)));
  return m.mul(m.mul(h, m.c(0.5)), h);
}
} // namespace

Value *emitTanh(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  // tanh is 1 in rounding past 9 (floats) or 19.1 (doubles); -2a stays in
  // expm1NonPositive's range.
  Value *a = m.atMost(m.fabs(x), m.isF32() ? 9 : 20);
  Value *e = expm1NonPositive(m, m.mul(a, m.c(-2)));
  return m.copysign(m.div(m.neg(e), m.add(e, m.c(2))), x);
}

namespace {
/// |x| at or past farTail (or NaN): the lanes of sinh and cosh that need
/// e^a/2 in two halves, a second exponential the others do not compute.
Value *pastFarTail(MathEmitter &m, Value *x) { return m.b.CreateFCmpUGE(m.fabs(x), m.c(farTail(m))); }

/// sinh(x); below: for |x| < farTail only (the same operations there).
Value *sinhBody(MathEmitter &m, Value *x, bool below) {
  IRBuilder<> &b = m.b;
  Value *a = m.fabs(x);
  Value *e = emitExpm1(b, below ? a : m.atMost(a, farTail(m)));
  Value *ratio = m.div(e, m.add(e, m.c(1)));
  Value *below1 = m.mul(m.c(0.5), m.sub(m.add(e, e), m.mul(e, ratio)));
  Value *mid = m.mul(m.c(0.5), m.add(e, ratio));
  Value *beyond1 = below ? mid : m.select(m.lt(a, m.c(farTail(m))), mid, halfExpLarge(b, m, a));
  return m.copysign(m.select(m.lt(a, m.c(1)), below1, beyond1), x);
}

/// cosh(x); below: for |x| < farTail only.
Value *coshBody(MathEmitter &m, Value *x, bool below) {
  IRBuilder<> &b = m.b;
  Value *a = m.fabs(x);
  Value *capped = below ? a : m.atMost(a, farTail(m));
  Value *e = emitExpm1(b, capped);
  Value *nearZero = m.add(m.c(1), m.div(m.mul(e, e), m.mul(m.c(2), m.add(e, m.c(1)))));
  Value *big = emitExp(b, capped);
  Value *mid = m.fma(m.c(0.5), big, m.div(m.c(0.5), big));
  Value *beyond = below ? mid : m.select(m.lt(a, m.c(farTail(m))), mid, halfExpLarge(b, m, a));
  return m.select(m.lt(a, m.c(0.5 * kLn2)), nearZero, beyond);
}
} // namespace

// Past farTail (9 for floats, 22 for doubles), rarely: withRareLanes.
Value *emitSinh(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  return withRareLanes(m, "sinh", x, pastFarTail, sinhBody);
}

Value *emitCosh(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  return withRareLanes(m, "cosh", x, pastFarTail, coshBody);
}

namespace {
constexpr double kLogFormFrom = 0x1p28; // asinh and acosh: past it, log(a) + ln2

/// asinh(x); moderateOnly: for |x| <= kLogFormFrom.
Value *asinhBody(MathEmitter &m, Value *x, bool moderateOnly) {
  IRBuilder<> &b = m.b;
  Value *a = m.fabs(x);
  Value *big = moderateOnly ? nullptr : m.gt(a, m.c(kLogFormFrom));
  Value *am = big ? m.select(big, m.c(1), a) : a; // keeps a^2 finite on the lanes that use the other form
  Value *sq = m.mul(am, am);
  Value *moderate = emitLog1p(b, m.add(am, m.div(sq, m.add(m.c(1), m.sqrt(m.add(m.c(1), sq))))));
  if (!big)
    return m.copysign(moderate, x);
  Value *large = m.add(emitLog(b, a), m.c(kLn2));
  return m.copysign(m.select(big, large, moderate), x);
}

/// acosh(x); moderateOnly: for x <= kLogFormFrom.
Value *acoshBody(MathEmitter &m, Value *x, bool moderateOnly) {
  IRBuilder<> &b = m.b;
  Value *big = moderateOnly ? nullptr : m.gt(x, m.c(kLogFormFrom));
  Value *t = m.sub(big ? m.select(big, m.c(2), x) : x, m.c(1));
  Value *r = emitLog1p(b, m.add(t, m.sqrt(m.mul(t, m.add(t, m.c(2))))));
  if (big)
    r = m.select(big, m.add(emitLog(b, x), m.c(kLn2)), r);
  return m.select(m.lt(x, m.c(1)), m.c(NAN), r);
}
} // namespace

// Their log form, past 2^28 (or NaN), only for vectors with such a lane.
Value *emitAsinh(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  return withRareLanes(
      m, "asinh", x, [](MathEmitter &e, Value *v) { return e.b.CreateFCmpUGT(e.fabs(v), e.c(kLogFormFrom)); }, asinhBody);
}

Value *emitAcosh(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  return withRareLanes(
      m, "acosh", x, [](MathEmitter &e, Value *v) { return e.b.CreateFCmpUGT(v, e.c(kLogFormFrom)); }, acoshBody);
}

Value *emitAtanh(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  Value *a = m.fabs(x);
  Value *twoA = m.add(a, a), *oneMinus = m.sub(m.c(1), a);
  Value *small = m.add(twoA, m.div(m.mul(twoA, a), oneMinus));
  Value *u = m.select(m.lt(a, m.c(0.5)), small, m.div(twoA, oneMinus));
  return m.copysign(m.mul(m.c(0.5), emitLog1p(b, u)), x);
}

} // namespace hsnn::detail
