//===- lib/Program/DeviceCode.cpp - Populations' bytecode for the GPU ----===//
#include "DeviceCode.h"

#include <fmt/format.h>
#include <limits>

namespace hsnn::detail {

namespace {
uint32_t reference(ValueRef r) {
  switch (r.kind) {
  case ValueRef::Variable:
    return device_ref::kVariable | r.index;
  case ValueRef::Scalar:
    return device_ref::kScalar | r.index;
  case ValueRef::Buffer:
    break;
  }
  return device_ref::kRegister | r.index;
}
} // namespace

Error DeviceCode::append(const BlockCode *code, const double *params, size_t output) {
  size_t scalarBase = scalars.size();
  if (!code) {
    scalars.push_back(std::numeric_limits<double>::quiet_NaN());
    outputs.push_back(device_ref::kScalar);
    stepStart.push_back(steps.size() / 4);
    scalarStart.push_back(scalars.size());
    return Error::success();
  }
  if (code->buffers > kDeviceRegisters)
    return Error(ErrorCode::Unsupported,
                 fmt::format("the formula holds {} values at once; the GPU interpreter holds at most {}",
                             code->buffers, kDeviceRegisters));
  scalars.resize(scalarBase + code->scalars.size());
  scalarValues(*code, params, scalars.data() + scalarBase);
  auto step = [&](uint32_t c, uint32_t dst, uint32_t a, uint32_t b) { steps.insert(steps.end(), {c, dst, a, b}); };
  auto scalar = [&](double v) {
    scalars.push_back(v);
    return device_ref::kScalar | uint32_t(scalars.size() - 1 - scalarBase);
  };
  using Shape = BlockCode::Shape;
  for (const BlockCode::Step &s : code->steps) {
    uint32_t a = reference(s.a), b = s.numArgs > 1 ? reference(s.b) : a;
    switch (s.shape) {
    case Shape::Fill:
      step(device_case::kCopy, s.dst, a, a);
      break;
    case Shape::Power:
      step(device_case::kPowerBase + uint32_t(s.power + kMaxKernelPower), s.dst, a, a);
      break;
    case Shape::LargePower:
      // |a|**k, a's sign put back for odd k: BlockCode's steps, one by one.
      step(uint32_t(Op::Abs), s.dst, a, a);
      step(uint32_t(Op::Pow), s.dst, device_ref::kRegister | s.dst, scalar(double(s.power)));
      if (s.power % 2 != 0)
        step(device_case::kCopySign, s.dst, device_ref::kRegister | s.dst, a);
      break;
    case Shape::Unary:
    case Shape::Binary:
    case Shape::VectorScalar:
    case Shape::ScalarVector:
    case Shape::Table:
      if (s.op == Op::Piecewise) {
        // The first true condition wins: from the default back to the front.
        const ValueRef *args = code->args.data() + s.argBegin;
        step(device_case::kCopy, s.dst, reference(args[s.numArgs - 1]), reference(args[s.numArgs - 1]));
        for (int k = int(s.numArgs) - 3; k >= 0; k -= 2)
          step(device_case::kSelect, s.dst, reference(args[k + 1]), reference(args[k]));
      } else if (isDeviceOp(s.op)) {
        step(uint32_t(s.op), s.dst, a, b);
      } else {
        return Error(ErrorCode::Internal, fmt::format("op {} has no case in the GPU interpreter", opInfo(s.op).name));
      }
      break;
    }
  }
  outputs.push_back(reference(code->outputs.at(output)));
  stepStart.push_back(steps.size() / 4);
  scalarStart.push_back(scalars.size());
  return Error::success();
}

} // namespace hsnn::detail
