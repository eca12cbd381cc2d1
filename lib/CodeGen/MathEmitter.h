//===- lib/CodeGen/MathEmitter.h - Building blocks of the math library -*- C++ -*-===//
//
// What every function of hsnn's math library (InlineMath.h) is written
// with: IEEE operations on a float or double, scalar or vector, with no
// fast-math flags whatever the builder's (error terms are exact only in
// IEEE arithmetic), and the few exact transformations the algorithms
// share (TwoSum, TwoProd, Cody-Waite reduction by ln2, scaling by 2^k).
// The same calls build the CPU's vectors and the GPU's scalars, which is
// what makes their results the same bits. Internal to lib/CodeGen.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <llvm/ADT/ArrayRef.h>
#include <llvm/ADT/STLFunctionalExtras.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <cstdint>
#include <utility>

namespace hsnn::detail {

/// A value held as hi + lo with |lo| <= ulp(hi)/2.
struct DoubleWord {
  llvm::Value *hi, *lo;
};

class MathEmitter {
public:
  MathEmitter(llvm::IRBuilder<> &b, llvm::Type *t)
      : b(b), t(t), keep_(b), it(t->getWithNewType(isF32() ? b.getInt32Ty() : b.getInt64Ty())) {
    b.clearFastMathFlags();
  }

  llvm::IRBuilder<> &b;
  llvm::Type *const t; ///< float, double or a vector of either.

private:
  llvm::IRBuilder<>::FastMathFlagGuard keep_;

public:
  llvm::Type *const it; ///< The integer type of t's width (i32 or i64 lanes).

  bool isF32() const { return t->getScalarType()->isFloatTy(); }
  unsigned mantissaBits() const { return isF32() ? 23 : 52; }
  int bias() const { return isF32() ? 127 : 1023; }

  llvm::Value *c(double v) { return llvm::ConstantFP::get(t, v); }
  llvm::Value *ci(int64_t v) { return llvm::ConstantInt::get(it, uint64_t(v), true); }
  llvm::Module *module() { return b.GetInsertBlock()->getModule(); }

  llvm::Value *add(llvm::Value *x, llvm::Value *y) { return b.CreateFAdd(x, y); }
  llvm::Value *sub(llvm::Value *x, llvm::Value *y) { return b.CreateFSub(x, y); }
  llvm::Value *mul(llvm::Value *x, llvm::Value *y) { return b.CreateFMul(x, y); }
  llvm::Value *div(llvm::Value *x, llvm::Value *y) { return b.CreateFDiv(x, y); }
  llvm::Value *neg(llvm::Value *x) { return b.CreateFNeg(x); }
  llvm::Value *fma(llvm::Value *x, llvm::Value *y, llvm::Value *z) { return intrinsic(llvm::Intrinsic::fma, {x, y, z}); }
  llvm::Value *fabs(llvm::Value *x) { return intrinsic(llvm::Intrinsic::fabs, {x}); }
  llvm::Value *sqrt(llvm::Value *x) { return intrinsic(llvm::Intrinsic::sqrt, {x}); }
  llvm::Value *floor(llvm::Value *x) { return intrinsic(llvm::Intrinsic::floor, {x}); }
  llvm::Value *copysign(llvm::Value *mag, llvm::Value *sign) {
    return intrinsic(llvm::Intrinsic::copysign, {mag, sign});
  }
  llvm::Value *select(llvm::Value *cond, llvm::Value *x, llvm::Value *y) { return b.CreateSelect(cond, x, y); }
  llvm::Value *lt(llvm::Value *x, llvm::Value *y) { return b.CreateFCmpOLT(x, y); }
  llvm::Value *gt(llvm::Value *x, llvm::Value *y) { return b.CreateFCmpOGT(x, y); }
  llvm::Value *eq(llvm::Value *x, llvm::Value *y) { return b.CreateFCmpOEQ(x, y); }
  llvm::Value *isNaN(llvm::Value *x) { return b.CreateFCmpUNO(x, x); }
  /// True where x's sign bit is set (-0 and NaNs with the bit included).
  llvm::Value *signBit(llvm::Value *x) { return b.CreateICmpSLT(bits(x), ci(0)); }
  /// x, or y where x > y; NaN stays NaN.
  llvm::Value *atMost(llvm::Value *x, double y) { return select(gt(x, c(y)), c(y), x); }
  /// x limited to [lo, hi]; NaN stays NaN.
  llvm::Value *clamp(llvm::Value *x, double lo, double hi) { return atMost(select(lt(x, c(lo)), c(lo), x), hi); }

  /// table[index] lane by lane, index of it's type and within the table:
  /// a gather for the CPU's vectors, a load for the GPU's scalars (a
  /// lookup is exact either way).
  llvm::Value *lookup(llvm::GlobalVariable *table, llvm::Value *index) {
    llvm::Type *elem = t->getScalarType();
    llvm::Align align(elem->getPrimitiveSizeInBits() / 8);
    llvm::Value *at = b.CreateInBoundsGEP(elem, table, index);
    if (t->isVectorTy())
      return b.CreateMaskedGather(t, at, align);
    return b.CreateAlignedLoad(t, at, align);
  }

