//===- lib/Program/KernelKind.h - Kernel kinds from KernelKinds.def -*- C++ -*-===//
//
// The enum, names and traits every engine, code generator and AOT header
// use; all generated from KernelKinds.def, so adding a kind cannot miss one.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hsnn::detail {

enum class KernelKind : uint8_t {
#define HSNN_KERNEL_KIND(E, name, cName, loss, in, out, roots, scaled, summing) E,
#include "KernelKinds.def"
};

struct KernelKindInfo {
  std::string_view name;
  std::string_view cName;
  bool loss;
  uint8_t inputs, outputs;
  bool value, derivative; ///< The roots the tape evaluates, in this order.
  bool constants;         ///< Instead: d/dc for each constant, reduced over the elements.
  bool scaled, summing;
};

inline constexpr KernelKindInfo kKernelKinds[] = {
#define HSNN_KERNEL_KIND(E, name, cName, loss, in, out, roots, scaled, summing)                                      \
  {name, cName, loss != 0, in, out, (roots & 1) != 0, (roots & 2) != 0, (roots & 4) != 0, scaled != 0, summing != 0},
#include "KernelKinds.def"
};
inline constexpr size_t kNumKernelKinds = std::size(kKernelKinds);

constexpr const KernelKindInfo &kindInfo(KernelKind k) { return kKernelKinds[size_t(k)]; }
constexpr std::string_view kindName(KernelKind k) { return kindInfo(k).name; }
constexpr bool isLoss(KernelKind k) { return kindInfo(k).loss; }

namespace kinds_detail {
template <bool Loss> constexpr auto select() {
  constexpr size_t n = [] {
    size_t c = 0;
    for (const auto &k : kKernelKinds)
      c += k.loss == Loss && !k.constants;
    return c;
  }();
  std::array<KernelKind, n> out{};
  size_t i = 0;
  for (size_t k = 0; k < kNumKernelKinds; ++k)
    if (kKernelKinds[k].loss == Loss && !kKernelKinds[k].constants)
      out[i++] = KernelKind(k);
  return out;
}
} // namespace kinds_detail

/// The activation kinds and the loss kinds, in .def order.
inline constexpr auto kActivationKinds = kinds_detail::select<false>();
inline constexpr auto kLossKinds = kinds_detail::select<true>();

/// A kind's index among its own group (activation or loss kinds).
constexpr size_t groupIndex(KernelKind k) {
  return isLoss(k) ? size_t(k) - kActivationKinds.size() : size_t(k);
}

/// The reducing kind of a mode: sums of d/dc per constant (trainable constants).
constexpr KernelKind constantGradientKind(bool loss) {
  return loss ? KernelKind::LossConstantGradient : KernelKind::ConstantGradient;
}

static_assert(kActivationKinds.size() + kLossKinds.size() + 2 == kNumKernelKinds);
static_assert(!isLoss(KernelKind(kActivationKinds.size() - 1)) && isLoss(KernelKind(kActivationKinds.size())),
              "KernelKinds.def lists activation kinds before loss kinds");

} // namespace hsnn::detail
