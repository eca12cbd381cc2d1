//===- lib/Expr/OpTable.cpp - The op table: semantics and derivatives -----===//
//
// One Rule<Op> specialization per entry of hsnn/Ops.def gives the op's value
// (as a scalar template, instantiated for float and double and wrapped into
// block loops) and its derivative. A missing specialization does not compile.
//
// Semantics at the edges are chosen here and documented in docs/guide/numerics.md:
// Max/Min propagate NaN, sign(±0) = ±0, Heaviside(0) = 0, sigmoid and
// softplus use their overflow-free forms.
//===----------------------------------------------------------------------===//
#include "OpTable.h"
#include "StableForms.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace hsnn {
namespace {

using detail::OpImpl;

// Derivative helpers: null stands for an exact zero.
Expr mulD(ExprContext &c, Expr coef, Expr d) { return d ? c.mul(coef, d) : nullptr; }
Expr addD(ExprContext &c, Expr a, Expr b) { return !a ? b : !b ? a : c.add(a, b); }
Expr subD(ExprContext &c, Expr a, Expr b) { return !b ? a : !a ? c.neg(b) : c.sub(a, b); }
Expr orZero(ExprContext &c, Expr d) { return d ? d : c.number(0); }
Expr num(ExprContext &c, double v) { return c.number(v); }

template <class T> T truth(bool b) { return b ? T(1) : T(0); }
template <class T> T nan() { return std::numeric_limits<T>::quiet_NaN(); }

template <Op O> struct Rule;

#define LEAF_RULE(Id)                                                                                        \
  template <> struct Rule<Op::Id> {                                                                          \
    static constexpr int kind = 0;                                                                           \
  };
LEAF_RULE(Number)
LEAF_RULE(Var)
LEAF_RULE(Param)
LEAF_RULE(True)
LEAF_RULE(False)
LEAF_RULE(Pi)
LEAF_RULE(E)
#undef LEAF_RULE

// A unary op: EVAL is an expression in `a`; DIFF an expression in c (the
// context), e (this node), a (the operand) and d (its derivative, non-null).
#define UNARY_RULE(Id, EVAL, DIFF)                                                                           \
  template <> struct Rule<Op::Id> {                                                                          \
    static constexpr int kind = 1;                                                                           \
    template <class T> static T eval(T a) { return EVAL; }                                                   \
    static Expr diff(ExprContext &c, Expr e, std::span<const Expr> ds) {                                     \
      Expr a = e->arg(0), d = ds[0];                                                                         \
      (void)a;                                                                                               \
      if (!d)                                                                                                \
        return nullptr;                                                                                      \
      return DIFF;                                                                                           \
    }                                                                                                        \
  };
// A binary op; DIFF sees a, b and their derivatives da, db (either may be null).
#define BINARY_RULE(Id, EVAL, DIFF)                                                                          \
  template <> struct Rule<Op::Id> {                                                                          \
    static constexpr int kind = 2;                                                                           \
    template <class T> static T eval(T a, T b) { return EVAL; }                                              \
    static Expr diff(ExprContext &c, Expr e, std::span<const Expr> ds) {                                     \
      Expr a = e->arg(0), b = e->arg(1), da = ds[0], db = ds[1];                                             \
      (void)a, (void)b, (void)e;                                                                             \
      if (!da && !db)                                                                                        \
        return nullptr;                                                                                      \
      return DIFF;                                                                                           \
    }                                                                                                        \
  };
// Truth-valued ops are never differentiated (conditions keep their value).
#define COND_RULE(Id, ARITY, EVAL)                                                                           \
  template <> struct Rule<Op::Id> {                                                                          \
    static constexpr int kind = ARITY;                                                                       \
    template <class T> static T eval(T a, [[maybe_unused]] T b = T(0)) { return EVAL; }                      \
    static constexpr std::nullptr_t diff = nullptr;                                                          \
  };

BINARY_RULE(Add, a + b, addD(c, da, db))
BINARY_RULE(Sub, a - b, subD(c, da, db))
BINARY_RULE(Mul, a *b, addD(c, da ? c.mul(da, b) : nullptr, mulD(c, a, db)))
// (a'b - ab')/b/b: one numerator, so the simplifier can cancel its terms
// (softsign's (1 + |x|) - |x| is 1), and no b*b to overflow.
BINARY_RULE(Div, a / b,
            !db ? c.div(da, b) : c.div(c.div(subD(c, da ? c.mul(da, b) : nullptr, c.mul(a, db)), b), b))
// d(a**b) = b*a**(b-1)*a' + a**b*log(a)*b'; the log term only when b varies,
// so x**2 at x<0 has no log of a negative number.
BINARY_RULE(Pow, std::pow(a, b),
            addD(c, da ? c.mul(c.mul(b, c.pow(a, c.sub(b, num(c, 1)))), da) : nullptr,
                 db ? c.mul(c.mul(e, c.call(Op::Log, a)), db) : nullptr))
UNARY_RULE(Neg, -a, c.neg(d))

COND_RULE(Lt, 2, truth<T>(a < b))
COND_RULE(Le, 2, truth<T>(a <= b))
COND_RULE(Gt, 2, truth<T>(a > b))
COND_RULE(Ge, 2, truth<T>(a >= b))
COND_RULE(Eq, 2, truth<T>(a == b))
COND_RULE(Ne, 2, truth<T>(a != b))
COND_RULE(And, 2, truth<T>(a != T(0) && b != T(0)))
COND_RULE(Or, 2, truth<T>(a != T(0) || b != T(0)))
COND_RULE(Not, 1, truth<T>(a == T(0)))

template <> struct Rule<Op::Piecewise> {
  static constexpr int kind = -1;
  // Branch by branch under the same conditions (a Guarded stays guarded).
  static Expr diff(ExprContext &c, Expr e, std::span<const Expr> ds) {
    bool any = false;
    std::vector<Expr> args(e->args().begin(), e->args().end());
    for (size_t i = 0; i < args.size(); i += 2) {
      any |= ds[i] != nullptr;
      args[i] = orZero(c, ds[i]);
    }
    return any ? c.make(e->op(), args) : nullptr;
  }
};
template <> struct Rule<Op::Guarded> : Rule<Op::Piecewise> {};
// sum_i p_i * a_i'; the value's own operands are not differentiated (the
// differentiator does not walk them, see Derivative.cpp).
template <> struct Rule<Op::Partials> {
  static constexpr int kind = -1;
  static Expr diff(ExprContext &c, Expr e, std::span<const Expr> ds) {
    Expr sum = nullptr;
    for (size_t i = 1; i + 1 < e->numArgs(); i += 2)
      sum = addD(c, sum, mulD(c, e->arg(i + 1), ds[i]));
    return sum;
  }
};

// Max/Min propagate NaN (fmax would drop it). At a tie the first operand's
// derivative is taken; the builder puts numbers first, so relu = Max(0, x)
// has relu'(0) = 0 however it was written.
BINARY_RULE(Max, (a != a || b != b) ? nan<T>() : (a >= b ? a : b),
            c.make(Op::Piecewise, {orZero(c, da), c.make(Op::Ge, {a, b}), orZero(c, db)}))
BINARY_RULE(Min, (a != a || b != b) ? nan<T>() : (a <= b ? a : b),
            c.make(Op::Piecewise, {orZero(c, da), c.make(Op::Le, {a, b}), orZero(c, db)}))
UNARY_RULE(Abs, std::fabs(a), c.mul(c.call(Op::Sign, a), d))
UNARY_RULE(Heaviside, a > T(0) ? T(1) : a <= T(0) ? T(0) : a, nullptr)
UNARY_RULE(Sign, a > T(0) ? T(1) : a < T(0) ? T(-1) : a, nullptr)
UNARY_RULE(Floor, std::floor(a), nullptr)
UNARY_RULE(Ceiling, std::ceil(a), nullptr)

UNARY_RULE(Exp, std::exp(a), c.mul(e, d))
UNARY_RULE(Log, std::log(a), c.div(d, a))
UNARY_RULE(Sqrt, std::sqrt(a), c.div(d, c.mul(num(c, 2), e)))
UNARY_RULE(Sin, std::sin(a), c.mul(c.call(Op::Cos, a), d))
UNARY_RULE(Cos, std::cos(a), c.mul(c.neg(c.call(Op::Sin, a)), d))
UNARY_RULE(Tan, std::tan(a), c.mul(c.add(num(c, 1), c.mul(e, e)), d))
UNARY_RULE(Asin, std::asin(a), c.div(d, c.call(Op::Sqrt, c.sub(num(c, 1), c.mul(a, a)))))
UNARY_RULE(Acos, std::acos(a), c.neg(c.div(d, c.call(Op::Sqrt, c.sub(num(c, 1), c.mul(a, a))))))
UNARY_RULE(Atan, std::atan(a), c.div(d, c.add(num(c, 1), c.mul(a, a))))
BINARY_RULE(Atan2, std::atan2(a, b),
            c.div(subD(c, mulD(c, b, da), mulD(c, a, db)), c.add(c.mul(a, a), c.mul(b, b))))
UNARY_RULE(Sinh, std::sinh(a), c.mul(c.call(Op::Cosh, a), d))
UNARY_RULE(Cosh, std::cosh(a), c.mul(c.call(Op::Sinh, a), d))
// sech(a)**2 in StableForms' form: 1 - tanh(a)**2 cancels where tanh is
// near 1, and 1/cosh(a)**2 overflowed to 0 past |a| = 45 (f32), where the
// true value is still a subnormal.
UNARY_RULE(Tanh, std::tanh(a), c.mul(detail::sech2(c, a), d))
UNARY_RULE(Asinh, std::asinh(a), c.div(d, c.call(Op::Sqrt, c.add(c.mul(a, a), num(c, 1)))))
// sqrt(a-1)*sqrt(a+1) rather than sqrt(a*a-1): no overflow for large a.
UNARY_RULE(Acosh, std::acosh(a),
           c.div(d, c.mul(c.call(Op::Sqrt, c.sub(a, num(c, 1))), c.call(Op::Sqrt, c.add(a, num(c, 1))))))
UNARY_RULE(Atanh, std::atanh(a), c.div(d, c.sub(num(c, 1), c.mul(a, a))))
// 2/sqrt(pi), exact until code generation.
Expr twoOverSqrtPi(ExprContext &c) { return c.div(num(c, 2), c.call(Op::Sqrt, c.constant(Op::Pi))); }
UNARY_RULE(Erf, std::erf(a), c.mul(c.mul(twoOverSqrtPi(c), c.call(Op::Exp, c.neg(c.mul(a, a)))), d))
UNARY_RULE(Erfc, std::erfc(a), c.mul(c.neg(c.mul(twoOverSqrtPi(c), c.call(Op::Exp, c.neg(c.mul(a, a))))), d))

UNARY_RULE(Log1p, std::log1p(a), c.div(d, c.add(num(c, 1), a)))
UNARY_RULE(Expm1, std::expm1(a), c.mul(c.call(Op::Exp, a), d))
// Overflow-free: exp of a non-positive number only. Code generators emit the
// same expression, so compiled and interpreted results agree.
template <class T> T sigmoid(T a) {
  T e = std::exp(-std::fabs(a));
  return a >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
}
UNARY_RULE(Sigmoid, sigmoid(a),
           // sigmoid(a)*sigmoid(-a): 1 - sigmoid(a) would cancel for large a.
           c.mul(c.mul(e, c.call(Op::Sigmoid, c.neg(a))), d))
// max(a, 0) + log1p(exp(-|a|)); written so NaN propagates.
UNARY_RULE(Softplus, (a > T(0) ? a : T(0)) + std::log1p(std::exp(-std::fabs(a))), c.mul(c.call(Op::Sigmoid, a), d))

#undef UNARY_RULE
#undef BINARY_RULE
#undef COND_RULE

template <Op O, class T> void evalBlock(T *out, const T *const *args, unsigned nargs, size_t n) {
  using R = Rule<O>;
  if constexpr (R::kind == 1) {
    const T *a = args[0];
    for (size_t i = 0; i < n; ++i)
      out[i] = R::template eval<T>(a[i]);
  } else if constexpr (R::kind == 2) {
    const T *a = args[0], *b = args[1];
    for (size_t i = 0; i < n; ++i)
      out[i] = R::template eval<T>(a[i], b[i]);
  } else if constexpr (O == Op::Partials) {
    for (size_t i = 0; i < n; ++i)
      out[i] = args[0][i];
  } else if constexpr (R::kind == -1) {
    // Piecewise: the first true condition wins, so fill from the last branch back.
    const T *last = args[nargs - 1];
    for (size_t i = 0; i < n; ++i)
      out[i] = last[i];
    for (int k = int(nargs) - 3; k >= 0; k -= 2) {
      const T *val = args[k], *cond = args[k + 1];
      for (size_t i = 0; i < n; ++i)
        out[i] = cond[i] != T(0) ? val[i] : out[i];
    }
  }
}

template <Op O> constexpr OpImpl makeImpl() {
  using R = Rule<O>;
  if constexpr (R::kind == 0)
    return OpImpl{nullptr, nullptr, nullptr};
  else if constexpr (std::is_same_v<std::remove_cv_t<decltype(R::diff)>, std::nullptr_t>)
    return OpImpl{&evalBlock<O, float>, &evalBlock<O, double>, nullptr};
  else
    return OpImpl{&evalBlock<O, float>, &evalBlock<O, double>, &R::diff};
}

// constexpr: ready before any static initialiser runs (layers may be compiled in one).
constexpr OpImpl kImpls[] = {
#define HSNN_OP(Id, Spelling, Arity, Syntax, Result, Libm) makeImpl<Op::Id>(),
#include "hsnn/Ops.def"
};
static_assert(std::size(kImpls) == size_t(kNumOps));

#define HSNN_OP(Id, Spelling, Arity, Syntax, Result, Libm)                                                   \
  static_assert(Rule<Op::Id>::kind == Arity || Rule<Op::Id>::kind == 0, "arity of " #Id " disagrees with Ops.def");
#include "hsnn/Ops.def"

constexpr OpInfo kInfos[] = {
#define HSNN_OP(Id, Spelling, Arity, Syntax, Result, Libm)                                                   \
  OpInfo{#Id, Spelling, Arity, OpSyntax::Syntax, std::string_view(#Result) == "Bool", Libm},
#include "hsnn/Ops.def"
};

} // namespace

const OpInfo &opInfo(Op op) { return kInfos[size_t(op)]; }

namespace detail {
const OpImpl &opImpl(Op op) { return kImpls[size_t(op)]; }

double evalScalar(Op op, std::span<const double> args) {
  const double *ptrs[16];
  size_t n = args.size() < 16 ? args.size() : 16;
  for (size_t i = 0; i < n; ++i)
    ptrs[i] = &args[i];
  double out = 0;
  opImpl(op).eval64(&out, ptrs, unsigned(n), 1);
  return out;
}
namespace {
long double evalExtended(Expr e) {
  auto arg = [&](size_t i) { return evalExtended(e->arg(i)); };
  switch (e->op()) {
  case Op::Number:
    return e->number();
  case Op::Pi:
    return 3.141592653589793238462643383279502884L;
  case Op::E:
    return 2.718281828459045235360287471352662498L;
  case Op::Add:
    return arg(0) + arg(1);
  case Op::Sub:
    return arg(0) - arg(1);
  case Op::Mul:
    return arg(0) * arg(1);
  case Op::Div:
    return arg(0) / arg(1);
  case Op::Neg:
    return -arg(0);
  case Op::Pow:
    return std::pow(arg(0), arg(1));
  case Op::Sqrt:
    return std::sqrt(arg(0));
  case Op::Exp:
    return std::exp(arg(0));
  case Op::Log:
    return std::log(arg(0));
  case Op::Partials:
    return arg(0);
  default: {
    // The rest through the op table in double.
    double vals[2] = {0, 0};
    for (size_t i = 0; i < e->numArgs() && i < 2; ++i)
      vals[i] = double(arg(i));
    return evalScalar(e->op(), std::span<const double>(vals, e->numArgs()));
  }
  }
}
} // namespace

double evalConstant(Expr e) { return double(evalExtended(e)); }

double evalReciprocal(Expr e) { return double(1.0L / evalExtended(e)); }

} // namespace detail

} // namespace hsnn
