//===- lib/Program/Interpreter.h - Running tapes over arrays ----*- C++ -*-===//
//
// The fallback engine and the oracle for every compiled path. Each
// instruction runs over a block of elements at a time (BlockCode.h: the
// JIT's op kernels where they are installed, else the op table's block
// evaluator), never a tree walk per element; blocks are spread over threads
// with TBB.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "BlockCode.h"
#include "KernelKind.h"
#include "Program.h"

#include "hsnn/Layer.h"

#include <type_traits>

namespace hsnn::detail {

/// Runs `p` over n <= kBlock elements on the op table's evaluation (the
/// oracle). `vars[v]` points at the n values of variable v (unused ones may
/// be null); `params` at the node's constants; `outs[k]` receives root k.
template <class T> void runBlock(const Program &p, const T *const vars[3], const double *params, T *const *outs, size_t n);

/// What the interpreter runs: each node's code (for one kernel kind), the
/// layer's constants, and the op kernels it was made with (null: the op
/// table's; an engine keeps one choice for its life, so its bits never
/// change between calls).
struct ActivationPlan {
  std::vector<const BlockCode *> nodeCode;
  const double *params = nullptr;
  const uint64_t *offsets = nullptr;
  Layout layout = Layout::NodesMajor;
  const OpKernels<float> *kernels32 = nullptr;
  const OpKernels<double> *kernels64 = nullptr;
  template <class T> const OpKernels<T> *kernels() const {
    if constexpr (std::is_same_v<T, float>)
      return kernels32;
    else
      return kernels64;
  }
};

/// Forward: out0 = f(z). Backward: out0 = err * f'(z). Fused: out0 = f(z), out1 = f'(z).
/// Outputs may be the same arrays as inputs (in place).
template <class T>
void interpretActivation(const ActivationPlan &plan, KernelKind kind, const T *z, const T *err, T *out0, T *out1,
                         size_t batch);

/// LossElements: out = l. LossSum: returns the sum of l. LossGradient: grad = scale*g.
/// LossFused: grad = scale*g and returns the sum of l. The plan's one code
/// holds the roots that kind needs: [l], [l], [g], [l, g]. Sums are in
/// double in a fixed order.
template <class T>
double interpretLoss(const ActivationPlan &plan, KernelKind kind, const T *yPred, const T *yTrue, T *out, T scale,
                     size_t n);

/// Trainable constants: grads[offsets[node] + j] = sum over the node's
/// elements of err * df/dc_j, in double, in element order (Neumaier), with
/// plan.nodeCode the ConstantGradient tapes'.
template <class T>
void interpretConstantGradient(const ActivationPlan &plan, const T *z, const T *err, double *grads, size_t batch);

/// grads[j] = scale * sum over the elements of dl/dc_j (the plan's one code:
/// the LossConstantGradient tape).
template <class T>
void interpretLossConstantGradient(const ActivationPlan &plan, const T *yPred, const T *yTrue, double scale, size_t n,
                                   double *grads);

} // namespace hsnn::detail
