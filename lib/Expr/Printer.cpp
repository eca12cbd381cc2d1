//===- lib/Expr/Printer.cpp - Expressions to SymPy-syntax text ------------===//
//
// Parenthesizes by precedence so that the text parses back to the same node:
// left-associative operators parenthesize a right operand of equal
// precedence, `**` a left one. Numbers use the shortest text that reads back
// to the same double.
//===----------------------------------------------------------------------===//
#include "hsnn/Formula.h"

#include "Names.h"

#include <charconv>
#include <cmath>
#include <fmt/format.h>

namespace hsnn {
namespace {

constexpr size_t kMaxPrintedLength = size_t(1) << 20;
constexpr uint32_t kMaxPrintedDepth = 4096;
struct TooLong {};

enum Prec { POr = 1, PAnd, PNot, PCompare, PAdd, PMul, PUnary, PPow, PAtom };

// x*x is printed x**2 (the parser builds x*x from it again).
bool isSquare(Expr e) { return e->op() == Op::Mul && e->arg(0) == e->arg(1); }

int precedence(Expr e) {
  if (isSquare(e))
    return PPow;
  switch (e->op()) {
  case Op::Number:
    return std::signbit(e->number()) ? PUnary : PAtom;
  case Op::Add:
  case Op::Sub:
    return PAdd;
  case Op::Mul:
  case Op::Div:
    return PMul;
  case Op::Pow:
    return PPow;
  case Op::Neg:
    return PUnary;
  case Op::And:
    return PAnd;
  case Op::Or:
    return POr;
  case Op::Not:
    return PNot;
  case Op::Eq:
  case Op::Ne:
    return PAtom; // printed as calls
  default:
    return opInfo(e->op()).syntax == OpSyntax::Compare ? PCompare : PAtom;
  }
}

class Printer {
public:
  explicit Printer(const PrintOptions &o) : opt_(o) {}
  std::string out;

  void print(Expr e, int minPrec = 0) {
    if (out.size() > kMaxPrintedLength)
      throw TooLong{};
    for (;;) {
      if (e->op() == Op::Guarded && !opt_.guards)
        e = e->args().back();
      else if (e->op() == Op::Partials)
        e = e->arg(0);
      else
        break;
    }
    bool parens = precedenceOf(e) < minPrec;
    if (parens)
      out += '(';
    printBare(e);
    if (parens)
      out += ')';
  }

private:
  /// How PrintOptions::sympy writes an op sympify does not know: `before`,
  /// the operand (parenthesized below `operandPrec`), `after`; `prec` is
  /// the spelling's own precedence. Sigmoid's operand is negated besides.
  struct SympySpelling {
    Op op;
    const char *before, *after;
    int operandPrec, prec;
  };
  static const SympySpelling *sympySpelling(Op op) {
    static const SympySpelling table[] = {
        {Op::Sigmoid, "1/(1 + exp(", "))", 0, PMul},
        {Op::Softplus, "log(1 + exp(", "))", 0, PAtom},
        {Op::Log1p, "log(1 + ", ")", PAdd + 1, PAtom},
        {Op::Expm1, "exp(", ") - 1", 0, PAdd},
    };
    for (const SympySpelling &s : table)
      if (s.op == op)
        return &s;
    return nullptr;
  }

  /// precedence(e), or that of the SymPy spelling printed for it.
  int precedenceOf(Expr e) const {
    const SympySpelling *s = opt_.sympy ? sympySpelling(e->op()) : nullptr;
    return s ? s->prec : precedence(e);
  }

  /// e in SymPy's terms (PrintOptions::sympy); false where sympify knows its op.
  bool printForSympy(Expr e) {
    const SympySpelling *s = sympySpelling(e->op());
    if (!s)
      return false;
    out += s->before;
    Expr u = e->arg(0);
    if (e->op() != Op::Sigmoid) {
      print(u, s->operandPrec);
    } else if (u->op() == Op::Neg) { // exp(-(-v)) is exp(v)
      print(u->arg(0));
    } else {
      out += '-';
      print(u, PUnary);
    }
    out += s->after;
    return true;
  }

