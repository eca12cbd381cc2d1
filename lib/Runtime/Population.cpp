//===- lib/Runtime/Population.cpp - Many new formulas, prepared ----------===//
//
// Preparing a member is the front end without its derivatives: parse,
// simplify, lower, bytecode; chunks of members in parallel, each in a
// context of its own. Derivatives and losses are made at their first use.
// Trees given as arrays are PopulationArrays.cpp's, scoring
// PopulationScore.cpp's.
//
//===----------------------------------------------------------------------===//
#include "PopulationImpl.h"

#include "Expr/Names.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <set>

namespace hsnn {

using namespace detail;

namespace {

std::string joined(const std::vector<std::string> &names) {
  std::string s;
  for (const std::string &n : names)
    s += (s.empty() ? "" : ", ") + n;
  return s;
}

} // namespace

namespace detail {

Error checkOptions(const PopulationOptions &o) {
  if (o.method != Method::Auto && o.method != Method::CpuInterp && o.method != Method::Cuda)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("a population runs on cpu_interp or cuda, not {} (cpu_jit compiles layers: "
                             "ActivationLayer)",
                             to_string(o.method)));
  if (o.method == Method::Cuda && o.gpuId < 0)
    return Error(ErrorCode::InvalidArgument, fmt::format("GPU id {} is negative", o.gpuId));
  if (o.variables.empty())
    return Error(ErrorCode::InvalidArgument, "a population needs at least one variable");
  if (o.variables.size() > 255)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("a population takes at most 255 variables, got {}", o.variables.size()));
  std::set<std::string> seen;
  for (const std::string &v : o.variables) {
    bool ident = !v.empty() && (std::isalpha((unsigned char)v[0]) || v[0] == '_') &&
                 std::all_of(v.begin(), v.end(), [](char c) { return std::isalnum((unsigned char)c) || c == '_'; });
    if (!ident)
      return Error(ErrorCode::InvalidArgument, fmt::format("variable name '{}' is not an identifier", v));
    if (isReservedName(v) && !findVariable(v))
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("variable name '{}' is reserved (a function, built-in or named number)", v));
    if (!seen.insert(v).second)
      return Error(ErrorCode::InvalidArgument, fmt::format("variable '{}' is named twice", v));
  }
  return Error::success();
}

// Members a chunk prepares: enough to amortize a context, few enough that
// every thread gets several.
constexpr size_t kMembersPerChunk = 64;


std::shared_ptr<Population::Impl> makePopulation(const PopulationOptions &options, size_t n) {
  auto impl = std::make_shared<Population::Impl>();
  impl->options = options;
  impl->members.resize(n);
  for (size_t b = 0; b < n; b += kMembersPerChunk) {
    impl->chunkStart.push_back(b);
    impl->contexts.push_back(std::make_unique<ExprContext>());
  }
  impl->chunkStart.push_back(n);
  return impl;
}

void finishPopulation(Population::Impl &impl, std::vector<double> &constants) {
  for (Member &m : impl.members)
    if (m.error)
      impl.errors.push_back(*m.error);
  impl.offsets.assign(1, 0);
  for (const Member &m : impl.members) {
    constants.insert(constants.end(), m.constants.begin(), m.constants.end());
    impl.offsets.push_back(constants.size());
  }
}


} // namespace detail

void Population::Impl::bind(size_t i, const std::map<std::string, double> &given) {
  Member &m = members[i];
  for (const std::string &n : m.formula.constants)
    if (!given.count(n) && !m.formula.defaults.count(n)) {
      size_t at = m.formula.firstUse.count(n) ? m.formula.firstUse.at(n) : 0;
      return fail(i, {.column = at, .length = n.size(),
                      .message = fmt::format("'{}' is neither a variable ({}) nor a constant given to this formula", n,
                                             joined(options.variables)),
                      .formula = m.formula.text});
    }
  std::vector<Diagnostic> unused; // a shared dictionary may hold others' constants
  auto bound = bindConstants(m.formula, given, int(i), &unused);
  if (auto *d = std::get_if<Diagnostic>(&bound))
    return fail(i, std::move(*d));
  m.constants = std::move(std::get<std::vector<double>>(bound));
  m.value = BlockCode::from(Program::lower(std::span<const Expr>(&m.formula.expr, 1), m.formula.constants));
  m.valid = true;
}

Expected<Population> Population::create(std::span<const PopulationMember> members, const PopulationOptions &options) {
  if (Error e = checkOptions(options))
    return e;
  auto impl = makePopulation(options, members.size());
  impl->markCopies(members.size(), [&](size_t i) {
    std::string key = members[i].formula;
    for (const auto &[name, value] : members[i].constants)
      key += fmt::format("\n{}={}", name, value);
    return key;
  });
  impl->forMembers([&](ExprContext &ctx, size_t i) {
    ParseOptions po{.mode = FormulaMode::Activation, .node = int(i), .variables = options.variables,
                    .literalsAsConstants = options.literalsAsConstants};
    auto parsed = parseFormulaDetailed(ctx, members[i].formula, po);
    if (auto *d = std::get_if<Diagnostic>(&parsed))
      return impl->fail(i, std::move(*d));
    impl->members[i].formula = std::move(std::get<Formula>(parsed));
    impl->bind(i, members[i].constants);
  });
  std::vector<double> constants;
  finishPopulation(*impl, constants);
  return Population(std::move(impl), std::move(constants));
}

