//===- lib/Model/ModelSnapshot.cpp - A layer's front-end result as bytes ---===//
//
// A cache hit in a fresh process spent most of its time in the front end
// (parsing, simplifying and differentiating formulas whose kernels were on
// disk already): code run once per process, so cold. The snapshot of a
// layer or a loss keeps
// what engines and the layer read after the front end: the tapes, the
// constants' names, defaults and domains, the per-node tables, the printed
// formulas and derivatives and the warnings. Expressions are not kept (only
// printing read them after compile), so a model from a snapshot has none.
//
// Bytes from disk are data: every count, index and enum is checked before
// use, so a damaged or planted snapshot is refused (the caller runs the
// front end), never trusted into an out-of-range tape.
//===----------------------------------------------------------------------===//
#include "CompiledModel.h"

#include "Expr/OpTable.h"

#include <cstring>

namespace hsnn::detail {
namespace {

constexpr char kMagic[8] = {'H', 'S', 'N', 'N', 'M', 'D', 'L', '1'};

class Writer {
public:
  std::string bytes;
  void raw(const void *p, size_t n) {
    if (n) // an empty vector's data() may be null
      bytes.append(static_cast<const char *>(p), n);
  }
  void u64(uint64_t v) { raw(&v, 8); }
  void u32(uint32_t v) { raw(&v, 4); }
  void f64(double v) { raw(&v, 8); }
  void str(std::string_view s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
};

// Reads fail soft: past the end, every read gives zeros and ok() is false.
class Reader {
public:
  explicit Reader(std::span<const char> b) : b_(b) {}
  bool ok() const { return ok_; }
  bool atEnd() const { return ok_ && at_ == b_.size(); }
  void raw(void *p, size_t n) {
    if (n == 0) // an empty vector's data() may be null
      return;
    if (!ok_ || b_.size() - at_ < n) {
      ok_ = false;
      std::memset(p, 0, n);
      return;
    }
    std::memcpy(p, b_.data() + at_, n);
    at_ += n;
  }
  uint64_t u64() {
    uint64_t v;
    raw(&v, 8);
    return v;
  }
  uint32_t u32() {
    uint32_t v;
    raw(&v, 4);
    return v;
  }
  double f64() {
    double v;
    raw(&v, 8);
    return v;
  }
  // A count of items at least `minBytes` each: no larger than what is left,
  // so a damaged count cannot ask for a huge allocation.
  size_t count(size_t minBytes) {
    uint64_t n = u64();
    if (!ok_ || n > (b_.size() - at_) / std::max<size_t>(minBytes, 1)) {
      ok_ = false;
      return 0;
    }
    return size_t(n);
  }
  std::string str() {
    size_t n = count(1);
    std::string s(n, '\0');
    raw(s.data(), n);
    return s;
  }

private:
  std::span<const char> b_;
  size_t at_ = 0;
  bool ok_ = true;
};

void writeProgram(Writer &w, const Program &p) {
  w.u64(p.code.size());
  for (const Instr &i : p.code) {
    w.u32(uint32_t(i.op) | uint32_t(i.isBool) << 8 | uint32_t(i.var) << 16);
    w.u32(i.param);
    w.f64(i.number);
    w.u32(i.argBegin);
    w.u32(i.numArgs);
  }
  w.u64(p.args.size());
  w.raw(p.args.data(), p.args.size() * 4);
  w.u64(p.outputs.size());
  w.raw(p.outputs.data(), p.outputs.size() * 4);
}

// A tape the interpreter and the code generators can run: ops a tape holds
// (an evaluator each) with their arity, operands computed before their use, constants and variables
// that exist.
bool wellFormed(const Program &p, size_t numConstants, bool loss) {
  for (size_t k = 0; k < p.code.size(); ++k) {
    const Instr &i = p.code[k];
    bool leaf = i.op == Op::Var || i.op == Op::Number || i.op == Op::Param;
    if (!leaf && (!blockEval<float>(i.op) || !blockEval<double>(i.op))) // folded away by lowering (pi, True)
      return false;
    int arity = opInfo(i.op).arity;
    if ((arity >= 0 && i.numArgs != uint32_t(arity)) || (arity < 0 && i.numArgs % 2 == 0) ||
        uint64_t(i.argBegin) + i.numArgs > p.args.size())
      return false;
    for (uint32_t a : p.operands(i))
      if (a >= k)
        return false;
    if ((i.op == Op::Param && i.param >= numConstants) ||
        (i.op == Op::Var && (loss ? i.var == Variable::Num : i.var != Variable::Num)))
      return false;
  }
  for (uint32_t o : p.outputs)
    if (o >= p.code.size())
      return false;
  return true;
}

std::optional<Program> readProgram(Reader &r) {
  Program p;
  p.code.resize(r.count(24));
  for (Instr &i : p.code) {
    uint32_t tag = r.u32();
    if ((tag & 0xff) >= uint32_t(kNumOps) || (tag >> 8 & 0xff) > 1 || (tag >> 16) > uint32_t(Variable::YTrue))
      return std::nullopt;
    i.op = Op(tag & 0xff);
    i.isBool = tag >> 8 & 1;
    i.var = Variable(tag >> 16);
    i.param = r.u32();
    i.number = r.f64();
    i.argBegin = r.u32();
    i.numArgs = r.u32();
  }
  p.args.resize(r.count(4));
  r.raw(p.args.data(), p.args.size() * 4);
  p.outputs.resize(r.count(4));
  r.raw(p.outputs.data(), p.outputs.size() * 4);
  if (!r.ok())
    return std::nullopt;
  return p;
}

} // namespace

std::string CompiledModel::formulaString(const FormulaGroup &g) {
  return g.formula.expr ? print(g.formula.expr, {g.formula.variable}) : g.printedFormula;
}
std::string CompiledModel::derivativeString(const FormulaGroup &g) {
  return g.derivative ? print(g.derivative, {g.formula.variable}) : g.printedDerivative;
}

namespace {
void writeSource(Writer &w, bool loss, const ModelOptions &options, size_t nodes) {
  w.u32(uint32_t(options.dtype) | uint32_t(options.layout) << 8 | uint32_t(options.bakeConstants) << 16 |
        uint32_t(options.strict) << 24);
  w.u32(loss);
  w.u64(nodes);
  w.u64(options.derivation.size());
  for (const std::string &step : options.derivation)
    w.str(step);
}
void writeNode(Writer &w, std::string_view formula, const std::map<std::string, double> &constants) {
  w.str(formula);
  w.u64(constants.size());
  for (const auto &[name, value] : constants) {
    w.str(name);
    w.f64(value);
  }
}
} // namespace

std::string CompiledModel::activationSource(const std::vector<NodeSpec> &nodes, const ModelOptions &options) {
  Writer w;
  writeSource(w, false, options, nodes.size());
  for (const NodeSpec &n : nodes)
    writeNode(w, n.formula, n.constants);
  return std::move(w.bytes);
}

std::string CompiledModel::lossSource(std::string_view formula, const std::map<std::string, double> &constants,
                                      const ModelOptions &options) {
  Writer w;
  writeSource(w, true, options, 1);
  writeNode(w, formula, constants);
  return std::move(w.bytes);
}

std::vector<char> CompiledModel::snapshot(const std::vector<std::string> &warnings) const {
  Writer w;
  w.raw(kMagic, 8);
  w.u32(isLoss);
  w.u64(groups.size());
  for (const FormulaGroup &g : groups) {
    const Formula &f = g.formula;
    w.str(f.text);
    w.str(f.variable);
    w.str(formulaString(g));
    w.str(derivativeString(g));
    w.u64(f.constants.size());
    for (const std::string &c : f.constants)
      w.str(c);
    w.u64(f.defaults.size());
    for (const auto &[name, value] : f.defaults) {
      w.str(name);
      w.f64(value);
    }
    w.u64(f.domains.size());
    for (const auto &[name, d] : f.domains) {
      w.str(name);
      w.f64(d.lower);
      w.u32(d.strict);
      w.str(d.builtin);
    }
    for (KernelKind k : tapeKinds())
      writeProgram(w, g.programs[size_t(k)]);
  }
  w.u64(nodeGroup.size());
  for (size_t n = 0; n < nodeGroup.size(); ++n) {
    w.u32(nodeGroup[n]);
    w.u64(offsets[n]);
  }
  w.u64(defaultParams.size());
  for (double v : defaultParams)
    w.f64(v);
  w.u64(warnings.size());
  for (const std::string &s : warnings)
    w.str(s);
  return std::vector<char>(w.bytes.begin(), w.bytes.end());
}

std::shared_ptr<const CompiledModel> CompiledModel::fromSnapshot(std::span<const char> bytes, const ModelOptions &options,
                                                                 size_t numNodes, std::vector<std::string> &warnings) {
  Reader r(bytes);
  char magic[8];
  r.raw(magic, 8);
  if (!r.ok() || std::memcmp(magic, kMagic, 8) != 0)
    return nullptr;
  auto m = std::make_shared<CompiledModel>();
  m->options = options;
  uint32_t loss = r.u32();
  if (loss > 1)
    return nullptr;
  m->isLoss = loss;
  size_t numGroups = r.count(64);
  for (size_t gi = 0; gi < numGroups; ++gi) {
    FormulaGroup &g = m->groups.emplace_back();
    Formula &f = g.formula;
    f.mode = loss ? FormulaMode::Loss : FormulaMode::Activation;
    f.text = r.str();
    f.variable = r.str();
    g.printedFormula = r.str();
    g.printedDerivative = r.str();
    f.constants.resize(r.count(8));
    for (std::string &c : f.constants)
      c = r.str();
    for (size_t i = 0, n = r.count(16); i < n; ++i) {
      std::string name = r.str();
      f.defaults[name] = r.f64();
    }
    for (size_t i = 0, n = r.count(28); i < n; ++i) {
      std::string name = r.str();
      ConstantDomain &d = f.domains[name];
      d.lower = r.f64();
      d.strict = r.u32() != 0;
      d.builtin = r.str();
    }
    for (KernelKind k : m->tapeKinds()) {
      std::optional<Program> p = readProgram(r);
      if (!p || !wellFormed(*p, f.constants.size(), loss))
        return nullptr;
      g.programs[size_t(k)] = std::move(*p);
    }
    if (!r.ok())
      return nullptr;
  }
  size_t nodes = r.count(12);
  if (nodes != numNodes || numGroups == 0 || (loss && numGroups != 1))
    return nullptr;
  for (size_t n = 0; n < nodes; ++n) {
    m->nodeGroup.push_back(r.u32());
    m->offsets.push_back(r.u64());
  }
  m->defaultParams.resize(r.count(8));
  for (double &v : m->defaultParams)
    v = r.f64();
  std::vector<std::string> said(r.count(8));
  for (std::string &s : said)
    s = r.str();
  if (!r.atEnd())
    return nullptr;
  // Node n's constants are params [offsets[n], offsets[n] + its formula's count).
  for (size_t n = 0; n < nodes; ++n) {
    if (m->nodeGroup[n] >= numGroups)
      return nullptr;
    uint64_t end = n + 1 < nodes ? m->offsets[n + 1] : m->defaultParams.size();
    if (m->offsets[n] > end || end - m->offsets[n] != m->groups[m->nodeGroup[n]].formula.constants.size())
      return nullptr;
  }
  if (m->offsets[0] != 0)
    return nullptr;
  m->planUnits();
  m->snapshotted = true;
  warnings.insert(warnings.end(), said.begin(), said.end());
  return m;
}

} // namespace hsnn::detail
