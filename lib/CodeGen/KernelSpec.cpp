//===- lib/CodeGen/KernelSpec.cpp - Kernel kinds --------------------------===//
#include "KernelSpec.h"

namespace hsnn::detail {

const char *shapeName(KernelShape s) {
  switch (s) {
  case KernelShape::ActivationForward: return "forward";
  case KernelShape::ActivationBackward: return "backward";
  case KernelShape::ActivationFused: return "fused";
  case KernelShape::LossElements: return "loss_elements";
  case KernelShape::LossReduce: return "loss_reduce";
  case KernelShape::LossGradient: return "loss_gradient";
  case KernelShape::LossFused: return "loss_fused";
  }
  return "?";
}

} // namespace hsnn::detail
