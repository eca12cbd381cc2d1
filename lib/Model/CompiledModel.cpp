//===- lib/Model/CompiledModel.cpp - Formulas to tapes, once per layer or loss ===//
#include "CompiledModel.h"

#include "Expr/Traversal.h"
#include "Program/Stopwatch.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <unordered_map>

namespace hsnn {
// Here, not with the other names in Runtime.cpp: the model (below the
// runtime) prints them, and a static library must not need one above it.
std::string_view to_string(DType d) { return d == DType::F32 ? "f32" : "f64"; }
std::string_view to_string(Layout l) { return l == Layout::NodesMajor ? "nodes_major" : "batch_major"; }
} // namespace hsnn

namespace hsnn::detail {
namespace {

bool readsVariable(const Program &p, Variable v) {
  return std::any_of(p.code.begin(), p.code.end(), [v](const Instr &i) { return i.op == Op::Var && i.var == v; });
}

// Which variables' NaN surely reaches e's value, as a bit per Variable.
// Arithmetic and math functions pass NaN on (Max/Min included: they
// propagate it by definition); a Piecewise only when every branch does,
// since a NaN makes its conditions false; pow(x, 0) is 1 even for NaN.
unsigned nanReaching(Expr root) {
  std::unordered_map<Expr, unsigned> mask;
  return detail::postOrder(mask, root, [&](Expr e) {
    unsigned m = 0;
    switch (e->op()) {
    case Op::Var:
      m = 1u << unsigned(e->variable());
      break;
    case Op::Piecewise:
    case Op::Guarded:
      m = ~0u;
      for (size_t i = 0; i < e->numArgs(); i += 2)
        m &= mask.at(e->arg(i));
      break;
    case Op::Pow:
      m = e->arg(1)->isNumber() && e->arg(1)->number() != 0 ? mask.at(e->arg(0)) : 0;
      break;
    case Op::Partials:
      m = mask.at(e->arg(0));
      break;
    default:
      if (!e->isBool())
        for (Expr a : e->args())
          m |= mask.at(a);
    }
    return m;
  });
}

// NaN in, NaN out, derivatives included: relu'(NaN) is NaN, not the slope
// of whichever branch a false comparison picks. Only derivatives that would
// not pass a NaN of `vars` on get the select.
Expr guardNaN(ExprContext &ctx, Expr d, std::initializer_list<Variable> vars) {
  unsigned reaching = nanReaching(d);
  for (Variable v : vars)
    if (!(reaching & (1u << unsigned(v)))) {
      Expr x = ctx.variable(v);
      d = ctx.make(Op::Piecewise, {x, ctx.make(Op::Ne, {x, x}), d});
    }
  return d;
}

bool powerOfTwoAboveOne(Expr e) {
  if (!e->isNumber())
    return false;
  int exponent = 0;
  double mantissa = std::frexp(std::abs(e->number()), &exponent);
  return mantissa == 0.5 && exponent > 1;
}

// How a product is evaluated, not what it is: canonical products put their
// number first, so 4*x*sigmoid(x)*exp(-2*softplus(x)) (mish') runs as
// ((4*x)*...), and 4*x overflows to inf for |x| > 8.5e37 (f32) where the
// later factors are 0: inf*0, NaN. A coefficient 2^k (k >= 1) moved to the
// end of its chain of products and quotients gives the same bits whenever
// nothing overflows or underflows (scaling by 2^k is exact), and the rest of
// the chain is smaller than with it, so the move cannot make an overflow; a
// coefficient below 1 moved last could (0.5*x*2 at x = 1e308), and stays.
class PowerOfTwoLast {
public:
  explicit PowerOfTwoLast(ExprContext &ctx) : ctx_(ctx) {}
  Expr operator()(Expr root) {
    return postOrder(memo_, root, [&](Expr e) -> Expr {
      if (e->numArgs() == 0)
        return e;
      std::vector<Expr> args;
      for (Expr a : e->args())
        args.push_back(memo_.at(a));
      if (e->op() == Op::Mul && powerOfTwoAboveOne(args[0]) && !args[1]->isNumber())
        return ctx_.mul(args[1], args[0]);
      // (y*2^k) op b -> (y op b)*2^k, for op * or /.
      Expr left = args[0];
      if ((e->op() == Op::Mul || e->op() == Op::Div) && left->op() == Op::Mul && powerOfTwoAboveOne(left->arg(1)) &&
          !args[1]->isNumber())
        return ctx_.mul(ctx_.make(e->op(), {left->arg(0), args[1]}), left->arg(1));
      return ctx_.make(e->op(), args);
    });
  }

private:
  ExprContext &ctx_;
  std::unordered_map<Expr, Expr> memo_;
};

// Lowers the tapes of every kind of the group's mode: each kind evaluates
// the roots its .def row names, value first.
void lowerGroup(ExprContext &ctx, FormulaGroup &g, std::span<const KernelKind> kinds) {
  bool loss = isLoss(kinds.front());
  PowerOfTwoLast evaluationOrder(ctx);
  Expr derivative = loss ? guardNaN(ctx, g.derivative, {Variable::YPred, Variable::YTrue})
                         : guardNaN(ctx, g.derivative, {Variable::Num});
  Expr value = evaluationOrder(g.formula.expr);
  derivative = evaluationOrder(derivative);
  for (KernelKind k : kinds) {
    std::vector<Expr> roots;
    if (kindInfo(k).value)
      roots.push_back(value);
    if (kindInfo(k).derivative)
      roots.push_back(derivative);
    g.programs[size_t(k)] = Program::lower(roots, g.formula.constants);
  }
  // d/dc for each constant, in the formula's (sorted) order: trainable constants.
  std::vector<Expr> byConstant;
  for (const std::string &name : g.formula.constants) {
    Expr d = differentiate(ctx, g.formula.expr, ctx.param(name));
    byConstant.push_back(evaluationOrder(loss ? guardNaN(ctx, d, {Variable::YPred, Variable::YTrue})
                                              : guardNaN(ctx, d, {Variable::Num})));
  }
  g.constantDerivatives = byConstant;
  g.programs[size_t(constantGradientKind(loss))] = Program::lower(byConstant, g.formula.constants);
}

// The name a tangent step gives the direction of constant `name`: `name'`,
// primed again while the formula already has such a constant. Not a name a
// formula can spell, so it never meets a user's constant.
std::string tangentName(const std::string &name, const std::vector<std::string> &taken) {
  std::string t = name + "'";
  while (std::find(taken.begin(), taken.end(), t) != taken.end())
    t += "'";
  return t;
}

// A derived model's formula from its parent's: each step replaces the
// expression by a derivative, NaN-guarded like f' (a step's result is a
// formula the next step differentiates again, so each is guarded as it is
// made). The constants keep their order and values: a derived layer takes
// its parent's params as they are. Steps:
//   "d"       d/d(the variable): num, or y_pred for a loss;
//   "t"       sum_i t_i * d/dc_i over the formula's constants c_i, each
//             direction t_i a new constant (value 0) appended after them:
//             the product of the constants' Jacobian with a direction, the
//             kernel a double backward through trainable constants needs;
//   "c:NAME"  d/d(constant NAME);
//   "y"       d/dy_true (losses only: a target that is itself computed,
//             in distillation or a physics residual, gets its gradient).
std::optional<std::string> derive(ExprContext &ctx, Formula &f, std::vector<double> &values,
                                  std::span<const std::string> steps) {
  bool loss = f.mode == FormulaMode::Loss;
  auto guarded = [&](Expr d) {
    return loss ? guardNaN(ctx, d, {Variable::YPred, Variable::YTrue}) : guardNaN(ctx, d, {Variable::Num});
  };
  for (const std::string &step : steps) {
    if (step == "d") {
      f.expr = guarded(differentiate(ctx, f.expr, loss ? Variable::YPred : Variable::Num));
    } else if (step == "t") {
      std::vector<std::string> names = f.constants;
      Expr sum = nullptr; // not 0 + ...: IEEE keeps that sum (0 + -0 is +0)
      for (const std::string &c : names) {
        std::string t = tangentName(c, f.constants);
        f.constants.push_back(t);
        values.push_back(0);
        Expr term = ctx.mul(ctx.param(t), guarded(differentiate(ctx, f.expr, ctx.param(c))));
        sum = sum ? ctx.add(sum, term) : term;
      }
      f.expr = simplify(ctx, sum ? sum : ctx.number(0));
    } else if (step == "y") {
      if (!loss)
        return std::string("d/dy_true (derivation step 'y') is a loss's derivative; an activation has no y_true");
      f.expr = guarded(differentiate(ctx, f.expr, Variable::YTrue));
    } else if (step.starts_with("c:")) {
      std::string name = step.substr(2);
      if (std::find(f.constants.begin(), f.constants.end(), name) == f.constants.end())
        return fmt::format("the formula has no constant '{}' to differentiate by{}", name,
                           f.constants.empty() ? std::string()
                                               : fmt::format("; it has: {}", fmt::join(f.constants, ", ")));
      f.expr = guarded(differentiate(ctx, f.expr, ctx.param(name)));
    } else {
      return fmt::format("unknown derivation step '{}'", step);
    }
  }
  return std::nullopt;
}

void addWarnings(std::vector<Diagnostic> &unused, std::vector<std::string> &warnings) {
  for (Diagnostic &d : unused) {
    d.warning = true;
    d.formula.clear(); // the cause is the constant, not a place in the text
    warnings.push_back(d.render() + " (ignored)");
  }
  unused.clear();
}

} // namespace

Expected<std::vector<std::string>> derivativeSteps(unsigned order) {
  if (order > kMaxDerivationSteps) // before a vector of `order` steps is made
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("derivative of order {}; at most {} are supported", order, kMaxDerivationSteps));
  return std::vector<std::string>(order, "d");
}

