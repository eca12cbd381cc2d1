//===- lib/Program/Interpreter.cpp - Block interpreter and layout loops ---===//
#include "Interpreter.h"

#include "../Expr/OpTable.h"

#include <algorithm>
#include <cstring>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

namespace hsnn::detail {

namespace {
// Below this many elements the work runs on the calling thread: scheduling
// would cost more than it saves.
constexpr size_t kSerialElements = 1 << 15;

template <class T> struct Scratch {
  std::vector<T> slots;
  std::vector<const T *> ptrs;
  std::vector<const T *> operands;
  std::vector<T> gather[3]; // batch-major columns: z, err, out0/out1 staging
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

template <class Body> void forBlocks(size_t tasks, size_t elementsPerTask, Body body) {
  if (tasks * elementsPerTask <= kSerialElements) {
    for (size_t t = 0; t < tasks; ++t)
      body(t);
    return;
  }
  size_t grain = std::max<size_t>(1, kSerialElements / 4 / std::max<size_t>(1, elementsPerTask));
  tbb::parallel_for(tbb::blocked_range<size_t>(0, tasks, grain), [&](const tbb::blocked_range<size_t> &r) {
    for (size_t t = r.begin(); t != r.end(); ++t)
      body(t);
  });
}

template <class T>
void interpretActivation(const ActivationPlan &plan, ActivationKernel kind, const T *z, const T *err, T *out0, T *out1,
                         size_t batch) {
  size_t nodes = plan.nodeProgram.size();
  if (nodes == 0 || batch == 0)
    return;

  // Runs node n over `len` contiguous inputs; results to o0/o1 (contiguous).
  auto runNode = [&](size_t n, const T *zIn, const T *errIn, T *o0, T *o1, size_t len) {
    const T *vars[3] = {zIn, nullptr, nullptr};
    const double *params = plan.params + plan.offsets[n];
    T *outs[2] = {o0, o1};
    runBlock<T>(*plan.nodeProgram[n], vars, params, outs, len);
    if (kind == ActivationKernel::Backward)
      for (size_t i = 0; i < len; ++i)
        o0[i] = errIn[i] * o0[i];
  };

  if (plan.layout == Layout::NodesMajor) {
    size_t perNode = (batch + kBlock - 1) / kBlock;
    forBlocks(nodes * perNode, std::min(batch, kBlock), [&](size_t t) {
      size_t n = t / perNode, b0 = (t % perNode) * kBlock, len = std::min(kBlock, batch - b0);
      size_t at = n * batch + b0;
      runNode(n, z + at, err ? err + at : nullptr, out0 + at, out1 ? out1 + at : nullptr, len);
    });
    return;
  }

  // Batch-major: a task takes a block of rows and walks the nodes, gathering
  // each column into a contiguous buffer (rows stay hot in cache).
  size_t rowBlocks = (batch + kBlock - 1) / kBlock;
  forBlocks(rowBlocks, std::min(batch, kBlock) * nodes, [&](size_t t) {
    size_t r0 = t * kBlock, len = std::min(kBlock, batch - r0);
    Scratch<T> &s = scratch<T>();
    for (auto &g : s.gather)
      g.resize(3 * kBlock);
    T *zc = s.gather[0].data(), *ec = s.gather[1].data(), *o0 = s.gather[2].data(), *o1 = o0 + kBlock;
    for (size_t n = 0; n < nodes; ++n) {
      for (size_t r = 0; r < len; ++r)
        zc[r] = z[(r0 + r) * nodes + n];
      if (err)
        for (size_t r = 0; r < len; ++r)
          ec[r] = err[(r0 + r) * nodes + n];
      runNode(n, zc, ec, o0, o1, len);
      for (size_t r = 0; r < len; ++r)
        out0[(r0 + r) * nodes + n] = o0[r];
      if (out1)
        for (size_t r = 0; r < len; ++r)
          out1[(r0 + r) * nodes + n] = o1[r];
    }
  });
}

template <class T>
double interpretLoss(const Program &p, LossKernel kind, const double *params, const T *yPred, const T *yTrue, T *out,
                     T scale, size_t n) {
  size_t blocks = (n + kBlock - 1) / kBlock;
  // One block: evaluate, post-process, and return its sum of losses.
  auto block = [&](size_t b) -> double {
    size_t i0 = b * kBlock, len = std::min(kBlock, n - i0);
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
  };
  if (n <= kSerialElements) {
    double total = 0;
    for (size_t b = 0; b < blocks; ++b)
      total += block(b);
    return total;
  }
  // Deterministic: the split depends only on the grain, never on timing, so
  // the same input sums in the same order on every run.
  return tbb::parallel_deterministic_reduce(
      tbb::blocked_range<size_t>(0, blocks, 8), 0.0,
      [&](const tbb::blocked_range<size_t> &r, double acc) {
        for (size_t b = r.begin(); b != r.end(); ++b)
          acc += block(b);
        return acc;
      },
      [](double a, double b) { return a + b; });
}

#define INSTANTIATE(T)                                                                                       \
  template void runBlock<T>(const Program &, const T *const[3], const double *, T *const *, size_t);          \
  template void interpretActivation<T>(const ActivationPlan &, ActivationKernel, const T *, const T *, T *, T *, size_t); \
  template double interpretLoss<T>(const Program &, LossKernel, const double *, const T *, const T *, T *, T, size_t);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

} // namespace hsnn::detail
