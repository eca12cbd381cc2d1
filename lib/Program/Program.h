//===- lib/Program/Program.h - Formulas lowered to a linear tape -*- C++ -*-===//
//
// A Program is the straight-line form of one or more expressions sharing
// common subexpressions: instruction i computes slot i from earlier slots.
// The interpreter runs it over blocks of elements; the LLVM emitter walks
// the same tape.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Expr.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hsnn::detail {

struct Instr {
  Op op;
  bool isBool = false;          ///< A truth value (conditions); 1/0 in the interpreter
  Variable var = Variable::Num; ///< Op::Var
  uint32_t param = 0;           ///< Op::Param: index into the node's constants
  double number = 0;            ///< Op::Number
  uint32_t argBegin = 0;        ///< Operand slots: args[argBegin, argBegin + numArgs)
  uint32_t numArgs = 0;
};

struct Program {
  std::vector<Instr> code;
  std::vector<uint32_t> args;
  std::vector<uint32_t> outputs; ///< Slot of each root, in order.

  std::span<const uint32_t> operands(const Instr &i) const { return {args.data() + i.argBegin, i.numArgs}; }

  /// Lowers `roots` (sharing subexpressions). `constants` lists the names
  /// the Param nodes index into (a node's sorted constants).
  static Program lower(std::span<const Expr> roots, std::span<const std::string> constants);

  /// A copy with every constant replaced by its value (params[index]), for
  /// kernels that bake constants in as literals.
  Program withConstants(const double *params) const;
  /// Text that identifies the tape exactly (ops, operands, numbers' bits,
  /// outputs): what cache keys hash.
  std::string fingerprint() const;
};

} // namespace hsnn::detail
