//===- tools/hsnn-jit/ExprCommands.cpp - parse, diff and eval -------------===//
#include "Commands.h"

#include "hsnn/Formula.h"
#include "hsnn/Layer.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <vector>

namespace hsnn::cli {
namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

constexpr const char *kParseHelp = R"(usage: hsnn-jit parse FORMULA [--mode activation|loss] [--guards] [--sympy] [--json] [-v]

Prints the canonical (simplified) form of FORMULA and the constants it needs,
with the defaults that built-ins supply. Without --mode, a formula that only
makes sense as a loss (y_pred, y_true, mse, ...) is read as one. --guards
also prints the branches kernels take at a built-in's tails, where its
floating-point form would give inf*0 (gelu, silu, mish). --sympy writes
sigmoid, softplus, log1p and expm1, which SymPy does not read, in its terms.
)";
constexpr const char *kDiffHelp = R"(usage: hsnn-jit diff FORMULA [--order K] [--mode activation|loss] [--guards] [--sympy] [--json] [-v]

Prints the simplified derivative on one line: d/dnum for activations,
d/dy_pred for losses; --order K (1 to 8) differentiates K times. The text is the function on the reals, as SymPy
reads it; --guards also prints the branches kernels take at a built-in's
tails (gelu'(+inf) is 1 where the printed form is inf*0); --sympy writes
sigmoid, softplus, log1p and expm1 in SymPy's terms (hsnn.diff's default).
)";
constexpr const char *kEvalHelp =
    R"(usage: hsnn-jit eval FORMULA --at X [--y-true T] [--const NAME=VALUE ...]
                     [--derivative | --order K] [--dtype f32|f64] [--mode activation|loss] [--json] [-v]

Evaluates FORMULA (or its derivative; --order K: its K-th, 0 to 8) with the
interpreter and prints the value with 17 significant digits. --at is num for activations and y_pred for
losses; --y-true makes it a loss.
)";

bool parseDouble(std::string_view s, double &out) {
  if (s == "inf" || s == "+inf") {
    out = INFINITY;
    return true;
  }
  if (s == "-inf") {
    out = -INFINITY;
    return true;
  }
  if (s == "nan") {
    out = NAN;
    return true;
  }
  if (!s.empty() && s[0] == '+')
    s.remove_prefix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

struct Options {
  std::optional<std::string_view> formula;
  std::optional<FormulaMode> mode;
  std::optional<double> at, yTrue;
  std::map<std::string, double> constants;
  unsigned order = 0; // derivatives to take (diff: 1 unless --order)
  bool orderGiven = false;
  DType dtype = DType::F64;
  bool help = false;
  bool json = false;
  bool verbose = false; // -v: where the time went, on stderr
  bool guards = false;  // PrintOptions::guards
  bool sympy = false;   // PrintOptions::sympy
};

// Returns an exit code on failure, nullopt to go on.
std::optional<int> parseOptions(std::string_view command, std::span<const std::string_view> args, Options &o,
                                bool evalOptions) {
  bool positionalOnly = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (positionalOnly) {
      if (o.formula)
        return usageError(command, fmt::format("unexpected argument '{}'", a));
      o.formula = a;
      continue;
    }
    auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= args.size())
        return std::nullopt;
      return args[++i];
    };
    if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "-v" || a == "--verbose") {
      o.verbose = true;
    } else if (!evalOptions && a == "--guards") {
      o.guards = true;
    } else if (!evalOptions && a == "--sympy") {
      o.sympy = true;
    } else if (a == "--mode") {
      auto v = value();
      if (!v || (*v != "activation" && *v != "loss"))
        return usageError(command, "--mode takes 'activation' or 'loss'");
      o.mode = *v == "loss" ? FormulaMode::Loss : FormulaMode::Activation;
    } else if (evalOptions && (a == "--at" || a == "--y-true")) {
      auto v = value();
      double d;
      if (!v)
        return usageError(command, fmt::format("{} needs a number", a));
      if (!parseDouble(*v, d)) {
        fmt::print(stderr, "hsnn-jit {}: error: {} '{}' is not a number\n", command, a, *v);
        return BadInput;
      }
      (a == "--at" ? o.at : o.yTrue) = d;
    } else if (evalOptions && a == "--const") {
      auto v = value();
      size_t eq = v ? v->find('=') : std::string_view::npos;
      if (!v || eq == std::string_view::npos || eq == 0)
        return usageError(command, "--const takes NAME=VALUE");
      double d;
      if (!parseDouble(v->substr(eq + 1), d)) {
        fmt::print(stderr, "hsnn-jit {}: error: value of constant '{}' is not a number: '{}'\n", command,
                   v->substr(0, eq), v->substr(eq + 1));
        return BadInput;
      }
      o.constants[std::string(v->substr(0, eq))] = d;
    } else if (evalOptions && a == "--derivative") {
      if (o.orderGiven && o.order != 1)
        return usageError(command, "--derivative and --order disagree");
      o.order = 1;
      o.orderGiven = true;
    } else if (a == "--order") {
      auto v = value();
      unsigned k = 0;
      auto [p, ec] = v ? std::from_chars(v->data(), v->data() + v->size(), k) : std::from_chars_result{};
      unsigned lowest = evalOptions ? 0 : 1;
      if (!v || ec != std::errc() || p != v->data() + v->size() || k < lowest || k > 8)
        return usageError(command, fmt::format("--order takes a whole number from {} to 8", lowest));
      if (o.orderGiven && o.order != k)
        return usageError(command, "--derivative and --order disagree");
      o.order = k;
      o.orderGiven = true;
    } else if (evalOptions && a == "--dtype") {
      auto v = value();
      if (!v || (*v != "f32" && *v != "f64"))
        return usageError(command, "--dtype takes 'f32' or 'f64'");
      o.dtype = *v == "f32" ? DType::F32 : DType::F64;
    } else if (a == "--") {
      positionalOnly = true;
    } else if (!positionalOnly && a.starts_with("--")) {
      // Options are long; a single dash starts a formula such as -x**2.
      return usageError(command, fmt::format("unknown option '{}'", a));
    } else if (!o.formula) {
      o.formula = a;
    } else {
      return usageError(command, fmt::format("unexpected argument '{}'", a));
    }
  }
  return std::nullopt;
}

