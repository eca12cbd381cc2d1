//===- lib/Program/Interpreter.cpp - Block interpreter and layout loops ---===//
#include "Interpreter.h"

#include "Launch.h"

#include "../Expr/OpTable.h"

#include <algorithm>
#include <cstring>

namespace hsnn::detail {

namespace {
template <class T> struct Scratch {
  std::vector<T> slots;
  std::vector<const T *> ptrs;
  std::vector<const T *> operands;
};
template <class T> Scratch<T> &scratch() {
  thread_local Scratch<T> s;
  return s;
}
} // namespace

template <class T> void runBlock(const Program &p, const T *const vars[3], const double *params, T *const *outs, size_t n) {
  Scratch<T> &s = scratch<T>();
  size_t slots = p.code.size();
  if (s.slots.size() < slots * kBlock)
    s.slots.resize(slots * kBlock);
  s.ptrs.resize(slots);
  for (size_t i = 0; i < slots; ++i) {
    const Instr &in = p.code[i];
    T *dst = s.slots.data() + i * kBlock;
    switch (in.op) {
    case Op::Var:
      s.ptrs[i] = vars[size_t(in.var)];
      continue;
    case Op::Number:
      std::fill_n(dst, n, T(in.number));
      break;
    case Op::Param:
      std::fill_n(dst, n, T(params[in.param]));
      break;
    default: {
      auto ops = p.operands(in);
      s.operands.resize(ops.size());
      for (size_t k = 0; k < ops.size(); ++k)
        s.operands[k] = s.ptrs[ops[k]];
      blockEval<T>(in.op)(dst, s.operands.data(), unsigned(ops.size()), n);
    }
    }
    s.ptrs[i] = dst;
  }
  for (size_t k = 0; k < p.outputs.size(); ++k)
    std::memmove(outs[k], s.ptrs[p.outputs[k]], n * sizeof(T));
}

template <class T>
void interpretActivation(const ActivationPlan &plan, ActivationKernel kind, const T *z, const T *err, T *out0, T *out1,
                         size_t batch) {
  launchActivation<T>(plan.layout, plan.nodeProgram.size(), batch, z, err, out0, out1, kBlock,
                      [&](size_t n, const T *zIn, const T *errIn, T *o0, T *o1, size_t len) {
                        const T *vars[3] = {zIn, nullptr, nullptr};
                        T *outs[2] = {o0, o1};
                        runBlock<T>(*plan.nodeProgram[n], vars, plan.params + plan.offsets[n], outs, len);
                        if (kind == ActivationKernel::Backward)
                          for (size_t i = 0; i < len; ++i)
                            o0[i] = errIn[i] * o0[i];
                      });
}

template <class T>
double interpretLoss(const Program &p, LossKernel kind, const double *params, const T *yPred, const T *yTrue, T *out,
                     T scale, size_t n) {
  return launchLoss(n, kBlock, [&](size_t i0, size_t len) -> double {
    const T *vars[3] = {nullptr, yPred + i0, yTrue + i0};
    T buf[2][kBlock];
    T *outs[2] = {buf[0], buf[1]};
    if (kind == LossKernel::Elements)
      outs[0] = out + i0;
    runBlock<T>(p, vars, params, outs, len);
    double sum = 0;
    if (kind == LossKernel::Reduce || kind == LossKernel::Fused)
      for (size_t i = 0; i < len; ++i)
        sum += double(buf[0][i]);
    if (kind == LossKernel::Gradient || kind == LossKernel::Fused) {
      const T *g = kind == LossKernel::Fused ? buf[1] : buf[0];
      for (size_t i = 0; i < len; ++i)
        out[i0 + i] = g[i] * scale;
    }
    return sum;
  });
}

#define INSTANTIATE(T)                                                                                       \
  template void runBlock<T>(const Program &, const T *const[3], const double *, T *const *, size_t);          \
  template void interpretActivation<T>(const ActivationPlan &, ActivationKernel, const T *, const T *, T *, T *, size_t); \
  template double interpretLoss<T>(const Program &, LossKernel, const double *, const T *, const T *, T *, T, size_t);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

} // namespace hsnn::detail
