// Row-kernel shapes: written and read back, measured on the host once and
// kept in the cache, never measured on a cache hit, and chosen by
// HSNN_ROW_SHAPE where set.
#include "TestUtil.h"
#include "Cache/CacheTestUtil.h"
#include "RequireJit.h"
#include "CPU/RowCalibration.h"
#include "hsnn/Cache.h"
#include "hsnn/Layer.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sys/wait.h>
#include <unistd.h>

using namespace hsnn;
using namespace hsnn::detail;
using hsnn::test::TempCache;

namespace {

CacheConfig configFor(const TempCache &cache) { return CacheConfig{.enabled = true, .dir = cache.dir, .warn = {}}; }

// The cache entry holding the host's shape, by its description.
std::vector<CacheEntryInfo> shapeEntries(const std::string &dir) {
  std::vector<CacheEntryInfo> out;
  for (const CacheEntryInfo &e : listCacheEntries(dir))
    if (e.description.starts_with("row-kernel shape for "))
      out.push_back(e);
  return out;
}

// Nodes repeating a pattern of four formulas, the third with a constant.
std::vector<NodeSpec> patterned(size_t nodes, const char *last = "gelu") {
  const char *formulas[] = {"relu", "tanh", "sin(num)*alpha", last};
  std::vector<NodeSpec> out;
  for (size_t j = 0; j < nodes; ++j)
    out.push_back({formulas[j % 4], j % 4 == 2 ? std::map<std::string, double>{{"alpha", 1.5}}
                                               : std::map<std::string, double>{}});
  return out;
}

struct ScopedEnv {
  std::string name;
  ScopedEnv(const char *n, const char *value) : name(n) { ::setenv(n, value, 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

} // namespace

TEST_CASE("row shapes read back as written and anything else is refused") {
  for (const RowShape &s : candidateRowShapes()) {
    CAPTURE(to_string(s));
    REQUIRE(parseRowShape(to_string(s)).has_value());
    CHECK(*parseRowShape(to_string(s)) == s);
  }
  CHECK(to_string(RowShape{.blocksPerPass = 4, .prefetchBytes = 0}) == "4x0");
  for (const char *bad : {"", "4", "x0", "3x0", "4x", "4x100", "4x131072", "4 x0", "4x0 ", "-1x0", "4x-64", "8x0"}) {
    CAPTURE(bad);
    CHECK_FALSE(parseRowShape(bad).has_value());
  }
  CHECK(candidateRowShapes().size() == 4);
}

TEST_CASE("HSNN_ROW_SHAPE fixes the shape and a malformed one is an error naming it") {
  {
    auto none = rowShapeOverride();
    REQUIRE_OK_EXPECTED(none);
    CHECK_FALSE(none->has_value());
  }
  {
    ScopedEnv env("HSNN_ROW_SHAPE", "2x4096");
    auto fixed = rowShapeOverride();
    REQUIRE_OK_EXPECTED(fixed);
    REQUIRE(fixed->has_value());
    CHECK(**fixed == RowShape{.blocksPerPass = 2, .prefetchBytes = 4096});
  }
  ScopedEnv env("HSNN_ROW_SHAPE", "fast");
  auto bad = rowShapeOverride();
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message() ==
        "HSNN_ROW_SHAPE='fast' is not BxP (B blocks a pass: 1, 2 or 4; P bytes prefetched ahead: 0 to 65536, a "
        "multiple of 64), e.g. 4x0; unset it to use the shape measured on this host");
  // Only layers with row kernels read it: a nodes-major layer compiles; a
  // batch-major one fails to, and runs on the interpreter with that warning
  // (the fallback policy's).
  REQUIRE_JIT();
  TempCache cache;
  auto nodesMajor = ActivationLayer::compile(patterned(64), {.method = Method::CpuJit});
  REQUIRE_OK_EXPECTED(nodesMajor);
  CHECK(nodesMajor->method() == Method::CpuJit);
  CHECK(cache.warnings.empty());
  auto rows = ActivationLayer::compile(patterned(64), {.method = Method::CpuJit, .layout = Layout::BatchMajor});
  REQUIRE_OK_EXPECTED(rows);
  CHECK(rows->method() == Method::CpuInterp);
  REQUIRE(cache.warnings.size() == 1);
  CHECK(cache.warnings[0].find("HSNN_ROW_SHAPE='fast' is not BxP") != std::string::npos);
}

TEST_CASE("the calibration times every candidate shape and takes the fastest") {
  REQUIRE_JIT();
  auto c = calibrateRowShapes();
  REQUIRE_OK_EXPECTED(c);
  REQUIRE(c->timings.size() == candidateRowShapes().size());
  for (size_t i = 0; i < c->timings.size(); ++i) {
    CHECK(c->timings[i].first == candidateRowShapes()[i]);
    CHECK(c->timings[i].second > 0);
  }
  auto fastest = std::min_element(c->timings.begin(), c->timings.end(),
                                  [](const auto &a, const auto &b) { return a.second < b.second; });
  CHECK(c->best == fastest->first);
  CHECK(c->compileMs > 0);
  CHECK(c->measureMs > 0);
  MESSAGE("calibration: compile ", c->compileMs, " ms, measure ", c->measureMs, " ms, best ", to_string(c->best));
}

TEST_CASE("the host's shape is stored in the cache, read back, and measured again when its entry is corrupt") {
  REQUIRE_JIT();
  TempCache cache;
  CHECK_FALSE(storedRowShape(configFor(cache)).has_value());
  RowShapeChoice first = loadOrCalibrateRowShape(configFor(cache));
  CHECK(first.measured);
  const RowShape measured = first.shape;
  auto stored = storedRowShape(configFor(cache));
  REQUIRE(stored.has_value());
  CHECK(stored->first == measured);
  // The entry: the shape, then each candidate's time.
  CHECK(stored->second.starts_with(to_string(measured) + "\n"));
  for (const RowShape &s : candidateRowShapes())
    CHECK(stored->second.find("\n" + to_string(s) + " ") != std::string::npos);
  std::vector<CacheEntryInfo> entries = shapeEntries(cache.dir);
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].description.find(": " + to_string(measured) + " (measured in ") != std::string::npos);