void CompiledModel::planUnits() {
  auto addUnit = [&](uint32_t g, const double *values) {
    CodeUnit u;
    for (KernelKind k : tapeKinds()) {
      const Program &p = groups[g].programs[size_t(k)];
      u.programs[size_t(k)] = values ? &baked_.emplace_back(p.withConstants(values)) : &p;
    }
    units.push_back(u);
    return uint32_t(units.size() - 1);
  };
  if (!options.bakeConstants) { // a unit per group, in the order nodes first use them
    std::vector<uint32_t> unitOfGroup(groups.size(), UINT32_MAX);
    for (uint32_t g : nodeGroup) {
      if (unitOfGroup[g] == UINT32_MAX)
        unitOfGroup[g] = addUnit(g, nullptr);
      unitOf.push_back(unitOfGroup[g]);
    }
    return;
  }
  std::map<std::pair<uint32_t, std::vector<double>>, uint32_t> index;
  for (size_t n = 0; n < nodeGroup.size(); ++n) {
    uint32_t g = nodeGroup[n];
    auto first = defaultParams.begin() + std::ptrdiff_t(offsets[n]);
    std::vector<double> values(first, first + std::ptrdiff_t(groups[g].formula.constants.size()));
    auto it = index.find({g, values});
    if (it == index.end())
      it = index.emplace(std::pair{g, values}, addUnit(g, values.data())).first;
    unitOf.push_back(it->second);
  }
}

