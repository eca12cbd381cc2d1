//===- lib/Program/Program.cpp - Lowering the DAG to a tape ---------------===//
#include "Program.h"

#include "Expr/OpTable.h"
#include "Expr/Traversal.h"

#include <algorithm>
#include <bit>
#include <fmt/format.h>
#include <cassert>
#include <functional>
#include <unordered_map>

namespace hsnn::detail {

Program Program::lower(std::span<const Expr> roots, std::span<const std::string> constants) {
  Program p;
  std::unordered_map<Expr, uint32_t> slotOf;
  // A constant subexpression (sqrt(2*pi)) is one number, rounded once: its
  // arguments get no slots.
  auto folds = [](Expr e) { return e->isConstant() && !e->isBool() && !e->isNumber(); };
  auto setOperands = [&](Instr &in, std::initializer_list<uint32_t> slots) {
    in.argBegin = uint32_t(p.args.size());
    in.numArgs = uint32_t(slots.size());
    p.args.insert(p.args.end(), slots);
  };
  auto descend = [&](Expr e) { return !folds(e) && e->op() != Op::Partials; };
  std::function<uint32_t(Expr)> emit = [&](Expr e) -> uint32_t {
    // A Partials node is its value; its partials are for the differentiator.
    if (e->op() == Op::Partials)
      return postOrder(slotOf, e->arg(0), emit, descend);
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
      case Op::Pow:
        // u**3 as (u*u)*u and u**4 as (u*u)*(u*u): within 1 and 2 ulp of the
        // true power in float (checked over every 7th normal float), where
        // pow is within 1 but a libm call (the tanh form of gelu has a cube).
        if (e->arg(1)->isNumber(3) || e->arg(1)->isNumber(4)) {
          uint32_t u = slotOf.at(e->arg(0));
          Instr square;
          square.op = Op::Mul;
          setOperands(square, {u, u});
          p.code.push_back(square);
          uint32_t sq = uint32_t(p.code.size() - 1);
          in.op = Op::Mul;
          setOperands(in, {sq, e->arg(1)->isNumber(3) ? u : sq});
          break;
        }
        setOperands(in, {slotOf.at(e->arg(0)), slotOf.at(e->arg(1))});
        break;
      case Op::Div:
        // x/sqrt(2) as x*(1/sqrt(2)): the divisor is a rounded constant, so
        // its reciprocal rounded once is as close to the true quotient, and
        // a vector multiply costs a tenth of a divide (gelu has two).
        if (folds(e->arg(1))) {
          Instr recip;
          recip.op = Op::Number;
          recip.number = evalReciprocal(e->arg(1));
          p.code.push_back(recip);
          in.op = Op::Mul;
          setOperands(in, {slotOf.at(e->arg(0)), uint32_t(p.code.size() - 1)});
          break;
        }
        [[fallthrough]];
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
    p.outputs.push_back(postOrder(slotOf, root, emit, descend));
  return p;
}

std::string Program::fingerprint() const {
  // Hashed, never read: the op's name, then its fields as raw bytes (the
  // formatted text this was cost a noticeable share of a cache hit).
  std::string tape;
  auto raw = [&](const auto &v) { tape.append(reinterpret_cast<const char *>(&v), sizeof v); };
  for (const Instr &in : code) {
    tape += opInfo(in.op).name;
    raw(uint8_t(in.isBool)), raw(uint8_t(in.var)), raw(in.param), raw(std::bit_cast<uint64_t>(in.number));
    raw(uint32_t(operands(in).size()));
    for (uint32_t a : operands(in))
      raw(a);
  }
  tape += "outputs";
  for (uint32_t o : outputs)
    raw(o);
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
