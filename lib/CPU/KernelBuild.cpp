//===- lib/CPU/KernelBuild.cpp - Kernel requests to loaded code ----------===//
#include "KernelBuild.h"

#include "HostId.h"
#include "MathObjects.h"
#include "RowCalibration.h"
#include "SharedObject.h"
#include "Program/Stopwatch.h"
#include "hsnn/Environment.h"
#include "hsnn/Version.h"

#include "CodeGenToken.h"

#include <algorithm>
#include <cstdlib>
#include <gnu/libc-version.h>
#include <mutex>
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>

namespace hsnn::detail {
namespace {

// Objects per compile: small layers in at most 4; large ones in objects of
// at most 128 kernels (formula tapes, as progress counts them) but never
// less than one function. The limit keeps progress fine and exits prompt:
// a background compile stops only between objects, and with the inlined
// math library an object of many sin and tanh tapes took seconds.
constexpr size_t kSmallChunks = 4, kMaxTapesPerChunk = 128;

// Bump it when the objects' layout or entry points change; the code
// generator's own sources are in the keys through HSNN_CODEGEN_TOKEN.
constexpr const char *kObjectFormat = "hsnn-host-object-17";

// What the requests compile to on a given target: the tapes (the canonical
// form of the formulas after simplification and differentiation), kernel
// kinds, dtype and options.
void addRequests(CacheKeyBuilder &k, std::span<const KernelRequest> requests, const JITOptions &options) {
  k.add("opt", uint64_t(options.optLevel)).add("fast-math", uint64_t(options.fastMath));
  if (options.rowShape) // a fixed shape (HSNN_ROW_SHAPE); the host's measured one is the host's
    k.add("row-shape", to_string(*options.rowShape));
  for (const KernelRequest &r : requests) {
    k.add("symbol", r.symbol)
        .add("kind", kindName(r.kind))
        .add("dtype", to_string(r.dtype))
        .add("tape", r.program->fingerprint())
        .add("row-slots", uint64_t(r.rowSlots.size()))
        .add("units", uint64_t(r.units.size()));
    for (const Program *slot : r.rowSlots)
      k.add("row-slot", slot->fingerprint());
    for (const Program *unit : r.units)
      k.add("unit", unit->fingerprint());
  }
}

// Everything that changes an object: the requests, and the target,
// compiler and hsnn versions.
CacheKey objectKey(std::span<const KernelRequest> requests, const JITOptions &options, const HostTarget &t) {
  CacheKeyBuilder k;
  k.add("format", kObjectFormat);
  addCompilerAndTarget(k, t);
  addRequests(k, requests, options);
  return k.finish();
}

// What the environment asks of the JIT's code (HostJIT.cpp reads the same
// variables, once, when the JIT starts): read once too, at the first
// compile. The host's fingerprint does not say it, so a linked entry is
// keyed by it: a process asking for AVX2 code or libmvec loaded the linked
// code another had compiled for the host and its math library.
const std::string &jitOverrides() {
  static const std::string overrides = [] {
    auto env = [](EnvironmentVariable name) {
      const char *v = environmentValue(name);
      return std::string(v ? v : "");
    };
    return env(EnvironmentVariable::TargetCpu) + ";" + env(EnvironmentVariable::CpuMath);
  }();
  return overrides;
}

// A layer's objects linked into one shared object. Where the host is
// identified without LLVM (HostId.h), named by that, the versions, what the
// environment asks of the code and the requests, so that a hit asks LLVM
// nothing; else by the objects' keys. Which linker made it does not matter:
// loads are checked.
std::optional<CacheKey> hostLinkedKey(std::span<const KernelRequest> requests, const JITOptions &options,
                                      size_t chunks) {
  const HostId &host = hostId();
  if (host.fingerprint.empty())
    return std::nullopt;
  CacheKeyBuilder k;
  k.add("format", "hsnn-linked-5") // 5: math functions linked beside the kernels
      .add("object-format", kObjectFormat)
      .add("code-generator", HSNN_CODEGEN_TOKEN)
      .add("hsnn", HSNN_VERSION)
      .add("llvm", HostJIT::llvmVersion())
      .add("host", host.fingerprint)
      .add("overrides", jitOverrides())
      .add("libc", ::gnu_get_libc_version()) // which vector math variants exist
      .add("objects", uint64_t(chunks))
      .add("tapes-per-object", uint64_t(kMaxTapesPerChunk));
  addRequests(k, requests, options);
  return k.finish();
}
CacheKey objectsLinkedKey(std::span<const CacheKey> objects, std::span<const std::string> symbols,
                          std::span<const MathFunction> math) {
  CacheKeyBuilder k;
  k.add("format", "hsnn-linked-3");
  for (const CacheKey &o : objects)
    k.add("object", toHex(o));
  for (const std::string &s : symbols)
    k.add("symbol", s);
  for (const MathFunction &f : math) // compiled as the objects are
    k.add("math", f.symbol());
  return k.finish();
}

// Progress counts kernels (a formula's tape for one kind, however many
// share a function), reported one call at a time and only forward.
size_t countTapes(std::span<const KernelRequest> requests) {
  size_t n = 0;
  for (const KernelRequest &r : requests)
    n += std::max<size_t>(1, r.units.size());
  return n;
}

// Where each object's requests start (and, last, the end): consecutive
// requests, at most `limit` tapes each unless one request alone has more,
// and a function of several formulas always alone: its object's cache
// entry then does not depend on its neighbours, so a layer with one
// formula changed finds the others' objects (multiUnitKernels cuts large
// layers by content). It depends only on the requests, so cache keys do
// not change with the thread count.
std::vector<size_t> chunkStarts(std::span<const KernelRequest> requests) {
  const size_t limit = std::clamp<size_t>((countTapes(requests) + kSmallChunks - 1) / kSmallChunks, 1,
                                          kMaxTapesPerChunk);
  std::vector<size_t> starts{0};
  size_t tapes = 0;
  auto multi = [&](size_t i) { return requests[i].units.size() > 1; };
  for (size_t i = 0; i < requests.size(); ++i) {
    size_t t = countTapes(requests.subspan(i, 1));
    if (tapes > 0 && (tapes + t > limit || multi(i) || multi(i - 1))) {
      starts.push_back(i);
      tapes = 0;
    }
    tapes += t;
  }
  starts.push_back(requests.size());
  return starts;
}

// One build of a set of kernel requests: the linked shared object from the
// cache (no LLVM), else each object from the cache or compiled (in
// parallel, with the math functions they call), loaded into the JIT; the
// JIT fields of `info` filled.
class KernelBuild {
public:
  KernelBuild(std::span<const KernelRequest> requests, const JITOptions &options, const CacheConfig &cacheConfig,
              CompileInfo &info, const CompileProgress &progress)
      : requests_(requests), options_(options), cacheConfig_(cacheConfig), info_(info), progress_(progress),
        starts_(chunkStarts(requests)), chunks_(starts_.size() - 1), cache_(ObjectCache::open(cacheConfig)) {
    for (const KernelRequest &r : requests)
      symbols_.push_back(r.symbol);
    rowKernels_ = std::any_of(requests.begin(), requests.end(), [](const KernelRequest &r) { return !r.rowSlots.empty(); });
  }

