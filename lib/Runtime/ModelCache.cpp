//===- lib/Runtime/ModelCache.cpp - Front-end results from the disk cache ===//
//
// A compile whose kernels are cached still ran the front end to find their
// key: in a fresh process most of such a hit (~0.8 of 1.7-2 ms here, cold
// code). An activation layer's model is kept beside its kernels, keyed by
// what the front end reads (the nodes' texts and constants, the options)
// and by a hash of the front end's own sources (FrontEndToken.h), so a
// snapshot never outlives the code that made it. A snapshot that does not
// read back whole is a miss: the front end runs and rewrites it.
//===----------------------------------------------------------------------===//
#include "LayerState.h"

#include "FrontEndToken.h"

namespace hsnn::detail {

Expected<std::shared_ptr<const CompiledModel>> activationModel(const std::vector<NodeSpec> &nodes,
                                                               const ModelOptions &options,
                                                               std::vector<std::string> &warnings) {
  CacheConfig config = cacheConfig();
  std::optional<ObjectCache> cache = config.enabled ? ObjectCache::open(config) : std::nullopt;
  if (!cache)
    return CompiledModel::activation(nodes, options, warnings);
  CacheKey key = CacheKeyBuilder()
                     .add("format", "hsnn-model-snapshot-1")
                     .add("front-end", HSNN_FRONT_END_TOKEN)
                     .add("source", CompiledModel::activationSource(nodes, options))
                     .finish();
  if (std::optional<std::vector<char>> bytes = cache->load(CacheCategory::Cpu, key))
    if (auto m = CompiledModel::fromSnapshot(*bytes, options, nodes.size(), warnings))
      return m;
  auto m = CompiledModel::activation(nodes, options, warnings);
  if (m)
    cache->store(CacheCategory::Cpu, key, (*m)->snapshot(warnings),
                 (*m)->describe("front end of a", {}), false);
  return m;
}

} // namespace hsnn::detail
