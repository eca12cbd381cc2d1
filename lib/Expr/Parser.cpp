//===- lib/Expr/Parser.cpp - SymPy-syntax formulas to expressions ---------===//
//
// A recursive-descent parser over a token list. Precedence, loosest first:
//   |   &   ~   comparisons (not chained)   + -   * /   unary + -   **
// `**` is right-associative and binds tighter than unary minus on its left
// (-x**2 is -(x**2)) but accepts one on its right (2**-x), as in Python.
// `&`/`|` bind looser than comparisons here (unlike Python), so the SymPy
// spelling `(x > 0) & (x < 1)` and the bare `x > 0 & x < 1` agree.
// Nesting and tree depth are bounded, so no input can overflow the stack.
//===----------------------------------------------------------------------===//
#include "hsnn/Formula.h"

#include "Builtins.h"
#include "Names.h"
#include "Traversal.h"

#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <set>

namespace hsnn {
namespace {

// Whether `text` is `name` alone, give or take surrounding white space.
bool isBareName(std::string_view text, std::string_view name) {
  size_t b = text.find_first_not_of(" \t\n\r\f\v"), e = text.find_last_not_of(" \t\n\r\f\v");
  return b != std::string_view::npos && text.substr(b, e - b + 1) == name;
}

using detail::Callable;
using detail::CallKind;

enum class Tok { Number, Ident, Plus, Minus, Star, Slash, Power, LParen, RParen, Comma, Lt, Le, Gt, Ge, EqEq, Ne, Amp, Pipe, Tilde, End };

struct Token {
  Tok kind;
  size_t pos; // 0-based byte offset
  size_t len;
  std::string_view text;
  double value = 0;
};

struct ParseFailure {
  Diagnostic diag;
};

bool isIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isIdentChar(char c) { return isIdentStart(c) || isDigit(c); }

std::string describe(const Token &t) {
  switch (t.kind) {
  case Tok::End:
    return "the end of the formula";
  case Tok::Number:
    return fmt::format("number '{}'", t.text);
  case Tok::Ident:
    return fmt::format("name '{}'", t.text);
  default:
    return fmt::format("'{}'", t.text);
  }
}

class Parser {
public:
  Parser(ExprContext &ctx, std::string_view src, const ParseOptions &opt) : ctx_(ctx), src_(src), opt_(opt) {}

  Formula run() {
    if (src_.size() > kMaxFormulaLength)
      fail(kMaxFormulaLength, 1,
           fmt::format("formula is {} characters long; the limit is {}", src_.size(), kMaxFormulaLength));
    lex();
    if (toks_.front().kind == Tok::End)
      fail(0, 0, "empty formula");
    Parsed r = parseOr();
    if (peek().kind != Tok::End) {
      const Token &t = peek();
      if (t.kind == Tok::RParen)
        fail(t.pos, 1, "unmatched ')'");
      fail(t.pos, t.len, fmt::format("unexpected {} after a complete expression", describe(t)));
    }
    if (r.e->isBool())
      fail(r.pos, r.end - r.pos, "the formula is a condition, not a number; use it inside Piecewise");
    if (r.e->op() == Op::Param && isBareName(src_, r.e->paramName())) {
      // A formula that is one name close to a built-in (relu6, prelu,
      // logsigmoid, hubr) is a mistyped built-in, not a constant. Only
      // the bare name: "(xswish)" is the constant, as the printer writes
      // a formula that simplified to one (log(exp(xswish))).
      std::vector<std::string> names;
      for (const BuiltinInfo &b : builtins())
        if (b.mode == opt_.mode)
          names.emplace_back(b.name);
      const std::string &n = r.e->paramName();
      if (std::string near = detail::nearestName(n, names); !near.empty())
        fail(r.pos, r.end - r.pos,
             fmt::format("'{}' is not a built-in {}; did you mean '{}'?", n,
                         opt_.mode == FormulaMode::Loss ? "loss" : "activation", near));
    }
    if (opt_.mode == FormulaMode::Loss && !usesYPred_)
      fail(0, 0, "a loss formula must use y_pred (the derivative is taken with respect to it)");

    Formula f;
    f.mode = opt_.mode;
    f.text = std::string(src_);
    if (!varSpelling_.empty())
      f.variable = varSpelling_;
    f.expr = opt_.simplify ? simplify(ctx_, r.e) : r.e;
    if (f.expr->depth() > kMaxDepth)
      fail(0, 0, fmt::format("expression nested deeper than {} levels", kMaxDepth));
    std::set<std::string> names;
    collectParams(f.expr, names);
    f.constants.assign(names.begin(), names.end());
    for (const std::string &n : f.constants) {
      f.firstUse[n] = firstUse_.count(n) ? firstUse_[n] : 0;
      if (defaults_.count(n))
        f.defaults[n] = defaults_[n];
      if (domains_.count(n))
        f.domains[n] = domains_[n];
    }
    return f;
  }

private:
  struct Parsed {
    Expr e;
    size_t pos, end; // [pos, end) in the source
  };

