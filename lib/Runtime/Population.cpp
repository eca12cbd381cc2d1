//===- lib/Runtime/Population.cpp - Many new formulas, scored at once -----===//
//
// Preparing a member is the front end without its derivatives: parse,
// simplify, lower, bytecode. Scoring cuts the (formulas x rows) plane into
// tiles of one formula and up to kTileRows rows; a tile fills its numbers
// once, runs the formula a block at a time and, for a fitness, the loss on
// the block at once, so no (N x rows) array is made. Each tile's sums are
// kept apart and added in row order: the same scores whatever the threads.
//
//===----------------------------------------------------------------------===//
#include "hsnn/Population.h"

#include "LayerState.h"
#include "Warn.h"

#include "CPU/KernelBuild.h"
#include "CPU/OpKernels.h"
#include "CodeGen/KernelSpec.h"
#include "Program/BlockCode.h"
#include "Expr/Names.h"
#include "Program/Launch.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <mutex>
#include <set>
#include <unordered_map>

namespace hsnn {

using namespace detail;

namespace {

// Rows one tile runs: enough that filling the numbers and the task's
// scheduling are amortized, few enough that 1000 formulas over 10^5 rows
// still give every thread many tiles.
constexpr size_t kTileRows = 16 * kBlock;

constexpr size_t kNotACopy = size_t(-1);

struct Member {
  /// A member written like an earlier one (a search's populations repeat
  /// their parents: elites, tournament winners) is prepared once: this is
  /// that one's index, and the member its copy.
  size_t sameAs = kNotACopy;
  bool valid = false;
  std::optional<Diagnostic> error;
  Formula formula;
  std::vector<double> constants; ///< Initial values, in formula.constants' order.
  BlockCode value;          ///< Outputs: the formula.
  BlockCode constantGrad;   ///< Outputs: the formula, then d/dc for each constant (lazy).
  BlockCode variableGrad;   ///< Outputs: d/dx for each variable (lazy).
};

// A loss's bytecode: outputs the loss, then its derivative in y_pred.
struct LossCode {
  BlockCode code;
  std::vector<double> params;
  /// The loss alone, and its sum compiled by the host JIT (a LossSum kernel,
  /// once per loss and dtype: a search's loss is the same every generation),
  /// which a fitness without weights calls once a block for the loss and its
  /// sum; null where there is no JIT.
  Program sumTape;
  std::once_flag compiled[2];
  void *sum[2] = {nullptr, nullptr};
  std::shared_ptr<KernelLibrary> library[2];

  template <class T> LossFn<T> sumKernel() {
    constexpr size_t d = std::is_same_v<T, float> ? 0 : 1;
    std::call_once(compiled[d], [&] {
      if (!HostJIT::available())
        return;
      std::string symbol = fmt::format("hsnn_population_loss_{}", d ? "f64" : "f32");
      KernelRequest r{.symbol = symbol, .program = &sumTape, .kind = KernelKind::LossSum,
                      .dtype = d ? DType::F64 : DType::F32};
      CompileInfo info;
      auto lib = buildKernels(std::span<const KernelRequest>(&r, 1), JITOptions{}, cacheConfig(),
                              [] { return std::string("population loss"); }, info, nullptr, /*linkedOnly=*/false);
      if (lib && *lib) {
        library[d] = *lib;
        sum[d] = (*lib)->address(symbol);
      }
    });
    return reinterpret_cast<LossFn<T>>(sum[d]);
  }
};

} // namespace

struct Population::Impl {
  PopulationOptions options;
  std::unique_ptr<ExprContext> ctx = std::make_unique<ExprContext>(); ///< Losses'
  std::vector<Member> members;
  /// Members are prepared (and differentiated) in chunks, in parallel, each
  /// chunk in a context of its own: chunk k is members [chunkStart[k],
  /// chunkStart[k+1]) in contexts[k].
  std::vector<size_t> chunkStart;
  std::vector<std::unique_ptr<ExprContext>> contexts;
  std::vector<Diagnostic> errors;
  std::vector<size_t> offsets{0}; ///< Constants of member i at [offsets[i], offsets[i+1]).

  std::mutex lazy; ///< Derivatives and losses, made at their first use.
  bool haveConstantGrads = false, haveVariableGrads = false;
  std::map<std::pair<std::string, std::map<std::string, double>>, std::shared_ptr<LossCode>> losses;

