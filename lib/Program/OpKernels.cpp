//===- lib/Program/OpKernels.cpp - The op kernels' tapes and the installed table ===//
#include "OpKernels.h"

#include <atomic>
#include <vector>

namespace hsnn::detail {

Program opKernelTape(Op op, OpOperands how, int power) {
  Program p;
  auto leaf = [&](Instr in) {
    p.code.push_back(in);
    return uint32_t(p.code.size() - 1);
  };
  Instr z{.op = Op::Var, .var = Variable::Num}, c{.op = Op::Param, .param = 0};
  std::vector<uint32_t> operands;
  switch (how) {
  case OpOperands::Power:
    operands = {leaf(z), leaf({.op = Op::Number, .number = double(power)})};
    break;
  case OpOperands::VectorScalar:
    operands = {leaf(z), leaf(c)};
    break;
  case OpOperands::ScalarVector:
    operands = {leaf(c), leaf(z)};
    break;
  case OpOperands::Arrays:
    if (opInfo(op).arity == 1)
      operands = {leaf(z)};
    else
      operands = {leaf({.op = Op::Var, .var = Variable::YPred}), leaf({.op = Op::Var, .var = Variable::YTrue})};
  }
  Instr in{.op = op, .isBool = opInfo(op).isBool, .argBegin = uint32_t(p.args.size()),
           .numArgs = uint32_t(operands.size())};
  p.args.insert(p.args.end(), operands.begin(), operands.end());
  p.code.push_back(in);
  p.outputs = {uint32_t(p.code.size() - 1)};
  return p;
}

namespace {
template <class T> std::atomic<const OpKernels<T> *> installed{nullptr};
} // namespace

template <class T> const OpKernels<T> *installedOpKernels() { return installed<T>.load(std::memory_order_acquire); }
template <class T> void installOpKernels(const OpKernels<T> *kernels) {
  const OpKernels<T> *none = nullptr;
  installed<T>.compare_exchange_strong(none, kernels, std::memory_order_acq_rel);
}
template const OpKernels<float> *installedOpKernels<float>();
template const OpKernels<double> *installedOpKernels<double>();
template void installOpKernels<float>(const OpKernels<float> *);
template void installOpKernels<double>(const OpKernels<double> *);

} // namespace hsnn::detail