  // linkedOnly: HostEngineOptions::linkedOnly (null where not linked).
  Expected<std::shared_ptr<KernelLibrary>> run(const std::function<std::string()> &describe, bool linkedOnly) {
    // Row kernels take HSNN_ROW_SHAPE's shape, which then keys them, else
    // the host's measured one, asked for on a miss only: every shape gives
    // the same bits, so a hit need not know which one its objects have.
    if (rowKernels_ && !options_.rowShape) {
      auto fixed = rowShapeOverride();
      if (!fixed)
        return fixed.error();
      options_.rowShape = *fixed;
    }
    compileOptions_ = options_;
    std::optional<CacheKey> linkedKey = hostLinkedKey(requests_, options_, chunks_);
    if (linkedKey)
      if (auto lib = loadLinked(*linkedKey))
        return lib;
    if (linkedOnly)
      return std::shared_ptr<KernelLibrary>();
    auto jit = HostJIT::get();
    if (!jit)
      return jit.error();
    jit_ = *jit;
    for (size_t c = 0; c < chunks_; ++c)
      keys_.push_back(objectKey(part(c), options_, jit_->target()));
    mathFunctions_ = calledMathFunctions(requests_, jit_->target().vectorBits);
    if (!linkedKey) {
      linkedKey = objectsLinkedKey(keys_, symbols_, mathFunctions_);
      if (auto lib = loadLinked(*linkedKey))
        return lib;
    }
    description_ = describe();
    objects_.assign(chunks_, {});
    stats_.assign(chunks_, {});
    errors_.assign(chunks_, {});
    hit_.assign(chunks_, 0);
    if (Error e = loadOrCompile())
      return e;
    CompileStats loadStats;
    auto lib = jit_->load(withMath(), symbols_, &loadStats);
    if (!lib && std::find(hit_.begin(), hit_.end(), 1) != hit_.end()) {
      // A verified entry that does not link (the machine's libmvec changed,
      // say) is compiled afresh and replaced, like any other miss.
      std::fill(hit_.begin(), hit_.end(), 0);
      chooseRowShape();
      tbb::parallel_for(size_t(0), chunks_, [&](size_t c) { compile(c); });
      if (Error e = firstError())
        return e;
      lib = jit_->load(withMath(), symbols_, &loadStats);
    }
    if (!lib)
      return lib.error();
    report(loadStats);
    if (cache_)
      storeLinkedLater(cacheConfig_, *linkedKey, withMath(), description_ + "; linked into one shared object",
                       symbols_.front());
    return lib;
  }

private:
  std::span<const KernelRequest> part(size_t c) const {
    return requests_.subspan(starts_[c], starts_[c + 1] - starts_[c]);
  }

