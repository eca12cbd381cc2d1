//===- lib/CPU/MathObjects.cpp - The math functions kernels link ----------===//
#include "MathObjects.h"

#include "hsnn/Version.h"

#include "CodeGenToken.h"

#include <map>
#include <memory>
#include <mutex>
#include <tbb/parallel_for.h>

namespace hsnn::detail {
namespace {

// Bump it when a math object's symbols or calling convention change.
constexpr const char *kMathObjectFormat = "hsnn-math-object-1";

CacheKey mathObjectKey(const MathFunction &f, const JITOptions &options, const HostTarget &t) {
  CacheKeyBuilder k;
  k.add("format", kMathObjectFormat);
  addCompilerAndTarget(k, t);
  return k.add("opt", uint64_t(options.optLevel)).add("function", f.symbol()).finish();
}

// Compiled in this process, by key: the same few functions serve every
// layer, and a process that compiles with the cache off (or a layer whose
// cache entries went) compiles each once.
struct Compiled {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const std::vector<char>>> objects;
};
Compiled &compiled() {
  static auto *c = new Compiled; // never destroyed: compiles may run at exit
  return *c;
}

} // namespace

void addCompilerAndTarget(CacheKeyBuilder &k, const HostTarget &t) {
  k.add("code-generator", HSNN_CODEGEN_TOKEN)
      .add("hsnn", HSNN_VERSION)
      .add("llvm", t.llvmVersion)
      .add("triple", t.triple)
      .add("cpu", t.cpu)
      .add("features", t.features)
      .add("vector-math", t.vectorMath);
}

Expected<MathObjects> mathObjects(HostJIT &jit, std::span<const MathFunction> functions, const JITOptions &options,
                                  const std::optional<ObjectCache> &cache) {
  MathObjects out;
  out.objects.resize(functions.size());
  std::vector<size_t> misses;
  Compiled &memory = compiled();
  for (size_t i = 0; i < functions.size(); ++i) {
    out.keys.push_back(mathObjectKey(functions[i], options, jit.target()));
    std::string hex = toHex(out.keys.back());
    {
      std::lock_guard lock(memory.mutex);
      if (auto it = memory.objects.find(hex); it != memory.objects.end()) {
        out.objects[i] = *it->second;
        continue;
      }
    }
    if (auto object = cache ? cache->load(CacheCategory::Cpu, out.keys.back()) : std::nullopt)
      out.objects[i] = std::move(*object);
    else
      misses.push_back(i);
  }
  std::vector<Error> errors(functions.size());
  std::vector<CompileStats> stats(functions.size());
  tbb::parallel_for(size_t(0), misses.size(), [&](size_t m) {
    size_t i = misses[m];
    auto object = jit.compileMath(functions.subspan(i, 1), options, &stats[i]);
    if (!object) {
      errors[i] = object.takeError();
      return;
    }
    if (cache)
      cache->store(CacheCategory::Cpu, out.keys[i], *object,
                   "cpu_jit math function " + functions[i].symbol());
    out.objects[i] = std::move(*object);
  });
  for (Error &e : errors)
    if (e)
      return std::move(e);
  std::lock_guard lock(memory.mutex);
  for (size_t i = 0; i < functions.size(); ++i) {
    memory.objects.try_emplace(toHex(out.keys[i]), std::make_shared<const std::vector<char>>(out.objects[i]));
    out.stats.emitMs += stats[i].emitMs;
    out.stats.optimizeMs += stats[i].optimizeMs;
    out.stats.codegenMs += stats[i].codegenMs;
  }
  return out;
}

} // namespace hsnn::detail