  void printBare(Expr e) {
    const OpInfo &info = opInfo(e->op());
    switch (e->op()) {
    case Op::Number: {
      char buf[32];
      auto r = std::to_chars(buf, buf + sizeof buf, e->number());
      out.append(buf, r.ptr);
      return;
    }
    case Op::Var:
      if (size_t(e->variable()) < opt_.variables.size())
        out += opt_.variables[size_t(e->variable())];
      else
        out += e->variable() == Variable::Num ? opt_.variable : variableName(e->variable());
      return;
    case Op::Param:
      out += e->paramName();
      return;
    case Op::True:
    case Op::False:
    case Op::Pi:
    case Op::E:
      out += info.spelling;
      return;
    case Op::Neg:
      out += '-';
      print(e->arg(0), PUnary);
      return;
    case Op::Not:
      out += '~';
      printCondition(e->arg(0));
      return;
    case Op::And:
    case Op::Or:
      printCondition(e->arg(0));
      out += e->op() == Op::And ? " & " : " | ";
      printCondition(e->arg(1));
      return;
    case Op::Piecewise:
    case Op::Guarded: {
      out += "Piecewise(";
      auto args = e->args();
      for (size_t i = 0; i < args.size(); i += 2) {
        out += i ? ", (" : "(";
        print(args[i]);
        out += ", ";
        if (i + 1 < args.size())
          print(args[i + 1]);
        else
          out += "True";
        out += ')';
      }
      out += ')';
      return;
    }
    default:
      break;
    }
    if (opt_.sympy && printForSympy(e))
      return;
    if (isSquare(e)) {
      print(e->arg(0), PAtom);
      out += "**2";
      return;
    }
    switch (info.syntax) {
    case OpSyntax::Infix: {
      int p = precedence(e);
      bool pow = e->op() == Op::Pow;
      print(e->arg(0), pow ? PAtom : p);
      out += pow ? "**" : e->op() == Op::Add ? " + " : e->op() == Op::Sub ? " - " : info.spelling;
      print(e->arg(1), pow ? PUnary : p + 1);
      return;
    }
    case OpSyntax::Compare:
      if (e->op() == Op::Eq || e->op() == Op::Ne) {
        // SymPy's form: in Python `x == 0` is a bool, not an equation, so
        // text with == would not read back into SymPy.
        out += e->op() == Op::Eq ? "Eq(" : "Ne(";
        print(e->arg(0));
        out += ", ";
        print(e->arg(1));
        out += ')';
        return;
      }
      print(e->arg(0), PAdd);
      out += fmt::format(" {} ", info.spelling);
      print(e->arg(1), PAdd);
      return;
    default:
      out += info.spelling;
      out += '(';
      for (size_t i = 0; i < e->numArgs(); ++i) {
        if (i)
          out += ", ";
        print(e->arg(i));
      }
      out += ')';
      return;
    }
  }

  // Python binds & tighter than comparisons, so a SymPy reader needs the
  // parentheses even though hsnn's parser does not.
  void printCondition(Expr c) {
    if (c->op() == Op::True || c->op() == Op::False) {
      print(c);
      return;
    }
    out += '(';
    print(c);
    out += ')';
  }

  const PrintOptions &opt_;
};

bool nearBuiltinName(const std::string &name) {
  std::vector<std::string> names;
  for (const BuiltinInfo &b : builtins())
    names.emplace_back(b.name);
  return !detail::nearestName(name, names).empty();
}

} // namespace

std::string print(Expr e, const PrintOptions &options) {
  // The printer recurses once per level; nothing readable is that deep.
  if (e->depth() > kMaxPrintedDepth)
    return fmt::format("<expression too deep to print ({} levels; the limit is {})>", e->depth(), kMaxPrintedDepth);
  Printer p(options);
  try {
    // A lone constant named close to a built-in (xswish) would read back as
    // a mistyped built-in's name (Parser.cpp); in parentheses it is the constant.
    if (e->op() == Op::Param && nearBuiltinName(e->paramName()))
      return "(" + e->paramName() + ")";
    p.print(e);
  } catch (TooLong &) {
    return fmt::format("<expression too large to print (over {} characters)>", kMaxPrintedLength);
  }
  return std::move(p.out);
}

} // namespace hsnn
