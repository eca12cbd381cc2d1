//===- lib/CPU/HostJitEngine.cpp - Models run as JIT-compiled host code ---===//
#include "HostJitEngine.h"

#include "Program/Launch.h"
#include "Program/Stopwatch.h"
#include "HostId.h"
#include "KernelBuild.h"
#include "Model/KernelRequests.h"
#include "CodeGen/MathCalls.h"
#include "RowCalibration.h"
#include "RowLaunch.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <tbb/parallel_for.h>

namespace hsnn::detail {
namespace {

// Contiguous elements per activation call: long enough to amortise the
// call, short enough that a batch-major tile stays in L2.
constexpr size_t kActivationBlock = 4096, kTileBytes = 1024;
constexpr size_t kLossBlock = 16384; // elements per loss call and per partial sum
// estimatedCompileMs's terms (ms).
constexpr double kEstimateFixedMs = 10, kEstimatePerInstructionMs = 0.04, kEstimatePerInlinedCallMs = 10;

// The kinds built when the engine is made (the others at their first use).
std::span<const KernelKind> creationKinds(bool loss) {
  static constexpr KernelKind kLoss[] = {KernelKind::LossElements, KernelKind::LossSum, KernelKind::LossGradient,
                                         KernelKind::LossFused};
  static constexpr KernelKind kActivation[] = {KernelKind::Forward, KernelKind::Backward};
  return loss ? std::span<const KernelKind>(kLoss) : std::span<const KernelKind>(kActivation);
}


class HostJitEngine final : public Engine {
public:
  HostJitEngine(std::shared_ptr<const CompiledModel> m, HostEngineOptions options)
      : Engine(std::move(m)), options_(std::move(options)), interpreter_(makeInterpreterEngine(model_)) {}

  Method method() const override { return Method::CpuJit; }
  /// A linkedOnly build found its kernels missing.
  bool missing() const { return missing_; }

  // Builds the kernels of `kinds` for every code unit.
  // linkedOnly: HostEngineOptions::linkedOnly, for the creation's kernels.
  Error build(std::span<const KernelKind> kinds, CompileInfo &info, bool progress = false,
              bool linkedOnly = false) {
    const CompiledModel &m = model();
    std::vector<KernelRequest> requests;
    std::string prefix = m.isLoss ? "hsnn_loss" : "hsnn_layer";
    // Per kind and unit, its request's index; none for a unit with no
    // constants in a constant-gradient kind (there is nothing to sum).
    constexpr size_t kNone = size_t(-1);
    std::vector<std::vector<size_t>> requestOf;
    planRows();
    for (KernelKind kind : kinds) {
      std::vector<size_t> &index = requestOf.emplace_back(m.units.size(), kNone);
      if (usesRowKernels(kind)) {
        rowRequests(kind, prefix, requests, index);
        continue;
      }
      if (!m.isLoss && !kindInfo(kind).constants) {
        multiUnitRequests(kind, prefix, requests, index);
        continue;
      }
      for (size_t u = 0; u < m.units.size(); ++u) {
        const Program *p = m.units[u].programs[size_t(kind)];
        if (kindInfo(kind).constants && p->outputs.empty())
          continue;
        index[u] = requests.size();
        requests.push_back({kernelSymbol(prefix, "_u", u, kind), p, kind, m.options.dtype});
      }
    }
    if (requests.empty()) { // constant gradients of a model without constants
      for (KernelKind kind : kinds)
        nodeKernel_[size_t(kind)].assign(m.numNodes(), nullptr);
      return Error::success();
    }
    // Described only for what is stored: a hit needs no description.
    auto describe = [&] { return m.describe("cpu_jit", std::vector<KernelKind>(kinds.begin(), kinds.end())); };
    CompileProgress told = progress ? options_.progress : CompileProgress();
    auto lib = buildKernels(requests, options_.jit, options_.cache, describe, info, told, linkedOnly);
    if (!lib)
      return lib.takeError();
    if (!*lib) { // linkedOnly, and not linked in the cache
      missing_ = true;
      return Error::success();
    }
    size_t k = 0;
    for (KernelKind kind : kinds) {
      if (usesRowKernels(kind)) { // requestOf: per segment
        for (size_t g = 0; g < rowPlan_->size(); ++g)
          rowKernel_[size_t(kind)].push_back((*lib)->address(requests[requestOf[k][g]].symbol));
        ++k;
        continue;
      }
      std::vector<void *> &fns = nodeKernel_[size_t(kind)];
      for (size_t n = 0; n < m.numNodes(); ++n) {
        size_t r = requestOf[k][m.unitOf[n]];
        fns.push_back(r == kNone ? nullptr : (*lib)->address(requests[r].symbol));
        if (r != kNone && !requests[r].units.empty())
          nodeCase_[size_t(kind)].push_back(unitCase_[size_t(kind)][m.unitOf[n]]);
      }
      ++k;
    }
    libraries_.push_back(std::move(*lib));
    info.rowSegments = rowPlan_ ? rowPlan_->size() : 0;
    return Error::success();
  }