  [[noreturn]] void fail(size_t pos, size_t len, std::string message) {
    Diagnostic d;
    d.node = opt_.node;
    d.column = len == 0 && pos == 0 ? 0 : pos + 1;
    d.length = len ? len : 1;
    d.message = std::move(message);
    d.formula = std::string(src_);
    throw ParseFailure{std::move(d)};
  }

  void lex() {
    size_t i = 0;
    auto push = [&](Tok k, size_t len) {
      toks_.push_back({k, i, len, src_.substr(i, len)});
      i += len;
    };
    while (i < src_.size()) {
      char c = src_[i];
      auto next = [&](size_t k) { return i + k < src_.size() ? src_[i + k] : '\0'; };
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i;
      } else if (static_cast<unsigned char>(c) >= 0x80) {
        fail(i, 1, fmt::format("non-ASCII byte 0x{:02X}; formulas are plain ASCII", static_cast<unsigned char>(c)));
      } else if (isDigit(c) || (c == '.' && isDigit(next(1)))) {
        lexNumber(i);
      } else if (isIdentStart(c)) {
        size_t j = i;
        while (j < src_.size() && isIdentChar(src_[j]))
          ++j;
        push(Tok::Ident, j - i);
      } else {
        switch (c) {
        case '+': push(Tok::Plus, 1); break;
        case '-': push(Tok::Minus, 1); break;
        case '*': next(1) == '*' ? push(Tok::Power, 2) : push(Tok::Star, 1); break;
        case '/': push(Tok::Slash, 1); break;
        case '(': push(Tok::LParen, 1); break;
        case ')': push(Tok::RParen, 1); break;
        case ',': push(Tok::Comma, 1); break;
        case '&': push(Tok::Amp, 1); break;
        case '|': push(Tok::Pipe, 1); break;
        case '~': push(Tok::Tilde, 1); break;
        case '<': next(1) == '=' ? push(Tok::Le, 2) : push(Tok::Lt, 1); break;
        case '>': next(1) == '=' ? push(Tok::Ge, 2) : push(Tok::Gt, 1); break;
        case '=':
          if (next(1) != '=')
            fail(i, 1, "'=' is assignment; compare with '=='");
          push(Tok::EqEq, 2);
          break;
        case '!':
          if (next(1) != '=')
            fail(i, 1, "'!' is not an operator; negate a condition with '~'");
          push(Tok::Ne, 2);
          break;
        case '^':
          fail(i, 1, "'^' is not a power in SymPy syntax; use '**'");
        default:
          if (c < 0x20 || c == 0x7f)
            fail(i, 1, fmt::format("unexpected control character 0x{:02X}", c));
          fail(i, 1, fmt::format("unexpected character '{}'", c));
        }
      }
    }
    toks_.push_back({Tok::End, src_.size(), 0, ""});
  }

