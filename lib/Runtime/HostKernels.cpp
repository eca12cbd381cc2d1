//===- lib/Runtime/HostKernels.cpp - JIT-compiled kernels for a layer -----===//
#include "HostKernels.h"

#include "Cache/ObjectCache.h"

#include <bit>
#include <chrono>
#include <fmt/format.h>

#ifndef HSNN_VERSION
#define HSNN_VERSION "0.1.0"
#endif

namespace hsnn::detail {
namespace {

// Everything that changes the object: the tapes (the canonical form of the
// formulas after simplification and differentiation), kernel kinds, dtype,
// options, and the target, compiler and hsnn versions.
CacheKey objectKey(std::span<const KernelRequest> requests, const JITOptions &options, const HostTarget &t) {
  CacheKeyBuilder k;
  k.add("format", "hsnn-host-object-1")
      .add("hsnn", HSNN_VERSION)
      .add("llvm", t.llvmVersion)
      .add("triple", t.triple)
      .add("cpu", t.cpu)
      .add("features", t.features)
      .add("opt", uint64_t(options.optLevel))
      .add("fast-math", uint64_t(options.fastMath));
  for (const KernelRequest &r : requests) {
    std::string tape;
    for (const Instr &in : r.program->code) {
      tape += fmt::format("{}:{}:{}:{}:{:x}(", opInfo(in.op).name, int(in.isBool), int(in.var), in.param,
                          std::bit_cast<uint64_t>(in.number));
      for (uint32_t a : r.program->operands(in))
        tape += fmt::format("{},", a);
      tape += ");";
    }
    for (uint32_t o : r.program->outputs)
      tape += fmt::format("out{};", o);
    k.add("symbol", r.symbol).add("shape", shapeName(r.shape)).add("dtype", to_string(r.dtype)).add("tape", tape);
  }
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

  std::optional<ObjectCache> cache = ObjectCache::open();
  CacheKey key = objectKey(requests, options, (*jit)->target());
  CompileStats stats;
  if (cache) {
    if (auto object = cache->load(CacheCategory::Cpu, key)) {
      auto lib = (*jit)->load(*object, symbols, &stats);
      if (lib) {
        info.cacheHit = true;
        info.loadMs = stats.loadMs;
        info.objectBytes = object->size();
        return lib;
      }
      // A verified entry that does not link (e.g. a foreign object under a
      // colliding name) is compiled afresh like any other miss.
    }
  }

  auto object = (*jit)->compileObject(requests, options, &stats);
  if (!object)
    return object.error();
  if (cache)
    cache->store(CacheCategory::Cpu, key, *object);
  auto lib = (*jit)->load(*object, symbols, &stats);
  if (!lib)
    return lib.error();
  info.emitMs = stats.emitMs;
  info.optimizeMs = stats.optimizeMs;
  info.codegenMs = stats.codegenMs;
  info.loadMs = stats.loadMs;
  info.objectBytes = stats.objectBytes;
  info.cacheHit = false;
  return lib;
}

} // namespace hsnn::detail
