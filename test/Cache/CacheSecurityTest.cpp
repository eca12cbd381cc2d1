//===- test/Cache/CacheSecurityTest.cpp - Entries this cache did not write -===//
//
// The cache authenticates its entries with its own secret, refuses hard
// links and linked category directories, and binds a linked image to the
// key it was linked for. The hostile image is a shared object whose
// constructor leaves a marker file: the marker must never appear, except
// in the control case where the image is stored with the cache's own
// secret (the threat model's stated limit: the cache is its user's).
//===----------------------------------------------------------------------===//
#include "CPU/SharedObject.h"
#include "Cache/ObjectCache.h"
#include "CacheTestUtil.h"

#include <llvm-c/blake3.h>

#include <cstdlib>
#include <cstring>
#include <doctest/doctest.h>
#include <fstream>
#include <iterator>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace hsnn;
using namespace hsnn::test;

namespace {

std::vector<char> readFile(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void writeFile(const fs::path &p, const std::vector<char> &bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

detail::CacheKey keyOf(const fs::path &entry) {
  std::string hex = entry.stem().string();
  detail::CacheKey key{};
  REQUIRE(hex.size() == 64);
  for (size_t i = 0; i < key.size(); ++i)
    key[i] = uint8_t(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return key;
}

// An entry as someone without the cache's secret would write it: every
// header field right, and the body's plain BLAKE3 in the MAC's place.
std::vector<char> forgedEntry(const detail::CacheKey &key, const std::vector<char> &payload) {
  std::vector<char> body(payload);
  std::vector<char> file(96, 0);
  std::memcpy(file.data(), "HSNNKC3", 8);
  uint32_t version = 3, category = uint32_t(CacheCategory::Cpu), descLen = 0;
  uint64_t size = body.size();
  std::memcpy(file.data() + 8, &version, 4);
  std::memcpy(file.data() + 12, &category, 4);
  std::memcpy(file.data() + 16, key.data(), 32);
  std::memcpy(file.data() + 48, &size, 8);
  llvm_blake3_hasher h;
  llvm_blake3_hasher_init(&h);
  llvm_blake3_hasher_update(&h, body.data(), body.size());
  llvm_blake3_hasher_finalize(&h, reinterpret_cast<uint8_t *>(file.data() + 56), 32);
  std::memcpy(file.data() + 88, &descLen, 4);
  file.resize(92);
  file.insert(file.end(), body.begin(), body.end());
  return file;
}

// The linked image's entry among the cache's files, or an empty path.
fs::path linkedEntry(const std::vector<fs::path> &except = {}) {
  auto list = listKernelCache();
  REQUIRE(list);
  for (const CacheEntryInfo &e : *list)
    if (e.description.ends_with("; linked into one shared object") &&
        std::find(except.begin(), except.end(), fs::path(e.path)) == except.end())
      return e.path;
  return {};
}

struct Marker {
  std::string path;
  Marker() : path(fs::temp_directory_path() / ("hsnn-hostile-marker-" + std::to_string(::getpid()))) {
    fs::remove(path);
    ::setenv("HSNN_TEST_MARKER", path.c_str(), 1);
  }
  ~Marker() {
    ::unsetenv("HSNN_TEST_MARKER");
    fs::remove(path);
  }
  bool present() const { return fs::exists(path); }
};

bool canLink() {
  if (!jitAvailable())
    return false;
  if (!detail::canLinkSharedObjects()) {
    MESSAGE("skipped: no linker program to link shared objects (HSNN_LINKER or the build's)");
    return false;
  }
  return true;
}

} // namespace

TEST_CASE("the cache's key file is made once with mode 0600 and 32 bytes, and a key others can read refuses the directory") {
  TempCache c;
  auto cache = detail::ObjectCache::open({true, c.dir, {}});
  REQUIRE(cache);
  struct stat st;
  REQUIRE(::stat((c.dir + "/key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(st.st_size == 32);
  std::vector<char> key = readFile(c.dir + "/key");
  REQUIRE(detail::ObjectCache::open({true, c.dir, {}}));
  CHECK(readFile(c.dir + "/key") == key); // not made again

  ::chmod((c.dir + "/key").c_str(), 0644);
  std::vector<std::string> warnings;
  CHECK_FALSE(detail::ObjectCache::open({true, c.dir, [&](std::string_view m) { warnings.emplace_back(m); }}));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "refusing cache directory " + c.dir + ": its key file " + c.dir +
                           "/key is not a file of this user's that only this user can read; kernels are not cached "
                           "on disk");
}

TEST_CASE("an entry this cache did not write is a miss: a recomputed checksum, another cache's entry or a hard link") {
  TempCache a, b;
  auto cacheA = detail::ObjectCache::open({true, a.dir, {}});
  auto cacheB = detail::ObjectCache::open({true, b.dir, {}});
  REQUIRE(cacheA);
  REQUIRE(cacheB);
  detail::CacheKey key{};
  key[0] = 7;
  const std::vector<char> payload(100, 'p'), planted(100, 'X');
  std::string path = a.dir + "/cpu/" + detail::toHex(key) + ".hsnn";

  cacheA->store(CacheCategory::Cpu, key, payload, "genuine");
  REQUIRE(cacheA->load(CacheCategory::Cpu, key) == payload);

  // The whole format, with the checksum recomputed over the planted body.
  writeFile(path, forgedEntry(key, planted));
  CHECK_FALSE(cacheA->load(CacheCategory::Cpu, key));
  CHECK_FALSE(fs::exists(path)); // removed, to be rewritten by a fresh compile

  // Another cache's entry under the same key, copied in.
  cacheB->store(CacheCategory::Cpu, key, planted, "from elsewhere");
  REQUIRE(cacheB->load(CacheCategory::Cpu, key) == planted);
  fs::copy_file(b.dir + "/cpu/" + detail::toHex(key) + ".hsnn", path, fs::copy_options::overwrite_existing);
  CHECK_FALSE(cacheA->load(CacheCategory::Cpu, key));

  // A genuine entry that is also linked from elsewhere: whoever can write
  // the other name changes the entry. The other name is left alone.
  cacheA->store(CacheCategory::Cpu, key, payload, "genuine");
  std::string elsewhere = fs::path(a.dir).parent_path() / "elsewhere";
  REQUIRE(::link(path.c_str(), elsewhere.c_str()) == 0);
  CHECK_FALSE(cacheA->load(CacheCategory::Cpu, key));
  CHECK(fs::exists(elsewhere));
  CHECK_FALSE(fs::exists(path));

  // The same entry stored under another key (or category) does not verify.
  cacheA->store(CacheCategory::Cpu, key, payload, "genuine");
  detail::CacheKey other = key;
  other[1] = 1;
  std::string otherPath = a.dir + "/cpu/" + detail::toHex(other) + ".hsnn";
  std::vector<char> bytes = readFile(path);
  std::memcpy(bytes.data() + 16, other.data(), 32); // the header names the new key
  writeFile(otherPath, bytes);
  CHECK_FALSE(cacheA->load(CacheCategory::Cpu, other));
  fs::copy_file(path, a.dir + "/gpu/" + detail::toHex(key) + ".hsnn");
  CHECK_FALSE(cacheA->load(CacheCategory::Gpu, key));
  CHECK(cacheA->load(CacheCategory::Cpu, key) == payload);
}

TEST_CASE("a cache directory whose name holds a NUL is refused, not cut at the NUL") {
  TempCache c;
  std::string dir = c.dir + std::string(1, '\0') + "rest";
  std::vector<std::string> warnings;
  CHECK_FALSE(detail::ObjectCache::open({true, dir, [&](std::string_view m) { warnings.emplace_back(m); }}));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "refusing cache directory '" + c.dir +
                           "\\0rest': it contains a NUL character; kernels are not cached on disk");
  CHECK_FALSE(fs::exists(c.dir)); // nothing was made at the part before the NUL
  CHECK(detail::clearCacheEntries(dir, CacheCategory::All).message() ==
        "the cache directory '" + c.dir + "\\0rest' contains a NUL character; nothing was removed");
  CHECK(detail::listCacheEntries(dir).empty());
}

TEST_CASE("a category directory that is a symbolic link is refused") {
  TempCache c;
  std::string target = fs::path(c.dir).parent_path() / "other-cpu";
  fs::create_directories(c.dir);
  fs::create_directory(target);
  ::chmod(target.c_str(), 0700);
  fs::create_directory_symlink(target, c.dir + "/cpu");
  std::vector<std::string> warnings;
  CHECK_FALSE(detail::ObjectCache::open({true, c.dir, [&](std::string_view m) { warnings.emplace_back(m); }}));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "refusing cache directory " + c.dir + "/cpu: it is a symbolic link; kernels are not cached on disk");
}

TEST_CASE("a hostile shared object in a linked entry never runs unless stored with the cache's own secret") {
  if (!canLink())
    return;
  TempCache cache;
  Marker marker;
  auto first = build();
  REQUIRE(first);
  const std::vector<float> want = run(*first);
  flushKernelCache();
  fs::path entry = linkedEntry();
  REQUIRE_FALSE(entry.empty());
  const detail::CacheKey key = keyOf(entry);
  const std::vector<char> hostile = readFile(HSNN_TEST_HOSTILE_MODULE);
  REQUIRE(hostile.size() > 64);
  auto store = detail::ObjectCache::open({true, cache.dir, {}});
  REQUIRE(store);

  auto expectRefused = [&](const char *what) {
    CAPTURE(what);
    auto layer = build();
    REQUIRE(layer);
    CHECK_FALSE(layer->compileInfo().linkedFromCache);
    CHECK(run(*layer) == want);
    CHECK_FALSE(marker.present());
    flushKernelCache(); // the genuine image is linked and stored again
    REQUIRE(store->load(CacheCategory::Cpu, key));
  };
  // Without the secret: the format with a recomputed checksum.
  writeFile(entry, forgedEntry(key, hostile));
  expectRefused("forged checksum");
  // Without the secret: another cache's entry (as another machine's, or
  // another user's cache, would give).
  {
    TempCache other;
    auto otherStore = detail::ObjectCache::open({true, other.dir, {}});
    REQUIRE(otherStore);
    otherStore->store(CacheCategory::Cpu, key, hostile, "linked into one shared object");
    fs::copy_file(fs::path(other.dir) / "cpu" / entry.filename(), entry, fs::copy_options::overwrite_existing);
  }
  expectRefused("another cache's entry");

  // The control: stored with this cache's own secret, the image is opened
  // (its constructor runs: whoever has the user's files has the user), and
  // then refused for lacking the key's binding symbol; the layer still
  // computes its own formulas.
  store->store(CacheCategory::Cpu, key, hostile, "planted with the secret");
  auto layer = build();
  REQUIRE(layer);
  CHECK(marker.present());
  CHECK_FALSE(layer->compileInfo().linkedFromCache);
  CHECK(run(*layer) == want);
}

TEST_CASE("two layers' linked images swapped under each other's keys are refused: each image is bound to its key") {
  if (!canLink())
    return;
  TempCache cache;
  const std::vector<NodeSpec> otherLayer = {{"tanh", {}}, {"cos(num)*alpha", {{"alpha", 3}}}, {"relu", {}}};
  auto x = build();
  REQUIRE(x);
  const std::vector<float> wantX = run(*x);
  flushKernelCache();
  fs::path entryX = linkedEntry();
  auto y = build(otherLayer);
  REQUIRE(y);
  const std::vector<float> wantY = run(*y);
  flushKernelCache();
  fs::path entryY = linkedEntry({entryX});
  REQUIRE_FALSE(entryX.empty());
  REQUIRE_FALSE(entryY.empty());
  REQUIRE(wantX != wantY);

  // Swapped with the secret (the strongest writer): each entry verifies.
  auto store = detail::ObjectCache::open({true, cache.dir, {}});
  REQUIRE(store);
  auto imageX = store->load(CacheCategory::Cpu, keyOf(entryX));
  auto imageY = store->load(CacheCategory::Cpu, keyOf(entryY));
  REQUIRE(imageX);
  REQUIRE(imageY);
  store->store(CacheCategory::Cpu, keyOf(entryX), *imageY, "swapped");
  store->store(CacheCategory::Cpu, keyOf(entryY), *imageX, "swapped");

  auto x2 = build();
  auto y2 = build(otherLayer);
  REQUIRE(x2);
  REQUIRE(y2);
  CHECK_FALSE(x2->compileInfo().linkedFromCache);
  CHECK_FALSE(y2->compileInfo().linkedFromCache);
  CHECK(run(*x2) == wantX);
  CHECK(run(*y2) == wantY);
  // Relinked, they load again.
  flushKernelCache();
  CHECK(build()->compileInfo().linkedFromCache);
}