  { // A flipped byte: not authenticated, a miss, measured and stored again.
    std::fstream f(entries[0].path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('#');
  }
  CHECK_FALSE(storedRowShape(configFor(cache)).has_value());
  CHECK(loadOrCalibrateRowShape(configFor(cache)).measured);
  CHECK(storedRowShape(configFor(cache)).has_value());
  CHECK_FALSE(processRowShape().has_value()); // loadOrCalibrateRowShape holds nothing per process
}

TEST_CASE("a batch-major layer measures the host's shape on a miss only, and HSNN_ROW_SHAPE keys its objects") {
  REQUIRE_JIT();
  TempCache cache;
  // Each compile in a fresh process (the shape is held per process),
  // forked before this one starts any threads.
  auto inChild = [](const std::function<bool()> &body) {
    pid_t kid = ::fork();
    if (kid == 0) {
      bool ok = body();
      flushKernelCache();
      ::_exit(ok ? 0 : 1);
    }
    int status = -1;
    ::waitpid(kid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  };
  const LayerOptions rows{.method = Method::CpuJit, .layout = Layout::BatchMajor};
  auto compiles = [&](const char *last, bool hit) {
    return [=] {
      auto layer = ActivationLayer::compile(patterned(64, last), rows);
      return layer && layer->compileInfo().rowSegments > 0 && layer->compileInfo().cacheHit == hit;
    };
  };
  CHECK(inChild(compiles("gelu", false)));
  std::vector<CacheEntryInfo> entries = shapeEntries(cache.dir);
  REQUIRE(entries.size() == 1); // measured by the miss
  std::filesystem::remove(entries[0].path);

  CHECK(inChild(compiles("gelu", true))); // a hit measures nothing
  CHECK(shapeEntries(cache.dir).empty());
  CHECK(inChild(compiles("silu", false))); // another layer's miss measures again
  REQUIRE(shapeEntries(cache.dir).size() == 1);

  // A fixed shape keys the objects (a miss) and is not measured.
  std::filesystem::remove(shapeEntries(cache.dir)[0].path);
  CHECK(inChild([&] {
    ScopedEnv env("HSNN_ROW_SHAPE", "1x0");
    return compiles("gelu", false)();
  }));
  CHECK(shapeEntries(cache.dir).empty());
}
