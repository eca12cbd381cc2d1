//===- test/fuzz/ParserFuzzer.cpp - libFuzzer target for the front end ----===//
//
// Any bytes: parse in both modes; what parses must print, re-parse to the
// same node, differentiate and evaluate without a crash or sanitizer report.
//===----------------------------------------------------------------------===//
#include "hsnn/Formula.h"

#include "Program/Interpreter.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <vector>

using namespace hsnn;

namespace {
template <class Pred> bool contains(Expr root, Pred pred) {
  std::vector<Expr> stack = {root};
  std::set<Expr> seen;
  while (!stack.empty()) {
    Expr e = stack.back();
    stack.pop_back();
    if (!seen.insert(e).second)
      continue;
    if (pred(e))
      return true;
    for (Expr a : e->args())
      stack.push_back(a);
  }
  return false;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  for (FormulaMode mode : {FormulaMode::Activation, FormulaMode::Loss}) {
    ExprContext ctx;
    auto parsed = parseFormulaDetailed(ctx, text, {mode});
    if (auto *d = std::get_if<Diagnostic>(&parsed)) {
      (void)d->render();
      continue;
    }
    const Formula &f = std::get<Formula>(parsed);
    // With the built-ins' tail guards, which read back as the Piecewise they
    // are, and their Partials nodes, which read back as their values: such a
    // formula must print the same text again.
    std::string printed = print(f.expr, {.guards = true});
    // Built-ins print expanded, so a legal formula can print longer than the
    // parser accepts (kMaxFormulaLength, a denial-of-service guard): the
    // round trip is checked for the texts the parser takes.
    if (printed.size() <= kMaxFormulaLength) {
      auto again = parseFormulaDetailed(ctx, printed, {mode, -1, false});
      // A loss whose y_pred terms cancel ((p + q) - q -> p) prints without
      // y_pred, which the parser refuses for a loss: that is the one allowed miss.
      bool lostYPred = mode == FormulaMode::Loss && !contains(f.expr, [](Expr e) {
        return e->op() == Op::Var && e->variable() == Variable::YPred;
      });
      bool guarded = contains(f.expr, [](Expr e) { return e->op() == Op::Guarded || e->op() == Op::Partials; });
      auto *back = std::get_if<Formula>(&again);
      bool same = back && (back->expr == f.expr || (guarded && print(back->expr, {.guards = true}) == printed));
      if (!lostYPred && !same)
        std::abort(); // the printer and parser disagree
    }

    Expr d = differentiate(ctx, f.expr, mode == FormulaMode::Loss ? Variable::YPred : Variable::Num);
    (void)print(d);
    (void)print(d, {.guards = true});
    std::vector<double> params(f.constants.size(), 0.5);
    Expr roots[] = {f.expr, d};
    detail::Program p = detail::Program::lower(roots, f.constants);
    double in[4] = {0.0, -1.5, 1e300, -INFINITY}, yt[4] = {1, 0, -2, 0.5}, o0[4], o1[4];
    const double *vars[3] = {in, in, yt};
    double *outs[2] = {o0, o1};
    detail::runBlock<double>(p, vars, params.data(), outs, 4);
    float inf32[4] = {0.0f, -1.5f, 3e38f, 1e-40f}, yt32[4] = {1, 0, -2, 0.5f}, p0[4], p1[4];
    const float *vars32[3] = {inf32, inf32, yt32};
    float *outs32[2] = {p0, p1};
    detail::runBlock<float>(p, vars32, params.data(), outs32, 4);
  }
  return 0;
}
