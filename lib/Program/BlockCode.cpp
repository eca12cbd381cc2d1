//===- lib/Program/BlockCode.cpp - A tape's steps over blocks of elements ===//
#include "BlockCode.h"

#include "Expr/OpTable.h"

#include <algorithm>
#include <cmath>

namespace hsnn::detail {

BlockCode BlockCode::from(const Program &p) {
  BlockCode c;
  size_t n = p.code.size();
  // The last instruction that reads each value; outputs live to the end.
  std::vector<size_t> lastUse(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (uint32_t a : p.operands(p.code[i]))
      lastUse[a] = i;
  for (uint32_t o : p.outputs)
    lastUse[o] = n;
  std::vector<ValueRef> where(n);
  std::vector<uint32_t> free;
  auto take = [&] {
    if (free.empty())
      return c.buffers++;
    uint32_t b = free.back();
    free.pop_back();
    return b;
  };
  for (size_t i = 0; i < n; ++i) {
    const Instr &in = p.code[i];
    if (in.op == Op::Var) {
      where[i] = {uint32_t(in.var), ValueRef::Variable};
      continue;
    }
    if (in.op == Op::Number || in.op == Op::Param) {
      where[i] = {uint32_t(c.scalars.size()), ValueRef::Scalar};
      c.scalars.push_back({in.op == Op::Param, in.param, in.number});
      continue;
    }
    Step s{.op = in.op, .argBegin = uint32_t(c.args.size()), .numArgs = in.numArgs};
    auto ops = p.operands(in);
    if (in.op == Op::Pow && p.code[ops[1]].op == Op::Number) {
      double k = p.code[ops[1]].number;
      // A 0 exponent is folded by the front end; 2**31 and beyond are even.
      if (k == std::trunc(k) && std::fabs(k) < 2147483648.0)
        s.power = int32_t(k);
    }
    uint32_t scalars = 0;
    for (uint32_t a : ops) {
      c.args.push_back(where[a]);
      scalars += where[a].kind == ValueRef::Scalar;
    }
    c.spread = std::max(c.spread, scalars);
    s.a = where[ops[0]];
    if (ops.size() > 1)
      s.b = where[ops[1]];
    bool scalar0 = s.a.kind == ValueRef::Scalar, scalar1 = ops.size() == 2 && s.b.kind == ValueRef::Scalar;
    if (!hasOpKernel(in.op) || (scalar0 && (ops.size() == 1 || scalar1)))
      s.shape = Shape::Table;
    else if (s.power != 0)
      s.shape = std::abs(s.power) <= kMaxKernelPower ? Shape::Power : Shape::LargePower;
    else if (ops.size() == 1)
      s.shape = Shape::Unary;
    else
      s.shape = scalar1 ? Shape::VectorScalar : scalar0 ? Shape::ScalarVector : Shape::Binary;
    // The destination is taken before the operands are given back: a step
    // never writes over its own operands.
    s.dst = take();
    where[i] = {s.dst, ValueRef::Buffer};
    c.steps.push_back(s);
    for (uint32_t a : ops)
      if (where[a].kind == ValueRef::Buffer && lastUse[a] == i &&
          std::find(free.begin(), free.end(), where[a].index) == free.end())
        free.push_back(where[a].index);
  }
  for (uint32_t o : p.outputs) {
    ValueRef r = where[o];
    if (r.kind == ValueRef::Scalar) {
      // An output that is a number or constant is spread by a step of its
      // own, so outputs are always arrays.
      Step s{.op = Op::Number, .shape = Shape::Fill, .dst = c.buffers++, .argBegin = uint32_t(c.args.size()),
             .numArgs = 1, .a = r, .b = {}};
      c.args.push_back(r);
      c.steps.push_back(s);
      r = {s.dst, ValueRef::Buffer};
    }
    c.outputs.push_back(r);
  }
  return c;
}

void scalarValues(const BlockCode &c, const double *params, double *out) {
  for (size_t k = 0; k < c.scalars.size(); ++k)
    out[k] = c.scalars[k].isParam ? params[c.scalars[k].param] : c.scalars[k].number;
}

template <class T>
void runCode(const BlockCode &c, const OpKernels<T> *kernels, const T *const *columns, const double *scalars,
              T *buffers, size_t n) {
  using Shape = BlockCode::Shape;
  for (const BlockCode::Step &s : c.steps) {
    T *dst = buffers + size_t(s.dst) * kBlock;
    const ValueRef *refs = c.args.data() + s.argBegin;
    auto array = [&](ValueRef r) { return valuePointer<T>(r, columns, buffers); };
    int64_t m = int64_t(n);
    if (s.shape == Shape::Fill) {
      std::fill_n(dst, n, T(scalars[s.a.index]));
      continue;
    }
    if (kernels) {
      switch (s.shape) {
      case Shape::Unary:
        kernels->unary[size_t(s.op)](array(s.a), nullptr, dst, nullptr, nullptr, m);
        continue;
      case Shape::Binary:
        kernels->binary[size_t(s.op)](array(s.a), array(s.b), dst, nullptr, m, T(1));
        continue;
      case Shape::VectorScalar:
        kernels->vectorScalar[size_t(s.op)](array(s.a), nullptr, dst, nullptr, &scalars[s.b.index], m);
        continue;
      case Shape::ScalarVector:
        kernels->scalarVector[size_t(s.op)](array(s.b), nullptr, dst, nullptr, &scalars[s.a.index], m);
        continue;
      case Shape::Power:
        kernels->power[size_t(s.power + kMaxKernelPower)](array(s.a), nullptr, dst, nullptr, nullptr, m);
        continue;
      case Shape::LargePower: {
        double k = double(s.power);
        const T *a = array(s.a);
        kernels->unary[size_t(Op::Abs)](a, nullptr, dst, nullptr, nullptr, m);
        kernels->vectorScalar[size_t(Op::Pow)](dst, nullptr, dst, nullptr, &k, m);
        if (s.power % 2 != 0)
          for (size_t i = 0; i < n; ++i)
            dst[i] = std::copysign(dst[i], a[i]);
        continue;
      }
      case Shape::Fill:
      case Shape::Table:
        break;
      }
    }
    // Conditions and Piecewise are selections (exact in any code), and
    // every op where there is no JIT: the op table's evaluation, scalars
    // spread over the buffers past the values'.
    const T *inline_[8];
    std::vector<const T *> many;
    const T **ptrs = inline_;
    if (s.numArgs > 8) {
      many.resize(s.numArgs);
      ptrs = many.data();
    }
    T *spread = buffers + size_t(c.buffers) * kBlock;
    for (unsigned j = 0; j < s.numArgs; ++j) {
      if (refs[j].kind == ValueRef::Scalar) {
        std::fill_n(spread, n, T(scalars[refs[j].index]));
        ptrs[j] = spread;
        spread += kBlock;
      } else {
        ptrs[j] = array(refs[j]);
      }
    }
    blockEval<T>(s.op)(dst, ptrs, s.numArgs, n);
  }
}

template void runCode<float>(const BlockCode &, const OpKernels<float> *, const float *const *, const double *,
                              float *, size_t);
template void runCode<double>(const BlockCode &, const OpKernels<double> *, const double *const *, const double *,
                             double *, size_t);

} // namespace hsnn::detail
