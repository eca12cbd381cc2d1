//===- lib/Runtime/PopulationScore.cpp - A population's tiles ------------===//
//
// Scoring cuts the (formulas x rows) plane into tiles of one formula and up
// to kTileRows rows; a tile runs the formula a block at a time and, for a
// fitness, the loss on the block at once, so no (N x rows) array is made.
// Each tile's sums are kept apart and added in row order: the same scores
// whatever the threads.
//
//===----------------------------------------------------------------------===//
#include "PopulationImpl.h"

#include "InterpreterKernels.h"
#include "LayerState.h"
#include "Warn.h"

#include "CPU/KernelBuild.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>

namespace hsnn {

using namespace detail;

namespace {

// Rows one tile runs: enough that the task's scheduling is amortized, few
// enough that 1000 formulas over 10^5 rows still give every thread many tiles.
constexpr size_t kTileRows = 16 * kBlock;

} // namespace

template <class T> LossFn<T> LossCode::sumKernel() {
  constexpr size_t d = std::is_same_v<T, float> ? 0 : 1;
  std::call_once(compiled[d], [&] {
    if (!HostJIT::available())
      return;
    std::string symbol = fmt::format("hsnn_population_loss_{}", d ? "f64" : "f32");
    KernelRequest r{.symbol = symbol, .program = &sumTape, .kind = KernelKind::LossSum,
                    .dtype = d ? DType::F64 : DType::F32};
    CompileInfo info;
    auto lib = buildKernels(std::span<const KernelRequest>(&r, 1), JITOptions{}, cacheConfig(),
                            [] { return std::string("population loss"); }, info, nullptr, /*linkedOnly=*/false);
    if (lib && *lib) {
      library[d] = *lib;
      sum[d] = (*lib)->address(symbol);
    }
  });
  return reinterpret_cast<LossFn<T>>(sum[d]);
}

namespace {

// The runtime's op kernels; where they cannot be built, the reason is said
// once: a population's values are then not the compiled layers' bits.
template <class T> const OpKernels<T> *populationOpKernels() {
  std::string why;
  const OpKernels<T> *k = runtimeOpKernels<T>(&why);
  static std::once_flag said;
  if (!why.empty())
    std::call_once(said, [&] {
      warn(fmt::format("population: the interpreter's op kernels could not be built ({}); the op table's evaluation "
                       "runs instead (values within the numerics guide's bounds, not cpu_jit's bits)",
                       why));
    });
  return k;
}

bool overlaps(const void *a, size_t an, const void *b, size_t bn) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an && bn && x < y + bn && y < x + an;
}

// The data's columns: X's own where it is column-major, else a transposed
// copy (once per call, shared by every formula).
template <class T> struct Columns {
  std::vector<T> copy;
  std::vector<const T *> column;
};

template <class T> Error checkX(const PopulationData<T> &d, size_t variables) {
  if (d.x.size() != d.rows * variables)
    return Error(ErrorCode::InvalidArgument, fmt::format("X has {} values; {} rows x {} variables need {}", d.x.size(),
                                                         d.rows, variables, d.rows * variables));
  return Error::success();
}

template <class T> Expected<Columns<T>> columnsOf(const PopulationData<T> &d, size_t variables) {
  if (Error e = checkX(d, variables))
    return e;
  Columns<T> c;
  const T *base = d.x.data();
  if (d.layout == DataLayout::RowMajor && variables > 1) {
    c.copy.resize(d.x.size());
    size_t chunks = (d.rows + kTileRows - 1) / kTileRows;
    forBlocks(chunks, kTileRows * variables, [&](size_t t) {
      size_t r0 = t * kTileRows, n = std::min(kTileRows, d.rows - r0);
      transposeTile<T>(d.x.data() + r0 * variables, variables, c.copy.data() + r0, d.rows, n, variables);
    });
    base = c.copy.data();
  }
  for (size_t j = 0; j < variables; ++j)
    c.column.push_back(base + j * d.rows);
  return c;
}

// parts += the sum of a[r] (times b[r], times w[r]) over a block, in double:
// eight independent sums (one chain of dependent additions held a fitness
// back; the DEVLOG has the measurement), added in a fixed order, then into the tile's compensated
// sum, so a score does not depend on the threads.
template <bool HasB, bool HasW, class T>
void addTerms(double (&lane)[8], const T *a, const T *b, const T *w, size_t n) {
  auto term = [&](size_t k) {
    double v = double(a[k]);
    if constexpr (HasB)
      v *= double(b[k]);
    if constexpr (HasW)
      v *= double(w[k]);
    return v;
  };
  size_t r = 0;
  for (; r + 8 <= n; r += 8)
    for (size_t j = 0; j < 8; ++j)
      lane[j] += term(r + j);
  for (size_t j = 0; r < n; ++r, ++j)
    lane[j] += term(r);
}

template <class T> void addBlock(SumParts &parts, const T *a, const T *b, const T *w, size_t n) {
  double lane[8] = {};
  if (b && w)
    addTerms<true, true>(lane, a, b, w, n);
  else if (b)
    addTerms<true, false>(lane, a, b, w, n);
  else if (w)
    addTerms<false, true>(lane, a, b, w, n);
  else
    addTerms<false, false>(lane, a, b, w, n);
  CompensatedSum sum{parts.sum, parts.residual};
  for (double v : lane)
    sum.add(v);
  parts = sum.parts();
}

template <class T> Error checkTarget(const PopulationData<T> &d) {
  if (d.y.size() != d.rows)
    return Error(ErrorCode::InvalidArgument, fmt::format("y has {} values for {} rows", d.y.size(), d.rows));
  if (!d.weights.empty() && d.weights.size() != d.rows)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("weights has {} values for {} rows", d.weights.size(), d.rows));
  return Error::success();
}

