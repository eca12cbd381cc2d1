//===- lib/Expr/Names.cpp - Function names, aliases and near-miss hints ---===//
#include "Names.h"

#include "Builtins.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace hsnn::detail {

std::optional<Callable> findCallable(std::string_view name) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo &info = opInfo(Op(i));
    if (info.syntax == OpSyntax::Call && info.spelling == name)
      return Callable{CallKind::Op, Op(i)};
  }
  struct Alias {
    std::string_view name;
    Callable callable;
  };
  static const Alias aliases[] = {
      {"max", {CallKind::Op, Op::Max}},     {"min", {CallKind::Op, Op::Min}},
      {"abs", {CallKind::Op, Op::Abs}},     {"ln", {CallKind::Op, Op::Log}},
      {"ceil", {CallKind::Op, Op::Ceiling}}, {"And", {CallKind::And}},
      {"Or", {CallKind::Or}},               {"Not", {CallKind::Not}},
      // SymPy's relational functions (Piecewise text SymPy prints uses them).
      {"Eq", {CallKind::Op, Op::Eq}},       {"Ne", {CallKind::Op, Op::Ne}},
      {"Lt", {CallKind::Op, Op::Lt}},       {"Le", {CallKind::Op, Op::Le}},
      {"Gt", {CallKind::Op, Op::Gt}},       {"Ge", {CallKind::Op, Op::Ge}},
      {"Rational", {CallKind::Rewrite, Op::Number, Rewrite::Rational}},
      {"Mod", {CallKind::Rewrite, Op::Number, Rewrite::Mod}},
      {"log2", {CallKind::Rewrite, Op::Number, Rewrite::Log2}},
      {"log10", {CallKind::Rewrite, Op::Number, Rewrite::Log10}},
      {"cbrt", {CallKind::Rewrite, Op::Number, Rewrite::Cbrt}},
  };
  for (const Alias &a : aliases)
    if (a.name == name)
      return a.callable;
  if (findBuiltin(name))
    return Callable{CallKind::Builtin};
  return std::nullopt;
}

size_t rewriteArity(Rewrite r) { return r == Rewrite::Rational || r == Rewrite::Mod ? 2 : 1; }

std::variant<Expr, std::string> expandRewrite(ExprContext &ctx, Rewrite r, std::span<const Expr> v) {
  switch (r) {
  case Rewrite::Rational: {
    auto integer = [](Expr x) { return x->isNumber() && std::isfinite(x->number()) && x->number() == std::trunc(x->number()); };
    if (!integer(v[0]) || !integer(v[1]))
      return std::string("Rational takes two integers, e.g. Rational(1, 3)");
    if (v[1]->number() == 0)
      return std::string("Rational with a zero denominator");
    return ctx.div(v[0], v[1]); // exact: 1/2 folds to 0.5, 1/3 stays a quotient
  }
  case Rewrite::Mod:
    return ctx.sub(v[0], ctx.mul(v[1], ctx.call(Op::Floor, ctx.div(v[0], v[1]))));
  case Rewrite::Log2:
  case Rewrite::Log10:
    return ctx.div(ctx.call(Op::Log, v[0]), ctx.call(Op::Log, ctx.number(r == Rewrite::Log2 ? 2 : 10)));
  case Rewrite::Cbrt:
    return ctx.make(Op::Pow, {v[0], ctx.div(ctx.number(1), ctx.number(3))});
  }
  return std::string("unknown rewrite");
}

Expr findNamedNumber(ExprContext &ctx, std::string_view name) {
  if (name == "E" || name == "e")
    return ctx.constant(Op::E);
  if (name == "pi")
    return ctx.constant(Op::Pi);
  if (name == "tau")
    return ctx.mul(ctx.number(2), ctx.constant(Op::Pi));
  if (name == "phi")
    return ctx.div(ctx.add(ctx.number(1), ctx.call(Op::Sqrt, ctx.number(5))), ctx.number(2));
  return nullptr;
}

bool isNamedNumber(std::string_view name) {
  return name == "E" || name == "e" || name == "pi" || name == "tau" || name == "phi";
}

std::optional<Variable> findVariable(std::string_view name) {
  for (const VariableSpelling &v : kVariableSpellings)
    if (v.name == name)
      return v.variable;
  return std::nullopt;
}

const std::vector<std::string> &knownNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (int i = 0; i < kNumOps; ++i)
      if (opInfo(Op(i)).syntax == OpSyntax::Call && !opInfo(Op(i)).spelling.empty())
        v.emplace_back(opInfo(Op(i)).spelling);
    for (const char *s : {"max", "min", "abs", "ln", "ceil", "And", "Or", "Not", "Eq", "Ne", "Lt", "Le", "Gt", "Ge",
                          "Rational", "Mod", "log2", "log10", "cbrt"})
      v.emplace_back(s);
    for (const BuiltinDef &b : builtinDefs())
      v.emplace_back(b.info.name);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }();
  return names;
}

namespace {
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}
} // namespace

std::string nearestName(std::string_view name, const std::vector<std::string> &candidates) {
  // Case-insensitive matches (Tanh, MAX) first, then at most 2 edits.
  for (const std::string &c : candidates)
    if (c.size() == name.size() &&
        std::equal(c.begin(), c.end(), name.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); }))
      return c;
  // Allow one edit per three characters: "sigmod" finds sigmoid, "foo" finds nothing.
  size_t best = std::max<size_t>(1, name.size() / 3) + 1;
  std::string bestName;
  for (const std::string &c : candidates) {
    size_t d = editDistance(name, c);
    if (d < best && d < c.size()) {
      best = d;
      bestName = c;
    }
  }
  return bestName;
}

} // namespace hsnn::detail