Expected<Population> Population::create(std::span<const std::string> formulas, const PopulationOptions &options) {
  std::vector<PopulationMember> members;
  members.reserve(formulas.size());
  for (const std::string &f : formulas)
    members.push_back({f, {}});
  return create(members, options);
}

Population::Population(std::shared_ptr<Impl> impl, std::vector<double> constants)
    : impl_(std::move(impl)), constants_(std::move(constants)) {}
Population::Population(const Population &) = default;
Population::Population(Population &&) noexcept = default;
Population &Population::operator=(const Population &) = default;
Population &Population::operator=(Population &&) noexcept = default;
Population::~Population() = default;

size_t Population::size() const { return impl_->members.size(); }
const PopulationOptions &Population::options() const { return impl_->options; }
const std::vector<Diagnostic> &Population::errors() const { return impl_->errors; }
bool Population::valid(size_t i) const { return i < size() && impl_->members[i].valid; }
std::string Population::simplified(size_t i) const {
  if (!valid(i))
    return "";
  return print(impl_->members[i].formula.expr, {.variables = impl_->options.variables});
}
const std::vector<std::string> &Population::constantNames(size_t i) const { return impl_->members.at(i).formula.constants; }
std::span<const double> Population::constants(size_t i) const {
  return std::span<const double>(constants_).subspan(impl_->offsets.at(i), impl_->offsets.at(i + 1) - impl_->offsets[i]);
}
std::span<const double> Population::allConstants() const { return constants_; }
size_t Population::constantOffset(size_t i) const { return impl_->offsets.at(i); }

Error Population::setConstants(std::span<const double> values) {
  if (values.size() != constants_.size())
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("the population has {} constants, got {} values", constants_.size(), values.size()));
  for (size_t k = 0; k < values.size(); ++k)
    if (!std::isfinite(values[k]))
      return Error(ErrorCode::InvalidArgument, fmt::format("constant value {} at index {} is not finite", values[k], k));
  constants_.assign(values.begin(), values.end());
  return Error::success();
}

// --- Derivatives and losses, at their first use ------------------------

// d/dwrt (an exact 0, null from differentiate, as a number).
static Expr derivative(ExprContext &ctx, Expr f, auto wrt) {
  Expr d = differentiate(ctx, f, wrt);
  return d ? d : ctx.number(0);
}

template <class Roots> void Population::Impl::derive(bool &made, BlockCode Member::*code, Roots &&roots) {
  std::lock_guard<std::mutex> lock(lazy);
  if (made)
    return;
  forMembers([&](ExprContext &ctx, size_t i) {
    Member &m = members[i];
    if (m.valid)
      m.*code = BlockCode::from(Program::lower(roots(ctx, m.formula), m.formula.constants));
  });
  made = true;
}

void Population::Impl::deriveConstants() {
  derive(haveConstantGrads, &Member::constantGrad, [](ExprContext &ctx, const Formula &f) {
    std::vector<Expr> roots{f.expr};
    for (const std::string &c : f.constants)
      roots.push_back(derivative(ctx, f.expr, ctx.param(c)));
    return roots;
  });
}

void Population::Impl::deriveVariables() {
  derive(haveVariableGrads, &Member::variableGrad, [&](ExprContext &ctx, const Formula &f) {
    std::vector<Expr> roots;
    for (size_t j = 0; j < options.variables.size(); ++j)
      roots.push_back(derivative(ctx, f.expr, Variable(j)));
    return roots;
  });
}

Expected<std::shared_ptr<LossCode>> Population::Impl::loss(const PopulationLoss &l) {
  if (l.reduction == Reduction::None)
    return Error(ErrorCode::InvalidArgument, "a fitness is reduced: use Reduction::Mean or Reduction::Sum");
  std::lock_guard<std::mutex> lock(lazy);
  auto key = std::make_pair(l.formula, l.constants);
  if (auto it = losses.find(key); it != losses.end())
    return it->second;
  auto parsed = parseFormula(*ctx, l.formula, {.mode = FormulaMode::Loss});
  if (!parsed)
    return parsed.takeError();
  auto bound = bindConstants(*parsed, l.constants);
  if (auto *d = std::get_if<Diagnostic>(&bound))
    return toError({*d});
  Expr roots[2] = {parsed->expr, derivative(*ctx, parsed->expr, Variable::YPred)};
  auto code = std::make_shared<LossCode>();
  code->code = BlockCode::from(Program::lower(roots, parsed->constants));
  code->sumTape = Program::lower(std::span<const Expr>(roots, 1), parsed->constants);
  code->params = std::get<std::vector<double>>(bound);
  losses.emplace(key, code);
  return code;
}

} // namespace hsnn
