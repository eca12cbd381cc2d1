//===- lib/CodeGen/MathErf.cpp - erf and erfc as IR -----------------------===//
//
// erfc (after the rational-in-(a-c)/(a+c) forms of Juffa and of Cody): for
// a = |x|,
//   erfc(a) = exp(-a^2) * R(a) / (1 + 2a),
// where R(a) = (1 + 2a) exp(a^2) erfc(a) rises only from 1 to 1.29, so its
// polynomial's rounding errors stay small next to 1:
//   R = 1 + t1 * P(t1 - 1),   t1 = 2a/(a + 2),
// P fitted for relative error (tools/math-coefficients.py: degree 9 for
// floats over a in [0, 11], 27 for doubles over [0, 27.3]). The factor t1
// makes R - 1 vanish at a = 0 exactly, so erfc near 1 does not inherit P's
// absolute error. Every other factor is carried as 1 + (small term) and
// multiplied out once:
//   - 1/(1 + 2a): d = 1/s for s = fl(1 + 2a), with e = 1 - (s + err) d
//     (err: the exact rounding error of s, d's own error: both exact with
//     an FMA), so 1/(1 + 2a) = d (1 + e) to second order;
//   - exp(-a^2): a^2 = hi + lo exactly (FMA), exp(-hi) = 2^k (1 + u) with
//     exp's reduction and polynomial, exp(-lo) = 1 - lo folded into e;
//   - m = d + d w, w = (1 + p)(1 + e)(1 + u) - 1: one rounding near d.
// 2^k is applied as 2^(k+64) then 2^-64, so results in the subnormal range
// round once (past |x| = 9 only: below, the result is normal and 2^k one
// factor, and a vector without such a lane skips the clamps too; doubles
// take this form only past 5, always with them).
// Floats: 1.75 ulp worst over every float, against 3.1 for glibc's erfcf,
// and faster than glibc's 16-wide erfcf on one thread (AVX-512; the DEVLOG
// has the runs). NaN passes through; x < 0 gives
// 2 - erfc(|x|). Doubles take this form only past |x| = 5; below, erfc is
// looked up in a table as erf is (erfcByTable).
//
// erf for floats (doubles look erf up in a table, erfByTable below):
// x + x F(x^2) for |x| < 0.875 (F = erf(x)/x - 1, |F| <= 0.13, so
// the one rounding near x is the last), else sign(x) (1 - exp(T(a))) with
// T ~ log(erfc(a)) a polynomial in a - 0.875 up to a = 4, where erf
// rounds to 1. erfc(a) <= 0.22 there, so an error d in
// T or in exp moves erf by d erfc(a) only: T is fitted for that weighted
// error, and the whole of erfc's work (two divisions, exp(-a^2) in two
// parts) is not needed. Every float checked against glibc's double erf:
// 0.94 ulp worst below 0.875, 1.05 above.
//===----------------------------------------------------------------------===//
#include "InlineMath.h"
#include "MathEmitter.h"

