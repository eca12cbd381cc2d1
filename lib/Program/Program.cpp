//===- lib/Program/Program.cpp - Lowering the DAG to a tape ---------------===//
#include "Program.h"

#include "../Expr/OpTable.h"
#include "../Expr/Traversal.h"

#include <algorithm>
#include <bit>
#include <fmt/format.h>
#include <cassert>
#include <unordered_map>

namespace hsnn::detail {

Program Program::lower(std::span<const Expr> roots, std::span<const std::string> constants) {
  Program p;
  std::unordered_map<Expr, uint32_t> slotOf;
  // A constant subexpression (sqrt(2*pi)) is one number, rounded once: its
  // arguments get no slots.
  auto folds = [](Expr e) { return e->isConstant() && !e->isBool() && !e->isNumber(); };
  auto emit = [&](Expr e) {
    Instr in;
    // Kernels run a Guarded as the Piecewise it is (Ops.def).
    in.op = e->op() == Op::Guarded ? Op::Piecewise : e->op();
    in.isBool = e->isBool();
    if (folds(e)) {
      in.op = Op::Number;
      in.number = evalConstant(e);
    } else {
      switch (in.op) {
      case Op::Number:
        in.number = e->number();
        break;
      case Op::True:
      case Op::False:
        in.op = Op::Number;
        in.number = e->op() == Op::True;
        break;
      case Op::Var:
        in.var = e->variable();
        break;
      case Op::Param: {
        auto it = std::find(constants.begin(), constants.end(), e->paramName());
        assert(it != constants.end() && "constant missing from the node's list");
        in.param = uint32_t(it - constants.begin());
        break;
      }
      default:
        in.argBegin = uint32_t(p.args.size());
        in.numArgs = uint32_t(e->numArgs());
        for (Expr a : e->args())
          p.args.push_back(slotOf.at(a));
      }
    }
    p.code.push_back(in);
    return uint32_t(p.code.size() - 1);
  };
  for (Expr root : roots)
    p.outputs.push_back(postOrder(slotOf, root, emit, [&](Expr e) { return !folds(e); }));
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
