//===- lib/Runtime/HostKernels.cpp - JIT-compiled kernels for a layer -----===//
#include "HostKernels.h"

#include "Cache/ObjectCache.h"

#include <algorithm>
#include <tbb/parallel_for.h>
#include <chrono>
#include <fmt/format.h>

#ifndef HSNN_VERSION
#define HSNN_VERSION "0.1.0"
#endif

namespace hsnn::detail {
namespace {

constexpr size_t kMaxChunks = 4, kMinPerChunk = 3;

// Everything that changes the object: the tapes (the canonical form of the
// formulas after simplification and differentiation), kernel kinds, dtype,
// options, and the target, compiler and hsnn versions.
CacheKey objectKey(std::span<const KernelRequest> requests, const JITOptions &options, const HostTarget &t) {
  CacheKeyBuilder k;
  // Bump the format whenever the emitter or pipeline changes the code it makes.
  k.add("format", "hsnn-host-object-2")
      .add("hsnn", HSNN_VERSION)
      .add("llvm", t.llvmVersion)
      .add("triple", t.triple)
      .add("cpu", t.cpu)
      .add("features", t.features)
      .add("vector-math", t.vectorMath)
      .add("opt", uint64_t(options.optLevel))
      .add("fast-math", uint64_t(options.fastMath));
  for (const KernelRequest &r : requests)
    k.add("symbol", r.symbol)
        .add("shape", shapeName(r.shape))
        .add("dtype", to_string(r.dtype))
        .add("tape", r.program->fingerprint());
  return k.finish();
}

} // namespace

Expected<std::shared_ptr<KernelLibrary>> buildHostKernels(std::span<const KernelRequest> requests,
                                                          const JITOptions &options, CompileInfo &info) {
  auto jit = HostJIT::get();
  if (!jit)
    return jit.error();
  std::vector<std::string> symbols;
  for (const KernelRequest &r : requests)
    symbols.push_back(r.symbol);

  // Kernels compile in a fixed number of independent objects, in parallel.
  // The split depends only on the requests, so cache keys do not change
  // with the thread count.
  size_t chunks = std::min<size_t>(kMaxChunks, (requests.size() + kMinPerChunk - 1) / kMinPerChunk);
  size_t per = (requests.size() + chunks - 1) / chunks;
  std::optional<ObjectCache> cache = ObjectCache::open();
  std::vector<std::vector<char>> objects(chunks);
  std::vector<CompileStats> stats(chunks);
  std::vector<Error> errors(chunks);
  std::vector<char> hit(chunks, 0);
  auto build = [&](size_t c, bool useCached) {
    auto part = requests.subspan(c * per, std::min(per, requests.size() - c * per));
    CacheKey key = objectKey(part, options, (*jit)->target());
    if (cache && useCached)
      if (auto object = cache->load(CacheCategory::Cpu, key)) {
        objects[c] = std::move(*object);
        hit[c] = 1;
        return;
      }
    auto object = (*jit)->compileObject(part, options, &stats[c]);
    if (!object) {
      errors[c] = object.takeError();
      return;
    }
    if (cache)
      cache->store(CacheCategory::Cpu, key, *object);
    objects[c] = std::move(*object);
  };
  tbb::parallel_for(size_t(0), chunks, [&](size_t c) { build(c, true); });
  for (Error &e : errors)
    if (e)
      return std::move(e);

  CompileStats loadStats;
  auto lib = (*jit)->load(objects, symbols, &loadStats);
  if (!lib && std::find(hit.begin(), hit.end(), 1) != hit.end()) {
    // A verified entry that does not link (the machine's libmvec changed,
    // say) is compiled afresh and replaced, like any other miss.
    std::fill(hit.begin(), hit.end(), 0);
    tbb::parallel_for(size_t(0), chunks, [&](size_t c) { build(c, false); });
    for (Error &e : errors)
      if (e)
        return std::move(e);
    lib = (*jit)->load(objects, symbols, &loadStats);
  }
  if (!lib)
    return lib.error();
  info.emitMs = info.optimizeMs = info.codegenMs = 0;
  info.objectBytes = 0;
  for (size_t c = 0; c < chunks; ++c) { // CPU time summed over the parallel compiles
    info.emitMs += stats[c].emitMs;
    info.optimizeMs += stats[c].optimizeMs;
    info.codegenMs += stats[c].codegenMs;
    info.objectBytes += objects[c].size();
  }
  info.loadMs = loadStats.loadMs;
  info.cacheHit = std::all_of(hit.begin(), hit.end(), [](char h) { return h; });
  return lib;
}

} // namespace hsnn::detail
