//===- lib/Program/Interpreter.cpp - Block interpreter and layout loops ---===//
#include "Interpreter.h"

#include <cmath>

#include "Launch.h"

#include "Expr/OpTable.h"

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
  // An output that is an input itself (f' = num) is copied out of the input
  // first: another output may be written over that input (in place).
  for (uint32_t o : p.outputs)
    if (p.code[o].op == Op::Var && s.ptrs[o] != s.slots.data() + o * kBlock) {
      std::memmove(s.slots.data() + o * kBlock, s.ptrs[o], n * sizeof(T));
      s.ptrs[o] = s.slots.data() + o * kBlock;
    }
  for (size_t k = 0; k < p.outputs.size(); ++k)
    std::memmove(outs[k], s.ptrs[p.outputs[k]], n * sizeof(T));
}

template <class T>
void interpretActivation(const ActivationPlan &plan, KernelKind kind, const T *z, const T *err, T *out0, T *out1,
                         size_t batch) {
  launchActivation<T>(plan.layout, plan.nodeProgram.size(), batch, z, err, out0, out1, kBlock,
                      [&](size_t n, const T *zIn, const T *errIn, T *o0, T *o1, size_t len) {
                        const T *vars[3] = {zIn, nullptr, nullptr};
                        if (kind != KernelKind::Backward) {
                          T *outs[2] = {o0, o1};
                          runBlock<T>(*plan.nodeProgram[n], vars, plan.params + plan.offsets[n], outs, len);
                          return;
                        }
                        // f' goes to a buffer first: delta may be err itself (in place).
                        T dfdz[kBlock];
                        for (size_t i0 = 0; i0 < len; i0 += kBlock) {
                          size_t m = std::min(kBlock, len - i0);
                          const T *v[3] = {zIn + i0, nullptr, nullptr};
                          T *outs[1] = {dfdz};
                          runBlock<T>(*plan.nodeProgram[n], v, plan.params + plan.offsets[n], outs, m);
                          for (size_t i = 0; i < m; ++i)
                            o0[i0 + i] = errIn[i0 + i] * dfdz[i];
                        }
                      });
}

template <class T>
double interpretLoss(const Program &p, KernelKind kind, const double *params, const T *yPred, const T *yTrue, T *out,
                     T scale, size_t n) {
  return launchLoss(n, kBlock, [&](size_t i0, size_t len) -> SumParts {
    const T *vars[3] = {nullptr, yPred + i0, yTrue + i0};
    T buf[2][kBlock];
    T *outs[2] = {buf[0], buf[1]};
    if (kind == KernelKind::LossElements)
      outs[0] = out + i0;
    runBlock<T>(p, vars, params, outs, len);
    // Compensated (Neumaier) like the compiled kernels, so f64 sums stay
    // within a few ulp of the exact sum whatever their length.
    CompensatedSum sum;
    if (kind == KernelKind::LossSum || kind == KernelKind::LossFused)
      for (size_t i = 0; i < len; ++i)
        sum.add(double(buf[0][i]));
    if (kind == KernelKind::LossGradient || kind == KernelKind::LossFused) {
      const T *g = kind == KernelKind::LossFused ? buf[1] : buf[0];
      for (size_t i = 0; i < len; ++i)
        out[i0 + i] = g[i] * scale;
    }
    return sum.parts();
  });
}

template <class T>
void interpretConstantGradient(const ActivationPlan &plan, const T *z, const T *err, double *grads, size_t batch) {
  size_t nodes = plan.nodeProgram.size();
  // One task per node: each sum runs over its elements in order, so the
  // result does not depend on the thread count.
  forBlocks(nodes, batch, [&](size_t n) {
    const Program &p = *plan.nodeProgram[n];
    size_t k = p.outputs.size();
    if (k == 0)
      return;
    std::vector<CompensatedSum> sums(k);
    std::vector<T> zb(kBlock), eb(kBlock), out(k * kBlock);
    std::vector<T *> outs(k);
    for (size_t j = 0; j < k; ++j)
      outs[j] = out.data() + j * kBlock;
    for (size_t b0 = 0; b0 < batch; b0 += kBlock) {
      size_t len = std::min(kBlock, batch - b0);
      for (size_t i = 0; i < len; ++i) {
        size_t at = plan.layout == Layout::NodesMajor ? n * batch + b0 + i : (b0 + i) * nodes + n;
        zb[i] = z[at];
        eb[i] = err[at];
      }
      const T *vars[3] = {zb.data(), nullptr, nullptr};
      runBlock<T>(p, vars, plan.params + plan.offsets[n], outs.data(), len);
      for (size_t j = 0; j < k; ++j)
        for (size_t i = 0; i < len; ++i)
          sums[j].add(double(eb[i]) * double(outs[j][i]));
    }
    for (size_t j = 0; j < k; ++j)
      grads[plan.offsets[n] + j] = sums[j].value();
  });
}

template <class T>
void interpretLossConstantGradient(const Program &p, const double *params, const T *yPred, const T *yTrue,
                                   double scale, size_t n, double *grads) {
  size_t k = p.outputs.size();
  std::vector<CompensatedSum> sums(k);
  std::vector<T> out(k * kBlock);
  std::vector<T *> outs(k);
  for (size_t j = 0; j < k; ++j)
    outs[j] = out.data() + j * kBlock;
  for (size_t i0 = 0; i0 < n; i0 += kBlock) {
    size_t len = std::min(kBlock, n - i0);
    const T *vars[3] = {nullptr, yPred + i0, yTrue + i0};
    runBlock<T>(p, vars, params, outs.data(), len);
    for (size_t j = 0; j < k; ++j)
      for (size_t i = 0; i < len; ++i)
        sums[j].add(double(outs[j][i]));
  }
  for (size_t j = 0; j < k; ++j)
    grads[j] = scale * sums[j].value();
}

#define INSTANTIATE(T)                                                                                       \
  template void runBlock<T>(const Program &, const T *const[3], const double *, T *const *, size_t);          \
  template void interpretActivation<T>(const ActivationPlan &, KernelKind, const T *, const T *, T *, T *, size_t); \
  template double interpretLoss<T>(const Program &, KernelKind, const double *, const T *, const T *, T *, T, size_t); \
  template void interpretConstantGradient<T>(const ActivationPlan &, const T *, const T *, double *, size_t);        \
  template void interpretLossConstantGradient<T>(const Program &, const double *, const T *, const T *, double,       \
                                                 size_t, double *);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

} // namespace hsnn::detail
