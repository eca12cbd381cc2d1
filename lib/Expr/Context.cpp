//===- lib/Expr/Context.cpp - Interning and the IEEE-exact builder folds ---===//
#include "hsnn/Expr.h"

#include "Names.h"
#include "OpTable.h"

#include <cassert>
#include <cmath>
#include <optional>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace hsnn {

namespace {
uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64-style finalizer over a running combination.
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 29;
  return h;
}
uint64_t hashString(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : s)
    h = (h ^ ch) * 1099511628211ULL;
  return h;
}
uint64_t bitsOf(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

bool sameNode(const Node &a, const Node &b) {
  if (a.op() != b.op() || a.numArgs() != b.numArgs())
    return false;
  switch (a.op()) {
  case Op::Number:
    return bitsOf(a.number()) == bitsOf(b.number());
  case Op::Var:
    return a.variable() == b.variable();
  case Op::Param:
    return a.paramName() == b.paramName();
  default:
    for (size_t i = 0; i < a.numArgs(); ++i)
      if (a.arg(i) != b.arg(i))
        return false;
    return true;
  }
}
// A finite input, or a value that cannot be inf/NaN when inputs are finite.
bool finiteForFinite(const Node *e) {
  return e->isBounded() || e->op() == Op::Var || e->op() == Op::Param ||
         ((e->op() == Op::Neg || e->op() == Op::Abs) && finiteForFinite(e->arg(0)));
}

uint8_t flagsOf(const Node &n) {
  constexpr uint8_t kConstant = 1, kBounded = 2;
  switch (n.op()) {
  case Op::Number:
    // Large numbers would let a product of bounded terms overflow.
    return kConstant | (std::fabs(n.number()) <= 0x1p64 ? kBounded : 0);
  case Op::True:
  case Op::False:
    return kConstant;
  case Op::Pi:
  case Op::E:
    return kConstant | kBounded;
  case Op::Var:
  case Op::Param:
    return 0;
  default:
    break;
  }
  bool constant = true, bounded = true;
  for (size_t i = 0; i < n.numArgs(); ++i) {
    const Node *a = n.arg(i);
    constant &= a->isConstant();
    // Piecewise conditions only choose; Max/Min of bounded values is bounded.
    bool isCondition = (n.op() == Op::Piecewise || n.op() == Op::Guarded) && i % 2 == 1;
    bounded &= isCondition || a->isBounded();
  }
  switch (n.op()) {
  case Op::Sin:
  case Op::Cos:
  case Op::Tanh:
  case Op::Sigmoid:
  case Op::Erf:
  case Op::Erfc:
  case Op::Atan:
  case Op::Sign:
  case Op::Heaviside:
    // Bounded functions: bounded wherever the argument is not inf or NaN.
    bounded = finiteForFinite(n.arg(0));
    break;
  case Op::Add:
  case Op::Sub:
  case Op::Mul:
  case Op::Neg:
  case Op::Abs:
  case Op::Max:
  case Op::Min:
  case Op::Piecewise:
  case Op::Guarded:
    break;
  default:
    bounded = false;
  }
  return uint8_t((constant ? kConstant : 0) | (bounded ? kBounded : 0));
}
} // namespace

std::string_view variableName(Variable v) {
  for (const detail::VariableSpelling &s : detail::kVariableSpellings)
    if (s.variable == v)
      return s.name;
  return "?";
}

struct ExprContext::Impl {
  std::mutex mutex;
  std::deque<Node> nodes; // deque: node addresses never move
  // The nodes by hash, open addressing with linear probing (a power-of-two
  // size, at most half full), each slot with its node's hash so that a probe
  // reads a node only when the hashes match: every builder call looks a
  // node up, and a node-based map chases a pointer a probe (the development
  // log has the measurement).
  struct Slot {
    uint64_t hash = 0;
    const Node *node = nullptr;
  };
  std::vector<Slot> slots = std::vector<Slot>(256);
  size_t used = 0;

  const Node *find(uint64_t h, const Node &n) const {
    for (size_t i = h & (slots.size() - 1);; i = (i + 1) & (slots.size() - 1)) {
      const Slot &s = slots[i];
      if (!s.node || (s.hash == h && sameNode(*s.node, n)))
        return s.node;
    }
  }
  void insert(const Node *p) {
    if (2 * (used + 1) > slots.size()) {
      std::vector<Slot> old(slots.size() * 2);
      old.swap(slots);
      for (const Slot &s : old)
        if (s.node)
          place(s);
    }
    place({p->hash(), p});
    ++used;
  }
  void place(const Slot &s) {
    size_t i = s.hash & (slots.size() - 1);
    while (slots[i].node)
      i = (i + 1) & (slots.size() - 1);
    slots[i] = s;
  }
};

