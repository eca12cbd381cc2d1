//===- lib/Runtime/HostKernels.cpp - JIT-compiled kernels for a layer -----===//
#include "HostKernels.h"

namespace hsnn::detail {

Expected<std::shared_ptr<KernelLibrary>> buildHostKernels(std::span<const KernelRequest> requests,
                                                          const JITOptions &options, CompileInfo &info) {
  auto jit = HostJIT::get();
  if (!jit)
    return jit.error();
  CompileStats stats;
  auto object = (*jit)->compileObject(requests, options, &stats);
  if (!object)
    return object.error();
  std::vector<std::string> symbols;
  for (const KernelRequest &r : requests)
    symbols.push_back(r.symbol);
  auto lib = (*jit)->load(*object, symbols, &stats);
  if (!lib)
    return lib.error();
  info.emitMs = stats.emitMs;
  info.optimizeMs = stats.optimizeMs;
  info.codegenMs = stats.codegenMs;
  info.loadMs = stats.loadMs;
  info.objectBytes = stats.objectBytes;
  info.cacheHit = stats.cacheHit;
  return lib;
}

} // namespace hsnn::detail
