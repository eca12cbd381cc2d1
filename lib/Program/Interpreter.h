//===- lib/Program/Interpreter.h - Running tapes over arrays ----*- C++ -*-===//
//
// The fallback engine and the oracle for every compiled path. Each
// instruction runs over a block of elements at a time (a tight loop through
// the op table's block evaluator), never a tree walk per element; blocks are
// spread over threads with TBB.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "KernelKind.h"
#include "Program.h"

#include "hsnn/Layer.h"

namespace hsnn::detail {

inline constexpr size_t kBlock = 512;

/// Runs `p` over n <= kBlock elements. `vars[v]` points at the n values of
/// variable v (unused ones may be null); `params` at the node's constants;
/// `outs[k]` receives root k.
template <class T> void runBlock(const Program &p, const T *const vars[3], const double *params, T *const *outs, size_t n);

/// What an activation kernel needs: each node's program (for that kernel
/// kind) and the layer's constants.
struct ActivationPlan {
  std::vector<const Program *> nodeProgram;
  const double *params = nullptr;
  const uint64_t *offsets = nullptr;
  Layout layout = Layout::NodesMajor;
};

/// Forward: out0 = f(z). Backward: out0 = err * f'(z). Fused: out0 = f(z), out1 = f'(z).
/// Outputs may be the same arrays as inputs (in place).
template <class T>
void interpretActivation(const ActivationPlan &plan, KernelKind kind, const T *z, const T *err, T *out0, T *out1,
                         size_t batch);

/// LossElements: out = l. LossSum: returns the sum of l. LossGradient: grad = scale*g.
/// LossFused: grad = scale*g and returns the sum of l. `p` holds the roots that
/// kind needs: [l], [l], [g], [l, g]. Sums are in double in a fixed order.
template <class T>
double interpretLoss(const Program &p, KernelKind kind, const double *params, const T *yPred, const T *yTrue, T *out,
                     T scale, size_t n);

/// Trainable constants: grads[offsets[node] + j] = sum over the node's
/// elements of err * df/dc_j, in double, in element order (Neumaier), with
/// plan.nodeProgram the ConstantGradient tapes.
template <class T>
void interpretConstantGradient(const ActivationPlan &plan, const T *z, const T *err, double *grads, size_t batch);

/// grads[j] = scale * sum over the elements of dl/dc_j (`p`: the LossConstantGradient tape).
template <class T>
void interpretLossConstantGradient(const Program &p, const double *params, const T *yPred, const T *yTrue,
                                   double scale, size_t n, double *grads);

} // namespace hsnn::detail
