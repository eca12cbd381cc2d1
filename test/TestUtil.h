//===- test/TestUtil.h - Shared helpers for hsnn tests ----------*- C++ -*-===//
#pragma once

#include "hsnn/Formula.h"
#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include "Program/Interpreter.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <doctest/doctest.h>
#include <map>
#include <random>
#include <string>
#include <vector>

// Errors are values: check one and show its message when it is set.
#define REQUIRE_OK(expr)                                                                                     \
  do {                                                                                                       \
    hsnn::Error err_ = (expr);                                                                               \
    INFO(err_.message());                                                                                    \
    REQUIRE_FALSE(static_cast<bool>(err_));                                                                  \
  } while (0)

// The same for an Expected: REQUIRE it holds a value, showing the error otherwise.
#define REQUIRE_OK_EXPECTED(expr)                                                                            \
  do {                                                                                                       \
    const auto &e_ = (expr);                                                                                 \
    INFO((e_ ? std::string() : e_.error().message()));                                                       \
    REQUIRE(e_.has_value());                                                                                 \
  } while (0)

namespace hsnn::test {

/// The CPU engines this build has: the interpreter, and the JIT when built.
inline std::vector<Method> cpuMethods() {
  std::vector<Method> m = {Method::CpuInterp};
  if (runtimeInfo().cpuJitEnabled)
    m.push_back(Method::CpuJit);
  return m;
}

/// n uniform doubles in [lo, hi), the same for a seed.
inline std::vector<double> randoms(size_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (double &x : v)
    x = u(rng);
  return v;
}

/// Bit for bit, NaN payloads aside.
template <class T> bool sameBits(T a, T b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

template <class T> void expectSameBits(const std::vector<T> &got, const std::vector<T> &want, const char *what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!sameBits(got[i], want[i]) && bad++ == 0)
      first = i;
  INFO(what << ": " << bad << " of " << got.size() << " elements differ; first at " << first << ": "
            << (bad ? got[first] : T(0)) << " vs " << (bad ? want[first] : T(0)));
  CHECK(bad == 0);
}

// Nodes-major (nodes x batch) to batch-major (batch x nodes) and back.
template <class T> std::vector<T> transposed(const std::vector<T> &v, size_t rows, size_t cols) {
  std::vector<T> t(v.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c)
      t[c * rows + r] = v[r * cols + c];
  return t;
}

/// Parses or fails the test with the diagnostic.
inline Formula mustParse(ExprContext &ctx, std::string_view text, FormulaMode mode = FormulaMode::Activation,
                         bool simplifyIt = true) {
  auto r = parseFormulaDetailed(ctx, text, {mode, -1, simplifyIt});
  if (auto *d = std::get_if<Diagnostic>(&r))
    FAIL(d->render());
  return std::get<Formula>(std::move(r));
}

/// Evaluates `e` at one point with the interpreter, constants by name.
template <class T = double>
T evalAt(Expr e, double x, double yTrue = 0, const std::map<std::string, double> &constants = {}) {
  std::vector<std::string> names;
  std::vector<double> values;
  for (auto &[k, v] : constants) {
    names.push_back(k);
    values.push_back(v);
  }
  detail::Program p = detail::Program::lower({&e, 1}, names);
  T in = T(x), yt = T(yTrue), out = 0;
  const T *vars[3] = {&in, &in, &yt};
  T *outs[1] = {&out};
  detail::runBlock<T>(p, vars, values.data(), outs, 1);
  return out;
}

/// Distance in units in the last place between two floats of one type.
template <class T> uint64_t ulpDistance(T a, T b) {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  if (a == b)
    return 0;
  I ia, ib;
  std::memcpy(&ia, &a, sizeof a);
  std::memcpy(&ib, &b, sizeof b);
  // Map sign-magnitude to a monotonic integer line.
  auto key = [](I v) -> int64_t { return v < 0 ? int64_t(std::numeric_limits<I>::min()) - int64_t(v) : int64_t(v); };
  int64_t d = key(ia) - key(ib);
  return uint64_t(d < 0 ? -d : d);
}

/// Same value, or both NaN.
template <class T> bool sameOrBothNaN(T a, T b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

} // namespace hsnn::test

namespace hsnn::test {

/// A formula per numeric op of hsnn/Ops.def, generated from it so a new op
/// is tested without editing a list: calls with numeric arguments
/// (`sin(x)`, `atan2(x, 0.25)`), each infix op both ways round, negation, and
/// one Piecewise that uses every comparison and logic op.
inline std::vector<std::string> opFormulas() {
  std::vector<std::string> out;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo &o = opInfo(Op(i));
    std::string sp(o.spelling);
    if (o.isBool || o.syntax == OpSyntax::Leaf || o.arity < 0)
      continue;
    if (o.syntax == OpSyntax::Call)
      out.push_back(o.arity == 1 ? sp + "(x)" : sp + "(x, 0.25)");
    else if (o.syntax == OpSyntax::Prefix)
      out.push_back(sp + "x");
    else if (o.syntax == OpSyntax::Infix)
      for (std::string f : {"x" + sp + "3", "0.75" + sp + "x"})
        out.push_back(f);
  }
  out.push_back("Piecewise((x, (x < -1) | (x <= -2)), (2*x, (x > 1) & ~(x >= 3)), (0.5, (x == 0) | (x != x)), (x*x, True))");
  return out;
}

/// The names of the built-ins of one mode, from the built-in table.
inline std::vector<std::string> builtinNames(FormulaMode mode) {
  std::vector<std::string> out;
  for (const BuiltinInfo &b : builtins())
    if (b.mode == mode)
      out.emplace_back(b.name);
  return out;
}

/// Ops and activation built-ins together, plus formulas with constants.
inline std::vector<std::string> activationFormulas(std::initializer_list<const char *> extra) {
  std::vector<std::string> out = opFormulas(), names = builtinNames(FormulaMode::Activation);
  out.insert(out.end(), names.begin(), names.end());
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

// A random numeric expression over the activation variable.
/// Random expressions for property tests (round trips, simplification).
class RandomExpr {
public:
  RandomExpr(ExprContext &ctx, uint64_t seed) : ctx_(ctx), rng_(seed) {}

  Expr num(int depth) {
    int pick = int(rng_() % (depth <= 0 ? 4 : 14));
    Expr x = ctx_.variable(Variable::Num);
    switch (pick) {
    case 0: return x;
    case 1: return ctx_.param(rng_() % 2 ? "alpha" : "beta");
    case 2: return ctx_.number(double(int(rng_() % 21) - 10) / 4);
    case 3: return ctx_.number(std::ldexp(double(rng_() % 1000) + 0.1, int(rng_() % 40) - 20));
    case 4: return ctx_.add(num(depth - 1), num(depth - 1));
    case 5: return ctx_.sub(num(depth - 1), num(depth - 1));
    case 6: return ctx_.mul(num(depth - 1), num(depth - 1));
    case 7: return ctx_.div(num(depth - 1), num(depth - 1));
    case 8: return ctx_.pow(num(depth - 1), num(depth - 1));
    case 9: return ctx_.neg(num(depth - 1));
    case 10: {
      static const Op unary[] = {Op::Sin, Op::Exp, Op::Abs, Op::Softplus, Op::Sigmoid, Op::Erf, Op::Log1p, Op::Sign};
      return ctx_.call(unary[rng_() % std::size(unary)], num(depth - 1));
    }
    case 11: return ctx_.make(rng_() % 2 ? Op::Max : Op::Min, {num(depth - 1), num(depth - 1)});
    case 12: return ctx_.make(Op::Atan2, {num(depth - 1), num(depth - 1)});
    default: return ctx_.make(Op::Piecewise, {num(depth - 1), cond(depth - 1), num(depth - 1), cond(depth - 1), num(depth - 1)});
    }
  }

  Expr cond(int depth) {
    static const Op cmp[] = {Op::Lt, Op::Le, Op::Gt, Op::Ge, Op::Eq, Op::Ne};
    switch (depth <= 0 ? 0 : rng_() % 4) {
    case 0: return ctx_.make(cmp[rng_() % 6], {num(depth - 1), num(depth - 1)});
    case 1: return ctx_.make(Op::And, {cond(depth - 1), cond(depth - 1)});
    case 2: return ctx_.make(Op::Or, {cond(depth - 1), cond(depth - 1)});
    default: return ctx_.make(Op::Not, {cond(depth - 1)});
    }
  }

private:
  ExprContext &ctx_;
  std::mt19937_64 rng_;
};


} // namespace hsnn::test