  void fail(size_t i, Diagnostic d) {
    d.node = int(i);
    members[i].error = std::move(d);
    members[i].valid = false;
  }
  /// fn(context, i) for every member but copies, the chunks in parallel;
  /// then the copies take their original's result.
  template <class Fn> void forMembers(Fn &&fn) {
    forBlocks(contexts.size(), 1 << 16, [&](size_t k) {
      for (size_t i = chunkStart[k]; i < chunkStart[k + 1]; ++i)
        if (members[i].sameAs == kNotACopy)
          fn(*contexts[k], i);
    });
    for (size_t i = 0; i < members.size(); ++i)
      if (size_t j = members[i].sameAs; j != kNotACopy) {
        members[i] = members[j];
        members[i].sameAs = j;
        if (members[i].error)
          members[i].error->node = int(i);
      }
  }
  /// Marks members whose key (their text, or their arrays) an earlier one has.
  template <class Key> void markCopies(size_t n, Key &&key) {
    std::unordered_map<std::string, size_t> first;
    first.reserve(n);
    for (size_t i = 0; i < n; ++i)
      if (auto [it, fresh] = first.emplace(key(i), i); !fresh)
        members[i].sameAs = it->second;
  }
  // A parsed formula's constants, checked against what was given.
  void bind(size_t i, const std::map<std::string, double> &given);
  Expected<std::shared_ptr<LossCode>> loss(const PopulationLoss &l);
  void deriveConstants();
  void deriveVariables();
  /// Each valid member's `code`, lowered from roots(context, formula), made
  /// once (`made`), at the first call that needs it.
  template <class Roots> void derive(bool &made, BlockCode Member::*code, Roots &&roots);
};

namespace {

Error checkVariables(const PopulationOptions &o) {
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

std::string joined(const std::vector<std::string> &names) {
  std::string s;
  for (const std::string &n : names)
    s += (s.empty() ? "" : ", ") + n;
  return s;
}

} // namespace

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

namespace {

// Members a chunk prepares: enough to amortize a context, few enough that
// every thread gets several.
constexpr size_t kMembersPerChunk = 64;

std::shared_ptr<Population::Impl> makeImpl(const PopulationOptions &options, size_t n) {
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

void finishOffsets(Population::Impl &impl, std::vector<double> &constants) {
  for (Member &m : impl.members)
    if (m.error)
      impl.errors.push_back(*m.error);
  impl.offsets.assign(1, 0);
  for (const Member &m : impl.members) {
    constants.insert(constants.end(), m.constants.begin(), m.constants.end());
    impl.offsets.push_back(constants.size());
  }
}

} // namespace

Expected<Population> Population::create(std::span<const PopulationMember> members, const PopulationOptions &options) {
  if (Error e = checkVariables(options))
    return e;
  auto impl = makeImpl(options, members.size());
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
  finishOffsets(*impl, constants);
  return Population(std::move(impl), std::move(constants));
}

Expected<Population> Population::create(std::span<const std::string> formulas, const PopulationOptions &options) {
  std::vector<PopulationMember> members;
  members.reserve(formulas.size());
  for (const std::string &f : formulas)
    members.push_back({f, {}});
  return create(members, options);
}

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
  if (Error e = checkVariables(options))
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
  auto impl = makeImpl(options, n);
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
  finishOffsets(*impl, constants);
  return Population(std::move(impl), std::move(constants));
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

// --- Scoring -------------------------------------------------------------

namespace {

template <class T> const OpKernels<T> *opKernels() {
  static const OpKernels<T> *kernels = [] {
    auto k = compiledOpKernels<T>(cacheConfig(), /*linkedOnly=*/false);
    if (!k) {
      warn(fmt::format("population: the op kernels could not be compiled ({}); the op table's evaluation runs "
                       "instead (values within the numerics guide's bounds, not the compiled layers' bits)",
                       k.error().message()));
      return static_cast<const OpKernels<T> *>(nullptr);
    }
    return *k;
  }();
  return kernels;
}

bool overlaps(const void *a, size_t an, const void *b, size_t bn) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an && bn && x < y + bn && y < x + an;
}

// The data's columns: X's own where it is column-major, else a transposed
// copy (once per call, shared by every formula).
template <class T> struct Columns {
  std::vector<T> copy;
  std::vector<const T *> column;
};

template <class T> Expected<Columns<T>> columnsOf(const PopulationData<T> &d, size_t variables) {
  if (d.x.size() != d.rows * variables)
    return Error(ErrorCode::InvalidArgument, fmt::format("X has {} values; {} rows x {} variables need {}", d.x.size(),
                                                         d.rows, variables, d.rows * variables));
  Columns<T> c;
  const T *base = d.x.data();
  if (d.layout == DataLayout::RowMajor && variables > 1) {
    c.copy.resize(d.x.size());
    size_t chunks = (d.rows + kTileRows - 1) / kTileRows;
    forBlocks(chunks, kTileRows * variables, [&](size_t t) {
      size_t r0 = t * kTileRows, n = std::min(kTileRows, d.rows - r0);
      transposeTile<T>(d.x.data() + r0 * variables, variables, c.copy.data() + r0, d.rows, n, variables);
    });
    base = c.copy.data();
  }
  for (size_t j = 0; j < variables; ++j)
    c.column.push_back(base + j * d.rows);
  return c;
}

// parts += the sum of a[r] (times b[r], times w[r]) over a block, in double:
// eight independent sums (one chain of dependent additions held a fitness
// back; the DEVLOG has the measurement), added in a fixed order, then into the tile's compensated
// sum, so a score does not depend on the threads.
template <bool HasB, bool HasW, class T>
void addTerms(double (&lane)[8], const T *a, const T *b, const T *w, size_t n) {
  auto term = [&](size_t k) {
    double v = double(a[k]);
    if constexpr (HasB)
      v *= double(b[k]);
    if constexpr (HasW)
      v *= double(w[k]);
    return v;
  };
  size_t r = 0;
  for (; r + 8 <= n; r += 8)
    for (size_t j = 0; j < 8; ++j)
      lane[j] += term(r + j);
  for (size_t j = 0; r < n; ++r, ++j)
    lane[j] += term(r);
}

template <class T> void addBlock(SumParts &parts, const T *a, const T *b, const T *w, size_t n) {
  double lane[8] = {};
  if (b && w)
    addTerms<true, true>(lane, a, b, w, n);
  else if (b)
    addTerms<true, false>(lane, a, b, w, n);
  else if (w)
    addTerms<false, true>(lane, a, b, w, n);
  else
    addTerms<false, false>(lane, a, b, w, n);
  CompensatedSum sum{parts.sum, parts.residual};
  for (double v : lane)
    sum.add(v);
  parts = sum.parts();
}

template <class T> Error checkTarget(const PopulationData<T> &d) {
  if (d.y.size() != d.rows)
    return Error(ErrorCode::InvalidArgument, fmt::format("y has {} values for {} rows", d.y.size(), d.rows));
  if (!d.weights.empty() && d.weights.size() != d.rows)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("weights has {} values for {} rows", d.weights.size(), d.rows));
  return Error::success();
}

// Runs body(member, r0, n, columns, buffers) for every block of every
// (valid member, row tile), a tile on one thread; the tiles of member i
// are tiles [i * perMember, (i + 1) * perMember).
template <class T, class Body>
void forTiles(const std::vector<Member> &members, const std::vector<size_t> &offsets, const double *constants,
              const Columns<T> &cols, size_t rows, const BlockCode Member::*code, Body &&body) {
  size_t perMember = std::max<size_t>(1, (rows + kTileRows - 1) / kTileRows);
  size_t variables = cols.column.size();
  forBlocks(members.size() * perMember, std::min(rows, kTileRows) * 8, [&](size_t t) {
    size_t i = t / perMember, tile = t % perMember;
    const Member &m = members[i];
    if (!m.valid)
      return;
    const BlockCode &c = m.*code;
    thread_local std::vector<T> buffers;
    thread_local std::vector<const T *> at;
    thread_local std::vector<double> scalars;
    if (buffers.size() < c.bufferCount() * kBlock)
      buffers.resize(c.bufferCount() * kBlock);
    at.resize(variables);
    scalars.resize(c.scalars.size());
    scalarValues(c, constants + offsets[i], scalars.data());
    size_t end = std::min(rows, (tile + 1) * kTileRows);
    for (size_t r0 = tile * kTileRows; r0 < end; r0 += kBlock) {
      size_t n = std::min(kBlock, end - r0);
      for (size_t j = 0; j < variables; ++j)
        at[j] = cols.column[j] + r0;
      body(i, tile, r0, n, c, at.data(), scalars.data(), buffers.data());
    }
  });
}

} // namespace

template <class T> static Error evaluateImpl(const Population::Impl &impl, const std::vector<double> &constants,
                                             const PopulationData<T> &d, std::span<T> out) {
  size_t n = impl.members.size();
  if (out.size() != n * d.rows)
    return Error(ErrorCode::InvalidArgument, fmt::format("out has {} values; {} formulas x {} rows need {}", out.size(),
                                                         n, d.rows, n * d.rows));
  if (overlaps(out.data(), out.size_bytes(), d.x.data(), d.x.size_bytes()))
    return Error(ErrorCode::InvalidArgument, "out overlaps X");
  auto cols = columnsOf(d, impl.options.variables.size());
  if (!cols)
    return cols.takeError();
  const OpKernels<T> *k = opKernels<T>();
  for (size_t i = 0; i < n; ++i)
    if (!impl.members[i].valid)
      std::fill_n(out.data() + i * d.rows, d.rows, std::numeric_limits<T>::quiet_NaN());
  forTiles<T>(impl.members, impl.offsets, constants.data(), *cols, d.rows, &Member::value,
              [&](size_t i, size_t, size_t r0, size_t len, const BlockCode &c, const T *const *at,
                  const double *sc, T *buf) {
                runCode<T>(c, k, at, sc, buf, len);
                const T *v = valuePointer<T>(c.outputs[0], at, buf);
                std::copy_n(v, len, out.data() + i * d.rows + r0);
              });
  return Error::success();
}

// Scores (and with `gradients`, d score / d constants) of every member.
template <class T>
static Error scoreImpl(Population::Impl &impl, const std::vector<double> &constants, const PopulationData<T> &d,
                       std::span<double> scores, std::span<double> *gradients, const PopulationLoss &lossSpec) {
  size_t n = impl.members.size();
  if (scores.size() != n)
    return Error(ErrorCode::InvalidArgument, fmt::format("scores has {} values for {} formulas", scores.size(), n));
  if (gradients && gradients->size() != constants.size())
    return Error(ErrorCode::InvalidArgument, fmt::format("gradients has {} values; the population has {} constants",
                                                         gradients->size(), constants.size()));
  if (Error e = checkTarget(d))
    return e;
  auto lossCode = impl.loss(lossSpec);
  if (!lossCode)
    return lossCode.takeError();
  LossCode &loss = **lossCode;
  auto cols = columnsOf(d, impl.options.variables.size());
  if (!cols)
    return cols.takeError();
  if (gradients)
    impl.deriveConstants();
  const OpKernels<T> *k = opKernels<T>();
  std::vector<double> lossScalars(loss.code.scalars.size());
  scalarValues(loss.code, loss.params.data(), lossScalars.data());
  size_t perMember = std::max<size_t>(1, (d.rows + kTileRows - 1) / kTileRows);
  // Per tile: the loss's sum, then each constant's.
  size_t width = 1;
  for (size_t i = 0; i < n; ++i)
    width = std::max(width, 1 + (gradients ? impl.offsets[i + 1] - impl.offsets[i] : 0));
  std::vector<SumParts> partial(n * perMember * width);
  const T *w = d.weights.empty() ? nullptr : d.weights.data();
  // The compiled loss sum where it serves: no weights, no gradients, and
  // the op kernels compiled too (without them the interpreter's loss keeps
  // every path on the op table alike).
  LossFn<T> fused = !w && !gradients && k ? loss.sumKernel<T>() : nullptr;
  forTiles<T>(
      impl.members, impl.offsets, constants.data(), *cols, d.rows, gradients ? &Member::constantGrad : &Member::value,
      [&](size_t i, size_t tile, size_t r0, size_t len, const BlockCode &c, const T *const *at, const double *sc,
          T *buf) {
        runCode<T>(c, k, at, sc, buf, len);
        SumParts *parts = partial.data() + (i * perMember + tile) * width;
        if (fused) {
          auto p = fused(valuePointer<T>(c.outputs[0], at, buf), d.y.data() + r0, nullptr, loss.params.data(),
                         int64_t(len), T(1));
          CompensatedSum sum{parts[0].sum, parts[0].residual};
          sum.add(p);
          parts[0] = sum.parts();
          return;
        }
        thread_local std::vector<T> lossBuffers;
        if (lossBuffers.size() < loss.code.bufferCount() * kBlock)
          lossBuffers.resize(loss.code.bufferCount() * kBlock);
        const T *lossColumns[3] = {nullptr, valuePointer<T>(c.outputs[0], at, buf), d.y.data() + r0};
        runCode<T>(loss.code, k, lossColumns, lossScalars.data(), lossBuffers.data(), len);
        const T *l = valuePointer<T>(loss.code.outputs[0], lossColumns, lossBuffers.data());
        addBlock(parts[0], l, static_cast<const T *>(nullptr), w ? w + r0 : nullptr, len);
        if (!gradients)
          return;
        const T *g = valuePointer<T>(loss.code.outputs[1], lossColumns, lossBuffers.data());
        for (size_t j = 1; j < c.outputs.size(); ++j)
          addBlock(parts[j], g, valuePointer<T>(c.outputs[j], at, buf), w ? w + r0 : nullptr, len);
      });
  double norm = 1;
  if (lossSpec.reduction == Reduction::Mean) {
    if (w) {
      CompensatedSum ws;
      for (size_t r = 0; r < d.rows; ++r)
        ws.add(double(w[r]));
      norm = ws.value();
    } else {
      norm = double(d.rows);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    size_t k0 = impl.offsets[i], kn = impl.offsets[i + 1] - k0;
    if (!impl.members[i].valid) {
      scores[i] = std::numeric_limits<double>::quiet_NaN();
      if (gradients)
        std::fill_n(gradients->data() + k0, kn, std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    for (size_t j = 0; j < (gradients ? 1 + kn : 1); ++j) {
      CompensatedSum s;
      for (size_t tile = 0; tile < perMember; ++tile) {
        const SumParts &p = partial[(i * perMember + tile) * width + j];
        s.add(p);
      }
      double v = s.value() / norm;
      if (j == 0)
        scores[i] = v;
      else
        (*gradients)[k0 + j - 1] = v;
    }
  }
  return Error::success();
}

template <class T>
static Error variableGradImpl(Population::Impl &impl, const std::vector<double> &constants, const PopulationData<T> &d,
                              std::span<T> out) {
  size_t n = impl.members.size(), v = impl.options.variables.size();
  if (out.size() != n * v * d.rows)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("out has {} values; {} formulas x {} variables x {} rows need {}", out.size(), n, v,
                             d.rows, n * v * d.rows));
  auto cols = columnsOf(d, v);
  if (!cols)
    return cols.takeError();
  impl.deriveVariables();
  const OpKernels<T> *k = opKernels<T>();
  for (size_t i = 0; i < n; ++i)
    if (!impl.members[i].valid)
      std::fill_n(out.data() + i * v * d.rows, v * d.rows, std::numeric_limits<T>::quiet_NaN());
  forTiles<T>(impl.members, impl.offsets, constants.data(), *cols, d.rows, &Member::variableGrad,
              [&](size_t i, size_t, size_t r0, size_t len, const BlockCode &c, const T *const *at,
                  const double *sc, T *buf) {
                runCode<T>(c, k, at, sc, buf, len);
                for (size_t j = 0; j < v; ++j)
                  std::copy_n(valuePointer<T>(c.outputs[j], at, buf), len, out.data() + (i * v + j) * d.rows + r0);
              });
  return Error::success();
}

Error Population::evaluate(const PopulationData<float> &d, std::span<float> out) const {
  return evaluateImpl(*impl_, constants_, d, out);
}
Error Population::evaluate(const PopulationData<double> &d, std::span<double> out) const {
  return evaluateImpl(*impl_, constants_, d, out);
}
Error Population::fitness(const PopulationData<float> &d, std::span<double> scores, const PopulationLoss &l) const {
  return scoreImpl(*impl_, constants_, d, scores, nullptr, l);
}
Error Population::fitness(const PopulationData<double> &d, std::span<double> scores, const PopulationLoss &l) const {
  return scoreImpl(*impl_, constants_, d, scores, nullptr, l);
}
Error Population::constantGradients(const PopulationData<float> &d, std::span<double> scores,
                                    std::span<double> gradients, const PopulationLoss &l) const {
  return scoreImpl(*impl_, constants_, d, scores, &gradients, l);
}
Error Population::constantGradients(const PopulationData<double> &d, std::span<double> scores,
                                    std::span<double> gradients, const PopulationLoss &l) const {
  return scoreImpl(*impl_, constants_, d, scores, &gradients, l);
}
Error Population::variableGradients(const PopulationData<float> &d, std::span<float> out) const {
  return variableGradImpl(*impl_, constants_, d, out);
}
Error Population::variableGradients(const PopulationData<double> &d, std::span<double> out) const {
  return variableGradImpl(*impl_, constants_, d, out);
}

} // namespace hsnn