namespace hsnn::detail {

using namespace llvm;

namespace {

// P(t), t = t1 - 1 in [-1, 0.69], lowest degree first.
constexpr float kErfcF32[] = {0x1.1ba03ap-2f,  -0x1.7a9dbap-2f, 0x1.a13314p-3f,   -0x1.44dff4p-5f,  -0x1.dc9becp-7f,
                              0x1.aa215cp-8f,  0x1.16d2b2p-9f,  -0x1.c50444p-11f, -0x1.905738p-12f, 0x1.07c89cp-15f};
// The same for doubles, t in [-1, 0.864]: 2^-55.4 relative.
constexpr double kErfcF64[] = {
    0x1.1ba03889de54ep-2,  -0x1.7a9db38f9e6dap-2, 0x1.a133a8600a96fp-3,  -0x1.44e6292ca0859p-5, -0x1.dd15b0d3e020fp-7,
    0x1.aba6f99ed2765p-8,  0x1.1ffdbf04b8338p-9,  -0x1.e56ac1c1ed69ep-11, -0x1.165f80230f128p-11, 0x1.415737f66dd2p-14,
    0x1.101ce890c9e21p-13, 0x1.651e37d82bf48p-16, -0x1.7e70de6e79df2p-16, -0x1.c955085405b8bp-17, 0x1.20d277c1b6715p-23,
    0x1.e0b0b081afe68p-19, 0x1.ba867537c02f5p-20, -0x1.50f9605d577e1p-23, -0x1.26d0b35688df9p-21, -0x1.1d2d7aa4d0123p-22,
    0x1.e7972fcbce147p-27, 0x1.b230be9a7033dp-24, 0x1.cd51f1e552458p-25, -0x1.2f8240385d4d6p-27, -0x1.5ac7a568d027ap-26,
    -0x1.1af42c39cda7ap-28, 0x1.79f802381ef5dp-29, 0x1.1cce345baef79p-30};
// F(z) = erf(x)/x - 1 in z = x^2 for |x| < 0.875: 2^-31.5 relative to
// erf(x)/x.
constexpr float kErfF32[] = {0x1.06eba8p-3f,  -0x1.812744p-2f, 0x1.ce2e84p-4f, -0x1.b819a6p-6f,
                             0x1.553abap-8f, -0x1.ae7f8cp-11f, 0x1.6bdf38p-14f};
// T(u) ~ log(erfc(0.875 + u)), u in [0, 3.125]: the error it gives erf is
// 2^-28.5.
constexpr float kErfTailF32[] = {-0x1.88672ep+0f, -0x1.37116ap+1f, -0x1.a73212p-1f, -0x1.7faba4p-5f,
                                 0x1.6ec632p-7f,  -0x1.0a685ep-9f, 0x1.a33b7ap-13f};
constexpr double kErfSplit = 0.875;

// Below this, erfc's result for floats and its 2^k are normal (erfc(9) =
// 4e-37), so 2^k is one factor and no clamp is needed.
constexpr double kErfcNormalUpToF32 = 9;

/// erfc(a) for a >= 0 (or NaN); normalOnly: for floats, a <= kErfcNormalUpToF32.
Value *erfcOfMagnitude(MathEmitter &m, Value *a, bool normalOnly) {
  bool f32 = m.isF32();
  if (!normalOnly)
    a = m.atMost(a, f32 ? 11 : 27.3); // erfc is 0 past these
  Value *twoA = m.add(a, a);
  Value *t1 = m.div(twoA, m.add(a, m.c(2)));
  Value *p = m.mul(f32 ? m.hornerEvenOdd(m.sub(t1, m.c(1)), ArrayRef(kErfcF32)) : m.hornerEvenOdd(m.sub(t1, m.c(1)), ArrayRef(kErfcF64)),
                   t1);

  // 2a is exact, so these are fma(a, 2, ...) on the add ports; 1 - s is
  // exact for s >= 1, and so is err = (2a + 1) - s.
  Value *s = m.add(twoA, m.c(1));
  Value *err = m.add(twoA, m.sub(m.c(1), s));
  Value *d = m.div(m.c(1), s);
  Value *e = m.fma(m.neg(s), d, m.c(1));
  e = m.fma(m.neg(err), d, e);

  DoubleWord sq = m.twoProd(a, a);
  e = m.sub(e, sq.lo); // (1 + e)(1 - lo): e lo is below 2^-40 of 1
  auto [k, r] = m.reduceLn2(m.neg(sq.hi));
  Value *u = m.mul(expm1OverR(m, r), r);

  Value *v = m.add(m.fma(p, e, p), e);
  Value *w = m.add(m.fma(v, u, v), u);
  Value *res = m.fma(d, w, d);
  if (normalOnly)
    return m.mul(res, m.pow2(k)); // exact: a normal result
  Value *scale = m.pow2(m.b.CreateAdd(k, m.ci(64)));
  return m.mul(m.mul(res, scale), m.c(0x1p-64));
}

Value *signedErfc(MathEmitter &m, Value *x, bool normalOnly) {
  Value *res = erfcOfMagnitude(m, m.fabs(x), normalOnly);
  return m.select(m.lt(x, m.c(0)), m.sub(m.c(2), res), res);
}

} // namespace

namespace {

// erf(r) and erfc(r) = hi + lo, and erf'(r), for r = i/128: a row each,
// up to r = 6 (erf rounds to 1 there) and 5.
constexpr double kErfTable[] = {
#include "MathErfTable.inc"
};
constexpr double kErfcTable[] = {
#include "MathErfcTable.inc"
};
constexpr double kTableSteps = 128, kErfRoundsToOne = 6, kErfcByTableUpTo = 5;
static_assert(std::size(kErfTable) == 3 * (size_t(kTableSteps * kErfRoundsToOne) + 1));
static_assert(std::size(kErfcTable) == 3 * (size_t(kTableSteps * kErfcByTableUpTo) + 1));

GlobalVariable *table(Module &mod, const char *name, ArrayRef<double> rows) {
  if (GlobalVariable *g = mod.getNamedGlobal(name))
    return g;
  auto *init = ConstantDataArray::get(mod.getContext(), rows);
  auto *g = new GlobalVariable(mod, init->getType(), true, GlobalValue::InternalLinkage, init, name);
  g->setAlignment(Align(64));
  return g;
}

/// For a >= 0 clamped to `upTo`, the last row's r (NaN too: every caller
/// needs a row that exists, withRareLanes' straight path on the special
/// vectors included), the row of the multiple r of 1/128 nearest a, and
/// s = d + d^2 T(d), d = a - r (exact, |d| <= 2^-8),
/// such that erf(a) = erf(r) + erf'(r) s and erfc(a) = erfc(r) - erf'(r) s:
/// T's coefficients are erf's Taylor series at r, b_k = (-1)^(k-1)
/// H_{k-1}(r)/k! for k = 2..7 (Hermite polynomials), and b_8 with
/// eighthTerm, as polynomials in r. Past b_2 = -r they need only 2^-40 of
/// their size, so one rounding each is enough.
struct NearRow {
  Value *hi, *lo, *slope, *series;
};
NearRow taylorAtRow(MathEmitter &m, Value *a, double upTo, GlobalVariable *rows, bool eighthTerm) {
  IRBuilder<> &b = m.b;
  a = m.select(m.lt(a, m.c(upTo)), a, m.c(upTo));
  Value *magic = m.c(0x1.8p52);
  Value *kf = m.fma(a, m.c(kTableSteps), magic); // 128 a rounded to an integer
  Value *row = b.CreateMul(b.CreateSub(m.bits(kf), m.bits(magic)), m.ci(3));
  Value *r = m.mul(m.sub(kf, magic), m.c(1 / kTableSteps));
  Value *d = m.sub(a, r);
  NearRow out{m.lookup(rows, row), m.lookup(rows, b.CreateAdd(row, m.ci(1))),
              m.lookup(rows, b.CreateAdd(row, m.ci(2))), nullptr};

  Value *q = m.mul(r, r);
  auto inQ = [&](std::initializer_list<double> coef) { return m.horner(q, ArrayRef(coef.begin(), coef.size())); };
  SmallVector<Value *, 8> coef = {m.neg(r), inQ({-1.0 / 3, 2.0 / 3}), m.mul(r, inQ({1.0 / 2, -1.0 / 3})),
                                  inQ({1.0 / 10, -2.0 / 5, 2.0 / 15}), m.mul(r, inQ({-1.0 / 6, 2.0 / 9, -2.0 / 45})),
                                  inQ({-1.0 / 42, 1.0 / 7, -2.0 / 21, 4.0 / 315})};
  if (eighthTerm)
    coef.push_back(m.mul(r, inQ({1.0 / 24, -1.0 / 12, 1.0 / 30, -1.0 / 315})));
  Value *t = coef.back();
  for (size_t k = coef.size() - 1; k-- > 0;)
    t = m.fma(t, d, coef[k]);
  out.series = m.fma(m.mul(d, d), t, d);
  return out;
}

/// erf for doubles: erf(|x|) = erf(r) + erf'(r) s (taylorAtRow), |x|
/// clamped to 6, where erf rounds to 1; the rest of the series is below 2^-69 of erf(x), and the
/// result is carried by the last two roundings, adding lo and then hi.
/// 30 arithmetic operations and 3 lookups, where 1 - exp(T) and
/// x + x F(x^2) both took 60: faster with AVX2's lookups as loads and with
/// AVX-512's gathers alike (one thread, in cache). 2 million random
/// doubles against glibc's erfl: 0.50 ulp worst above 0.5 (1.13 before),
/// 1.39 just above 1/256, where erf(r) - erf'(r) |d| cancels to half of
/// erf(r) (0.85 before).
Value *erfByTable(MathEmitter &m, Value *x) {
  NearRow n = taylorAtRow(m, m.fabs(x), kErfRoundsToOne, table(*m.module(), "hsnn.math.erf_table", kErfTable), false);
  Value *res = m.copysign(m.add(n.hi, m.fma(n.slope, n.series, n.lo)), x);
  return m.select(m.isNaN(x), x, res);
}

/// erfc for doubles with |x| <= 5: erfc(a) = erfc(r) - erf'(r) s, with
/// b_8 (the series' rest is below 2^-61 of erfc(a) up to 5, where erf'(r) s
/// is 4% of it), and 2 - that for x < 0.
Value *erfcByTable(MathEmitter &m, Value *x) {
  NearRow n = taylorAtRow(m, m.fabs(x), kErfcByTableUpTo, table(*m.module(), "hsnn.math.erfc_table", kErfcTable), true);
  Value *e = m.add(n.hi, m.fma(m.neg(n.slope), n.series, n.lo));
  return m.select(m.lt(x, m.c(0)), m.sub(m.c(2), e), e);
}

} // namespace

// Doubles: |x| <= 5 from the table; past 5 (and NaN) is rare, and those
// vectors take the form above for their far lanes. Floats: |x| past
// kErfcNormalUpToF32 (a subnormal or zero result, or 2) is rare: those vectors
// take the clamp and the two-factor 2^k, the same bits elsewhere.
Value *emitErfc(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  if (!m.isF32())
    return withRareLanes(
        m, "erfc", x, [](MathEmitter &e, Value *v) { return e.b.CreateFCmpUGT(e.fabs(v), e.c(kErfcByTableUpTo)); },
        erfcByTable,
        [](MathEmitter &e, Value *v) {
          return e.select(e.b.CreateFCmpOLE(e.fabs(v), e.c(kErfcByTableUpTo)), erfcByTable(e, v), signedErfc(e, v, false));
        });
  return withRareLanes(
      m, "erfc", x, [](MathEmitter &e, Value *v) { return e.gt(e.fabs(v), e.c(kErfcNormalUpToF32)); }, signedErfc);
}

Value *emitErf(IRBuilder<> &b, Value *x) {
  MathEmitter m(b, x->getType());
  if (!m.isF32())
    return erfByTable(m, x);
  Value *a = m.fabs(x);
  Value *z = m.mul(x, x);
  Value *near0 = m.fma(x, m.horner(z, ArrayRef(kErfF32)), x);
  // u = a - 0.875 is exact; NaN stays NaN.
  Value *u = m.sub(m.atMost(m.select(m.lt(a, m.c(kErfSplit)), m.c(kErfSplit), a), 4), m.c(kErfSplit));
  Value *t = m.horner(u, ArrayRef(kErfTailF32));
  // exp(t), t in [-18, -1.5]: no overflow, no subnormal, so one power of two.
  auto [k, r] = m.reduceLn2(t);
  Value *e = m.mul(m.fma(expm1OverR(m, r), r, m.c(1)), m.pow2(k));
  Value *tail = m.copysign(m.sub(m.c(1), e), x);
  return m.select(m.lt(a, m.c(kErfSplit)), near0, tail);
}

} // namespace hsnn::detail
