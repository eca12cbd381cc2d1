//===- lib/Program/Program.cpp - Lowering the DAG to a tape ---------------===//
#include "Program.h"

#include "../Expr/OpTable.h"

#include <algorithm>
#include <bit>
#include <fmt/format.h>
#include <cassert>
#include <unordered_map>

namespace hsnn::detail {

Program Program::lower(std::span<const Expr> roots, std::span<const std::string> constants) {
  Program p;
  std::unordered_map<Expr, uint32_t> slotOf;
  // Iterative post-order: derivative DAGs can be deeper than the C++ stack likes.
  struct Frame {
    Expr e;
    size_t next;
  };
  for (Expr root : roots) {
    std::vector<Frame> stack{{root, 0}};
    while (!stack.empty()) {
      Frame &f = stack.back();
      if (slotOf.count(f.e)) {
        stack.pop_back();
        continue;
      }
      // A constant subexpression (sqrt(2*pi)) is one number, rounded once.
      if (f.next == 0 && f.e->isConstant() && !f.e->isBool() && !f.e->isNumber()) {
        Instr in;
        in.op = Op::Number;
        in.number = evalConstant(f.e);
        slotOf[f.e] = uint32_t(p.code.size());
        p.code.push_back(in);
        stack.pop_back();
        continue;
      }
      if (f.next < f.e->numArgs()) {
        Expr child = f.e->arg(f.next++);
        if (!slotOf.count(child))
          stack.push_back({child, 0});
        continue;
      }
      Instr in;
      in.op = f.e->op();
      in.isBool = f.e->isBool();
      switch (in.op) {
      case Op::Number:
        in.number = f.e->number();
        break;
      case Op::True:
      case Op::False:
        in.op = Op::Number;
        in.number = f.e->op() == Op::True;
        break;
      case Op::Var:
        in.var = f.e->variable();
        break;
      case Op::Param: {
        auto it = std::find(constants.begin(), constants.end(), f.e->paramName());
        assert(it != constants.end() && "constant missing from the node's list");
        in.param = uint32_t(it - constants.begin());
        break;
      }
      default:
        in.argBegin = uint32_t(p.args.size());
        in.numArgs = uint32_t(f.e->numArgs());
        for (Expr a : f.e->args())
          p.args.push_back(slotOf.at(a));
      }
      slotOf[f.e] = uint32_t(p.code.size());
      p.code.push_back(in);
      stack.pop_back();
    }
    p.outputs.push_back(slotOf.at(root));
  }
  return p;
}

std::string Program::fingerprint() const {
  std::string tape;
  for (const Instr &in : code) {
    tape += fmt::format("{}:{}:{}:{}:{:x}(", opInfo(in.op).name, int(in.isBool), int(in.var), in.param,
                        std::bit_cast<uint64_t>(in.number));
    for (uint32_t a : operands(in))
      tape += fmt::format("{},", a);
    tape += ");";
  }
  for (uint32_t o : outputs)
    tape += fmt::format("out{};", o);
  return tape;
}

Program Program::withConstants(const double *params) const {
  Program p = *this;
  for (Instr &in : p.code)
    if (in.op == Op::Param) {
      in.op = Op::Number;
      in.number = params[in.param];
    }
  return p;
}

} // namespace hsnn::detail
