//===- lib/Program/DeviceCode.h - Populations' bytecode for the GPU -*- C++ -*-===//
//
// The GPU runs a whole population in one launch: one interpreter kernel,
// made once per device and dtype (CodeGen/GpuPopulationKernel.cpp), walks
// each formula's steps for each row. Its steps are the block interpreter's
// (BlockCode.h) flattened to words a kernel decodes: an op case, a register
// to write and two operand references. The cases are the op kernels' own
// one-instruction tapes (OpKernels.h), lowered by the same emitter, so a
// value on the GPU has the bits of the CPU's interpreter and cpu_jit.
// LLVM-free.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "BlockCode.h"
#include "OpKernels.h"

#include "hsnn/Error.h"

#include <cstdint>
#include <vector>

namespace hsnn::detail {

/// Values a formula may hold at once on the GPU (a thread's registers, in
/// local memory). BlockCode reuses a buffer once its value is dead, so even
/// formulas of thousands of nodes stay far below.
inline constexpr uint32_t kDeviceRegisters = 64;

/// A step's case, its first word. Numeric and boolean ops are their Op
/// (booleans held as 1 or 0); then one case per integer power
/// -kMaxKernelPower..kMaxKernelPower (as OpOperands::Power); then:
///   Copy:     dst = a
///   Select:   dst = (a != 0) ? b : dst   (Piecewise, from its default back)
///   CopySign: dst = copysign(a, b)       (large integer powers, as BlockCode)
namespace device_case {
inline constexpr uint32_t kPowerBase = uint32_t(kNumOps);
inline constexpr uint32_t kCopy = kPowerBase + 2 * kMaxKernelPower + 1;
inline constexpr uint32_t kSelect = kCopy + 1;
inline constexpr uint32_t kCopySign = kSelect + 1;
inline constexpr uint32_t kCount = kCopySign + 1;
} // namespace device_case

/// Whether op `o` is a case of its own (numeric ops of one or two operands,
/// comparisons and logic).
inline bool isDeviceOp(Op o) {
  const OpInfo &info = opInfo(o);
  return info.syntax != OpSyntax::Leaf && (info.arity == 1 || info.arity == 2);
}

/// An operand reference: its kind in the top two bits, its index below.
namespace device_ref {
inline constexpr uint32_t kRegister = 0u << 30, kVariable = 1u << 30, kScalar = 2u << 30;
inline constexpr uint32_t kIndexMask = (1u << 30) - 1;
} // namespace device_ref

/// A population's code as the GPU kernel reads it. Formula f runs steps
/// [stepStart[f], stepStart[f+1]) (four words each: case, dst, a, b), its
/// scalars (numbers and constant values, in double) are
/// scalars[scalarStart[f] ...], and its value is outputs[f] after them. A
/// formula that is not valid has no steps and a NaN scalar as its value.
struct DeviceCode {
  std::vector<uint32_t> steps;
  std::vector<uint64_t> stepStart{0};
  std::vector<double> scalars;
  std::vector<uint64_t> scalarStart{0};
  std::vector<uint32_t> outputs;

  size_t formulas() const { return outputs.size(); }
  /// Appends a formula: output `output` of `code` with constants `params`,
  /// or (null code) one whose value is NaN. An error where the formula
  /// needs more than kDeviceRegisters registers.
  Error append(const BlockCode *code, const double *params, size_t output = 0);
};

} // namespace hsnn::detail