  // The objects linked into one shared object by an earlier process load
  // without LLVM; a stale or foreign one is relinked.
  std::shared_ptr<KernelLibrary> loadLinked(const CacheKey &key) {
    auto image = cache_ ? cache_->load(CacheCategory::Cpu, key) : std::nullopt;
    if (!image)
      return nullptr;
    auto t0 = Clock::now();
    auto lib = loadSharedObject(*image, symbols_, imageBindingSymbol(key));
    if (!lib)
      return nullptr;
    info_.emitMs = info_.optimizeMs = info_.codegenMs = 0;
    info_.objectBytes = image->size();
    info_.loadMs = msSince(t0);
    info_.cacheHit = info_.linkedFromCache = true;
    info_.objectsCompiled = 0;
    info_.objectsFromCache = chunks_;
    if (progress_) {
      size_t all = countTapes(requests_);
      progress_(all, all);
    }
    return *lib;
  }

  // Each object from the cache or compiled; the math functions' objects
  // beside the kernels' compiles.
  Error loadOrCompile() {
    // Cache hits on this thread: a fresh process that finds every object
    // cached then never starts TBB's workers (a large share of such a hit).
    std::vector<size_t> misses;
    for (size_t c = 0; c < chunks_; ++c)
      if (auto object = cache_ ? cache_->load(CacheCategory::Cpu, keys_[c]) : std::nullopt) {
        objects_[c] = std::move(*object);
        hit_[c] = 1;
        tapesDone(c);
      } else {
        misses.push_back(c);
      }
    if (!misses.empty())
      chooseRowShape();
    Expected<MathObjects> math = MathObjects{};
    tbb::parallel_invoke(
        [&] {
          if (!mathFunctions_.empty())
            math = mathObjects(*jit_, mathFunctions_, compileOptions_, cache_);
        },
        [&] {
          tbb::parallel_for(size_t(0), misses.size(), [&](size_t i) {
            compile(misses[i]);
            tapesDone(misses[i]);
          });
        });
    if (Error e = firstError())
      return e;
    if (!math)
      return math.error();
    math_ = std::move(*math);
    return Error::success();
  }