// Parses in the requested mode, or guesses: activation first, then loss.
std::variant<Formula, Diagnostic> parseAnyMode(ExprContext &ctx, std::string_view text, std::optional<FormulaMode> mode) {
  if (mode)
    return parseFormulaDetailed(ctx, text, {*mode});
  auto act = parseFormulaDetailed(ctx, text, {FormulaMode::Activation});
  if (std::holds_alternative<Formula>(act))
    return act;
  auto loss = parseFormulaDetailed(ctx, text, {FormulaMode::Loss});
  if (std::holds_alternative<Formula>(loss))
    return loss;
  bool looksLikeLoss = text.find("y_pred") != std::string_view::npos || text.find("y_true") != std::string_view::npos;
  return looksLikeLoss ? loss : act;
}

int withFormula(std::string_view command, const char *help, std::span<const std::string_view> args, bool evalOptions,
                Options &o) {
  if (auto code = parseOptions(command, args, o, evalOptions))
    return *code;
  if (o.help) {
    fmt::print("{}", help);
    return -1;
  }
  if (!o.formula)
    return usageError(command, "no formula given");
  return Ok;
}

// Parses the command's formula, timing it; on failure prints the diagnostic.
std::optional<Formula> parseOrReport(ExprContext &ctx, const Options &o, double &parseMs) {
  auto t0 = Clock::now();
  auto r = parseAnyMode(ctx, *o.formula, o.mode);
  parseMs = msSince(t0);
  if (auto *d = std::get_if<Diagnostic>(&r)) {
    fmt::print(stderr, "{}\n", d->render());
    return std::nullopt;
  }
  return std::get<Formula>(std::move(r));
}

} // namespace

