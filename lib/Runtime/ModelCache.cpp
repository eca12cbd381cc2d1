//===- lib/Runtime/ModelCache.cpp - Front-end results from the disk cache ===//
//
// A compile whose kernels are cached still ran the front end to find their
// key: in a fresh process most of such a hit (cold code). A layer's or
// loss's model is kept beside its kernels, keyed by what the front end
// reads (the formulas' texts and constants, the options) and by a hash of
// the front end's own sources (FrontEndToken.h), so a snapshot never
// outlives the code that made it. A snapshot that does not
// read back whole is a miss: the front end runs and rewrites it.
//===----------------------------------------------------------------------===//
#include "LayerState.h"

#include "FrontEndToken.h"

#include <functional>

namespace hsnn::detail {

namespace {

using ModelResult = Expected<std::shared_ptr<const CompiledModel>>;

// The model for `source` from its snapshot, else from `frontEnd` (then
// stored).
ModelResult cachedModel(const std::string &source, bool loss, size_t numNodes, const ModelOptions &options,
                        std::vector<std::string> &warnings, const std::function<ModelResult()> &frontEnd) {
  CacheConfig config = cacheConfig();
  std::optional<ObjectCache> cache = config.enabled ? ObjectCache::open(config) : std::nullopt;
  if (!cache)
    return frontEnd();
  CacheKey key = CacheKeyBuilder()
                     .add("format", "hsnn-model-snapshot-2")
                     .add("front-end", HSNN_FRONT_END_TOKEN)
                     .add("source", source)
                     .finish();
  if (std::optional<std::vector<char>> bytes = cache->load(CacheCategory::Cpu, key)) {
    std::vector<std::string> said; // the snapshot's warnings, given only if it is used
    if (auto m = CompiledModel::fromSnapshot(*bytes, options, numNodes, said); m && m->isLoss == loss) {
      warnings.insert(warnings.end(), said.begin(), said.end());
      return m;
    }
  }
  ModelResult m = frontEnd();
  if (m)
    cache->store(CacheCategory::Cpu, key, (*m)->snapshot(warnings), (*m)->describe("front end of a", {}), false);
  return m;
}

} // namespace

ModelResult activationModel(const std::vector<NodeSpec> &nodes, const ModelOptions &options,
                            std::vector<std::string> &warnings) {
  return cachedModel(CompiledModel::activationSource(nodes, options), false, nodes.size(), options, warnings,
                     [&] { return CompiledModel::activation(nodes, options, warnings); });
}

ModelResult lossModel(std::string_view formula, const std::map<std::string, double> &constants,
                      const ModelOptions &options, std::vector<std::string> &warnings) {
  return cachedModel(CompiledModel::lossSource(formula, constants, options), true, 1, options, warnings,
                     [&] { return CompiledModel::loss(formula, constants, options, warnings); });
}

} // namespace hsnn::detail