// Runs body(member, r0, n, columns, buffers) for every block of every
// (valid member, row tile), a tile on one thread; the tiles of member i
// are tiles [i * perMember, (i + 1) * perMember).
template <class T, class Body>
void forTiles(const std::vector<Member> &members, const std::vector<size_t> &offsets, const double *constants,
              const Columns<T> &cols, size_t rows, const BlockCode Member::*code, Body &&body) {
  size_t perMember = std::max<size_t>(1, (rows + kTileRows - 1) / kTileRows);
  size_t variables = cols.column.size();
  forBlocks(members.size() * perMember, std::min(rows, kTileRows) * 8, [&](size_t t) {
    size_t i = t / perMember, tile = t % perMember;
    const Member &m = members[i];
    if (!m.valid)
      return;
    const BlockCode &c = m.*code;
    thread_local std::vector<T> buffers;
    thread_local std::vector<const T *> at;
    thread_local std::vector<double> scalars;
    if (buffers.size() < c.bufferCount() * kBlock)
      buffers.resize(c.bufferCount() * kBlock);
    at.resize(variables);
    scalars.resize(c.scalars.size());
    scalarValues(c, constants + offsets[i], scalars.data());
    size_t end = std::min(rows, (tile + 1) * kTileRows);
    for (size_t r0 = tile * kTileRows; r0 < end; r0 += kBlock) {
      size_t n = std::min(kBlock, end - r0);
      for (size_t j = 0; j < variables; ++j)
        at[j] = cols.column[j] + r0;
      body(i, tile, r0, n, c, at.data(), scalars.data(), buffers.data());
    }
  });
}

} // namespace

template <class T> static Error evaluateImpl(const Population::Impl &impl, const std::vector<double> &constants,
                                             const PopulationData<T> &d, std::span<T> out) {
  size_t n = impl.members.size();
  if (out.size() != n * d.rows)
    return Error(ErrorCode::InvalidArgument, fmt::format("out has {} values; {} formulas x {} rows need {}", out.size(),
                                                         n, d.rows, n * d.rows));
  if (overlaps(out.data(), out.size_bytes(), d.x.data(), d.x.size_bytes()))
    return Error(ErrorCode::InvalidArgument, "out overlaps X");
  if (impl.options.method == Method::Cuda) {
    if (Error e = checkX(d, impl.options.variables.size()))
      return e;
    return gpuEvaluate<T>(impl, constants, d, out);
  }
  auto cols = columnsOf(d, impl.options.variables.size());
  if (!cols)
    return cols.takeError();
  const OpKernels<T> *k = populationOpKernels<T>();
  for (size_t i = 0; i < n; ++i)
    if (!impl.members[i].valid)
      std::fill_n(out.data() + i * d.rows, d.rows, std::numeric_limits<T>::quiet_NaN());
  forTiles<T>(impl.members, impl.offsets, constants.data(), *cols, d.rows, &Member::value,
              [&](size_t i, size_t, size_t r0, size_t len, const BlockCode &c, const T *const *at,
                  const double *sc, T *buf) {
                runCode<T>(c, k, at, sc, buf, len);
                const T *v = valuePointer<T>(c.outputs[0], at, buf);
                std::copy_n(v, len, out.data() + i * d.rows + r0);
              });
  return Error::success();
}

