//===- lib/CPU/RowCalibration.cpp - Row kernel shapes measured on the host ===//
#include "RowCalibration.h"

#include "HostId.h"
#include "CodeGen/HostJIT.h"
#include "Model/CompiledModel.h"
#include "Model/KernelRequests.h"
#include "Program/Stopwatch.h"
#include "RowLaunch.h"
#include "hsnn/Environment.h"
#include "hsnn/Version.h"

#include "CodeGenToken.h"

#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>
#include <gnu/libc-version.h>
#include <mutex>
#include <random>
#include <tbb/parallel_for.h>

namespace hsnn::detail {
namespace {

// The probe: bench W1's formulas, period 8 (inline chains, libmvec calls,
// a select, an affine slot), f32, forward and backward (two inputs), at
// 16384 x 256: 16 MiB an array, 48 MiB with err and the output, past a 32
// MiB L3. Whether prefetching pays shows only there: on a Zen 4 in L3 the
// candidates were close and the winner changed from run to run, while at
// 2^24 elements 4 KiB ahead left W2's batch-major backward well behind its
// nodes-major one and no prefetch ahead of it. Rounds alternate the
// candidates, so a drift of the machine's bandwidth falls on all of them
// alike.
constexpr const char *kProbeFormulas[] = {"relu", "sigmoid", "tanh", "gelu", "silu", "softplus", "sin(num)",
                                          "0.5*num+0.1"};
constexpr size_t kProbeNodes = 256, kProbeBatch = 16384, kRounds = 3;
constexpr KernelKind kProbeKinds[] = {KernelKind::Forward, KernelKind::Backward};

// Bump when what a stored entry holds changes.
constexpr const char *kEntryFormat = "hsnn-row-shape-1";

CacheKey entryKey(const HostTarget &t) {
  CacheKeyBuilder k;
  k.add("format", kEntryFormat)
      .add("code-generator", HSNN_CODEGEN_TOKEN)
      .add("hsnn", HSNN_VERSION)
      .add("llvm", HostJIT::llvmVersion())
      .add("host", hostId().fingerprint)
      .add("cpu", t.cpu)
      .add("features", t.features)
      .add("vector-math", t.vectorMath)
      .add("libc", ::gnu_get_libc_version());
  return k.finish();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct CandidateKernels {
  std::shared_ptr<KernelLibrary> library;
  std::vector<void *> fns[std::size(kProbeKinds)]; // per kind, per segment
};

} // namespace

std::vector<RowShape> candidateRowShapes() {
  std::vector<RowShape> shapes;
  for (unsigned blocks : {1u, 4u})
    for (unsigned ahead : {0u, 4096u})
      shapes.push_back({.blocksPerPass = blocks, .prefetchBytes = ahead});
  return shapes;
}

Expected<RowCalibration> calibrateRowShapes() {
  auto jit = HostJIT::get();
  if (!jit)
    return jit.error();
  auto t0 = Clock::now();
  std::vector<NodeSpec> nodes;
  for (size_t j = 0; j < kProbeNodes; ++j)
    nodes.push_back({kProbeFormulas[j % std::size(kProbeFormulas)], {}});
  std::vector<std::string> warnings;
  auto model = CompiledModel::activation(nodes, {.dtype = DType::F32, .layout = Layout::BatchMajor}, warnings);
  if (!model)
    return model.error();
  const CompiledModel &m = **model;
  auto plan = planRowSegments(m.unitOf, (*jit)->target().vectorBits / 32);
  if (!plan)
    return Error(ErrorCode::Internal, "the row-shape probe layer has no row plan");

  std::vector<KernelRequest> requests;
  std::vector<size_t> requestOf[std::size(kProbeKinds)];
  std::vector<size_t> tableAt;
  for (size_t k = 0; k < std::size(kProbeKinds); ++k) {
    RowKernelSet set = rowKernels(*plan, m, kProbeKinds[k], "hsnn_row_probe");
    for (size_t r : set.requestOf)
      requestOf[k].push_back(requests.size() + r);
    requests.insert(requests.end(), set.requests.begin(), set.requests.end());
    tableAt = set.tableAt; // the probe has no constants: the table is padding
  }
  std::vector<std::string> symbols;
  for (const KernelRequest &r : requests)
    symbols.push_back(r.symbol);

  const std::vector<RowShape> shapes = candidateRowShapes();
  std::vector<CandidateKernels> kernels(shapes.size());
  std::vector<Error> errors(shapes.size());
  tbb::parallel_for(size_t(0), shapes.size(), [&](size_t c) {
    auto object = (*jit)->compileObject(requests, {.optLevel = 3, .rowShape = shapes[c]}, nullptr);
    if (!object) {
      errors[c] = object.takeError();
      return;
    }
    std::vector<std::vector<char>> objects{std::move(*object)};
    auto lib = (*jit)->load(objects, symbols, nullptr);
    if (!lib) {
      errors[c] = lib.takeError();
      return;
    }
    kernels[c].library = std::move(*lib);
    for (size_t k = 0; k < std::size(kProbeKinds); ++k)
      for (size_t r : requestOf[k])
        kernels[c].fns[k].push_back(kernels[c].library->address(requests[r].symbol));
  });
  for (Error &e : errors)
    if (e)
      return std::move(e);
  RowCalibration out;
  out.compileMs = msSince(t0);

  auto t1 = Clock::now();
  const size_t n = kProbeNodes * kProbeBatch;
  std::vector<float> z(n), err(n), result(n), table(kRowTablePadding);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> pick(-6, 6);
  for (size_t i = 0; i < n; ++i)
    z[i] = pick(rng), err[i] = pick(rng);
  auto run = [&](const CandidateKernels &c) {
    auto start = Clock::now();
    launchRows<float>(*plan, c.fns[0], table.data(), tableAt, kProbeNodes, kProbeBatch, z.data(), nullptr,
                      result.data(), nullptr);
    launchRows<float>(*plan, c.fns[1], table.data(), tableAt, kProbeNodes, kProbeBatch, z.data(), err.data(),
                      result.data(), nullptr);
    return msSince(start);
  };
  std::vector<std::vector<double>> times(shapes.size());
  for (size_t round = 0; round <= kRounds; ++round)
    for (size_t c = 0; c < shapes.size(); ++c) {
      double ms = run(kernels[c]);
      if (round > 0) // round 0 warms the pages, caches and threads
        times[c].push_back(ms);
    }
  out.measureMs = msSince(t1);
  for (size_t c = 0; c < shapes.size(); ++c)
    out.timings.emplace_back(shapes[c], median(times[c]));
  out.best = std::min_element(out.timings.begin(), out.timings.end(),
                              [](const auto &a, const auto &b) { return a.second < b.second; })
                 ->first;
  return out;
}

Expected<std::optional<RowShape>> rowShapeOverride() {
  const char *env = environmentValue(EnvironmentVariable::RowShape);
  if (!env || !*env)
    return std::optional<RowShape>();
  std::optional<RowShape> shape = parseRowShape(env);
  if (!shape)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("HSNN_ROW_SHAPE='{}' is not BxP (B blocks a pass: 1, 2 or 4; P bytes prefetched "
                             "ahead: 0 to 65536, a multiple of 64), e.g. 4x0; unset it to use the shape measured "
                             "on this host",
                             env));
  return shape;
}

std::optional<std::pair<RowShape, std::string>> storedRowShape(const CacheConfig &config) {
  auto jit = HostJIT::get();
  if (!jit)
    return std::nullopt;
  std::optional<ObjectCache> cache = ObjectCache::open(config);
  if (!cache)
    return std::nullopt;
  std::optional<std::vector<char>> payload = cache->load(CacheCategory::Cpu, entryKey((*jit)->target()));
  if (!payload)
    return std::nullopt;
  std::string text(payload->begin(), payload->end());
  std::optional<RowShape> shape = parseRowShape(std::string_view(text).substr(0, text.find('\n')));
  if (!shape) // authenticated but unreadable (another format): measured again
    return std::nullopt;
  return std::pair{*shape, text};
}

namespace {

struct Chosen {
  std::mutex mutex;
  std::optional<RowShapeChoice> choice;
};
Chosen &chosen() {
  static Chosen c;
  return c;
}

} // namespace

RowShapeChoice loadOrCalibrateRowShape(const CacheConfig &config) {
  if (auto stored = storedRowShape(config))
    return {stored->first, stored->second.substr(stored->second.find('\n') + 1), true};
  auto jit = HostJIT::get();
  const std::string cpu = jit ? (*jit)->target().cpu : "generic";
  auto calibration = calibrateRowShapes();
  if (!calibration) {
    if (config.warn)
      config.warn(fmt::format("row-kernel shapes could not be measured on this host ({}); batch-major layers use "
                              "the shape fixed for {}",
                              calibration.error().message(), cpu));
    return {fixedRowShape(cpu), {}, false};
  }
  std::string timings, listed;
  for (const auto &[shape, ms] : calibration->timings) {
    timings += fmt::format("{} {:.4f}\n", to_string(shape), ms);
    listed += fmt::format("{}{} {:.3f}", listed.empty() ? "" : ", ", to_string(shape), ms);
  }
  std::string payload = to_string(calibration->best) + "\n" + timings;
  if (std::optional<ObjectCache> cache = ObjectCache::open(config))
    cache->store(CacheCategory::Cpu, entryKey((*jit)->target()), std::vector<char>(payload.begin(), payload.end()),
                 fmt::format("row-kernel shape for {}: {} (measured in {:.0f} ms after {:.0f} ms compiling; probe "
                             "forward+backward ms: {})",
                             cpu, to_string(calibration->best), calibration->measureMs, calibration->compileMs,
                             listed));
  return {calibration->best, timings, true};
}

RowShape hostRowShape(const CacheConfig &config) {
  Chosen &c = chosen();
  std::lock_guard lock(c.mutex);
  if (!c.choice)
    c.choice = loadOrCalibrateRowShape(config);
  return c.choice->shape;
}

std::optional<RowShapeChoice> processRowShape() {
  Chosen &c = chosen();
  std::lock_guard lock(c.mutex);
  return c.choice;
}

} // namespace hsnn::detail