  Error runActivation(KernelKind kind, const ActivationArgs &a, const ParamSet &params) const override {
    if (kindInfo(kind).constants) {
      if (Error e = ensure(constants_, kind))
        return e;
      if (!constants_.compiled)
        return interpreter_->runActivation(kind, a, params);
      if (model().options.dtype == DType::F32)
        runConstantGradient<float>(a, params);
      else
        runConstantGradient<double>(a, params);
      return Error::success();
    }
    if (kind == KernelKind::Fused) {
      if (Error e = ensure(fused_, kind))
        return e;
      if (!fused_.compiled)
        return interpreter_->runActivation(kind, a, params);
    }
    if (model().options.dtype == DType::F32)
      run<float>(kind, a, params);
    else
      run<double>(kind, a, params);
    return Error::success();
  }

  Expected<double> runLoss(KernelKind kind, const LossArgs &a, const ParamSet &params) const override {
    if (kindInfo(kind).constants) {
      if (Error e = ensure(constants_, kind))
        return e;
      if (!constants_.compiled)
        return interpreter_->runLoss(kind, a, params);
      if (model().options.dtype == DType::F32)
        runLossConstantGradient<float>(a, params);
      else
        runLossConstantGradient<double>(a, params);
      return 0.0;
    }
    if (model().options.dtype == DType::F32)
      return runLoss<float>(kind, a, params);
    return runLoss<double>(kind, a, params);
  }

private:
  // Kernels built at their first use (fused, constant gradients): once,
  // and a failure follows the fallback policy (interpreter with a warning,
  // or an error when strict).
  struct LazyKind {
    std::once_flag once;
    Error error;
    bool compiled = false;
  };
  Error ensure(LazyKind &lazy, KernelKind kind) const {
    std::call_once(lazy.once, [&] {
      auto *self = const_cast<HostJitEngine *>(this);
      CompileInfo info;
      if (Error e = self->build(std::span(&kind, 1), info))
        lazy.error = options_.onLazyFailure ? options_.onLazyFailure(e) : std::move(e);
      else
        lazy.compiled = true;
    });
    return lazy.error;
  }

  // Per node, the batch in fixed chunks (gathered when batch-major), each
  // chunk's sums added in chunk order: the result does not depend on the
  // thread count.
  template <class T> void runConstantGradient(const ActivationArgs &a, const ParamSet &params) const {
    using Fn = void (*)(const T *, const T *, double *, void *, const double *, int64_t);
    const CompiledModel &m = model();
    const auto &fns = nodeKernel_[size_t(KernelKind::ConstantGradient)];
    size_t nodes = m.numNodes(), batch = a.batch;
    bool nodesMajor = m.options.layout == Layout::NodesMajor;
    const T *z = static_cast<const T *>(a.z), *err = static_cast<const T *>(a.err);
    auto *grads = static_cast<double *>(a.out0);
    forBlocks(nodes, batch, [&](size_t n) {
      size_t k = m.group(n).formula.constants.size();
      if (k == 0)
        return;
      auto fn = reinterpret_cast<Fn>(fns[n]);
      std::vector<CompensatedSum> sums(k);
      std::vector<double> part(k);
      std::vector<T> zb, eb;
      for (size_t c0 = 0; c0 < batch; c0 += kActivationBlock) {
        size_t len = std::min(kActivationBlock, batch - c0);
        const T *zp = z + n * batch + c0, *ep = err + n * batch + c0;
        if (!nodesMajor) {
          zb.resize(len), eb.resize(len);
          for (size_t i = 0; i < len; ++i) {
            zb[i] = z[(c0 + i) * nodes + n];
            eb[i] = err[(c0 + i) * nodes + n];
          }
          zp = zb.data(), ep = eb.data();
        }
        fn(zp, ep, part.data(), nullptr, params.values.data() + m.offsets[n], int64_t(len));
        for (size_t j = 0; j < k; ++j)
          sums[j].add(part[j]);
      }
      for (size_t j = 0; j < k; ++j)
        grads[m.offsets[n] + j] = sums[j].value();
    });
  }

