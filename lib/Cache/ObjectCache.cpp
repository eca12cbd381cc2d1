//===- lib/Cache/ObjectCache.cpp - Verified, atomic on-disk entries -------===//
//
// Entry file: a fixed header (magic, format version, category, key, payload
// size, BLAKE3 of the payload) and the payload. Written to a temporary file
// in the same directory, then renamed into place, so readers see a whole
// entry or none; verified field by field on every load.
//===----------------------------------------------------------------------===//
#include "ObjectCache.h"


#include <llvm/Support/BLAKE3.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace hsnn {
namespace detail {
namespace {

constexpr char kMagic[8] = {'H', 'S', 'N', 'N', 'K', 'C', '1', '\0'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderSize = 8 + 4 + 4 + 32 + 8 + 32;
std::atomic<uint64_t> gLimit{256ull << 20};

const char *categoryDir(CacheCategory c) { return c == CacheCategory::Gpu ? "gpu" : "cpu"; }

CacheKey hashBytes(const char *data, size_t size) {
  llvm::BLAKE3 h;
  h.update(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(data), size));
  return h.final();
}

template <class T> void put(std::vector<char> &out, const T &v) {
  const char *p = reinterpret_cast<const char *>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

// Why a directory cannot hold the cache, or "".
std::string refuseReason(const std::string &dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    return fmt::format("cannot stat it: {}", std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return "it is not a directory";
  if (st.st_uid != ::geteuid())
    return fmt::format("it is owned by uid {}, not by this user (uid {})", st.st_uid, ::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("it is writable by group or others (mode {:o})", st.st_mode & 0777);
  return "";
}

// Creates dir (mode 0700; parents as usual) if missing; "" when usable.
std::string prepareDir(const std::string &dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::path p(dir);
    if (p.has_parent_path())
      fs::create_directories(p.parent_path(), ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return fmt::format("cannot create it: {}", std::strerror(errno));
  }
  return refuseReason(dir);
}

std::vector<fs::directory_entry> entries(const std::string &root, CacheCategory which) {
  std::vector<fs::directory_entry> out;
  for (CacheCategory c : {CacheCategory::Cpu, CacheCategory::Gpu}) {
    if (which != CacheCategory::All && which != c)
      continue;
    std::error_code ec;
    fs::directory_iterator it(fs::path(root) / categoryDir(c), ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      std::error_code fe;
      if (it->is_regular_file(fe) && it->path().extension() == ".hsnn")
        out.push_back(*it);
    }
  }
  return out;
}

// Other threads and processes store and evict at the same time: every
// filesystem call here takes an error_code, and a file that vanished is
// simply skipped.
void evict(const std::string &root) {
  struct Entry {
    fs::path path;
    fs::file_time_type time;
    uint64_t size;
  };
  std::vector<Entry> all;
  uint64_t total = 0;
  for (auto &e : entries(root, CacheCategory::All)) {
    std::error_code ec1, ec2;
    auto time = fs::last_write_time(e.path(), ec1);
    auto size = fs::file_size(e.path(), ec2);
    if (ec1 || ec2)
      continue;
    all.push_back({e.path(), time, size});
    total += size;
  }
  if (total <= gLimit.load())
    return;
  std::sort(all.begin(), all.end(), [](const Entry &a, const Entry &b) { return a.time < b.time; });
  for (const Entry &e : all) {
    if (total <= gLimit.load())
      break;
    std::error_code ec;
    fs::remove(e.path, ec);
    total -= e.size; // gone, whether we or another process removed it
  }
}

} // namespace

CacheKeyBuilder &CacheKeyBuilder::add(std::string_view field, std::string_view value) {
  // Length-prefixed so that no two field lists produce the same text.
  text_ += fmt::format("{}={}:{}\n", field, value.size(), value);
  return *this;
}
CacheKeyBuilder &CacheKeyBuilder::add(std::string_view field, uint64_t value) { return add(field, std::to_string(value)); }
CacheKey CacheKeyBuilder::finish() const { return hashBytes(text_.data(), text_.size()); }

std::string toHex(const CacheKey &key) {
  std::string s;
  for (uint8_t b : key)
    s += fmt::format("{:02x}", b);
  return s;
}

std::optional<ObjectCache> ObjectCache::open(const CacheConfig &config) {
  if (!config.enabled)
    return std::nullopt;
  auto warn = [&](const std::string &m) {
    if (config.warn)
      config.warn(m);
  };
  const std::string &dir = config.dir;
  if (dir.empty()) {
    warn("no cache directory (HSNN_CACHE_DIR, XDG_CACHE_HOME and HOME are unset); kernels are not cached on disk");
    return std::nullopt;
  }
  for (const std::string &d : {dir, dir + "/cpu", dir + "/gpu"})
    if (std::string why = prepareDir(d); !why.empty()) {
      warn(fmt::format("refusing cache directory {}: {}; kernels are not cached on disk", d, why));
      return std::nullopt;
    }
  return ObjectCache(dir, config.warn);
}

std::optional<std::vector<char>> ObjectCache::load(CacheCategory category, const CacheKey &key) const {
  try {
    return loadUnchecked(category, key);
  } catch (const std::exception &e) { // a cache problem is a miss, never a failure
    warn(fmt::format("cache read failed: {}", e.what()));
    return std::nullopt;
  }
}

void ObjectCache::store(CacheCategory category, const CacheKey &key, const std::vector<char> &payload) const {
  try {
    storeUnchecked(category, key, payload);
  } catch (const std::exception &e) {
    warn(fmt::format("cache write failed: {}", e.what()));
  }
}

std::optional<std::vector<char>> ObjectCache::loadUnchecked(CacheCategory category, const CacheKey &key) const {
  std::string path = fmt::format("{}/{}/{}.hsnn", dir_, categoryDir(category), toHex(key));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return std::nullopt;
  std::vector<char> file;
  struct stat st;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && st.st_size >= off_t(kHeaderSize) &&
            st.st_size < (off_t(1) << 32);
  if (ok) {
    file.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < file.size()) {
      ssize_t r = ::read(fd, file.data() + got, file.size() - got);
      if (r <= 0)
        break;
      got += size_t(r);
    }
    ok = got == file.size();
  }
  ::close(fd);
  auto reject = [&]() -> std::optional<std::vector<char>> {
    std::error_code ec;
    fs::remove(path, ec); // it will be rewritten with the fresh compile
    return std::nullopt;
  };
  if (!ok)
    return reject();
  const char *p = file.data();
  uint32_t version, cat;
  uint64_t size;
  std::memcpy(&version, p + 8, 4);
  std::memcpy(&cat, p + 12, 4);
  std::memcpy(&size, p + 48, 8);
  if (std::memcmp(p, kMagic, 8) != 0 || version != kFormatVersion || cat != uint32_t(category) ||
      std::memcmp(p + 16, key.data(), 32) != 0 || size != file.size() - kHeaderSize)
    return reject();
  CacheKey payloadHash = hashBytes(p + kHeaderSize, size);
  if (std::memcmp(p + 56, payloadHash.data(), 32) != 0)
    return reject();
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); // mark recently used for LRU
  return std::vector<char>(file.begin() + kHeaderSize, file.end());
}

void ObjectCache::storeUnchecked(CacheCategory category, const CacheKey &key, const std::vector<char> &payload) const {
  std::vector<char> file;
  file.insert(file.end(), kMagic, kMagic + 8);
  put(file, kFormatVersion);
  put(file, uint32_t(category));
  file.insert(file.end(), key.begin(), key.end());
  put(file, uint64_t(payload.size()));
  CacheKey h = hashBytes(payload.data(), payload.size());
  file.insert(file.end(), h.begin(), h.end());
  file.insert(file.end(), payload.begin(), payload.end());

  std::string dir = fmt::format("{}/{}", dir_, categoryDir(category));
  std::string tmp = fmt::format("{}/.tmp-{}-{}-{}", dir, toHex(key).substr(0, 16), ::getpid(), std::random_device{}());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    warn(fmt::format("cannot write cache entry {}: {}", tmp, std::strerror(errno)));
    return;
  }
  size_t done = 0;
  while (done < file.size()) {
    ssize_t w = ::write(fd, file.data() + done, file.size() - done);
    if (w <= 0)
      break;
    done += size_t(w);
  }
  bool ok = done == file.size();
  ok &= ::close(fd) == 0;
  std::string path = fmt::format("{}/{}.hsnn", dir, toHex(key));
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    warn(fmt::format("cannot write cache entry {}: {}", path, std::strerror(errno)));
    ::unlink(tmp.c_str());
    return;
  }
  evict(dir_);
}

std::vector<CacheEntryInfo> listCacheEntries(const std::string &dir) {
  std::vector<CacheEntryInfo> out;
  if (dir.empty())
    return out;
  for (auto &e : entries(dir, CacheCategory::All)) {
    struct stat st;
    if (::stat(e.path().c_str(), &st) != 0)
      continue;
    out.push_back({e.path().string(), e.path().parent_path().filename().string(), uint64_t(st.st_size),
                   int64_t(st.st_mtime)});
  }
  std::sort(out.begin(), out.end(), [](auto &a, auto &b) { return a.lastUsed > b.lastUsed; });
  return out;
}

Error clearCacheEntries(const std::string &dir, CacheCategory category) {
  if (dir.empty())
    return Error::success();
  std::error_code ec;
  for (auto &e : entries(dir, category))
    if (!fs::remove(e.path(), ec) && ec)
      return Error(ErrorCode::Internal, fmt::format("cannot remove {}: {}", e.path().string(), ec.message()));
  return Error::success();
}

void setCacheLimit(uint64_t bytes) { gLimit = bytes; }

} // namespace detail
} // namespace hsnn