ExprContext::ExprContext() : impl_(std::make_unique<Impl>()) {}
ExprContext::~ExprContext() = default;

size_t ExprContext::size() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->nodes.size();
}

Expr ExprContext::intern(Node &&n) {
  // A Guarded node hashes as the Piecewise it prints as (PrintOptions::
  // guards), so operands ordered by hash (Max/Min, sums, products) keep
  // their order when the printed text is read back; a Partials node (below)
  // as its value.
  uint64_t h = mix(0, uint64_t(n.op_ == Op::Guarded ? Op::Piecewise : n.op_));
  uint32_t depth = 0;
  switch (n.op_) {
  case Op::Number:
    h = mix(h, bitsOf(n.number_));
    break;
  case Op::Var:
    h = mix(h, uint64_t(n.variable_));
    break;
  case Op::Param:
    h = mix(h, hashString(n.name_));
    break;
  default:
    for (const Node *a : n.args_) {
      h = mix(h, a->hash());
      depth = std::max(depth, a->depth());
    }
  }
  // A Partials node hashes as its value, which it prints as: the same order
  // among operands once the text is read back.
  if (n.op_ == Op::Partials)
    h = n.args_[0]->hash();
  n.hash_ = h;
  n.depth_ = depth + 1;
  n.flags_ = flagsOf(n);

  std::lock_guard lock(impl_->mutex);
  if (const Node *found = impl_->find(h, n))
    return found;
  const Node *stored = &impl_->nodes.emplace_back(std::move(n));
  impl_->insert(stored);
  return stored;
}

Expr ExprContext::number(double value) {
  assert(std::isfinite(value) && "numbers in expressions are finite");
  Node n;
  n.op_ = Op::Number;
  n.number_ = value;
  return intern(std::move(n));
}

Expr ExprContext::variable(Variable v) {
  Node n;
  n.op_ = Op::Var;
  n.variable_ = v;
  return intern(std::move(n));
}

Expr ExprContext::param(std::string_view name) {
  Node n;
  n.op_ = Op::Param;
  n.name_ = std::string(name);
  return intern(std::move(n));
}

Expr ExprContext::constant(Op op) {
  assert((op == Op::Pi || op == Op::E) && "not an exact constant");
  Node n;
  n.op_ = op;
  return intern(std::move(n));
}

Expr ExprContext::boolean(bool value) {
  Node n;
  n.op_ = value ? Op::True : Op::False;
  return intern(std::move(n));
}

namespace {

// Exact rationals: an integer number, a number with a small power-of-two
// denominator (0.5, 0.75), or an integer over an integer (what the builder
// keeps of 1/3), all below 2^53 in magnitude.
struct Rational {
  __int128 num = 0, den = 1;
};
constexpr double kExactInt = 9007199254740992.0; // 2^53

// Through int64_t (every value here is below 2^53): one instruction, where
// a double converts to __int128 through a libgcc call.
__int128 wide(double integral) { return __int128(int64_t(integral)); }

std::optional<Rational> rationalOf(Expr e) {
  auto integer = [](Expr x) {
    return x->isNumber() && std::fabs(x->number()) < kExactInt && x->number() == std::trunc(x->number());
  };
  if (integer(e))
    return Rational{wide(e->number()), 1};
  if (e->isNumber() && std::fabs(e->number()) < 0x1p32) {
    double scaled = e->number() * 0x1p20; // exact: a power of two
    if (scaled == std::trunc(scaled))
      return Rational{wide(scaled), __int128(1) << 20};
  }
  if (e->op() == Op::Div && integer(e->arg(0)) && integer(e->arg(1)) && e->arg(1)->number() != 0) {
    Rational r{wide(e->arg(0)->number()), wide(e->arg(1)->number())};
    if (r.den < 0)
      r.num = -r.num, r.den = -r.den;
    return r;
  }
  return std::nullopt;
}

} // namespace