Expected<std::shared_ptr<const CompiledModel>> CompiledModel::activation(const std::vector<NodeSpec> &nodes,
                                                                         const ModelOptions &options,
                                                                         std::vector<std::string> &warnings) {
  if (nodes.empty())
    return Error(ErrorCode::InvalidArgument, "a layer needs at least one node");
  auto m = std::make_shared<CompiledModel>();
  m->options = options;
  m->ctx = std::make_shared<ExprContext>();
  auto t0 = Clock::now();
  std::vector<Diagnostic> diags, unused;
  // Nodes share a group when their expressions and constant lists agree (a
  // derivative can drop a constant the node's params still hold).
  std::map<std::pair<Expr, std::vector<std::string>>, uint32_t> groupOf;
  // Layers repeat a few formulas over many nodes: each text is parsed once,
  // and one that fails gives each of its nodes the same diagnostic (reported
  // once, naming them: renderDiagnostics).
  std::unordered_map<std::string_view, Formula> parsedText;
  std::unordered_map<std::string_view, Diagnostic> failedText;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Formula f;
    if (auto it = parsedText.find(nodes[i].formula); it != parsedText.end()) {
      f = it->second;
    } else if (auto failed = failedText.find(nodes[i].formula); failed != failedText.end()) {
      diags.push_back(failed->second);
      diags.back().node = int(i);
      continue;
    } else {
      auto parsed = parseFormulaDetailed(*m->ctx, nodes[i].formula, {FormulaMode::Activation, int(i)});
      if (auto *d = std::get_if<Diagnostic>(&parsed)) {
        failedText.emplace(nodes[i].formula, *d);
        diags.push_back(std::move(*d));
        continue;
      }
      f = std::get<Formula>(std::move(parsed));
      parsedText.emplace(nodes[i].formula, f);
    }
    auto bound = bindConstants(f, nodes[i].constants, int(i), options.strict ? nullptr : &unused);
    if (auto *d = std::get_if<Diagnostic>(&bound)) {
      diags.push_back(std::move(*d));
      continue;
    }
    addWarnings(unused, warnings);
    auto &values = std::get<std::vector<double>>(bound);
    if (auto why = derive(*m->ctx, f, values, options.derivation))
      return Error(ErrorCode::InvalidArgument, fmt::format("node {}: {}", i, *why));
    auto [it, fresh] = groupOf.try_emplace({f.expr, f.constants}, uint32_t(m->groups.size()));
    if (fresh)
      m->groups.push_back({std::move(f), nullptr, {}, {}, {}, {}});
    m->nodeGroup.push_back(it->second);
    m->offsets.push_back(m->defaultParams.size());
    m->defaultParams.insert(m->defaultParams.end(), values.begin(), values.end());
  }
  if (!diags.empty())
    return toError(diags);
  m->parseMs = msSince(t0);

  auto t1 = Clock::now();
  std::vector<bool> constantGroup;
  for (FormulaGroup &g : m->groups) {
    g.derivative = differentiate(*m->ctx, g.formula.expr, Variable::Num);
    lowerGroup(*m->ctx, g, kActivationKinds);
    constantGroup.push_back(!readsVariable(g.programs[size_t(KernelKind::Forward)], Variable::Num));
  }
  for (size_t n = 0; n < m->nodeGroup.size() && options.derivation.empty(); ++n) // f'' = 0 is no mistake
    if (constantGroup[m->nodeGroup[n]])
      warnings.push_back(fmt::format("node {}: warning: formula '{}' does not use its input (num, x or z); its output "
                                     "is the same for every input and its derivative is 0",
                                     n, m->group(n).formula.text));
  m->planUnits();
  m->diffMs = msSince(t1);
  return std::shared_ptr<const CompiledModel>(std::move(m));
}

