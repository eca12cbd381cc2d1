//===- lib/Runtime/PopulationArrays.cpp - Trees given as arrays -----------===//
//
// Populations from op codes and values in prefix or postfix order, as GPU
// genetic-programming systems keep their trees: read into expressions with
// the builders (no text), then simplified and lowered like parsed formulas.
//
//===----------------------------------------------------------------------===//
#include "PopulationImpl.h"

#include <cmath>
#include <fmt/format.h>
#include <set>

namespace hsnn {

using namespace detail;

std::vector<std::pair<std::string, int>> populationOpCodes() {
  std::vector<std::pair<std::string, int>> codes;
  for (int o = 0; o < kNumOps; ++o) {
    const OpInfo &info = opInfo(Op(o));
    std::string name(info.spelling);
    switch (Op(o)) {
    case Op::Number: name = "number"; break;
    case Op::Var: name = "variable"; break;
    case Op::Param: name = "constant"; break;
    case Op::Add: name = "add"; break;
    case Op::Sub: name = "sub"; break;
    case Op::Mul: name = "mul"; break;
    case Op::Div: name = "div"; break;
    case Op::Pow: name = "pow"; break;
    case Op::Neg: name = "neg"; break;
    default: break;
    }
    if (info.isBool || name.empty() || Op(o) == Op::Piecewise)
      continue;
    codes.emplace_back(name, o);
  }
  return codes;
}

namespace {

// One tree of PopulationArrays as an expression; a string says what is
// wrong and where (the code's position in the tree, 0-based).
struct TreeReader {
  ExprContext &ctx;
  const PopulationOptions &options;
  std::span<const int32_t> codes;
  std::span<const double> values;
  Formula &formula;
  std::map<std::string, double> &initial;
  size_t at = 0;

  struct Bad {
    size_t position;
    std::string cause;
  };

  Expr leaf(size_t k) {
    Op op = Op(codes[k]);
    double v = values[k];
    if (op == Op::Var) {
      if (!(v >= 0 && v < double(options.variables.size()) && v == std::trunc(v)))
        throw Bad{k, fmt::format("variable index {} is not one of the {} variables", v, options.variables.size())};
      return ctx.variable(Variable(int(v)));
    }
    if (!std::isfinite(v))
      throw Bad{k, fmt::format("value {} is not finite", v)};
    if (op == Op::Param || options.literalsAsConstants) {
      std::string name = fmt::format("_c{}", initial.size());
      initial[name] = v;
      formula.firstUse[name] = k + 1;
      return ctx.param(name);
    }
    return ctx.number(v);
  }

  int arity(size_t k) {
    int32_t c = codes[k];
    if (c < 0 || c >= kNumOps)
      throw Bad{k, fmt::format("code {} is not an op", c)};
    Op op = Op(c);
    const OpInfo &info = opInfo(op);
    if (op == Op::Number || op == Op::Var || op == Op::Param || op == Op::Pi || op == Op::E)
      return 0;
    if (info.isBool || info.arity < 0 || info.spelling.empty())
      throw Bad{k, fmt::format("op '{}' (code {}) cannot be encoded in arrays", info.name, c)};
    return info.arity;
  }

  Expr node(size_t k, std::span<const Expr> args) {
    Op op = Op(codes[k]);
    if (op == Op::Pi || op == Op::E)
      return ctx.constant(op);
    if (args.empty())
      return leaf(k);
    Expr e = ctx.make(op, args);
    if (e->depth() > kMaxDepth)
      throw Bad{k, fmt::format("tree deeper than {} levels", kMaxDepth)};
    return e;
  }

  Expr prefix() {
    // Pending operators and the operands they have so far.
    struct Open {
      size_t k;
      int need;
      std::vector<Expr> args;
    };
    std::vector<Open> stack;
    for (size_t k = 0; k < codes.size(); ++k) {
      int a = arity(k);
      if (a > 0) {
        stack.push_back({k, a, {}});
        continue;
      }
      Expr e = node(k, {});
      for (;;) {
        if (stack.empty()) {
          if (k + 1 != codes.size())
            throw Bad{k + 1, "the tree ends before the codes do"};
          return e;
        }
        Open &top = stack.back();
        top.args.push_back(e);
        if (int(top.args.size()) < top.need)
          break;
        e = node(top.k, top.args);
        stack.pop_back();
      }
    }
    throw Bad{codes.size(), fmt::format("the codes end with {} operator(s) missing operands", stack.size())};
  }