// Reduced, denominator positive; false when it does not fit double's exact integers.
static bool reduce(Rational &r) {
  if (r.den < 0)
    r.num = -r.num, r.den = -r.den;
  __int128 a = r.num < 0 ? -r.num : r.num, b = r.den;
  while (b != 0) {
    __int128 t = a % b;
    a = b, b = t;
  }
  if (a > 1)
    r.num /= a, r.den /= a;
  auto fits = [](__int128 v) { return v < __int128(kExactInt) && -v < __int128(kExactInt); };
  return fits(r.num) && fits(r.den);
}

Expr ExprContext::rational(double num, double den) {
  Rational r{__int128(num), __int128(den)};
  reduce(r);
  double n = double(r.num), d = double(r.den), q = n / d;
  if (std::fma(q, d, -n) == 0)
    return number(q);
  Node node;
  node.op_ = Op::Div;
  node.args_ = {number(n), number(d)};
  return intern(std::move(node));
}

Expr ExprContext::make(Op op, std::span<const Expr> args) {
  const OpInfo &info = opInfo(op);
  assert((info.arity < 0 ? args.size() % 2 == 1 : int(args.size()) == info.arity) && "wrong arity");
  assert(info.syntax != OpSyntax::Leaf && "use number()/variable()/param()/boolean() for leaves");

  // Exact constant folding: every operand a number (conditions: True/False).
  bool allConst = !args.empty();
  for (Expr a : args)
    allConst &= a->isNumber() || a->op() == Op::True || a->op() == Op::False;
  if (allConst && op != Op::Piecewise && op != Op::Guarded && op != Op::Partials) {
    double vals[2];
    for (size_t i = 0; i < args.size(); ++i)
      vals[i] = args[i]->isNumber() ? args[i]->number() : args[i]->op() == Op::True;
    double r = detail::evalScalar(op, std::span<const double>(vals, args.size()));
    if (info.isBool)
      return boolean(r != 0);
    // Arithmetic folds; a function folds only to an integer (exp(0),
    // sqrt(4)): sqrt(2), log(2) and exp(1) stay exact until code
    // generation. So do quotients that do not divide exactly (1/3 stays a
    // rational, 1/2 is 0.5) and powers with a fractional exponent that are
    // not integers (2**(1/2) stays; 4**0.5 is 2).
    bool arithmetic = info.syntax == OpSyntax::Infix || info.syntax == OpSyntax::Prefix ||
                      op == Op::Max || op == Op::Min || op == Op::Abs || op == Op::Sign || op == Op::Heaviside ||
                      op == Op::Floor || op == Op::Ceiling;
    if (op == Op::Div && std::isfinite(r) && vals[1] != 0 && std::fma(r, vals[1], -vals[0]) != 0) {
      auto isInt = [](double v) { return std::fabs(v) < kExactInt && v == std::trunc(v); };
      if (isInt(vals[0]) && isInt(vals[1]))
        return rational(vals[0], vals[1]); // reduced: 2/6 is 1/3
      arithmetic = false;
    }
    if (op == Op::Pow && vals[1] != std::trunc(vals[1]))
      arithmetic = false;
    if (std::isfinite(r) && (arithmetic || r == std::trunc(r)))
      return number(r);
  }

  Expr a = args.empty() ? nullptr : args[0];
  Expr b = args.size() > 1 ? args[1] : nullptr;
  // Rational arithmetic stays exact: 1/3 - 1 is -2/3, (1/3)*3 is 1.
  if ((op == Op::Add || op == Op::Sub || op == Op::Mul || op == Op::Div) && !(a->isNumber() && b->isNumber())) {
    auto x = rationalOf(a), y = rationalOf(b);
    if (x && y && !(op == Op::Div && y->num == 0)) {
      Rational r = op == Op::Add   ? Rational{x->num * y->den + y->num * x->den, x->den * y->den}
                   : op == Op::Sub ? Rational{x->num * y->den - y->num * x->den, x->den * y->den}
                   : op == Op::Mul ? Rational{x->num * y->num, x->den * y->den}
                                   : Rational{x->num * y->den, x->den * y->num};
      if (reduce(r))
        return rational(double(r.num), double(r.den));
    }
  }
  if (op == Op::Neg)
    if (auto x = rationalOf(a); x && x->den != 1)
      return rational(-double(x->num), double(x->den));
  switch (op) {
  case Op::Neg:
    if (a->op() == Op::Neg)
      return a->arg(0);
    break;
  case Op::Mul:
    if (b->isNumber(1))
      return a;
    if (a->isNumber(1))
      return b;
    if (a->isNumber(-1))
      return make(Op::Neg, {b});
    if (b->isNumber(-1))
      return make(Op::Neg, {a});
    break;
  case Op::Div:
  case Op::Pow:
    if (b->isNumber(1))
      return a;
    // u**2 is u*u: both are the correctly rounded square, so one node
    // (the printer writes it u**2 again).
    if (op == Op::Pow && b->isNumber(2))
      return make(Op::Mul, {a, a});
    // c**(1/2) of a positive number is sqrt(c), the same correctly rounded
    // value, and stays exact as SymPy writes it (2**(1/2) is sqrt(2)).
    if (b->isNumber(0.5) && a->isNumber() && a->number() > 0 && std::isfinite(a->number()))
      return make(Op::Sqrt, {a});
    break;
  case Op::Add:
    // a + a is 2*a exactly, for every a (inf, NaN and -0 included).
    if (a == b)
      return make(Op::Mul, {number(2), a});
    break;
  case Op::Sub:
    // x - (+0) is x for every x, -0 included; x + 0 is not (-0 + 0 = +0).
    if (b->isNumber() && b->number() == 0 && !std::signbit(b->number()))
      return a;
    break;
  case Op::Max:
  case Op::Min: {
    if (a == b)
      return a;
    // Canonical order: numbers first, then by structure, so Max(x, 0) and
    // Max(0, x) are one node and share the tie rule.
    bool swap = b->isNumber() != a->isNumber() ? b->isNumber() : compareStructure(a, b) > 0;
    if (swap) {
      Node n;
      n.op_ = op;
      n.args_ = {b, a};
      return intern(std::move(n));
    }
    break;
  }
  case Op::Not:
    if (a->op() == Op::Not)
      return a->arg(0);
    break;
  case Op::And:
  case Op::Or: {
    // True/False absorb or vanish; NaN cannot reach a truth value.
    bool isAnd = op == Op::And;
    for (int i = 0; i < 2; ++i) {
      Expr x = args[i], y = args[1 - i];
      if (x->op() == (isAnd ? Op::True : Op::False))
        return y;
      if (x->op() == (isAnd ? Op::False : Op::True))
        return x;
    }
    if (a == b)
      return a;
    break;
  }
  case Op::Piecewise:
  case Op::Guarded: {
    // Drop branches whose condition is False; a True condition ends the list.
    std::vector<Expr> kept;
    for (size_t i = 0; i + 1 < args.size(); i += 2) {
      if (args[i + 1]->op() == Op::False)
        continue;
      if (args[i + 1]->op() == Op::True) {
        kept.push_back(args[i]);
        goto done;
      }
      kept.push_back(args[i]);
      kept.push_back(args[i + 1]);
    }
    kept.push_back(args.back());
  done:
    // Trailing branches equal to the default are redundant.
    while (kept.size() >= 3 && kept[kept.size() - 3] == kept.back()) {
      Expr last = kept.back();
      kept.resize(kept.size() - 3);
      kept.push_back(last);
    }
    if (kept.size() == 1)
      return kept[0];
    Node n;
    n.op_ = op;
    n.args_ = std::move(kept);
    return intern(std::move(n));
  }
  default:
    break;
  }

  Node n;
  n.op_ = op;
  n.args_.assign(args.begin(), args.end());
  return intern(std::move(n));
}

int compareStructure(Expr a, Expr b) {
  if (a == b)
    return 0;
  if (a->hash() != b->hash())
    return a->hash() < b->hash() ? -1 : 1;
  // Equal hashes of different nodes: settle it by structure (rare).
  if (a->op() != b->op())
    return a->op() < b->op() ? -1 : 1;
  switch (a->op()) {
  case Op::Number:
    return a->number() < b->number() ? -1 : a->number() > b->number() ? 1 : 0;
  case Op::Var:
    return int(a->variable()) - int(b->variable());
  case Op::Param:
    return a->paramName().compare(b->paramName());
  default:
    if (a->numArgs() != b->numArgs())
      return a->numArgs() < b->numArgs() ? -1 : 1;
    for (size_t i = 0; i < a->numArgs(); ++i)
      if (int c = compareStructure(a->arg(i), b->arg(i)))
        return c;
    return 0;
  }
}

} // namespace hsnn