  template <class T> void runLossConstantGradient(const LossArgs &a, const ParamSet &params) const {
    using Fn = double (*)(const T *, const T *, double *, const double *, int64_t, double);
    size_t k = model().group(0).formula.constants.size();
    if (k == 0)
      return;
    auto fn = reinterpret_cast<Fn>(nodeKernel_[size_t(KernelKind::LossConstantGradient)][0]);
    const T *yp = static_cast<const T *>(a.yPred), *yt = static_cast<const T *>(a.yTrue);
    size_t chunks = (a.n + kLossBlock - 1) / kLossBlock;
    std::vector<double> parts(chunks * k);
    forBlocks(chunks, kLossBlock, [&](size_t c) {
      size_t i0 = c * kLossBlock, len = std::min(kLossBlock, a.n - i0);
      fn(yp + i0, yt + i0, parts.data() + c * k, params.values.data(), int64_t(len), 1.0);
    });
    auto *grads = static_cast<double *>(a.out);
    for (size_t j = 0; j < k; ++j) {
      CompensatedSum sum;
      for (size_t c = 0; c < chunks; ++c)
        sum.add(parts[c * k + j]);
      grads[j] = a.scale * sum.value();
    }
  }

  template <class T> void run(KernelKind kind, const ActivationArgs &a, const ParamSet &params) const {
    if (usesRowKernels(kind))
      return runRows<T>(kind, a, params);
    const auto &fns = nodeKernel_[size_t(kind)];
    const auto &cases = nodeCase_[size_t(kind)];
    const CompiledModel &m = model();
    // Batch-major tiles of 256 f32 or 128 f64 rows: measured best on bench W1.
    size_t block = m.options.layout == Layout::NodesMajor ? kActivationBlock : kTileBytes / sizeof(T);
    const double *p = params.values.data();
    launchActivation<T>(m.options.layout, m.numNodes(), a.batch, static_cast<const T *>(a.z),
                        static_cast<const T *>(a.err), static_cast<T *>(a.out0), static_cast<T *>(a.out1), block,
                        [&](size_t n, const T *zIn, const T *errIn, T *o0, T *o1, size_t len) {
                          auto fn = reinterpret_cast<MultiActivationFn<T>>(fns[n]);
                          fn(zIn, errIn, o0, o1, p + m.offsets[n], int64_t(len), cases[n]);
                        });
  }

  // Batch-major with row kernels: blocks of rows of one segment per task,
  // in place, no scratch.
  template <class T> void runRows(KernelKind kind, const ActivationArgs &a, const ParamSet &params) const {
    // The constants as T in the kernels' layout (KernelRequests.h): O(nodes) per call.
    const RowTable &layout = rowTable_[size_t(kind)];
    std::vector<T> table(layout.source.size() + kRowTablePadding);
    for (size_t i = 0; i < layout.source.size(); ++i)
      table[i] = T(params.values[layout.source[i]]);
    launchRows<T>(*rowPlan_, rowKernel_[size_t(kind)], table.data(), layout.at, model().numNodes(), a.batch,
                  static_cast<const T *>(a.z), static_cast<const T *>(a.err), static_cast<T *>(a.out0),
                  static_cast<T *>(a.out1));
  }

  // Whether `kind` runs as row kernels: elementwise kinds of a batch-major
  // layer whose formulas repeat in a pattern (RowPlan.h).
  bool usesRowKernels(KernelKind kind) const {
    return rowPlan_ && !model().isLoss && !kindInfo(kind).constants;
  }

  void planRows() {
    const CompiledModel &m = model();
    if (rowsPlanned_ || m.isLoss || m.options.layout != Layout::BatchMajor || m.numNodes() == 0)
      return;
    rowsPlanned_ = true;
    // The width LLVM's target implies, known without asking LLVM (HostId.h);
    // the plan only weighs segments, so a mismatch would cost speed only.
    unsigned bits = hostId().vectorBits;
    if (hostId().fingerprint.empty()) {
      auto jit = HostJIT::get();
      if (!jit)
        return;
      bits = (*jit)->target().vectorBits;
    }
    size_t lanes = bits / (m.options.dtype == DType::F32 ? 32 : 64);
    rowPlan_ = planRowSegments(m.unitOf, lanes);
  }