// Scores (and with `gradients`, d score / d constants) of every member.
template <class T>
static Error scoreImpl(Population::Impl &impl, const std::vector<double> &constants, const PopulationData<T> &d,
                       std::span<double> scores, std::span<double> *gradients, const PopulationLoss &lossSpec) {
  size_t n = impl.members.size();
  if (scores.size() != n)
    return Error(ErrorCode::InvalidArgument, fmt::format("scores has {} values for {} formulas", scores.size(), n));
  if (gradients && gradients->size() != constants.size())
    return Error(ErrorCode::InvalidArgument, fmt::format("gradients has {} values; the population has {} constants",
                                                         gradients->size(), constants.size()));
  if (Error e = checkTarget(d))
    return e;
  auto lossCode = impl.loss(lossSpec);
  if (!lossCode)
    return lossCode.takeError();
  LossCode &loss = **lossCode;
  const T *w = d.weights.empty() ? nullptr : d.weights.data();
  double norm = 1;
  if (lossSpec.reduction == Reduction::Mean) {
    if (w) {
      CompensatedSum ws;
      for (size_t r = 0; r < d.rows; ++r)
        ws.add(double(w[r]));
      norm = ws.value();
    } else {
      norm = double(d.rows);
    }
  }
  // Scores without gradients on the GPU (gradients run here: their data
  // is on the host either way).
  if (impl.options.method == Method::Cuda && !gradients) {
    if (Error e = checkX(d, impl.options.variables.size()))
      return e;
    if (Error e = gpuLossSums<T>(impl, constants, d, loss, scores.data()))
      return e;
    for (size_t i = 0; i < n; ++i)
      scores[i] = impl.members[i].valid ? scores[i] / norm : std::numeric_limits<double>::quiet_NaN();
    return Error::success();
  }
  auto cols = columnsOf(d, impl.options.variables.size());
  if (!cols)
    return cols.takeError();
  if (gradients)
    impl.deriveConstants();
  const OpKernels<T> *k = populationOpKernels<T>();
  std::vector<double> lossScalars(loss.code.scalars.size());
  scalarValues(loss.code, loss.params.data(), lossScalars.data());
  size_t perMember = std::max<size_t>(1, (d.rows + kTileRows - 1) / kTileRows);
  // Per tile: the loss's sum, then each constant's.
  size_t width = 1;
  for (size_t i = 0; i < n; ++i)
    width = std::max(width, 1 + (gradients ? impl.offsets[i + 1] - impl.offsets[i] : 0));
  std::vector<SumParts> partial(n * perMember * width);
  // The compiled loss sum where it serves: no weights, no gradients, and
  // the op kernels compiled too (without them the interpreter's loss keeps
  // every path on the op table alike).
  LossFn<T> fused = !w && !gradients && k ? loss.sumKernel<T>() : nullptr;
  forTiles<T>(
      impl.members, impl.offsets, constants.data(), *cols, d.rows, gradients ? &Member::constantGrad : &Member::value,
      [&](size_t i, size_t tile, size_t r0, size_t len, const BlockCode &c, const T *const *at, const double *sc,
          T *buf) {
        runCode<T>(c, k, at, sc, buf, len);
        SumParts *parts = partial.data() + (i * perMember + tile) * width;
        if (fused) {
          auto p = fused(valuePointer<T>(c.outputs[0], at, buf), d.y.data() + r0, nullptr, loss.params.data(),
                         int64_t(len), T(1));
          CompensatedSum sum{parts[0].sum, parts[0].residual};
          sum.add(p);
          parts[0] = sum.parts();
          return;
        }
        thread_local std::vector<T> lossBuffers;
        if (lossBuffers.size() < loss.code.bufferCount() * kBlock)
          lossBuffers.resize(loss.code.bufferCount() * kBlock);
        const T *lossColumns[3] = {nullptr, valuePointer<T>(c.outputs[0], at, buf), d.y.data() + r0};
        runCode<T>(loss.code, k, lossColumns, lossScalars.data(), lossBuffers.data(), len);
        const T *l = valuePointer<T>(loss.code.outputs[0], lossColumns, lossBuffers.data());
        addBlock(parts[0], l, static_cast<const T *>(nullptr), w ? w + r0 : nullptr, len);
        if (!gradients)
          return;
        const T *g = valuePointer<T>(loss.code.outputs[1], lossColumns, lossBuffers.data());
        for (size_t j = 1; j < c.outputs.size(); ++j)
          addBlock(parts[j], g, valuePointer<T>(c.outputs[j], at, buf), w ? w + r0 : nullptr, len);
      });
  for (size_t i = 0; i < n; ++i) {
    size_t k0 = impl.offsets[i], kn = impl.offsets[i + 1] - k0;
    if (!impl.members[i].valid) {
      scores[i] = std::numeric_limits<double>::quiet_NaN();
      if (gradients)
        std::fill_n(gradients->data() + k0, kn, std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    for (size_t j = 0; j < (gradients ? 1 + kn : 1); ++j) {
      CompensatedSum s;
      for (size_t tile = 0; tile < perMember; ++tile) {
        const SumParts &p = partial[(i * perMember + tile) * width + j];
        s.add(p);
      }
      double v = s.value() / norm;
      if (j == 0)
        scores[i] = v;
      else
        (*gradients)[k0 + j - 1] = v;
    }
  }
  return Error::success();
}

template <class T>
static Error variableGradImpl(Population::Impl &impl, const std::vector<double> &constants, const PopulationData<T> &d,
                              std::span<T> out) {
  size_t n = impl.members.size(), v = impl.options.variables.size();
  if (out.size() != n * v * d.rows)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("out has {} values; {} formulas x {} variables x {} rows need {}", out.size(), n, v,
                             d.rows, n * v * d.rows));
  auto cols = columnsOf(d, v);
  if (!cols)
    return cols.takeError();
  impl.deriveVariables();
  const OpKernels<T> *k = populationOpKernels<T>();
  for (size_t i = 0; i < n; ++i)
    if (!impl.members[i].valid)
      std::fill_n(out.data() + i * v * d.rows, v * d.rows, std::numeric_limits<T>::quiet_NaN());
  forTiles<T>(impl.members, impl.offsets, constants.data(), *cols, d.rows, &Member::variableGrad,
              [&](size_t i, size_t, size_t r0, size_t len, const BlockCode &c, const T *const *at,
                  const double *sc, T *buf) {
                runCode<T>(c, k, at, sc, buf, len);
                for (size_t j = 0; j < v; ++j)
                  std::copy_n(valuePointer<T>(c.outputs[j], at, buf), len, out.data() + (i * v + j) * d.rows + r0);
              });
  return Error::success();
}

Error Population::evaluate(const PopulationData<float> &d, std::span<float> out) const {
  return evaluateImpl(*impl_, constants_, d, out);
}
Error Population::evaluate(const PopulationData<double> &d, std::span<double> out) const {
  return evaluateImpl(*impl_, constants_, d, out);
}
Error Population::fitness(const PopulationData<float> &d, std::span<double> scores, const PopulationLoss &l) const {
  return scoreImpl(*impl_, constants_, d, scores, nullptr, l);
}
Error Population::fitness(const PopulationData<double> &d, std::span<double> scores, const PopulationLoss &l) const {
  return scoreImpl(*impl_, constants_, d, scores, nullptr, l);
}
Error Population::constantGradients(const PopulationData<float> &d, std::span<double> scores,
                                    std::span<double> gradients, const PopulationLoss &l) const {
  return scoreImpl(*impl_, constants_, d, scores, &gradients, l);
}
Error Population::constantGradients(const PopulationData<double> &d, std::span<double> scores,
                                    std::span<double> gradients, const PopulationLoss &l) const {
  return scoreImpl(*impl_, constants_, d, scores, &gradients, l);
}
Error Population::variableGradients(const PopulationData<float> &d, std::span<float> out) const {
  return variableGradImpl(*impl_, constants_, d, out);
}
Error Population::variableGradients(const PopulationData<double> &d, std::span<double> out) const {
  return variableGradImpl(*impl_, constants_, d, out);
}

} // namespace hsnn