  void lexNumber(size_t &i) {
    size_t j = i;
    while (j < src_.size() && isDigit(src_[j]))
      ++j;
    if (j < src_.size() && src_[j] == '.') {
      ++j;
      while (j < src_.size() && isDigit(src_[j]))
        ++j;
    }
    bool bad = false;
    if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-'))
        ++k;
      if (k < src_.size() && isDigit(src_[k])) {
        while (k < src_.size() && isDigit(src_[k]))
          ++k;
        j = k;
      } else {
        bad = true;
        j = k;
      }
    }
    // Letters, digits or dots glued to a number make it malformed ("1.2.3", "2x").
    while (j < src_.size() && (isIdentChar(src_[j]) || src_[j] == '.')) {
      bad = true;
      ++j;
    }
    std::string_view text = src_.substr(i, j - i);
    if (bad)
      fail(i, j - i, fmt::format("malformed number '{}'", text));
    double v = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc::result_out_of_range)
      fail(i, j - i, fmt::format("number '{}' is out of range for a double", text));
    if (ec != std::errc() || ptr != text.data() + text.size())
      fail(i, j - i, fmt::format("malformed number '{}'", text));
    toks_.push_back({Tok::Number, i, j - i, text, v});
    i = j;
  }

  const Token &peek() const { return toks_[pos_]; }
  const Token &take() { return toks_[pos_++]; }
  bool accept(Tok k) {
    if (peek().kind != k)
      return false;
    ++pos_;
    return true;
  }

  struct NestGuard {
    Parser &p;
    NestGuard(Parser &p, size_t at) : p(p) {
      if (++p.nesting_ > kMaxNesting)
        p.fail(at, 1, fmt::format("formula nested deeper than {} levels", kMaxNesting));
    }
    ~NestGuard() { --p.nesting_; }
  };

  Expr build(Op op, std::span<const Expr> args, size_t pos, size_t len) {
    Expr e = ctx_.make(op, args);
    if (e->depth() > kMaxDepth)
      fail(pos, len, fmt::format("expression nested deeper than {} levels", kMaxDepth));
    return e;
  }
  Expr build(Op op, std::initializer_list<Expr> args, size_t pos, size_t len) {
    return build(op, std::span<const Expr>(args.begin(), args.size()), pos, len);
  }

  void needNum(const Parsed &p, std::string_view where) {
    if (p.e->isBool())
      fail(p.pos, p.end - p.pos, fmt::format("a condition cannot be used as a number {}", where));
  }
  // An operator's operand: the message is formatted only when it fails
  // (formatting it for every operator was a tenth of a cache hit's time).
  void needNumOperand(const Parsed &p, std::string_view side, std::string_view op) {
    if (p.e->isBool())
      needNum(p, fmt::format("({} '{}')", side, op));
  }
  void needBool(const Parsed &p, std::string_view where) {
    if (!p.e->isBool())
      fail(p.pos, p.end - p.pos, fmt::format("a number cannot be used as a condition {}", where));
  }

  Parsed parseOr() {
    Parsed l = parseAnd();
    while (peek().kind == Tok::Pipe) {
      const Token &op = take();
      Parsed r = parseAnd();
      needBool(l, "(left of '|')");
      needBool(r, "(right of '|')");
      l = {build(Op::Or, {l.e, r.e}, op.pos, 1), l.pos, r.end};
    }
    return l;
  }

  Parsed parseAnd() {
    Parsed l = parseNot();
    while (peek().kind == Tok::Amp) {
      const Token &op = take();
      Parsed r = parseNot();
      needBool(l, "(left of '&')");
      needBool(r, "(right of '&')");
      l = {build(Op::And, {l.e, r.e}, op.pos, 1), l.pos, r.end};
    }
    return l;
  }

  Parsed parseNot() {
    if (peek().kind == Tok::Tilde) {
      const Token &op = take();
      NestGuard g(*this, op.pos);
      Parsed a = parseNot();
      needBool(a, "(operand of '~')");
      return {build(Op::Not, {a.e}, op.pos, 1), op.pos, a.end};
    }
    return parseComparison();
  }

  static std::optional<Op> comparisonOp(Tok k) {
    switch (k) {
    case Tok::Lt: return Op::Lt;
    case Tok::Le: return Op::Le;
    case Tok::Gt: return Op::Gt;
    case Tok::Ge: return Op::Ge;
    case Tok::EqEq: return Op::Eq;
    case Tok::Ne: return Op::Ne;
    default: return std::nullopt;
    }
  }

  Parsed parseComparison() {
    Parsed l = parseArith();
    auto op = comparisonOp(peek().kind);
    if (!op)
      return l;
    const Token &opTok = take();
    Parsed r = parseArith();
    needNumOperand(l, "left of", opTok.text);
    needNumOperand(r, "right of", opTok.text);
    if (comparisonOp(peek().kind))
      fail(peek().pos, peek().len, "chained comparison; write (a < b) & (b < c)");
    return {build(*op, {l.e, r.e}, opTok.pos, opTok.len), l.pos, r.end};
  }

  Parsed parseArith() {
    Parsed l = parseTerm();
    while (peek().kind == Tok::Plus || peek().kind == Tok::Minus) {
      const Token &op = take();
      Parsed r = parseTerm();
      needNumOperand(l, "left of", op.text);
      needNumOperand(r, "right of", op.text);
      l = {build(op.kind == Tok::Plus ? Op::Add : Op::Sub, {l.e, r.e}, op.pos, 1), l.pos, r.end};
    }
    return l;
  }

  Parsed parseTerm() {
    Parsed l = parseUnary();
    while (peek().kind == Tok::Star || peek().kind == Tok::Slash) {
      const Token &op = take();
      Parsed r = parseUnary();
      needNumOperand(l, "left of", op.text);
      needNumOperand(r, "right of", op.text);
      l = {build(op.kind == Tok::Star ? Op::Mul : Op::Div, {l.e, r.e}, op.pos, 1), l.pos, r.end};
    }
    return l;
  }

  Parsed parseUnary() {
    if (peek().kind == Tok::Minus || peek().kind == Tok::Plus) {
      const Token &op = take();
      NestGuard g(*this, op.pos);
      Parsed a = parseUnary();
      needNumOperand(a, "operand of unary", op.text);
      Expr e = op.kind == Tok::Minus ? build(Op::Neg, {a.e}, op.pos, 1) : a.e;
      return {e, op.pos, a.end};
    }
    return parsePower();
  }

  Parsed parsePower() {
    Parsed base = parsePrimary();
    if (peek().kind != Tok::Power)
      return base;
    const Token &op = take();
    NestGuard g(*this, op.pos);
    Parsed ex = parseUnary();
    needNum(base, "(base of '**')");
    needNum(ex, "(exponent of '**')");
    return {build(Op::Pow, {base.e, ex.e}, op.pos, 2), base.pos, ex.end};
  }

  [[noreturn]] void failExpected() {
    const Token &t = peek();
    if (t.kind == Tok::End && pos_ > 0)
      fail(t.pos, 1, fmt::format("expected an expression after '{}'", toks_[pos_ - 1].text));
    fail(t.pos, t.len, fmt::format("expected an expression, found {}", describe(t)));
  }

  void expectClose(const Token &open, std::string_view what) {
    if (accept(Tok::RParen))
      return;
    const Token &t = peek();
    fail(t.pos, t.kind == Tok::End ? 1 : t.len,
         fmt::format("expected ')' to close {} at column {}, found {}", what, open.pos + 1, describe(t)));
  }

  Parsed parsePrimary() {
    const Token &t = peek();
    switch (t.kind) {
    case Tok::Number:
      take();
      if (opt_.literalsAsConstants) {
        std::string name = fmt::format("_c{}", literals_++);
        defaults_.emplace(name, t.value);
        firstUse_.emplace(name, t.pos + 1);
        return {ctx_.param(name), t.pos, t.pos + t.len};
      }
      return {ctx_.number(t.value), t.pos, t.pos + t.len};
    case Tok::LParen: {
      take();
      NestGuard g(*this, t.pos);
      if (peek().kind == Tok::RParen)
        fail(peek().pos, 1, "expected an expression inside '()'");
      Parsed inner = parseOr();
      if (peek().kind == Tok::Comma)
        fail(peek().pos, 1, "unexpected ','; tuples only appear as Piecewise((expression, condition), ...) pairs");
      expectClose(t, "the '('");
      return {inner.e, t.pos, toks_[pos_ - 1].pos + 1};
    }
    case Tok::Ident:
      take();
      if (peek().kind == Tok::LParen)
        return parseCall(t);
      return {resolveName(t), t.pos, t.pos + t.len};
    case Tok::RParen:
      if (pos_ == 0 || toks_[pos_ - 1].kind == Tok::LParen)
        failExpected();
      fail(t.pos, 1, fmt::format("expected an expression after '{}', found ')'", toks_[pos_ - 1].text));
    default:
      failExpected();
    }
  }

  Expr activationVar(const Token &t) {
    if (opt_.mode == FormulaMode::Loss)
      fail(t.pos, t.len, fmt::format("'{}' is the activation variable; loss formulas use y_pred and y_true", t.text));
    if (!varSpelling_.empty() && varSpelling_ != t.text)
      fail(t.pos, t.len,
           fmt::format("formula uses both '{}' and '{}' for the variable; they are aliases, use one", varSpelling_, t.text));
    varSpelling_ = std::string(t.text);
    return ctx_.variable(Variable::Num);
  }

  Expr lossVar(const Token &t, Variable v) {
    if (opt_.mode == FormulaMode::Activation)
      fail(t.pos, t.len, fmt::format("'{}' is a loss variable; activation formulas use num (or x, z)", t.text));
    usesYPred_ |= v == Variable::YPred;
    return ctx_.variable(v);
  }

  Expr expandBuiltin(const detail::BuiltinDef &b, const Token &at, std::span<const Expr> args) {
    for (auto [name, value] : b.info.params) {
      defaults_.emplace(std::string(name), value);
      firstUse_.emplace(std::string(name), at.pos + 1);
      if (!b.domain.builtin.empty())
        domains_.emplace(std::string(name), b.domain);
    }
    Expr e = b.expand(ctx_, args);
    if (e->depth() > kMaxDepth)
      fail(at.pos, at.len, fmt::format("expression nested deeper than {} levels", kMaxDepth));
    return e;
  }

  Expr resolveName(const Token &t) {
    std::string_view n = t.text;
    if (!opt_.variables.empty()) {
      for (size_t i = 0; i < opt_.variables.size(); ++i)
        if (opt_.variables[i] == n)
          return ctx_.variable(Variable(i));
    } else if (std::optional<Variable> v = detail::findVariable(n)) {
      return *v == Variable::Num ? activationVar(t) : lossVar(t, *v);
    }
    if (n == "True" || n == "False")
      return ctx_.boolean(n == "True");
    if (Expr v = detail::findNamedNumber(ctx_, n))
      return v;
    if (const detail::BuiltinDef *b = detail::findBuiltin(n)) {
      if (b->info.mode != opt_.mode) {
        if (b->info.mode == FormulaMode::Loss)
          fail(t.pos, t.len, fmt::format("'{}' is a loss; it cannot be used in an activation formula", n));
        fail(t.pos, t.len,
             fmt::format("'{}' is an activation; in a loss formula call it, e.g. {}(y_pred - y_true)", n, n));
      }
      if (b->info.mode == FormulaMode::Loss) {
        usesYPred_ = true;
        Expr args[] = {ctx_.variable(Variable::YPred), ctx_.variable(Variable::YTrue)};
        return expandBuiltin(*b, t, args);
      }
      if (opt_.variables.size() > 1)
        fail(t.pos, t.len, fmt::format("'{}' alone does not say which variable; call it, e.g. {}({})", n, n,
                                       opt_.variables[0]));
      Expr arg = ctx_.variable(Variable::Num);
      return expandBuiltin(*b, t, std::span<const Expr>(&arg, 1));
    }
    if (detail::findCallable(n))
      fail(t.pos, t.len, fmt::format("'{}' is a function; call it, e.g. {}({})", n, n,
                                     opt_.variables.empty() ? std::string("num") : opt_.variables[0]));
    firstUse_.emplace(std::string(n), t.pos + 1);
    return ctx_.param(n);
  }

  std::vector<Parsed> parseArgs(const Token &name, const Token &open) {
    std::vector<Parsed> args;
    if (accept(Tok::RParen))
      return args;
    for (;;) {
      args.push_back(parseOr());
      if (accept(Tok::Comma))
        continue;
      if (!accept(Tok::RParen))
        expectClose(open, fmt::format("the call to '{}'", name.text));
      return args;
    }
  }

  Parsed parsePiecewise(const Token &name, const Token &open) {
    std::vector<Expr> args;
    bool sawTrue = false;
    for (;;) {
      const Token &lp = peek();
      if (lp.kind != Tok::LParen)
        fail(lp.pos, lp.kind == Tok::End ? 1 : lp.len,
             fmt::format("Piecewise arguments are (expression, condition) pairs; found {}", describe(lp)));
      take();
      NestGuard g(*this, lp.pos);
      Parsed value = parsePiecewiseValue();
      if (!accept(Tok::Comma))
        fail(peek().pos, 1, fmt::format("expected ',' and a condition in the Piecewise pair at column {}", lp.pos + 1));
      Parsed cond = parseOr();
      expectClose(lp, "the Piecewise pair");
      needNum(value, "(Piecewise value)");
      needBool(cond, "(Piecewise condition)");
      args.push_back(value.e);
      args.push_back(cond.e);
      sawTrue = cond.e->op() == Op::True;
      if (accept(Tok::Comma))
        continue;
      expectClose(open, "the call to 'Piecewise'");
      break;
    }
    if (!sawTrue)
      fail(name.pos, name.len, "Piecewise without a final (expression, True) branch; add one so every input has a value");
    args.pop_back(); // the final True is implicit in the node
    return {build(Op::Piecewise, args, name.pos, name.len), name.pos, toks_[pos_ - 1].pos + 1};
  }
  Parsed parsePiecewiseValue() { return parseOr(); }

  Parsed parseCall(const Token &name) {
    const Token &open = take();
    NestGuard g(*this, name.pos);
    std::string_view n = name.text;
    std::optional<Callable> callable = detail::findCallable(n);
    if (!callable) {
      if (detail::findVariable(n) || detail::isNamedNumber(n))
        fail(name.pos, name.len, fmt::format("'{}' is not a function", n));
      std::string near = detail::nearestName(n, detail::knownNames());
      fail(name.pos, name.len,
           near.empty() ? fmt::format("unknown function '{}'", n)
                        : fmt::format("unknown function '{}'; did you mean '{}'?", n, near));
    }
    if (callable->kind == CallKind::Op && callable->op == Op::Piecewise)
      return parsePiecewise(name, open);

    std::vector<Parsed> args = parseArgs(name, open);
    size_t end = toks_[pos_ - 1].pos + 1;
    auto arity = [&](size_t lo, size_t hi, std::string_view what) {
      if (args.size() < lo || args.size() > hi)
        fail(name.pos, name.len, fmt::format("{} takes {}, got {}", n, what, args.size()));
    };
    auto numArgs = [&]() {
      std::vector<Expr> v;
      for (const Parsed &a : args) {
        if (a.e->isBool())
          needNum(a, fmt::format("(argument of {})", n));
        v.push_back(a.e);
      }
      return v;
    };
    auto boolArgs = [&]() {
      std::vector<Expr> v;
      for (const Parsed &a : args) {
        if (!a.e->isBool())
          needBool(a, fmt::format("(argument of {})", n));
        v.push_back(a.e);
      }
      return v;
    };
    auto fold = [&](Op op, std::vector<Expr> v) {
      Expr acc = v[0];
      for (size_t i = 1; i < v.size(); ++i)
        acc = build(op, {acc, v[i]}, name.pos, name.len);
      return acc;
    };

    Expr e = nullptr;
    switch (callable->kind) {
    case CallKind::Op: {
      Op op = callable->op;
      int ar = opInfo(op).arity;
      if (op == Op::Log && args.size() == 2) {
        // log(x, base) = log(x)/log(base), as in SymPy.
        std::vector<Expr> v = numArgs();
        e = build(Op::Div, {build(Op::Log, {v[0]}, name.pos, name.len), build(Op::Log, {v[1]}, name.pos, name.len)},
                  name.pos, name.len);
      } else if (op == Op::Heaviside && args.size() == 2) {
        // SymPy's Heaviside(x, h0): the value at 0 is h0.
        std::vector<Expr> v = numArgs();
        Expr atZero = build(Op::Eq, {v[0], ctx_.number(0)}, name.pos, name.len);
        e = build(Op::Piecewise, {v[1], atZero, build(Op::Heaviside, {v[0]}, name.pos, name.len)}, name.pos, name.len);
      } else if (op == Op::Heaviside) {
        arity(1, 2, "1 or 2 arguments");
        e = build(op, numArgs(), name.pos, name.len);
      } else if (op == Op::Log) {
        arity(1, 2, "1 or 2 arguments");
        e = build(op, numArgs(), name.pos, name.len);
      } else if (op == Op::Max || op == Op::Min) {
        arity(1, SIZE_MAX, "at least 1 argument");
        e = fold(op, numArgs());
      } else {
        arity(ar, ar, ar == 1 ? "1 argument" : fmt::format("{} arguments", ar));
        e = build(op, numArgs(), name.pos, name.len);
      }
      break;
    }
    case CallKind::And:
    case CallKind::Or:
      arity(2, SIZE_MAX, "at least 2 arguments");
      e = fold(callable->kind == CallKind::And ? Op::And : Op::Or, boolArgs());
      break;
    case CallKind::Not:
      arity(1, 1, "1 argument");
      e = build(Op::Not, boolArgs(), name.pos, name.len);
      break;
    case CallKind::Rewrite: {
      size_t ar = detail::rewriteArity(callable->rewrite);
      arity(ar, ar, ar == 1 ? "1 argument" : "2 arguments");
      auto r = detail::expandRewrite(ctx_, callable->rewrite, numArgs());
      if (auto *why = std::get_if<std::string>(&r))
        fail(name.pos, name.len, *why);
      e = std::get<Expr>(r);
      if (e->depth() > kMaxDepth)
        fail(name.pos, name.len, fmt::format("expression nested deeper than {} levels", kMaxDepth));
      break;
    }
    case CallKind::Builtin: {
      const detail::BuiltinDef &b = *detail::findBuiltin(n);
      if (b.info.mode == FormulaMode::Loss && opt_.mode == FormulaMode::Activation)
        fail(name.pos, name.len, fmt::format("'{}' is a loss; it cannot be used in an activation formula", n));
      arity(b.arity(), b.arity(), b.arity() == 1 ? "1 argument" : "2 arguments (y_pred, y_true)");
      std::vector<Expr> v = numArgs();
      e = expandBuiltin(b, name, v);
      break;
    }
    }
    return {e, name.pos, end};
  }

  friend struct NestGuard;

  static void collectParams(Expr e, std::set<std::string> &out) {
    detail::forEachNode({&e, 1}, [&](Expr n) {
      if (n->op() == Op::Param)
        out.insert(n->paramName());
    });
  }

  ExprContext &ctx_;
  std::string_view src_;
  ParseOptions opt_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  unsigned nesting_ = 0;
  std::string varSpelling_;
  bool usesYPred_ = false;
  std::map<std::string, double> defaults_;
  unsigned literals_ = 0; ///< Numbers made constants so far (literalsAsConstants).
  std::map<std::string, ConstantDomain> domains_;
  std::map<std::string, size_t> firstUse_;
};

} // namespace

std::variant<Formula, Diagnostic> parseFormulaDetailed(ExprContext &ctx, std::string_view text,
                                                        const ParseOptions &options) {
  try {
    return Parser(ctx, text, options).run();
  } catch (ParseFailure &f) {
    return std::move(f.diag);
  }
}

Expected<Formula> parseFormula(ExprContext &ctx, std::string_view text, const ParseOptions &options) {
  auto r = parseFormulaDetailed(ctx, text, options);
  if (auto *d = std::get_if<Diagnostic>(&r))
    return Error(ErrorCode::InvalidFormula, d->render());
  return std::get<Formula>(std::move(r));
}

bool isReservedName(std::string_view name) {
  return detail::findVariable(name) || name == "True" || name == "False" || detail::isNamedNumber(name) ||
         detail::findCallable(name);
}

} // namespace hsnn
