//===- lib/Expr/Traversal.h - The one walk over expression DAGs -*- C++ -*-===//
//
// Every pass over a DAG (simplify, differentiate, lower to a tape, the NaN
// analysis, collecting constants) walks it here: arguments before the nodes
// that use them, each node once, on an explicit stack. Derivative DAGs nest
// far deeper than the formulas they come from, and a pass that recursed per
// node could run out of stack on a worker thread; this one cannot.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Expr.h"

#include <span>
#include <unordered_map>
#include <vector>

namespace hsnn::detail {

struct DescendAll {
  bool operator()(Expr) const { return true; }
};

/// Gives every node reachable from `root` a value in `memo`: `visit(e)` runs
/// once per node, after each of its arguments has its value (read them from
/// `memo`), and may itself call postOrder on new nodes. Nodes already in
/// `memo` are not visited again, nor are their arguments. Where
/// `descend(e)` is false, `e` is visited without its arguments first.
/// Returns root's value.
template <class V, class Visit, class Descend = DescendAll>
V postOrder(std::unordered_map<Expr, V> &memo, Expr root, Visit &&visit, Descend &&descend = {}) {
  struct Frame {
    Expr e;
    size_t next;
  };
  std::vector<Frame> stack{{root, 0}};
  while (!stack.empty()) {
    Frame &f = stack.back();
    if (memo.count(f.e)) {
      stack.pop_back();
      continue;
    }
    if (f.next < f.e->numArgs() && (f.next > 0 || descend(f.e))) {
      Expr child = f.e->arg(f.next++);
      if (!memo.count(child))
        stack.push_back({child, 0}); // invalidates f: not used again this round
      continue;
    }
    Expr e = f.e;
    stack.pop_back();
    V value = visit(e); // may grow memo: no reference into it is held here
    memo.emplace(e, std::move(value));
  }
  return memo.at(root);
}

/// Calls `fn(e)` once for every node reachable from `roots`, arguments first.
template <class Fn> void forEachNode(std::span<const Expr> roots, Fn &&fn) {
  std::unordered_map<Expr, bool> seen;
  for (Expr r : roots)
    postOrder(seen, r, [&](Expr e) {
      fn(e);
      return true;
    });
}

} // namespace hsnn::detail