  void compile(size_t c) {
    auto object = jit_->compileObject(part(c), compileOptions_, &stats_[c]);
    if (!object) {
      errors_[c] = object.takeError();
      return;
    }
    if (cache_)
      cache_->store(CacheCategory::Cpu, keys_[c], *object, description_);
    objects_[c] = std::move(*object);
  }

  Error firstError() {
    for (Error &e : errors_)
      if (e)
        return std::move(e);
    return Error::success();
  }

  void chooseRowShape() {
    if (rowKernels_ && !compileOptions_.rowShape)
      compileOptions_.rowShape = hostRowShape(cacheConfig_);
  }

  // Progress counts kernels, reported one call at a time and only forward.
  void tapesDone(size_t c) {
    if (!progress_)
      return;
    std::lock_guard lock(progressMutex_);
    kernelsDone_ += countTapes(part(c));
    progress_(kernelsDone_, countTapes(requests_));
  }

  // The kernels' objects, then the math functions' they call (the symbols
  // are the kernels').
  std::vector<std::vector<char>> withMath() const {
    std::vector<std::vector<char>> all = objects_;
    all.insert(all.end(), math_.objects.begin(), math_.objects.end());
    return all;
  }

  void report(const CompileStats &load) {
    info_.emitMs = math_.stats.emitMs;
    info_.optimizeMs = math_.stats.optimizeMs;
    info_.codegenMs = math_.stats.codegenMs;
    info_.objectBytes = 0;
    for (size_t c = 0; c < chunks_; ++c) { // CPU time summed over the parallel compiles
      info_.emitMs += stats_[c].emitMs;
      info_.optimizeMs += stats_[c].optimizeMs;
      info_.codegenMs += stats_[c].codegenMs;
      info_.objectBytes += objects_[c].size();
    }
    info_.loadMs = load.loadMs;
    info_.cacheHit = std::all_of(hit_.begin(), hit_.end(), [](char h) { return h; });
    info_.objectsFromCache = size_t(std::count(hit_.begin(), hit_.end(), 1));
    info_.objectsCompiled = chunks_ - info_.objectsFromCache;
  }

  std::span<const KernelRequest> requests_;
  JITOptions options_, compileOptions_; // compileOptions_: with the host's row shape once a miss needs it
  const CacheConfig &cacheConfig_;
  CompileInfo &info_;
  const CompileProgress &progress_;
  const std::vector<size_t> starts_; // where each object's requests start (chunkStarts)
  const size_t chunks_;
  std::optional<ObjectCache> cache_;
  std::vector<std::string> symbols_;
  bool rowKernels_ = false;
  HostJIT *jit_ = nullptr;
  std::vector<CacheKey> keys_;
  std::vector<MathFunction> mathFunctions_;
  std::string description_;
  std::vector<std::vector<char>> objects_;
  std::vector<CompileStats> stats_;
  std::vector<Error> errors_;
  std::vector<char> hit_;
  MathObjects math_;
  std::mutex progressMutex_;
  size_t kernelsDone_ = 0;
};

} // namespace

Expected<std::shared_ptr<KernelLibrary>> buildKernels(std::span<const KernelRequest> requests, const JITOptions &options,
                                                      const CacheConfig &cache,
                                                      const std::function<std::string()> &describe, CompileInfo &info,
                                                      const CompileProgress &progress, bool linkedOnly) {
  return KernelBuild(requests, options, cache, info, progress).run(describe, linkedOnly);
}

} // namespace hsnn::detail