  // The kind's kernels for every unit, several units per function
  // (MultiActivationFn); index[u] is unit u's request, unitCase_ its case.
  void multiUnitRequests(KernelKind kind, const std::string &prefix, std::vector<KernelRequest> &requests,
                         std::vector<size_t> &index) {
    MultiKernelSet set = multiUnitKernels(model(), kind, prefix);
    for (size_t u = 0; u < set.requestOf.size(); ++u)
      index[u] = requests.size() + set.requestOf[u];
    unitCase_[size_t(kind)] = std::move(set.caseOf);
    requests.insert(requests.end(), set.requests.begin(), set.requests.end());
  }

  // The kind's row kernels appended to `requests`; index[g] is segment g's.
  void rowRequests(KernelKind kind, const std::string &prefix, std::vector<KernelRequest> &requests,
                   std::vector<size_t> &index) {
    RowKernelSet set = rowKernels(*rowPlan_, model(), kind, prefix);
    index.clear();
    for (size_t r : set.requestOf)
      index.push_back(requests.size() + r);
    requests.insert(requests.end(), set.requests.begin(), set.requests.end());
    rowTable_[size_t(kind)] = {std::move(set.tableAt), std::move(set.tableSource)};
  }

  template <class T> double runLoss(KernelKind kind, const LossArgs &a, const ParamSet &params) const {
    auto fn = reinterpret_cast<LossFn<T>>(nodeKernel_[size_t(kind)][0]);
    const T *yp = static_cast<const T *>(a.yPred), *yt = static_cast<const T *>(a.yTrue);
    T *out = static_cast<T *>(a.out);
    T scale = T(a.scale);
    const double *p = params.values.data();
    return launchLoss(a.n, kLossBlock, [&](size_t i0, size_t len) {
      return fn(yp + i0, yt + i0, out ? out + i0 : nullptr, p, int64_t(len), scale);
    });
  }

  HostEngineOptions options_;
  bool missing_ = false; // a linkedOnly build found no linked entry
  std::shared_ptr<const Engine> interpreter_; // runs kinds the JIT could not build
  std::vector<std::shared_ptr<KernelLibrary>> libraries_;
  std::vector<void *> nodeKernel_[kNumKernelKinds]; // per kind, per node
  std::vector<int64_t> unitCase_[kNumKernelKinds];  // per elementwise kind, per unit: its case in its kernel
  std::vector<int64_t> nodeCase_[kNumKernelKinds];  // the same per node
  bool rowsPlanned_ = false;
  std::optional<std::vector<RowSegment>> rowPlan_; // batch-major layers with a pattern
  std::vector<void *> rowKernel_[kNumKernelKinds];  // per kind, per segment of rowPlan_
  struct RowTable {
    std::vector<size_t> at;      // per segment, its first entry
    std::vector<uint64_t> source; // per entry, its index into the params
  };
  RowTable rowTable_[kNumKernelKinds];
  mutable LazyKind fused_, constants_;
};

} // namespace

double estimatedCompileMs(const CompiledModel &m) {
  // Fitted to `hsnn-jit bench --workload compile`'s layers (cache off):
  // a fixed part, code generation by tape instruction, and the inlined
  // math library's copies (MathCalls.h) where a kernel keeps them.
  double instructions = 0, inlinedCalls = 0;
  for (const CodeUnit &u : m.units)
    for (KernelKind k : creationKinds(m.isLoss)) {
      instructions += double(u.programs[size_t(k)]->code.size());
      inlinedCalls += double(mathCallSites(*u.programs[size_t(k)]));
    }
  if (!m.isLoss && m.units.size() > kMultiKernels * kInlineMathFormulasPerKernel)
    inlinedCalls = 0;
  return kEstimateFixedMs + kEstimatePerInstructionMs * instructions + kEstimatePerInlinedCallMs * inlinedCalls;
}

Expected<std::shared_ptr<const Engine>> makeHostJitEngine(std::shared_ptr<const CompiledModel> model,
                                                          const HostEngineOptions &options, CompileInfo &info) {
  std::span<const KernelKind> kinds = creationKinds(model->isLoss);
  auto engine = std::make_shared<HostJitEngine>(std::move(model), options);
  Error e = engine->build(kinds, info, true, options.linkedOnly);
  if (e)
    return e;
  if (engine->missing())
    return std::shared_ptr<const Engine>();
  return std::shared_ptr<const Engine>(std::move(engine));
}

} // namespace hsnn::detail
