//===- test/Cache/ObjectCacheTest.cpp - The on-disk kernel cache ----------===//
#include "CPU/SharedObject.h"
#include "Cache/ObjectCache.h"
#include "CacheTestUtil.h"

#include "hsnn/Cache.h"
#include "hsnn/Layer.h"
#include "hsnn/Runtime.h"

#include <doctest/doctest.h>
#include <filesystem>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sys/stat.h>
#include <sys/wait.h>
#include <csignal>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace hsnn;
using namespace hsnn::test;

TEST_CASE("a second compile of the same layer is a cache hit with the same results") {
  if (!jitAvailable())
    return;
  TempCache cache;
  auto first = build();
  REQUIRE(first);
  CHECK_FALSE(first->compileInfo().cacheHit);
  auto second = build();
  REQUIRE(second);
  CHECK(second->compileInfo().cacheHit);
  CHECK(second->compileInfo().optimizeMs == 0);
  CHECK(run(*first) == run(*second));
  // The directory and entry are private to this user.
  struct stat st;
  REQUIRE(::stat(cache.dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE_FALSE(cache.files().empty()); // one entry per object (kernels compile in parallel objects)
  for (const fs::path &f : cache.files()) {
    REQUIRE(::stat(f.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
  }
  // A constant's value is read at run time: not part of the key.
  auto other = build({{"gelu", {}}, {"sin(num)*alpha", {{"alpha", -7}}}, {"softplus", {}}});
  CHECK(other->compileInfo().cacheHit);
  CHECK(cache.warnings.empty());
}

TEST_CASE("any change to what the code depends on is a miss") {
  if (!jitAvailable())
    return;
  TempCache cache;
  REQUIRE(build());
  CHECK_FALSE(build({{"gelu", {}}, {"sin(num)*alpha", {{"alpha", 2}}}, {"mish", {}}})->compileInfo().cacheHit);
  CHECK_FALSE(build(kLayer, {.dtype = DType::F64})->compileInfo().cacheHit);
  CHECK_FALSE(build(kLayer, {.optLevel = 1})->compileInfo().cacheHit);
  CHECK_FALSE(build(kLayer, {.fastMath = true})->compileInfo().cacheHit);
  CHECK_FALSE(build({{"gelu", {}}, {"cos(num)*alpha", {{"alpha", 2}}}, {"softplus", {}}})->compileInfo().cacheHit);
  // A constant's name never reaches the code (it is a slot in params): same object.
  CHECK(build({{"gelu", {}}, {"sin(num)*beta", {{"beta", 2}}}, {"softplus", {}}})->compileInfo().cacheHit);
  CHECK(build(kLayer, {.layout = Layout::BatchMajor})->compileInfo().cacheHit); // same kernels, other launcher
  CHECK(build()->compileInfo().cacheHit);
}

TEST_CASE("corrupt, truncated and foreign entries are recompiled, never loaded") {
  if (!jitAvailable())
    return;
  TempCache cache;
  auto good = build();
  REQUIRE(good);
  std::vector<float> want = run(*good);
  flushKernelCache(); // the layer's objects and their linked shared object

  // Every entry of the layer damaged alike (one intact one would serve).
  auto damage = [&](auto fn) {
    for (const fs::path &entry : cache.files()) {
      std::vector<char> bytes(fs::file_size(entry));
      {
        std::ifstream in(entry, std::ios::binary);
        in.read(bytes.data(), std::streamsize(bytes.size()));
      }
      fn(bytes);
      std::ofstream out(entry, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), std::streamsize(bytes.size()));
    }
  };
  // Rewrites the good entries after each damage so the next case starts clean.
  auto expectMissThenHeal = [&](const char *what) {
    CAPTURE(what);
    auto layer = build();
    REQUIRE(layer);
    CHECK_FALSE(layer->compileInfo().cacheHit);
    CHECK(run(*layer) == want);
    flushKernelCache();
    CHECK(build()->compileInfo().cacheHit);
  };

  damage([](std::vector<char> &b) { b[b.size() / 2] ^= 0x10; }); // a flipped bit in the payload
  expectMissThenHeal("bit flip");
  damage([](std::vector<char> &b) { b.resize(b.size() - 100); });
  expectMissThenHeal("truncated");
  damage([](std::vector<char> &b) { b.resize(40); });
  expectMissThenHeal("header only");
  damage([](std::vector<char> &b) { b[20] ^= 1; }); // key field
  expectMissThenHeal("wrong key");
  damage([](std::vector<char> &b) { std::fill(b.begin(), b.end(), 'x'); });
  expectMissThenHeal("foreign file");
}

TEST_CASE("a verified entry whose object does not link is compiled afresh and replaced") {
  if (!jitAvailable())
    return;
  TempCache cache;
  auto good = build();
  REQUIRE(good);
  std::vector<float> want = run(*good);
  // Re-store every entry under its own key with a payload that passes
  // verification but is not an object file.
  for (const fs::path &entry : cache.files()) {
    std::ifstream in(entry, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(bytes.size() > 48);
    detail::CacheKey key;
    std::memcpy(key.data(), bytes.data() + 16, key.size());
    auto store = detail::ObjectCache::open({true, kernelCacheDir(), {}});
    REQUIRE(store);
    store->store(CacheCategory::Cpu, key, std::vector<char>(64, 'x'));
  }
  auto again = build();
  REQUIRE(again);
  CHECK(again->method() == Method::CpuJit);
  CHECK_FALSE(again->compileInfo().cacheHit);
  CHECK(run(*again) == want);
  CHECK(build()->compileInfo().cacheHit); // the entries were replaced
}

TEST_CASE("a directory others can write, or another user's, is refused with a warning") {
  if (!jitAvailable())
    return;
  TempCache cache;
  fs::create_directories(cache.dir);
  ::chmod(cache.dir.c_str(), 0777);
  auto layer = build();
  REQUIRE(layer);
  CHECK_FALSE(layer->compileInfo().cacheHit);
  REQUIRE(cache.warnings.size() == 1);
  CHECK(cache.warnings[0] == "refusing cache directory " + cache.dir +
                                 ": it is writable by group or others (mode 777); kernels are not cached on disk");
  CHECK(cache.files().empty());
  CHECK_FALSE(build()->compileInfo().cacheHit);
}

TEST_CASE("the cache can be switched off") {
  if (!jitAvailable())
    return;
  TempCache cache;
  RuntimeFlags f = runtimeFlags();
  f.useKernelCache = false;
  ScopedRuntimeFlags off(RuntimeFlagsOverride::from(f));
  REQUIRE(build());
  CHECK_FALSE(build()->compileInfo().cacheHit);
  CHECK_FALSE(fs::exists(cache.dir));
}

TEST_CASE("two processes writing the same entry at once leave one valid entry") {
  if (!jitAvailable())
    return;
  TempCache cache;
  // Forked before this process starts any threads (each test case runs in its own process under ctest).
  pid_t kids[2];
  for (pid_t &k : kids) {
    k = ::fork();
    if (k == 0) {
      auto layer = build();
      ::_exit(layer && layer->method() == Method::CpuJit ? 0 : 1);
    }
  }
  for (pid_t k : kids) {
    int status = 0;
    ::waitpid(k, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  auto files = cache.files();
  REQUIRE_FALSE(files.empty());
  for (const fs::path &f : files)
    CHECK(f.extension() == ".hsnn"); // no temporary files left behind
  CHECK(build()->compileInfo().cacheHit);
}

TEST_CASE("clearing by category, listing, and the size cap") {
  if (!jitAvailable())
    return;
  TempCache cache;
  REQUIRE(build());
  flushKernelCache();
  size_t one = listKernelCache()->size();
  REQUIRE(build({{"relu", {}}}));
  flushKernelCache();
  auto list = listKernelCache();
  REQUIRE(list);
  // A one-formula layer: its forward and backward kernels compile in
  // parallel, an object each, and the two linked into one shared object;
  // and the front end's snapshot.
  size_t added = (detail::canLinkSharedObjects() ? 3 : 2) + 1;
  CHECK(list->size() == one + added);
  CHECK(list->at(0).category == "cpu");
  CHECK(list->at(0).bytes > 0);
  REQUIRE_FALSE(static_cast<bool>(clearKernelCache(CacheCategory::Gpu)));
  CHECK(listKernelCache()->size() == one + added);
  REQUIRE_FALSE(static_cast<bool>(clearKernelCache(CacheCategory::Cpu)));
  CHECK(listKernelCache()->empty());

  setKernelCacheLimit(1); // every store evicts down to the cap
  REQUIRE(build());
  flushKernelCache();
  CHECK(listKernelCache()->empty());
  setKernelCacheLimit(256ull << 20);
}

TEST_CASE("hostile entries: a FIFO is refused without blocking, stale temporaries are removed") {
  TempCache c;
  auto cache = detail::ObjectCache::open({true, c.dir, {}});
  REQUIRE(cache);
  detail::CacheKey key{};
  key[0] = 7;
  std::string fifo = c.dir + "/cpu/" + detail::toHex(key) + ".hsnn";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(cache->load(CacheCategory::Cpu, key)); // would block forever on a blocking open
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));

  // A writer killed mid-write leaves .tmp-*; an old one goes at the next scan,
  // a fresh one (a live writer's) stays.
  std::string stale = c.dir + "/cpu/.tmp-dead-1-1", fresh = c.dir + "/gpu/.tmp-live-2-2";
  std::ofstream(stale) << std::string(100, 'x');
  std::ofstream(fresh) << std::string(100, 'y');
  auto old = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(stale, old);
  detail::CacheKey other{};
  other[0] = 8;
  detail::setCacheLimit(0); // forces a scan at this store
  cache->store(CacheCategory::Cpu, other, std::vector<char>(10, 'z'), "test entry");
  detail::setCacheLimit(256ull << 20);
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(fresh));
}

TEST_CASE("a store does not scan the whole directory each time") {
  TempCache c;
  auto cache = detail::ObjectCache::open({true, c.dir, {}});
  REQUIRE(cache);
  uint64_t before = detail::cacheScans();
  for (int i = 0; i < 200; ++i) {
    detail::CacheKey key{};
    key[0] = uint8_t(i), key[1] = uint8_t(i >> 8), key[2] = 0x5a;
    cache->store(CacheCategory::Cpu, key, std::vector<char>(100, char(i)), "entry");
  }
  CHECK(detail::cacheScans() - before <= 2); // the first store of the directory, at most one more
}

TEST_CASE("entries say what they hold, and a refused directory is reported once") {
  if (!jitAvailable())
    return;
  TempCache c;
  REQUIRE(build());
  auto list = listKernelCache();
  REQUIRE(list);
  REQUIRE_FALSE(list->empty());
  size_t snapshots = 0;
  for (const CacheEntryInfo &e : *list) {
    INFO(e.description);
    // The formulas as hsnn prints them once parsed.
    CHECK(e.description.ends_with(": num*erfc(-num/sqrt(2))/2, alpha*sin(num), softplus(num)") !=
          e.description.ends_with("; linked into one shared object"));
    if (e.description.starts_with("front end of a f32 layer (nodes_major): "))
      ++snapshots;
    else
      CHECK(e.description.starts_with("cpu_jit f32 layer (nodes_major; forward, backward): "));
  }
  CHECK(snapshots == 1);

  ::chmod(c.dir.c_str(), 0777); // others may write: refused
  c.warnings.clear();
  for (int i = 0; i < 3; ++i)
    REQUIRE(build({{"tanh", {}}}));
  CHECK(c.warnings.size() == 1);
  ::chmod(c.dir.c_str(), 0700);
}

TEST_CASE("a layer's kernels come back linked into one shared object, loaded without LLVM, with the same bits") {
  if (!jitAvailable())
    return;
  if (!detail::canLinkSharedObjects()) {
    MESSAGE("skipped: no linker program to link shared objects (HSNN_LINKER or the build's)");
    return;
  }
  TempCache cache;
  auto first = build();
  REQUIRE(first);
  CHECK_FALSE(first->compileInfo().linkedFromCache);
  flushKernelCache();
  auto linkedEntry = [&]() -> fs::path {
    auto list = listKernelCache();
    REQUIRE(list);
    for (const CacheEntryInfo &e : *list)
      if (e.description.ends_with("; linked into one shared object"))
        return e.path;
    return {};
  };
  fs::path linked = linkedEntry();
  REQUIRE_FALSE(linked.empty());

  auto second = build();
  REQUIRE(second);
  CHECK(second->compileInfo().cacheHit);
  CHECK(second->compileInfo().linkedFromCache);
  CHECK(run(*first) == run(*second));
  // Two layers loaded from shared objects at once stay apart.
  auto other = build({{"tanh", {}}, {"sin(num)*alpha", {{"alpha", 2}}}, {"relu", {}}});
  flushKernelCache();
  auto otherAgain = build({{"tanh", {}}, {"sin(num)*alpha", {{"alpha", 2}}}, {"relu", {}}});
  REQUIRE(otherAgain);
  CHECK(otherAgain->compileInfo().linkedFromCache);
  CHECK(run(*otherAgain) == run(*other));
  CHECK(run(*build()) == run(*first));

  // A damaged shared object is refused by the verification; the objects
  // serve, and the shared object is linked again.
  {
    std::fstream f(linked, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(std::streamoff(fs::file_size(linked) / 2));
    f.put('\x7f');
  }
  auto third = build();
  REQUIRE(third);
  CHECK(third->compileInfo().cacheHit);
  CHECK_FALSE(third->compileInfo().linkedFromCache);
  CHECK(run(*third) == run(*first));
  flushKernelCache();
  CHECK(build()->compileInfo().linkedFromCache);
  CHECK(cache.warnings.empty());
}

TEST_CASE("a child forked while a link is queued starts with an empty queue") {
  if (!jitAvailable() || !detail::canLinkSharedObjects())
    return;
  TempCache cache;
  REQUIRE(build()); // queues the layer's link on the background thread
  pid_t kid = ::fork();
  if (kid == 0) {
    flushKernelCache(); // the parent's jobs are not this process's: returns at once
    ::_exit(0);
  }
  REQUIRE(kid > 0);
  int status = -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (::waitpid(kid, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (::kill(kid, 0) == 0) { // still there: hung on a lock copied at the fork
    ::kill(kid, SIGKILL);
    ::waitpid(kid, &status, 0);
    FAIL("the forked child hung in flushKernelCache()");
  }
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  flushKernelCache();
  CHECK(build()->compileInfo().linkedFromCache); // the parent's link still landed
}

TEST_CASE("an image that is not a loadable shared object is an error, not a crash") {
  std::vector<std::string> symbols = {"hsnn_layer_u0_forward"};
  std::vector<char> junk(4096, 'x');
  auto lib = detail::loadSharedObject(junk, symbols);
  REQUIRE_FALSE(lib);
  CHECK(lib.error().message().starts_with("cannot load the cached shared object: "));
}

TEST_CASE("a load marks an entry recently used for the LRU, at most once a minute") {
  TempCache c;
  auto cache = detail::ObjectCache::open({true, c.dir, {}});
  REQUIRE(cache);
  detail::CacheKey key{};
  key[0] = 42;
  cache->store(CacheCategory::Cpu, key, std::vector<char>(64, 'q'), "lru entry");
  std::string path = c.dir + "/cpu/" + detail::toHex(key) + ".hsnn";
  auto hourAgo = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(path, hourAgo);
  auto loaded = cache->load(CacheCategory::Cpu, key);
  REQUIRE(loaded);
  CHECK(*loaded == std::vector<char>(64, 'q'));
  CHECK(fs::last_write_time(path) > fs::file_time_type::clock::now() - std::chrono::minutes(1));
  // Used seconds ago: left as it is (no system call per hit).
  auto secondsAgo = fs::file_time_type::clock::now() - std::chrono::seconds(5);
  fs::last_write_time(path, secondsAgo);
  REQUIRE(cache->load(CacheCategory::Cpu, key));
  CHECK(fs::last_write_time(path) == secondsAgo);
}