Expected<std::shared_ptr<const CompiledModel>> CompiledModel::loss(std::string_view text,
                                                                   const std::map<std::string, double> &constants,
                                                                   const ModelOptions &options,
                                                                   std::vector<std::string> &warnings) {
  auto m = std::make_shared<CompiledModel>();
  m->isLoss = true;
  m->options = options;
  m->ctx = std::make_shared<ExprContext>();
  auto t0 = Clock::now();
  auto parsed = parseFormulaDetailed(*m->ctx, text, {FormulaMode::Loss});
  if (auto *d = std::get_if<Diagnostic>(&parsed))
    return toError({*d});
  std::vector<Diagnostic> unused;
  Formula &f = std::get<Formula>(parsed);
  auto bound = bindConstants(f, constants, -1, options.strict ? nullptr : &unused);
  if (auto *d = std::get_if<Diagnostic>(&bound))
    return toError({*d});
  addWarnings(unused, warnings);
  m->defaultParams = std::get<std::vector<double>>(std::move(bound));
  if (auto why = derive(*m->ctx, f, m->defaultParams, options.derivation))
    return Error(ErrorCode::InvalidArgument, *why);
  m->groups.push_back({std::move(f), nullptr, {}, {}, {}, {}});
  m->nodeGroup = {0};
  m->offsets = {0};
  m->parseMs = msSince(t0);

  auto t1 = Clock::now();
  FormulaGroup &g = m->groups.front();
  g.derivative = differentiate(*m->ctx, g.formula.expr, Variable::YPred);
  lowerGroup(*m->ctx, g, kLossKinds);
  if (options.derivation.empty() && !readsVariable(g.programs[size_t(KernelKind::LossElements)], Variable::YPred))
    warnings.push_back(fmt::format("warning: loss '{}' does not depend on y_pred once simplified (its terms in y_pred "
                                   "cancel); its gradient is 0",
                                   g.formula.text));
  m->planUnits();
  m->diffMs = msSince(t1);
  return std::shared_ptr<const CompiledModel>(std::move(m));
}

std::string CompiledModel::describe(std::string_view engine, std::span<const KernelKind> built) const {
  std::string kinds, formulas;
  for (KernelKind k : built)
    kinds += (kinds.empty() ? "" : ", ") + std::string(kindName(k));
  for (const FormulaGroup &g : groups) {
    formulas += (formulas.empty() ? "" : ", ") + formulaString(g);
    if (formulas.size() > 200) {
      formulas = formulas.substr(0, 200) + "...";
      break;
    }
  }
  std::string what = isLoss ? kinds : std::string(to_string(options.layout)) + (kinds.empty() ? "" : "; " + kinds);
  return fmt::format("{} {} {}{}: {}", engine, to_string(options.dtype), isLoss ? "loss" : "layer",
                     what.empty() ? "" : " (" + what + ")", formulas);
}

} // namespace hsnn::detail
