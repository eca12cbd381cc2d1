//===- lib/Program/BlockCode.h - A tape's steps over blocks of elements -*- C++ -*-===//
//
// A tape (Program.h) made ready for the interpreter (layers' cpu_interp, and
// populations: Runtime/Population.cpp): each instruction a step over a block
// of elements, its result in one of a few
// buffers reused once the value is dead (a formula needs far fewer buffers
// than instructions, so a tile's working set stays in the near caches), variables read in place from the data's
// columns, numbers and constants passed to the op kernels as scalars (no
// buffer to fill: numbers are many of a random formula's leaves). Steps call the op
// kernels (OpKernels.h): the compiled layers' code, one op at a time.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "OpKernels.h"
#include "Program.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hsnn::detail {

/// Elements a step runs at once: a buffer of floats is 4 KiB. Each step is a
/// kernel call, and blocks this long keep the calls' cost small beside their
/// work while a formula's few live buffers stay in L1 and L2 (the DEVLOG has
/// the runs).
inline constexpr size_t kBlock = 1024;

/// Where an operand is: a variable's column, a buffer, or a scalar (a
/// number or constant, the same for every row).
struct ValueRef {
  enum Kind : uint8_t { Variable, Buffer, Scalar };
  uint32_t index = 0;
  Kind kind = Buffer;
};

struct BlockCode {
  /// How a step runs where the op kernels are installed (decided once, so
  /// the loop over steps branches once a step).
  enum class Shape : uint8_t {
    Fill,         ///< A scalar output spread over its buffer.
    Unary,        ///< kernels.unary[op](a)
    Binary,       ///< kernels.binary[op](a, b)
    VectorScalar, ///< kernels.vectorScalar[op](a; b a scalar)
    ScalarVector, ///< kernels.scalarVector[op](b; a a scalar)
    Power,        ///< kernels.power[k](a), |k| <= kMaxKernelPower
    LargePower,   ///< |a|**k, a's sign put back for odd k, as Lowering.cpp does
    Table,        ///< The op table's evaluation (conditions, Piecewise)
  };
  struct Step {
    Op op;
    Shape shape = Shape::Table;
    /// Pow by an integer exponent: the exponent; 0 otherwise.
    int32_t power = 0;
    uint32_t dst = 0;
    uint32_t argBegin = 0, numArgs = 0;
    ValueRef a, b; ///< The first two operands (also in args)
  };
  /// A scalar: a number, or constant `param` of the formula.
  struct Scalar {
    bool isParam;
    uint32_t param;
    double number;
  };
  std::vector<Step> steps;
  std::vector<ValueRef> args;
  std::vector<Scalar> scalars;
  std::vector<ValueRef> outputs;
  /// Buffers for values, then `spread` more: scalars spread over a block for
  /// a step with no scalar kernel (conditions, Piecewise).
  uint32_t buffers = 0, spread = 0;

  /// The tape's steps, buffers assigned by liveness.
  static BlockCode from(const Program &p);
  /// Buffers a run needs, each kBlock long.
  size_t bufferCount() const { return size_t(buffers) + spread; }
};

/// The scalars' values for the formula's constants `params`.
void scalarValues(const BlockCode &c, const double *params, double *out);

/// Runs the steps over n <= kBlock rows: `columns` are the
/// variables' values at the block's first row, `scalars` from scalarValues,
/// `buffers` bufferCount() blocks. Outputs are read through valuePointer.
template <class T>
void runCode(const BlockCode &c, const OpKernels<T> *kernels, const T *const *columns, const double *scalars,
              T *buffers, size_t n);

/// A variable's or buffer's values (not a scalar's).
template <class T> const T *valuePointer(ValueRef r, const T *const *columns, T *buffers) {
  return r.kind == ValueRef::Variable ? columns[r.index] : buffers + size_t(r.index) * kBlock;
}

} // namespace hsnn::detail