  Expr postfix() {
    std::vector<Expr> stack;
    for (size_t k = 0; k < codes.size(); ++k) {
      int a = arity(k);
      if (int(stack.size()) < a)
        throw Bad{k, fmt::format("op '{}' takes {} operand(s), {} before it", opInfo(Op(codes[k])).name, a,
                                 stack.size())};
      std::vector<Expr> args(stack.end() - a, stack.end());
      stack.resize(stack.size() - a);
      stack.push_back(node(k, args));
    }
    if (stack.size() != 1)
      throw Bad{codes.size(), stack.empty() ? std::string("empty tree")
                                            : fmt::format("the codes leave {} trees, not one", stack.size())};
    return stack[0];
  }
};

} // namespace

Expected<Population> Population::fromArrays(const PopulationArrays &a, const PopulationOptions &options) {
  if (Error e = checkOptions(options))
    return e;
  if (a.codes.size() != a.values.size())
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("codes has {} entries but values {}", a.codes.size(), a.values.size()));
  if (a.offsets.empty() || a.offsets.front() != 0 || size_t(a.offsets.back()) != a.codes.size())
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("offsets must run from 0 to the number of codes ({})", a.codes.size()));
  for (size_t i = 1; i < a.offsets.size(); ++i)
    if (a.offsets[i] < a.offsets[i - 1])
      return Error(ErrorCode::InvalidArgument, fmt::format("offsets decrease at {}", i));
  size_t n = a.offsets.size() - 1;
  auto impl = makePopulation(options, n);
  impl->markCopies(n, [&](size_t i) {
    size_t b = size_t(a.offsets[i]), e = size_t(a.offsets[i + 1]);
    return std::string(reinterpret_cast<const char *>(a.codes.data() + b), (e - b) * sizeof(int32_t)) +
           std::string(reinterpret_cast<const char *>(a.values.data() + b), (e - b) * sizeof(double));
  });
  impl->forMembers([&](ExprContext &ctx, size_t i) {
    size_t b = size_t(a.offsets[i]), e = size_t(a.offsets[i + 1]);
    Member &m = impl->members[i];
    m.formula.text = fmt::format("(arrays: codes {}..{})", b, e);
    std::map<std::string, double> initial;
    TreeReader r{ctx, options, a.codes.subspan(b, e - b), a.values.subspan(b, e - b), m.formula, initial};
    try {
      if (e == b)
        throw TreeReader::Bad{0, "empty tree"};
      Expr tree = a.postfix ? r.postfix() : r.prefix();
      m.formula.expr = simplify(ctx, tree);
    } catch (const TreeReader::Bad &bad) {
      return impl->fail(i, {.column = bad.position + 1,
                            .message = fmt::format("position {}: {}", bad.position, bad.cause),
                            .formula = m.formula.text});
    }
    std::set<std::string> names;
    for (auto &[name, v] : initial)
      names.insert(name);
    // Simplification may have dropped some (x - x is kept, but x*1 is not
    // a constant's to drop): keep those the tree still reads, in order.
    std::vector<Expr> stack{m.formula.expr};
    std::set<Expr> seen;
    std::set<std::string> used;
    while (!stack.empty()) {
      Expr x = stack.back();
      stack.pop_back();
      if (!seen.insert(x).second)
        continue;
      if (x->op() == Op::Param)
        used.insert(x->paramName());
      for (Expr c : x->args())
        stack.push_back(c);
    }
    m.formula.constants.assign(used.begin(), used.end());
    impl->bind(i, initial);
  });
  for (size_t i = 0; i < n; ++i) // a copy's diagnostics name its own codes
    if (Member &m = impl->members[i]; m.sameAs != kNotACopy) {
      m.formula.text = fmt::format("(arrays: codes {}..{})", a.offsets[i], a.offsets[i + 1]);
      if (m.error)
        m.error->formula = m.formula.text;
    }
  std::vector<double> constants;
  finishPopulation(*impl, constants);
  return Population(std::move(impl), std::move(constants));
}

} // namespace hsnn
