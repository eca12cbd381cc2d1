//===- lib/Expr/Collect.cpp - Canonical sums and products -----------------===//
#include "Collect.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <vector>

namespace hsnn::detail {
namespace {

// Sums and products with more atoms than this are not collected.
constexpr size_t kMaxAtoms = 256;

// Where collecting would round, it does not combine: a coefficient's two
// sides (x*2/3) become one number only when the division is exact, and
// sqrt(c)**2 folds to c only when c**k is exact.
bool mulExact(double a, double b, double &r) {
  r = a * b;
  return std::isfinite(r) && std::fma(a, b, -r) == 0;
}
bool divExact(double a, double b, double &r) {
  if (b == 0)
    return false;
  r = a / b;
  return std::isfinite(r) && std::fma(r, b, -a) == 0;
}
bool isInteger(double v) { return std::isfinite(v) && v == std::trunc(v); }

// Canonical order of atoms: numbers, exact constants (pi, sqrt(2)),
// variables, constants, then everything else, each group by structure.
int rank(Expr e) {
  if (e->isNumber())
    return 0;
  if (e->isConstant())
    return 1;
  if (e->op() == Op::Var)
    return 2;
  if (e->op() == Op::Param)
    return 3;
  return 4;
}
bool before(Expr a, Expr b) {
  int ra = rank(a), rb = rank(b);
  return ra != rb ? ra < rb : compareStructure(a, b) < 0;
}

bool isSum(Expr e) { return e->op() == Op::Add || e->op() == Op::Sub; }
bool isProduct(Expr e) { return e->op() == Op::Mul || e->op() == Op::Div; }

//===-- Products ----------------------------------------------------------===//

struct Product {
  double num = 1, den = 1; // coefficient num/den, both positive
  bool negative = false;
  std::vector<std::pair<Expr, int>> powers; // base, integer exponent
  bool ok = true;

  // Bases dividing separately: b in 1/b/b, when b can be large (b*b would
  // overflow where 1/b/b is a normal number: softsign's 1/(1 + |x|)**2).
  std::vector<Expr> divisors;

  // A base's entry in powers, or powers.size(). A linear search: products
  // have a few bases (at most kMaxAtoms), and a hash map's nodes cost a
  // malloc and a free each (the DEVLOG has the measurement).
  size_t find(Expr base) const {
    size_t i = 0;
    while (i < powers.size() && powers[i].first != base)
      ++i;
    return i;
  }