  llvm::Value *bits(llvm::Value *x) { return b.CreateBitCast(x, it); }
  llvm::Value *fromBits(llvm::Value *i) { return b.CreateBitCast(i, t); }
  /// 2^k for an integer k in the normal range.
  llvm::Value *pow2(llvm::Value *k) {
    return fromBits(b.CreateShl(b.CreateAdd(k, ci(bias())), mantissaBits()));
  }
  /// p 2^k as p 2^(k/2) 2^(k - k/2): the first product exact, one rounding
  /// in the second, also into the subnormal range and to inf.
  llvm::Value *scaleByPow2(llvm::Value *p, llvm::Value *k) {
    llvm::Value *k1 = b.CreateAShr(k, 1), *k2 = b.CreateSub(k, k1);
    return mul(mul(p, pow2(k1)), pow2(k2));
  }

  template <class C> llvm::Value *horner(llvm::Value *x, llvm::ArrayRef<C> coef) {
    llvm::Value *acc = c(coef.back());
    for (size_t i = coef.size() - 1; i-- > 0;)
      acc = fma(acc, x, c(coef[i]));
    return acc;
  }

  /// The same polynomial as even(x^2) + x odd(x^2): two Horner chains of
  /// half the length, for long polynomials, whose one chain of dependent
  /// FMAs kept too few loop iterations in flight (fewer cycles an element
  /// than Horner for f64 erf's 19 terms, erfc and exp, one thread, in cache).
  template <class C> llvm::Value *hornerEvenOdd(llvm::Value *x, llvm::ArrayRef<C> coef) {
    llvm::SmallVector<C, 16> even, odd;
    for (size_t i = 0; i < coef.size(); ++i)
      (i % 2 ? odd : even).push_back(coef[i]);
    llvm::Value *x2 = mul(x, x);
    return fma(horner(x2, llvm::ArrayRef<C>(odd)), x, horner(x2, llvm::ArrayRef<C>(even)));
  }

  /// x + y exactly (Knuth's TwoSum: no condition on the magnitudes).
  DoubleWord twoSum(llvm::Value *x, llvm::Value *y) {
    llvm::Value *s = add(x, y), *yv = sub(s, x);
    return {s, add(sub(x, sub(s, yv)), sub(y, yv))};
  }
  /// x + y exactly where |x| >= |y| or x = 0 (Dekker's Fast2Sum).
  DoubleWord fastTwoSum(llvm::Value *x, llvm::Value *y) {
    llvm::Value *s = add(x, y);
    return {s, sub(y, sub(s, x))};
  }
  /// x y exactly (barring underflow).
  DoubleWord twoProd(llvm::Value *x, llvm::Value *y) {
    llvm::Value *p = mul(x, y);
    return {p, fma(x, y, neg(p))};
  }

  /// Cody-Waite: x = k ln2 + r, |r| <= ln2/2, for x in the range where exp
  /// is finite and not 0 (k ln2's high part is exact there). Returns k as
  /// an integer and r rounded once.
  std::pair<llvm::Value *, llvm::Value *> reduceLn2(llvm::Value *x) {
    // The magic constant 1.5 2^m rounds x/ln2 to an integer held in the
    // low mantissa bits.
    double magic = isF32() ? 0x1.8p23 : 0x1.8p52;
    llvm::Value *kf = fma(x, c(isF32() ? 0x1.715476p+0 : 0x1.71547652b82fep+0), c(magic));
    llvm::Value *k = sub(kf, c(magic));
    // ln2 = hi + lo, hi with enough trailing zeros that k hi is exact.
    llvm::Value *r = fma(k, c(isF32() ? -0x1.62e43p-1 : -0x1.62e42fefa3800p-1), x);
    r = fma(k, c(isF32() ? 0x1.05c61p-29 : -0x1.ef35793c76730p-45), r);
    return {b.CreateSub(bits(kf), bits(c(magic))), r};
  }

private:
  llvm::Value *intrinsic(llvm::Intrinsic::ID id, llvm::ArrayRef<llvm::Value *> args) {
    return b.CreateCall(llvm::Intrinsic::getDeclaration(module(), id, {t}), args);
  }
};

using MathBody = llvm::function_ref<llvm::Value *(MathEmitter &, llvm::Value *)>;

/// What `full` computes for x, computed as `ordinary` does where no lane of
/// x is `special` (an i1 per lane): one test and a branch, rarely taken, to
/// a cold out-of-line function computing `full` (named hsnn.math.NAME...).
/// `ordinary` must give full's bits on every lane that is not special, so
/// that the result does not depend on a lane's neighbours, and must be
/// safe for any input: it runs before the test, on the special vectors
/// too (their result is dropped), so a table row it reads must exist. For the special
/// cases' selects, which took as long as the rest of log (InlineMath.cpp).
llvm::Value *withRareLanes(MathEmitter &m, llvm::StringRef name, llvm::Value *x, MathBody special, MathBody ordinary,
                           MathBody full);

/// The same where one body serves both: body(m, x, true) is the ordinary
/// path, body(m, x, false) the full one.
using RestrictableBody = llvm::Value *(*)(MathEmitter &, llvm::Value *, bool ordinaryOnly);
llvm::Value *withRareLanes(MathEmitter &m, llvm::StringRef name, llvm::Value *x, MathBody special,
                           RestrictableBody body);

/// (exp(r) - 1)/r for |r| <= ln2/2, the polynomial exp and expm1 use
/// (InlineMath.cpp).
llvm::Value *expm1OverR(MathEmitter &m, llvm::Value *r);

/// expm1(x) for x in [-18, 0] (floats) or [-40, 0] (doubles), or NaN, as
/// emitExpm1 computes it there but for -0 (which gives +0): without the
/// clamps, the path for large x and the test for -0 (tanh's case).
llvm::Value *expm1NonPositive(MathEmitter &m, llvm::Value *x);

} // namespace hsnn::detail
