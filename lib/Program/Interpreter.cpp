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
  std::vector<T> buffers;
  std::vector<double> scalars;
};
template <class T> Scratch<T> &scratch() {
  thread_local Scratch<T> s;
  return s;
}

// Runs `c` over n <= kBlock elements; outs[k] receives output k.
template <class T>
void runCodeBlock(const BlockCode &c, const OpKernels<T> *kernels, const T *const vars[3], const double *params,
                  T *const *outs, size_t n) {
  Scratch<T> &s = scratch<T>();
  // One more buffer per output: an output that is an input itself (f' =
  // num) is copied out of the input first, since another output may be
  // written over that input (in place).
  size_t need = (c.bufferCount() + c.outputs.size()) * kBlock;
  if (s.buffers.size() < need)
    s.buffers.resize(need);
  s.scalars.resize(c.scalars.size());
  scalarValues(c, params, s.scalars.data());
  runCode<T>(c, kernels, vars, s.scalars.data(), s.buffers.data(), n);
  for (size_t k = 0; k < c.outputs.size(); ++k)
    if (c.outputs[k].kind == ValueRef::Variable)
      std::memcpy(s.buffers.data() + (c.bufferCount() + k) * kBlock, vars[c.outputs[k].index], n * sizeof(T));
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    const T *from = c.outputs[k].kind == ValueRef::Variable ? s.buffers.data() + (c.bufferCount() + k) * kBlock
                                                             : valuePointer<T>(c.outputs[k], vars, s.buffers.data());
    std::memmove(outs[k], from, n * sizeof(T));
  }
}
} // namespace

template <class T> void runBlock(const Program &p, const T *const vars[3], const double *params, T *const *outs, size_t n) {
  runCodeBlock<T>(BlockCode::from(p), nullptr, vars, params, outs, n);
}

template <class T>
void interpretActivation(const ActivationPlan &plan, KernelKind kind, const T *z, const T *err, T *out0, T *out1,
                         size_t batch) {
  launchActivation<T>(plan.layout, plan.nodeCode.size(), batch, z, err, out0, out1, kBlock,
                      [&](size_t n, const T *zIn, const T *errIn, T *o0, T *o1, size_t len) {
                        if (kind != KernelKind::Backward) { // runs of at most kBlock elements
                          const T *v[3] = {zIn, nullptr, nullptr};
                          T *outs[2] = {o0, o1};
                          runCodeBlock<T>(*plan.nodeCode[n], plan.kernels<T>(), v, plan.params + plan.offsets[n], outs,
                                          len);
                          return;
                        }
                        // f' goes to a buffer first: delta may be err itself (in place).
                        T dfdz[kBlock];
                        for (size_t i0 = 0; i0 < len; i0 += kBlock) {
                          size_t m = std::min(kBlock, len - i0);
                          const T *v[3] = {zIn + i0, nullptr, nullptr};
                          T *outs[1] = {dfdz};
                          runCodeBlock<T>(*plan.nodeCode[n], plan.kernels<T>(), v, plan.params + plan.offsets[n],
                                          outs, m);
                          for (size_t i = 0; i < m; ++i)
                            o0[i0 + i] = errIn[i0 + i] * dfdz[i];
                        }
                      });
}

template <class T>
double interpretLoss(const ActivationPlan &plan, KernelKind kind, const T *yPred, const T *yTrue, T *out, T scale,
                     size_t n) {
  return launchLoss(n, kBlock, [&](size_t i0, size_t len) -> SumParts {
    const T *vars[3] = {nullptr, yPred + i0, yTrue + i0};
    T buf[2][kBlock];
    T *outs[2] = {buf[0], buf[1]};
    if (kind == KernelKind::LossElements)
      outs[0] = out + i0;
    runCodeBlock<T>(*plan.nodeCode[0], plan.kernels<T>(), vars, plan.params, outs, len);
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
  size_t nodes = plan.nodeCode.size();
  // One task per node: each sum runs over its elements in order, so the
  // result does not depend on the thread count.
  forBlocks(nodes, batch, [&](size_t n) {
    const BlockCode &c = *plan.nodeCode[n];
    size_t k = c.outputs.size();
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
      runCodeBlock<T>(c, plan.kernels<T>(), vars, plan.params + plan.offsets[n], outs.data(), len);
      for (size_t j = 0; j < k; ++j)
        for (size_t i = 0; i < len; ++i)
          sums[j].add(double(eb[i]) * double(outs[j][i]));
    }
    for (size_t j = 0; j < k; ++j)
      grads[plan.offsets[n] + j] = sums[j].value();
  });
}

template <class T>
void interpretLossConstantGradient(const ActivationPlan &plan, const T *yPred, const T *yTrue, double scale, size_t n,
                                   double *grads) {
  const BlockCode &c = *plan.nodeCode[0];
  size_t k = c.outputs.size();
  std::vector<CompensatedSum> sums(k);
  std::vector<T> out(k * kBlock);
  std::vector<T *> outs(k);
  for (size_t j = 0; j < k; ++j)
    outs[j] = out.data() + j * kBlock;
  for (size_t i0 = 0; i0 < n; i0 += kBlock) {
    size_t len = std::min(kBlock, n - i0);
    const T *vars[3] = {nullptr, yPred + i0, yTrue + i0};
    runCodeBlock<T>(c, plan.kernels<T>(), vars, plan.params, outs.data(), len);
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
  template double interpretLoss<T>(const ActivationPlan &, KernelKind, const T *, const T *, T *, T, size_t);       \
  template void interpretConstantGradient<T>(const ActivationPlan &, const T *, const T *, double *, size_t);        \
  template void interpretLossConstantGradient<T>(const ActivationPlan &, const T *, const T *, double, size_t,        \
                                                 double *);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

} // namespace hsnn::detail
