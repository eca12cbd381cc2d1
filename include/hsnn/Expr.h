//===- hsnn/Expr.h - Immutable, hash-consed expression DAG ------*- C++ -*-===//
//
// Expressions are DAGs of Nodes owned by an ExprContext. Building the same
// expression twice in one context yields the same Node, so f and f' share their
// common subexpressions and equality is pointer equality. Nodes are immutable
// and live as long as their context; a context may be used from many threads.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hsnn {

/// Operation of a node; the list lives in hsnn/Ops.def.
enum class Op : uint8_t {
#define HSNN_OP(Id, Spelling, Arity, Syntax, Result, Libm) Id,
#include "hsnn/Ops.def"
};

/// How an op is written; drives both the parser and the printer.
enum class OpSyntax : uint8_t { Leaf, Infix, Prefix, Call, Compare, Logic };

/// The static facts about an op (the rest of its table row, derivative and
/// evaluation, lives in lib/Expr/OpTable.cpp).
struct OpInfo {
  std::string_view name;     ///< Enumerator name, e.g. "Sin".
  std::string_view spelling; ///< Printed form: "+", "sin", "Piecewise".
  int arity;                 ///< -1 for Piecewise.
  OpSyntax syntax;
  bool isBool;               ///< Result is a truth value (conditions only).
  std::string_view libm;     ///< C function for doubles ("" if none).
};

const OpInfo &opInfo(Op op);
inline constexpr int kNumOps = 0
#define HSNN_OP(Id, Spelling, Arity, Syntax, Result, Libm) +1
#include "hsnn/Ops.def"
    ;

/// The independent variables. Activation formulas use Num; losses use YPred
/// and YTrue and are differentiated with respect to YPred.
enum class Variable : uint8_t { Num, YPred, YTrue };
std::string_view variableName(Variable v);

/// One immutable node. Compare nodes of one context by pointer.
class Node {
public:
  Op op() const { return op_; }
  std::span<const Node *const> args() const { return args_; }
  const Node *arg(size_t i) const { return args_[i]; }
  size_t numArgs() const { return args_.size(); }

  /// Value of an Op::Number node (always finite).
  double number() const { return number_; }
  /// Which variable an Op::Var node is.
  Variable variable() const { return variable_; }
  /// Name of an Op::Param node (a user constant).
  const std::string &paramName() const { return name_; }

  /// Structural hash: equal for equal structure in any context and any run,
  /// so it can order operands canonically and key caches.
  uint64_t hash() const { return hash_; }
  /// Longest path to a leaf (a leaf has depth 1).
  uint32_t depth() const { return depth_; }
  bool isBool() const { return opInfo(op_).isBool; }
  bool isNumber() const { return op_ == Op::Number; }
  bool isNumber(double v) const { return op_ == Op::Number && number_ == v; }
  /// No variable and no constant below: a number or an exact constant
  /// such as pi or sqrt(2), folded when kernels are generated.
  bool isConstant() const { return flags_ & kConstant; }
  /// Finite and bounded for every finite input (sin(x), tanh(x)*cos(x)):
  /// what lets the simplifier cancel such terms without hiding a NaN.
  bool isBounded() const { return flags_ & kBounded; }

private:
  friend class ExprContext;
  static constexpr uint8_t kConstant = 1, kBounded = 2;
  Op op_ = Op::Number;
  Variable variable_ = Variable::Num;
  uint8_t flags_ = 0;
  uint32_t depth_ = 1;
  uint64_t hash_ = 0;
  double number_ = 0;
  std::string name_;
  std::vector<const Node *> args_;
};

/// A handle to a node; null only where documented.
using Expr = const Node *;

/// Owns nodes and interns them. Thread-safe: any number of threads may build
/// expressions in one context at once.
///
/// The builders apply only folds that are exact under IEEE 754 for every
/// input, including NaN, infinities and signed zeros: constant folding when
/// the result is finite (arithmetic always; a function of numbers only when
/// the result is an integer, so sqrt(2) and log(2) stay exact; a quotient
/// of integers that does not divide exactly stays a reduced rational, and
/// arithmetic on rationals is exact: 1/3 - 1 is -2/3), x*1, x/1, x-0, x**1, -(-x), -1*x -> -x, x + x ->
/// 2*x, x**2 -> x*x, and a canonical operand order for Max/Min (numbers
/// first, then by structure).
/// They never fold x*0 or x-x.
class ExprContext {
public:
  ExprContext();
  ~ExprContext();
  ExprContext(const ExprContext &) = delete;
  ExprContext &operator=(const ExprContext &) = delete;

  /// A finite number (asserts on NaN/inf: callers validate first).
  Expr number(double value);
  Expr variable(Variable v);
  Expr param(std::string_view name);
  Expr boolean(bool value);
  /// An exact constant leaf: Op::Pi or Op::E.
  Expr constant(Op op);
  /// Any other op. Arity and operand kinds (numeric vs. condition) must be
  /// right; the parser checks them and reports errors before calling this.
  Expr make(Op op, std::span<const Expr> args);
  Expr make(Op op, std::initializer_list<Expr> args) { return make(op, std::span<const Expr>(args.begin(), args.size())); }

  Expr add(Expr a, Expr b) { return make(Op::Add, {a, b}); }
  Expr sub(Expr a, Expr b) { return make(Op::Sub, {a, b}); }
  Expr mul(Expr a, Expr b) { return make(Op::Mul, {a, b}); }
  Expr div(Expr a, Expr b) { return make(Op::Div, {a, b}); }
  Expr pow(Expr a, Expr b) { return make(Op::Pow, {a, b}); }
  Expr neg(Expr a) { return make(Op::Neg, {a}); }
  Expr call(Op op, Expr a) { return make(op, {a}); }

  /// Number of distinct nodes built so far.
  size_t size() const;

private:
  Expr intern(Node &&candidate);
  /// num/den for integers below 2^53, reduced: a number when exact, else
  /// the quotient node (1/3 stays exact until code generation).
  Expr rational(double num, double den);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Total, deterministic order on nodes by structure (not by address).
/// Returns <0, 0 or >0.
int compareStructure(Expr a, Expr b);

} // namespace hsnn