  void addPower(Expr base, int k) {
    size_t at = find(base);
    if (at == powers.size()) {
      powers.push_back({base, k});
      return;
    }
    int &e = powers[at].second;
    if (k < 0 && e < 0 && !base->isBounded() && !base->isConstant())
      divisors.insert(divisors.end(), size_t(-k), base);
    else
      e += k;
  }
  void addNumber(double v, int sign) {
    if (v < 0 || std::signbit(v))
      negative = !negative, v = -v;
    // Numbers on one side multiply as the builder folds them (rounded);
    // the two sides stay apart, so x/3 is not x*0.333.
    double &c = sign > 0 ? num : den;
    c *= v;
    ok = ok && v != 0 && std::isfinite(c) && c != 0;
  }
  size_t visited = 0;
  void flatten(Expr e, int sign) {
    // Long chains are left as they are: collecting is for formulas, and a
    // bound keeps it linear (and its recursion shallow) on deep DAGs.
    if (++visited > kMaxAtoms) {
      ok = false;
      return;
    }
    switch (e->op()) {
    case Op::Mul:
      // A written square of a sum stays one power: (1 + |x|)**2 is not
      // split into divisions below.
      if (e->arg(0) == e->arg(1) && !isProduct(e->arg(0)) && e->arg(0)->op() != Op::Neg) {
        addPower(e->arg(0), 2 * sign);
        return;
      }
      flatten(e->arg(0), sign), flatten(e->arg(1), sign);
      return;
    case Op::Div:
      flatten(e->arg(0), sign), flatten(e->arg(1), -sign);
      return;
    case Op::Neg:
      negative = !negative;
      flatten(e->arg(0), sign);
      return;
    case Op::Number:
      addNumber(e->number(), sign);
      return;
    case Op::Pow:
      if (Expr k = e->arg(1); k->isNumber() && isInteger(k->number()) && std::fabs(k->number()) <= 64) {
        addPower(e->arg(0), sign * int(k->number()));
        return;
      }
      break;
    default:
      break;
    }
    addPower(e, sign);
  }
};

// sqrt(c)**2 is c for a constant c >= 0: the pair leaves the powers and
// joins the coefficient (sqrt(2)*sqrt(2) -> 2), when c is a number.
void foldSquareRoots(Product &p) {
  for (auto &[b, k] : p.powers) {
    if (b->op() != Op::Sqrt || !b->arg(0)->isNumber() || k / 2 == 0)
      continue;
    double c = b->arg(0)->number(), f = 1;
    for (int i = 0; i < std::abs(k / 2); ++i)
      p.ok = p.ok && mulExact(f, c, f);
    double &side = k > 0 ? p.num : p.den;
    p.ok = p.ok && mulExact(side, f, side);
    k %= 2;
  }
  // An exact constant over itself is 1 (constants are finite and nonzero).
  std::erase_if(p.powers, [](auto &bk) { return bk.first->isConstant() && bk.second == 0; });
}

Expr powerOf(ExprContext &ctx, Expr base, int k) {
  if (k == 1)
    return base;
  if (k == 2)
    return ctx.mul(base, base);
  return ctx.pow(base, ctx.number(k));
}

// Multiplies factors left to right, the first negated when asked (-x*y,
// as SymPy prints it). sqrt(a)*sqrt(b) of constants a, b >= 0 is
// sqrt(a*b): one square root, and the 1/sqrt(2*pi) users recognise.
Expr multiply(ExprContext &ctx, Expr number, const std::vector<Expr> &factors, bool negateFirst = false) {
  std::vector<Expr> roots, rest;
  if (number)
    rest.push_back(number);
  for (Expr f : factors)
    (f->op() == Op::Sqrt && f->isConstant() ? roots : rest).push_back(f);
  if (!roots.empty()) {
    Expr arg = roots[0]->arg(0);
    for (size_t i = 1; i < roots.size(); ++i)
      arg = ctx.mul(arg, roots[i]->arg(0));
    arg = collectProduct(ctx, arg, false); // 2*pi, in canonical order
    rest.insert(rest.begin() + (number ? 1 : 0), roots.size() > 1 ? ctx.call(Op::Sqrt, arg) : roots[0]);
  }
  Expr r = nullptr;
  for (Expr f : rest) {
    if (negateFirst && !r)
      f = ctx.neg(f);
    r = r ? ctx.mul(r, f) : f;
  }
  return r;
}

// The exponent's sign and whether it is an integer, for an exact rational
// (a number, or the builder's integer over integer); nullopt otherwise.
struct ExponentKind {
  bool negative, integer;
};
std::optional<ExponentKind> exactExponent(Expr k) {
  if (k->isNumber() && std::fabs(k->number()) < 0x1p32 && isInteger(k->number() * 0x1p20))
    return ExponentKind{k->number() < 0, isInteger(k->number())};
  if (k->op() == Op::Div && k->arg(0)->isNumber() && k->arg(1)->isNumber() && isInteger(k->arg(0)->number()) &&
      isInteger(k->arg(1)->number()))
    return ExponentKind{(k->arg(0)->number() < 0) != (k->arg(1)->number() < 0), false};
  return std::nullopt;
}

// x**(1/3)*x**(1/3) is x**(2/3), x*x**0.5 is x**1.5: powers of one base
// with fractional exponents add, when that keeps the function's domain and
// its values at 0: every exponent of one sign (x**(1/2)*x**(-1/3) is 0*inf
// = NaN at 0, x**(1/6) is 0) and the sum not an integer (x**0.5*x**1.5 is
// NaN for x < 0, x**2 is not). Exponents add exactly or not at all.
void combineFractionalPowers(ExprContext &ctx, Product &p) {
  // Only a power node has a fractional exponent: without one there is
  // nothing to combine (most products), and nothing to build.
  if (std::none_of(p.powers.begin(), p.powers.end(), [](auto &bk) { return bk.first->op() == Op::Pow; }))
    return;
  struct Group {
    std::vector<size_t> entries;
    Expr total = nullptr;
    bool negative = false, mixed = false, fractional = false;
  };
  std::unordered_map<Expr, Group> groups;
  std::vector<Expr> order;
  auto add = [&](Expr base, size_t entry, Expr k) {
    auto kind = exactExponent(k);
    if (!kind)
      return;
    auto [it, fresh] = groups.try_emplace(base);
    Group &g = it->second;
    if (fresh)
      order.push_back(base), g.negative = kind->negative;
    g.mixed |= g.negative != kind->negative;
    g.fractional |= !kind->integer;
    g.entries.push_back(entry);
    g.total = g.total ? ctx.add(g.total, k) : k;
  };
  for (size_t i = 0; i < p.powers.size(); ++i) {
    auto [f, k] = p.powers[i];
    if (k == 0)
      continue;
    if (f->op() == Op::Pow)
      add(f->arg(0), i, ctx.mul(f->arg(1), ctx.number(k)));
    else
      add(f, i, ctx.number(k));
  }
  std::vector<bool> drop(p.powers.size());
  for (Expr base : order) {
    Group &g = groups.at(base);
    auto total = g.entries.size() > 1 || p.powers[g.entries[0]].second != 1 ? exactExponent(g.total) : std::nullopt;
    if (!g.fractional || g.mixed || !total || total->integer)
      continue;
    for (size_t e : g.entries)
      drop[e] = true;
    p.powers.push_back({ctx.pow(base, g.total), 1});
  }
  for (size_t i = drop.size(); i-- > 0;)
    if (drop[i])
      p.powers.erase(p.powers.begin() + ptrdiff_t(i));
}

Expr buildProduct(ExprContext &ctx, Product &p, bool fast) {
  combineFractionalPowers(ctx, p);
  std::sort(p.powers.begin(), p.powers.end(), [](auto &a, auto &b) { return before(a.first, b.first); });
  std::vector<Expr> up, down;
  for (auto &[b, k] : p.powers) {
    if (k == 0 && !fast)
      return nullptr; // x/x: NaN at 0 and inf, left as written
    if (k > 0)
      up.push_back(powerOf(ctx, b, k));
    else if (k < 0)
      down.push_back(powerOf(ctx, b, -k));
  }
  // The coefficient: one number when num/den is exact, written as a
  // division when it is 1/n (x/2, not 0.5*x: the same value).
  double c, inv, upNum = p.num, downNum = p.den;
  if (divExact(p.num, p.den, c)) {
    upNum = c, downNum = 1;
    if (c < 1 && divExact(1, c, inv) && isInteger(inv))
      upNum = 1, downNum = inv;
  }
  Expr top = upNum != 1 || up.empty() ? multiply(ctx, ctx.number(p.negative ? -upNum : upNum), up)
                                        : multiply(ctx, nullptr, up, p.negative);
  Expr bottom = multiply(ctx, downNum != 1 ? ctx.number(downNum) : nullptr, down);
  Expr r = bottom ? ctx.div(top, bottom) : top;
  std::sort(p.divisors.begin(), p.divisors.end(), before);
  for (Expr d : p.divisors)
    r = ctx.div(r, d);
  return r;
}

//===-- Sums --------------------------------------------------------------===//

struct Sum {
  Sum(ExprContext &c, bool f) : ctx(c), fast(f) {}
  ExprContext &ctx;
  bool fast;
  std::vector<std::pair<Expr, double>> terms; // term, coefficient
  double number = 0;
  int numbers = 0;
  bool ok = true;