int runParse(std::span<const std::string_view> args) {
  Options o;
  if (int code = withFormula("parse", kParseHelp, args, false, o))
    return code < 0 ? Ok : code;
  ExprContext ctx;
  double parseMs = 0;
  auto parsed = parseOrReport(ctx, o, parseMs);
  if (!parsed)
    return BadInput;
  const Formula &f = *parsed;
  if (o.verbose)
    fmt::print(stderr, "parse+simplify: {:.3f} ms\n", parseMs);
  PrintOptions printed{.variable = f.variable, .guards = o.guards, .sympy = o.sympy};
  if (o.json) {
    std::vector<std::string> cs;
    for (const std::string &c : f.constants) {
      auto it = f.defaults.find(c);
      cs.push_back(it == f.defaults.end() ? fmt::format("{{\"name\": {}}}", jsonQuote(c))
                                          : fmt::format("{{\"name\": {}, \"default\": {}}}", jsonQuote(c), it->second));
    }
    fmt::print("{{\"canonical\": {}, \"mode\": \"{}\", \"constants\": [{}]}}\n", jsonQuote(print(f.expr, printed)),
               f.mode == FormulaMode::Loss ? "loss" : "activation", fmt::join(cs, ", "));
    return Ok;
  }
  fmt::print("{}\n", print(f.expr, printed));
  std::vector<std::string> names;
  for (const std::string &c : f.constants) {
    auto it = f.defaults.find(c);
    names.push_back(it == f.defaults.end() ? c : fmt::format("{} (default {})", c, it->second));
  }
  fmt::print("mode: {}\nconstants: {}\n", f.mode == FormulaMode::Loss ? "loss" : "activation",
             names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")));
  return Ok;
}

int runDiff(std::span<const std::string_view> args) {
  Options o;
  if (int code = withFormula("diff", kDiffHelp, args, false, o))
    return code < 0 ? Ok : code;
  ExprContext ctx;
  double parseMs = 0;
  auto parsed = parseOrReport(ctx, o, parseMs);
  if (!parsed)
    return BadInput;
  const Formula &f = *parsed;
  Variable v = f.mode == FormulaMode::Loss ? Variable::YPred : Variable::Num;
  auto t1 = Clock::now();
  Expr d = f.expr;
  for (unsigned k = 0; k < (o.orderGiven ? o.order : 1); ++k)
    d = differentiate(ctx, d, v);
  std::string derivative = print(d, {.variable = f.variable, .guards = o.guards, .sympy = o.sympy});
  if (o.verbose)
    fmt::print(stderr, "parse+simplify: {:.3f} ms, differentiate: {:.3f} ms\n", parseMs, msSince(t1));
  if (o.json)
    fmt::print("{{\"formula\": {}, \"variable\": \"{}\", \"order\": {}, \"derivative\": {}}}\n",
               jsonQuote(print(f.expr, {f.variable})), variableName(v), o.orderGiven ? o.order : 1, jsonQuote(derivative));
  else
    fmt::print("{}\n", derivative);
  return Ok;
}

int runEval(std::span<const std::string_view> args) {
  Options o;
  if (int code = withFormula("eval", kEvalHelp, args, true, o))
    return code < 0 ? Ok : code;
  if (!o.at)
    return usageError("eval", "--at X is required");
  if (o.yTrue && !o.mode)
    o.mode = FormulaMode::Loss;
  if (!o.mode) {
    ExprContext ctx;
    auto r = parseAnyMode(ctx, *o.formula, std::nullopt);
    if (auto *f = std::get_if<Formula>(&r))
      o.mode = f->mode;
    else
      o.mode = FormulaMode::Activation;
  }

  auto report = [](const Error &e) {
    fmt::print(stderr, "{}\n", e.message());
    return BadInput;
  };
  double value = 0;
  CompileInfo info;
  auto t0 = Clock::now();
  if (*o.mode == FormulaMode::Activation) {
    auto layer = ActivationLayer::compile({{std::string(*o.formula), o.constants}},
                                          {.method = Method::CpuInterp, .dtype = o.dtype});
    if (!layer)
      return report(layer.error());
    info = layer->compileInfo();
    // The K-th derivative as the kernels run it: backward of the (K-1)-th layer.
    if (o.order > 1) {
      auto below = layer->derivativeLayer(o.order - 1);
      if (!below)
        return report(below.error());
      *layer = std::move(*below);
    }
    auto runOne = [&](auto zero) -> Error {
      using T = decltype(zero);
      T z = T(*o.at), one = 1, out = 0;
      Error e = o.order ? layer->backward({&z, 1}, {&one, 1}, {&out, 1}, 1) : layer->forward({&z, 1}, {&out, 1}, 1);
      value = double(out);
      return e;
    };
    if (Error e = o.dtype == DType::F32 ? runOne(0.0f) : runOne(0.0))
      return report(e);
  } else {
    auto loss = Loss::compile(*o.formula, o.constants,
                              {.method = Method::CpuInterp, .dtype = o.dtype, .reduction = Reduction::None});
    if (!loss)
      return report(loss.error());
    info = loss->compileInfo();
    if (o.order > 1) {
      auto below = loss->derivativeLoss(o.order - 1);
      if (!below)
        return report(below.error());
      *loss = std::move(*below);
    }
    auto runOne = [&](auto zero) -> Error {
      using T = decltype(zero);
      T yp = T(*o.at), yt = T(o.yTrue.value_or(0)), out = 0;
      Error e = o.order ? loss->gradient({&yp, 1}, {&yt, 1}, {&out, 1}) : loss->forwardElements({&yp, 1}, {&yt, 1}, {&out, 1});
      value = double(out);
      return e;
    };
    if (Error e = o.dtype == DType::F32 ? runOne(0.0f) : runOne(0.0))
      return report(e);
  }
  if (o.verbose)
    fmt::print(stderr, "parse+simplify: {:.3f} ms, differentiate+lower: {:.3f} ms, total with evaluation: {:.3f} ms\n",
               info.parseMs, info.diffMs, msSince(t0));
  if (o.json)
    fmt::print("{{\"value\": {}, \"dtype\": \"{}\", \"derivative\": {}, \"order\": {}}}\n",
               std::isfinite(value) ? fmt::format("{:.17g}", value) : jsonQuote(fmt::format("{}", value)), to_string(o.dtype),
               o.order > 0, o.order);
  else
    fmt::print("{:.17g}\n", value);
  return Ok;
}

} // namespace hsnn::cli
