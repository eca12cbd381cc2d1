//===- lib/CodeGen/MathCalls.h - Math functions called, not inlined -*- C++ -*-===//
//
// The math library (InlineMath.h) is inlined into small kernels: no call,
// so the loop's vectors stay in registers. In a kernel with many math calls
// (a layer of many distinct formulas) the inlined copies were nearly all of
// the compile time, and the code generator's time grows faster than a
// function's size, so there each call site calls one definition instead:
// the host JIT links it from an object compiled once per process (and kept
// in the cache, MathFunction::symbol), ahead-of-time objects define it
// once per module. The same operations either way, so the same bits.
//
// LLVM-free: the emitter decides with these functions, and the cpu_jit
// engine asks them which definitions a compile links.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "KernelSpec.h"

#include <algorithm>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace hsnn::detail {

/// A kernel inlines the math library while it holds at most this many
/// math calls and formulas (measured: the performance guide's "Compile
/// time"): layers of a few formulas, run many times (W1's eight built-ins
/// are two functions of four), keep the inlined code's speed; layers of
/// many formulas, the kind a search makes, compile without the copies.
inline constexpr size_t kInlineMathCallsPerKernel = 8, kInlineMathFormulasPerKernel = 4;

/// One function of the math library at one vector type.
struct MathFunction {
  std::string name; ///< libm's name of the double function ("exp"), or "log1p_unit" (softplus's)
  DType dtype = DType::F32;
  unsigned lanes = 1;

  /// hsnn_math_exp_f32x32: a C name, hidden in every object that defines it.
  std::string symbol() const {
    return "hsnn_math_" + name + (dtype == DType::F32 ? "_f32x" : "_f64x") + std::to_string(lanes);
  }
  /// Its arguments: two for pow and atan2.
  unsigned arity() const { return name == "pow" || name == "atan2" ? 2 : 1; }
  bool operator<(const MathFunction &o) const {
    return std::tie(name, dtype, lanes) < std::tie(o.name, o.dtype, o.lanes);
  }
};

/// The math functions lowering an instruction calls: libm's name of a
/// non-intrinsic op, sigmoid's exp, softplus's exp and log of 1 + a unit
/// value; pow's even where an integer exponent is squared instead.
inline void addMathCalls(Op op, std::vector<std::string_view> &out) {
  std::string_view libm = opInfo(op).libm;
  if (op == Op::Sigmoid)
    out.push_back("exp");
  else if (op == Op::Softplus)
    out.insert(out.end(), {"exp", "log1p_unit"});
  else if (!libm.empty() && !libm.starts_with("llvm."))
    out.push_back(libm);
}

/// Math call sites in a tape (softplus counts once).
inline size_t mathCallSites(const Program &p) {
  return size_t(std::count_if(p.code.begin(), p.code.end(), [](const Instr &in) {
    std::vector<std::string_view> calls;
    addMathCalls(in.op, calls);
    return !calls.empty();
  }));
}

/// The tapes an elementwise request runs.
inline std::span<const Program *const> requestTapes(const KernelRequest &r) {
  return r.units.empty() ? std::span<const Program *const>(&r.program, 1) : std::span<const Program *const>(r.units);
}

/// Whether an elementwise request (not a row kernel) calls the math library
/// rather than inlining it: more call sites or formulas than the limits.
inline bool outlinesMath(const KernelRequest &r) {
  if (!r.rowSlots.empty())
    return false;
  if (r.units.size() > kInlineMathFormulasPerKernel)
    return std::any_of(r.units.begin(), r.units.end(), [](const Program *p) { return mathCallSites(*p) > 0; });
  size_t sites = 0;
  for (const Program *p : requestTapes(r))
    sites += mathCallSites(*p);
  return sites > kInlineMathCallsPerKernel;
}

/// Vector registers an elementwise kernel's step spans (IREmitter.cpp says
/// why).
inline constexpr unsigned kElementwiseRegisters = 2;

/// Lanes of an elementwise kernel's step: kElementwiseRegisters' worth, but
/// one register for the constants' gradients and for f64 sums of terms that
/// call no math function. The math functions it calls take vectors as wide.
inline unsigned elementwiseLanes(const KernelRequest &r, unsigned vectorBits) {
  const KernelKindInfo &k = kindInfo(r.kind);
  unsigned lanes = std::max(1u, vectorBits / (r.dtype == DType::F32 ? 32u : 64u));
  bool groupedSum = k.summing && r.dtype == DType::F32;
  bool costlyTerms = mathCallSites(*r.program) > 0;
  return !k.constants && (!k.summing || groupedSum || costlyTerms) ? kElementwiseRegisters * lanes : lanes;
}

/// The math functions that the requests which outline math call, once
/// each, in a fixed order.
inline std::vector<MathFunction> calledMathFunctions(std::span<const KernelRequest> requests, unsigned vectorBits) {
  std::set<MathFunction> fns;
  std::vector<std::string_view> names;
  for (const KernelRequest &r : requests) {
    if (!outlinesMath(r))
      continue;
    names.clear();
    for (const Program *p : requestTapes(r))
      for (const Instr &in : p->code)
        addMathCalls(in.op, names);
    for (std::string_view n : names)
      fns.insert({std::string(n), r.dtype, elementwiseLanes(r, vectorBits)});
  }
  return {fns.begin(), fns.end()};
}

} // namespace hsnn::detail
