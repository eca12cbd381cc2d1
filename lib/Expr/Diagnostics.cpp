//===- lib/Expr/Diagnostics.cpp - Rendering errors; binding constants -----===//
#include "hsnn/Formula.h"

#include "Names.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace hsnn {

namespace {

// "node 3" or "nodes 1, 9, 17, ... (32 nodes)": a few are listed whole, a
// long list by its first three and its count (Error::nodes has them all).
std::string nodeList(const std::vector<int> &nodes) {
  if (nodes.size() == 1)
    return fmt::format("node {}", nodes[0]);
  constexpr size_t kListed = 3, kWhole = 6;
  std::string out = "nodes ";
  for (size_t i = 0; i < nodes.size() && (nodes.size() <= kWhole || i < kListed); ++i)
    out += fmt::format("{}{}", i ? ", " : "", nodes[i]);
  if (nodes.size() > kWhole)
    out += ", ...";
  return out + fmt::format(" ({} nodes)", nodes.size());
}

std::string renderFor(const Diagnostic &d, const std::vector<int> &nodes) {
  std::string_view level = d.warning ? "warning" : "error";
  std::string out = nodes.empty() ? fmt::format("{}: {}", level, d.message)
                                  : fmt::format("{}: {}: {}", nodeList(nodes), level, d.message);
  const std::string &formula = d.formula;
  const size_t column = d.column, length = d.length;
  if (formula.empty())
    return out;
  // A long formula is shown as a window around the cause, elided with "...",
  // not echoed whole with a caret line as long as it.
  constexpr size_t kWindow = 100;
  size_t at = column > 0 ? column - 1 : 0, start = 0, len = std::min(length, kWindow);
  std::string shown = formula;
  if (formula.size() > kWindow) {
    start = at > kWindow / 2 ? std::min(at - kWindow / 2, formula.size() - kWindow) : 0;
    shown = (start ? "..." : "") + formula.substr(start, kWindow) + (start + kWindow < formula.size() ? "..." : "");
    len = std::min(len, start + kWindow - std::min(at, start + kWindow));
  }
  out += fmt::format("\n  {}", shown);
  if (column > 0) {
    size_t pad = at - start + (start ? 3 : 0);
    out += "\n  " + std::string(pad, ' ') + "^";
    if (len > 1)
      out += std::string(len - 1, '~');
  }
  return out;
}

bool sameButNode(const Diagnostic &a, const Diagnostic &b) {
  return a.warning == b.warning && a.column == b.column && a.length == b.length && a.message == b.message &&
         a.formula == b.formula;
}

} // namespace

std::string Diagnostic::render() const {
  return renderFor(*this, node >= 0 ? std::vector<int>{node} : std::vector<int>{});
}

std::string renderDiagnostics(const std::vector<Diagnostic> &diags) {
  // Blocks in the order of their first node; a layer has few distinct
  // failing formulas, so the linear search stays short.
  std::vector<std::pair<const Diagnostic *, std::vector<int>>> blocks;
  for (const Diagnostic &d : diags) {
    auto it = std::find_if(blocks.begin(), blocks.end(), [&](const auto &b) { return sameButNode(*b.first, d); });
    if (it == blocks.end() || d.node < 0)
      it = blocks.insert(blocks.end(), {&d, {}});
    if (d.node >= 0)
      it->second.push_back(d.node);
  }
  std::string out;
  for (const auto &[d, nodes] : blocks) {
    if (!out.empty())
      out += '\n';
    out += renderFor(*d, nodes);
  }
  return out;
}

Error toError(const std::vector<Diagnostic> &diags) {
  std::vector<int> nodes;
  for (const Diagnostic &d : diags)
    if (!d.warning && d.node >= 0 && std::find(nodes.begin(), nodes.end(), d.node) == nodes.end())
      nodes.push_back(d.node);
  return Error(ErrorCode::InvalidFormula, renderDiagnostics(diags)).withNodes(std::move(nodes));
}

std::variant<std::vector<double>, Diagnostic> bindConstants(const Formula &formula,
                                                           const std::map<std::string, double> &given, int node,
                                                           std::vector<Diagnostic> *unused) {
  auto diag = [&](size_t column, size_t length, std::string message) {
    Diagnostic d;
    d.node = node;
    d.column = column;
    d.length = length ? length : 1;
    d.message = std::move(message);
    d.formula = formula.text;
    return d;
  };
  auto column = [&](const std::string &name) {
    auto it = formula.firstUse.find(name);
    return it == formula.firstUse.end() ? size_t(0) : it->second;
  };
  auto needed = [&](const std::string &name) {
    return std::binary_search(formula.constants.begin(), formula.constants.end(), name);
  };

  for (const auto &[name, value] : given) {
    if (isReservedName(name))
      return diag(0, 0, fmt::format("'{}' is a reserved name and cannot be a constant", name));
    if (!needed(name)) {
      std::string near = detail::nearestName(name, formula.constants);
      Diagnostic d = diag(0, 0,
                          near.empty() ? fmt::format("constant '{}' is not used by the formula", name)
                                       : fmt::format("constant '{}' is not used by the formula; did you mean '{}'?", name, near));
      if (!unused)
        return d;
      unused->push_back(std::move(d));
      continue;
    }
    if (!std::isfinite(value))
      return diag(column(name), name.size(), fmt::format("constant '{}' is {}; constants must be finite", name, value));
    if (std::string why = checkConstantValue(formula, name, value); !why.empty())
      return diag(column(name), name.size(), why);
  }
  std::vector<double> values;
  for (const std::string &name : formula.constants) {
    if (auto it = given.find(name); it != given.end())
      values.push_back(it->second);
    else if (auto d = formula.defaults.find(name); d != formula.defaults.end())
      values.push_back(d->second);
    else
      return diag(column(name), name.size(), fmt::format("missing constant '{}': give it a value", name));
  }
  return values;
}

std::string checkConstantValue(const Formula &formula, const std::string &name, double value) {
  if (!std::isfinite(value))
    return fmt::format("constant '{}' must be finite, got {}", name, value);
  auto it = formula.domains.find(name);
  if (it == formula.domains.end())
    return "";
  const ConstantDomain &d = it->second;
  bool ok = d.strict ? value > d.lower : value >= d.lower;
  return ok ? "" : fmt::format("constant '{}' of {} must be {} {}, got {}", name, d.builtin, d.strict ? ">" : ">=", d.lower, value);
}

} // namespace hsnn