  int added = 0; // terms seen, before like terms combined

  void addTerm(Expr t, double c) {
    ++added;
    size_t at = 0; // a linear search, as Product::find
    while (at < terms.size() && terms[at].first != t)
      ++at;
    if (at == terms.size()) {
      terms.push_back({t, c});
      return;
    }
    double &k = terms[at].second;
    k += c;
    ok = ok && std::isfinite(k);
  }
  // The numeric coefficient of a product and the product without it
  // (-2*sin(x)*cos(x) is -2 times sin(x)*cos(x)).
  static std::pair<Expr, double> split(ExprContext &ctx, Expr e, bool fast) {
    if (!isProduct(e) && e->op() != Op::Neg)
      return {e, 1};
    Product p;
    p.flatten(e, 1);
    foldSquareRoots(p);
    double c;
    if (!p.ok || !divExact(p.num, p.den, c))
      return {e, 1};
    double sign = p.negative ? -1 : 1;
    p.num = p.den = 1, p.negative = false;
    Expr t = buildProduct(ctx, p, fast);
    return t ? std::pair{t, sign * c} : std::pair{e, 1.0};
  }
  size_t visited = 0;
  void flatten(Expr e, double sign) {
    if (++visited > kMaxAtoms) {
      ok = false;
      return;
    }
    switch (e->op()) {
    case Op::Add:
      flatten(e->arg(0), sign), flatten(e->arg(1), sign);
      return;
    case Op::Sub:
      flatten(e->arg(0), sign), flatten(e->arg(1), -sign);
      return;
    case Op::Neg:
      flatten(e->arg(0), -sign);
      return;
    case Op::Number:
      number += sign * e->number();
      ok = ok && std::isfinite(number);
      ++numbers;
      return;
    default: {
      auto [t, c] = split(ctx, e, fast);
      addTerm(t, sign * c);
    }
    }
  }
};

Expr scaled(ExprContext &ctx, Expr t, double c, bool fast) {
  if (c == 1)
    return t;
  return collectProduct(ctx, ctx.mul(ctx.number(c), t), fast);
}

// The terms in canonical order: a positive term leads (1 - x, not -x + 1),
// the number goes last. Null when a cancelled term could hide a NaN.
Expr buildSum(ExprContext &ctx, Sum &s, bool fast) {
  std::vector<std::pair<Expr, double>> kept;
  for (auto &[t, c] : s.terms) {
    if (c != 0)
      kept.push_back({t, c});
    else if (!fast && !t->isBounded())
      return nullptr; // x - x: NaN at inf, left as written
  }
  std::sort(kept.begin(), kept.end(), [](auto &a, auto &b) { return before(a.first, b.first); });
  auto lead = std::find_if(kept.begin(), kept.end(), [](auto &t) { return t.second > 0; });
  if (lead != kept.end())
    std::rotate(kept.begin(), lead, lead + 1);
  // With no positive term, a positive number leads (1 - x).
  bool numberFirst = lead == kept.end() && s.number > 0;
  Expr r = numberFirst ? ctx.number(s.number) : nullptr;
  for (auto &[t, c] : kept) {
    if (!r)
      r = scaled(ctx, t, c, fast);
    else
      r = c > 0 ? ctx.add(r, scaled(ctx, t, c, fast)) : ctx.sub(r, scaled(ctx, t, -c, fast));
  }
  if (!r)
    return ctx.number(s.number);
  // A lone 0 that was written stays (x + 0 is +0 at x = -0); numbers that
  // cancel (x + 1 - 1) leave nothing.
  if (!numberFirst && s.numbers && (s.number != 0 || (s.numbers == 1 && !fast)))
    r = std::signbit(s.number) ? ctx.sub(r, ctx.number(-s.number)) : ctx.add(r, ctx.number(s.number));
  return r;
}


int unitless(const Sum &s) {
  int n = 0;
  for (auto &[t, c] : s.terms)
    n += std::fabs(c) != 1;
  return n + (s.number != 0);
}

// c*(a + b) as c*a + c*b when that leaves fewer coefficients to multiply:
// (erfc(u) + 2*x*g)/2 is erfc(u)/2 + x*g. Only exact scalings.
Expr distribute(ExprContext &ctx, const Product &p, bool fast) {
  if (p.powers.size() != 1 || p.powers[0].second != 1 || !isSum(p.powers[0].first) || !p.divisors.empty())
    return nullptr;
  double c;
  if (!divExact(p.num, p.den, c) || c == 1)
    return nullptr;
  c = p.negative ? -c : c;
  Sum plain(ctx, fast), scaledSum(ctx, fast);
  plain.flatten(p.powers[0].first, 1);
  scaledSum.flatten(p.powers[0].first, c);
  if (!plain.ok || !scaledSum.ok || unitless(scaledSum) >= unitless(plain) + 1)
    return nullptr;
  return buildSum(ctx, scaledSum, fast);
}

// a*x**2*u + b*x**3*v as x**2*(a*u + b*x*v): the powers every term has,
// each at its least exponent, multiply the sum once. Shorter, one product
// fewer per term, unless a term is the factor itself (its 1 would be a new
// number). It changes results by rounding; at an overflow it can replace
// inf - inf by the product's limit, and where the sum is an exact 0 its
// sign may flip (x*a + x*b is +0, x*(a + b) is -0 for x < 0). A sum with a
// number term has no common factor and keeps its association.
Expr factorCommon(ExprContext &ctx, const Sum &s, bool fast) {
  if (!s.ok || s.numbers || s.terms.size() < 2)
    return nullptr;
  std::vector<Product> products(s.terms.size());
  std::unordered_map<Expr, int> common;
  bool allNegative = true;
  for (size_t i = 0; i < s.terms.size(); ++i) {
    auto &[t, c] = s.terms[i];
    Product &p = products[i];
    p.flatten(t, 1);
    if (!p.ok || c == 0)
      return nullptr;
    allNegative &= c < 0;
    if (i == 0) {
      for (auto &[b, k] : p.powers)
        if (k > 0)
          common.emplace(b, k);
      continue;
    }
    for (auto it = common.begin(); it != common.end();) {
      size_t at = p.find(it->first);
      int k = at == p.powers.size() ? 0 : p.powers[at].second;
      if (k <= 0) {
        it = common.erase(it);
        continue;
      }
      it->second = std::min(it->second, k);
      ++it;
    }
  }
  if (common.empty())
    return nullptr;
  // Integer coefficients' common divisor joins the factor: 2*x + 4*x*y is
  // 2*x*(1 + 2*y), and over 2 the 2s meet.
  double g = 0;
  for (auto &[t, c] : s.terms)
    g = isInteger(c) && std::fabs(c) < 0x1p53 && (g >= 0) ? std::gcd(int64_t(g), int64_t(std::fabs(c))) : -1;
  g = g > 1 ? g : 1;
  Sum inner(ctx, fast);
  for (size_t i = 0; i < s.terms.size(); ++i) {
    Product &p = products[i];
    for (auto &[b, k] : p.powers)
      if (auto it = common.find(b); it != common.end())
        k -= it->second;
    std::erase_if(p.powers, [&](auto &bk) { return bk.second == 0 && common.count(bk.first); });
    if (p.powers.empty() && p.divisors.empty())
      return nullptr; // x + c*x**3 is shorter than x*(c*x**2 + 1), and no slower
    Expr reduced = buildProduct(ctx, p, fast);
    if (!reduced)
      return nullptr;
    inner.flatten(reduced, (allNegative ? -s.terms[i].second : s.terms[i].second) / g);
  }
  Expr sum = inner.ok ? buildSum(ctx, inner, fast) : nullptr;
  if (!sum)
    return nullptr;
  Product factor;
  factor.negative = allNegative;
  factor.num = g;
  for (auto &[b, k] : common)
    factor.powers.push_back({b, k});
  return collectProduct(ctx, ctx.mul(buildProduct(ctx, factor, fast), sum), fast);
}

} // namespace

Expr collectProduct(ExprContext &ctx, Expr e, bool fast) {
  if (!isProduct(e) && !(e->op() == Op::Neg && !isSum(e->arg(0))))
    return e;
  Product p;
  p.flatten(e, 1);
  foldSquareRoots(p);
  if (!p.ok)
    return e;
  if (Expr d = distribute(ctx, p, fast))
    return d;
  Expr r = buildProduct(ctx, p, fast);
  return r ? r : e;
}

Expr collectSum(ExprContext &ctx, Expr e, bool fast) {
  if (!isSum(e) && !(e->op() == Op::Neg && isSum(e->arg(0))))
    return e;
  Sum s(ctx, fast);
  s.flatten(e, 1);
  // Only a sum whose terms combine is rebuilt: reassociating the others
  // could cancel digits the formula was written to keep (bce's
  // `1 - y_pred + eps` is not `eps - y_pred + 1` near y_pred = 1).
  bool combines = s.added > int(s.terms.size()) || s.numbers > 1 || e->op() == Op::Neg;
  if (Expr r = factorCommon(ctx, s, fast))
    return r;
  if (s.ok && combines)
    if (Expr r = buildSum(ctx, s, fast))
      return r;
  // Otherwise only the signs: a + -2*b is a - 2*b, -2*a + b is b - 2*a
  // (the same value: negation and addition commute exactly).
  if (e->op() == Op::Neg)
    return e;
  Expr a = e->arg(0), b = e->arg(1);
  auto negative = [&](Expr t) { return t->isNumber() ? t->number() < 0 : Sum::split(ctx, t, fast).second < 0; };
  auto negated = [&](Expr t) { return t->isNumber() ? ctx.number(-t->number()) : collectProduct(ctx, ctx.neg(t), fast); };
  if (negative(b))
    return e->op() == Op::Add ? ctx.sub(a, negated(b)) : ctx.add(a, negated(b));
  if (e->op() == Op::Add && negative(a))
    return ctx.sub(b, negated(a));
  return e;
}

} // namespace hsnn::detail
