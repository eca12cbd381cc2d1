//===- lib/Cache/ObjectCache.cpp - Verified, atomic on-disk entries -------===//
//
// Entry file: a fixed header (magic, format version, category, key, payload
// size, MAC of the body) and the body. Written to a temporary file in the
// same directory, then renamed into place, so readers see a whole entry or
// none; verified field by field on every load.
//
// The MAC is BLAKE3 keyed with the cache's own secret (DIR/key, 0600, made
// by the first process that uses the directory) over the category, the
// entry's key and its body. A checksum anyone can recompute would let a
// file that this cache never wrote pass as an entry: one planted or
// hard-linked into the directory, one copied from another cache, or a
// layer's linked image stored under another layer's key. Those fail like
// corrupt entries. Whoever can read the user's files can read the secret
// too: the cache is trusted input of its user (docs/guide/cache.md, threat model).
//===----------------------------------------------------------------------===//
#include "ObjectCache.h"


#include <llvm-c/blake3.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <random>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace hsnn {
namespace detail {
namespace {

// Entry format 3 (docs/guide/cache.md, "Entry format"): magic, format, category,
// key, body size, MAC of the body, description length; the body is the
// description (what the entry holds, for `cache list`) then the payload.
constexpr char kMagic[8] = {'H', 'S', 'N', 'N', 'K', 'C', '3', '\0'};
constexpr uint32_t kFormatVersion = 3;
constexpr size_t kHeaderSize = 8 + 4 + 4 + 32 + 8 + 32 + 4;
constexpr size_t kMaxDescription = 1024;
std::atomic<uint64_t> gLimit{256ull << 20};
// Temporary files of writers that died (SIGKILL mid-write) are removed once
// they are this old; a live writer finishes in far less.
constexpr auto kStaleTemporary = std::chrono::minutes(10);
// Scanning the directory costs time proportional to its entries, so a
// process scans when its running estimate passes the cap, or after this long.
constexpr auto kRescanEvery = std::chrono::seconds(30);
std::atomic<uint64_t> gScans{0};

const char *categoryDir(CacheCategory c) { return c == CacheCategory::Gpu ? "gpu" : "cpu"; }

CacheKey hashBytes(const char *data, size_t size) {
  llvm_blake3_hasher h;
  llvm_blake3_hasher_init(&h);
  llvm_blake3_hasher_update(&h, data, size);
  CacheKey key;
  static_assert(sizeof(key) == LLVM_BLAKE3_OUT_LEN);
  llvm_blake3_hasher_finalize(&h, key.data(), key.size());
  return key;
}

// The entry's MAC: keyed BLAKE3 of category, key and body.
CacheKey entryMac(const CacheSecret &secret, CacheCategory category, const CacheKey &key, const char *body,
                  size_t size) {
  llvm_blake3_hasher h;
  llvm_blake3_hasher_init_keyed(&h, secret.data());
  uint32_t c = uint32_t(category);
  llvm_blake3_hasher_update(&h, &c, sizeof c);
  llvm_blake3_hasher_update(&h, key.data(), key.size());
  llvm_blake3_hasher_update(&h, body, size);
  CacheKey mac;
  llvm_blake3_hasher_finalize(&h, mac.data(), mac.size());
  return mac;
}

template <class T> void put(std::vector<char> &out, const T &v) {
  const char *p = reinterpret_cast<const char *>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

// Why a directory cannot hold the cache, or "".
std::string refuseReason(const struct stat &st, uid_t euid) {
  if (S_ISLNK(st.st_mode))
    return "it is a symbolic link";
  if (!S_ISDIR(st.st_mode))
    return "it is not a directory";
  if (st.st_uid != euid)
    return fmt::format("it is owned by uid {}, not by this user (uid {})", st.st_uid, euid);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("it is writable by group or others (mode {:o})", st.st_mode & 0777);
  return "";
}

// Creates dir (mode 0700; parents as usual) if missing; "" when usable.
// One stat when it exists: every system call is slow on a virtual
// machine, and a cache hit opens the cache once.
std::string prepareDir(const std::string &dir, uid_t euid, bool followLink = true) {
  struct stat st;
  if ((followLink ? ::stat(dir.c_str(), &st) : ::lstat(dir.c_str(), &st)) != 0) {
    if (errno != ENOENT)
      return fmt::format("cannot stat it: {}", std::strerror(errno));
    std::error_code ec;
    fs::path p(dir);
    if (p.has_parent_path())
      fs::create_directories(p.parent_path(), ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return fmt::format("cannot create it: {}", std::strerror(errno));
    if (::stat(dir.c_str(), &st) != 0)
      return fmt::format("cannot stat it: {}", std::strerror(errno));
  }
  return refuseReason(st, euid);
}

bool isTemporary(const fs::path &p) { return p.filename().string().starts_with(".tmp-"); }

// Entries (and, with `temporaries`, writers' temporary files) of a category.
std::vector<fs::directory_entry> entries(const std::string &root, CacheCategory which, bool temporaries = false) {
  std::vector<fs::directory_entry> out;
  for (CacheCategory c : {CacheCategory::Cpu, CacheCategory::Gpu}) {
    if (which != CacheCategory::All && which != c)
      continue;
    std::error_code ec;
    fs::directory_iterator it(fs::path(root) / categoryDir(c), ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      std::error_code fe;
      if (it->is_regular_file(fe) && (it->path().extension() == ".hsnn" || (temporaries && isTemporary(it->path()))))
        out.push_back(*it);
    }
  }
  return out;
}

// Other threads and processes store and evict at the same time: every
// filesystem call here takes an error_code, and a file that vanished is
// simply skipped.
// Removes stale temporaries and the least recently used entries beyond the
// cap; returns the bytes left.
uint64_t evict(const std::string &root) {
  ++gScans;
  struct Entry {
    fs::path path;
    fs::file_time_type time;
    uint64_t size;
  };
  std::vector<Entry> all;
  uint64_t total = 0;
  auto staleBefore = fs::file_time_type::clock::now() - kStaleTemporary;
  for (auto &e : entries(root, CacheCategory::All, /*temporaries=*/true)) {
    std::error_code ec1, ec2;
    auto time = fs::last_write_time(e.path(), ec1);
    auto size = fs::file_size(e.path(), ec2);
    if (ec1 || ec2)
      continue;
    if (isTemporary(e.path())) {
      if (time < staleBefore) {
        fs::remove(e.path(), ec1);
        continue;
      }
      total += size; // a live writer's: counted, not evicted
      continue;
    }
    all.push_back({e.path(), time, size});
    total += size;
  }
  if (total <= gLimit.load())
    return total;
  std::sort(all.begin(), all.end(), [](const Entry &a, const Entry &b) { return a.time < b.time; });
  for (const Entry &e : all) {
    if (total <= gLimit.load())
      break;
    std::error_code ec;
    fs::remove(e.path, ec);
    total -= e.size; // gone, whether we or another process removed it
  }
  return total;
}

// Evicts after a store, scanning only when this process's estimate of the
// directory's size passes the cap or the last scan is old.
void evictAfterStore(const std::string &root, uint64_t added) {
  struct Estimate {
    uint64_t bytes = 0;
    std::chrono::steady_clock::time_point scanned;
    bool known = false;
  };
  // Never destroyed: the thread that stores linked objects may store during
  // exit, after statics made later than its exit handler are gone.
  static auto *mutex = new std::mutex;
  static auto *estimates = new std::map<std::string, Estimate>;
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(*mutex);
    Estimate &e = (*estimates)[root];
    e.bytes += added;
    if (e.known && e.bytes <= gLimit.load() && now - e.scanned < kRescanEvery)
      return;
  }
  uint64_t left = evict(root);
  std::lock_guard lock(*mutex);
  (*estimates)[root] = {left, now, true};
}

// The secret as its file holds it, or nullopt with `why`.
std::optional<CacheSecret> readSecret(const std::string &path, std::string &why) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    why = errno == ENOENT ? "" : fmt::format("cannot open its key file {}: {}", path, std::strerror(errno));
    return std::nullopt;
  }
  CacheSecret secret;
  struct stat st;
  bool ok = ::fstat(fd, &st) == 0;
  if (!ok || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077))
    why = fmt::format("its key file {} is not a file of this user's that only this user can read", path);
  else if (st.st_size != off_t(secret.size()) || ::read(fd, secret.data(), secret.size()) != ssize_t(secret.size()))
    why = fmt::format("its key file {} does not hold {} bytes", path, secret.size());
  ::close(fd);
  if (!why.empty())
    return std::nullopt;
  return secret;
}

// The directory's secret, made by the first process that needs it: a
// temporary file linked into place, so no reader sees it half written and
// two processes that race both end up with the one that was linked first.
std::optional<CacheSecret> makeOrReadSecret(const std::string &dir, std::string &why) {
  std::string path = dir + "/key";
  if (auto s = readSecret(path, why); s || !why.empty())
    return s;
  CacheSecret secret;
  if (::getrandom(secret.data(), secret.size(), 0) != ssize_t(secret.size())) {
    why = fmt::format("no random bytes for its key: {}", std::strerror(errno));
    return std::nullopt;
  }
  std::string tmp = fmt::format("{}/.tmp-key-{}-{}", dir, ::getpid(), std::random_device{}());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    why = fmt::format("cannot write its key file: {}", std::strerror(errno));
    return std::nullopt;
  }
  bool ok = ::write(fd, secret.data(), secret.size()) == ssize_t(secret.size());
  ok &= ::close(fd) == 0;
  bool linked = ok && ::link(tmp.c_str(), path.c_str()) == 0;
  int linkErrno = errno;
  ::unlink(tmp.c_str());
  if (linked)
    return secret;
  if (ok && linkErrno == EEXIST) // another process was first: its key is the directory's
    return readSecret(path, why);
  why = fmt::format("cannot write its key file {}: {}", path, std::strerror(ok ? linkErrno : errno));
  return std::nullopt;
}

// Read once per key file and process (a cache hit opens the cache): one
// stat tells whether the file is still the one read (a directory removed
// and made again has a new key).
std::optional<CacheSecret> cacheSecret(const std::string &dir, std::string &why) {
  struct Known {
    dev_t dev;
    ino_t ino;
    CacheSecret secret;
  };
  static auto *mutex = new std::mutex; // never destroyed: stores run during exit
  static auto *known = new std::map<std::string, Known>;
  std::string path = dir + "/key";
  struct stat st;
  // Still this user's own file, only this user's to read: else read
  // again, to be refused with the reason.
  bool exists = ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
                !(st.st_mode & 077);
  std::lock_guard lock(*mutex);
  if (auto it = known->find(dir); exists && it != known->end() && it->second.dev == st.st_dev && it->second.ino == st.st_ino)
    return it->second.secret;
  std::optional<CacheSecret> secret = makeOrReadSecret(dir, why);
  if (secret && ::lstat(path.c_str(), &st) == 0)
    (*known)[dir] = {st.st_dev, st.st_ino, *secret};
  return secret;
}

// A path as text a terminal shows: a NUL as \0.
std::string printable(const std::string &path) {
  std::string out;
  for (char c : path)
    out += c == '\0' ? std::string("\\0") : std::string(1, c);
  return out;
}

// Each refused directory is reported once per process, not at every compile.
void warnOnce(const CacheWarningSink &warn, const std::string &message) {
  static auto *mutex = new std::mutex; // never destroyed, as above
  static auto *said = new std::set<std::string>;
  {
    std::lock_guard lock(*mutex);
    if (!said->insert(message).second)
      return;
  }
  if (warn)
    warn(message);
}

} // namespace

CacheKeyBuilder &CacheKeyBuilder::add(std::string_view field, std::string_view value) {
  // Length-prefixed so that no two field lists produce the same text.
  // Appended, not formatted: a layer's key has hundreds of fields.
  text_.append(field);
  text_ += '=';
  text_ += std::to_string(value.size());
  text_ += ':';
  text_.append(value);
  text_ += '\n';
  return *this;
}
CacheKeyBuilder &CacheKeyBuilder::add(std::string_view field, uint64_t value) { return add(field, std::to_string(value)); }
CacheKey CacheKeyBuilder::finish() const { return hashBytes(text_.data(), text_.size()); }

std::string toHex(const CacheKey &key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : key) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

std::optional<ObjectCache> ObjectCache::open(const CacheConfig &config) {
  if (!config.enabled)
    return std::nullopt;
  auto warn = [&](const std::string &m) { warnOnce(config.warn, m); };
  const std::string &dir = config.dir;
  if (dir.empty()) {
    warn("no cache directory (HSNN_CACHE_DIR, XDG_CACHE_HOME and HOME are unset); kernels are not cached on disk");
    return std::nullopt;
  }
  if (dir.find('\0') != std::string::npos) {
    // The system calls would see the path cut at the NUL: another directory.
    warn(fmt::format("refusing cache directory '{}': it contains a NUL character; kernels are not cached on disk",
                     printable(dir)));
    return std::nullopt;
  }
  uid_t euid = ::geteuid();
  // The root may be a link the user made (~/.cache elsewhere); the
  // category directories inside it are the cache's own and never links.
  for (const std::string &d : {dir, dir + "/cpu", dir + "/gpu"})
    if (std::string why = prepareDir(d, euid, /*followLink=*/d == dir); !why.empty()) {
      warn(fmt::format("refusing cache directory {}: {}; kernels are not cached on disk", d, why));
      return std::nullopt;
    }
  std::string why;
  std::optional<CacheSecret> secret = cacheSecret(dir, why);
  if (!secret) {
    warn(fmt::format("refusing cache directory {}: {}; kernels are not cached on disk", dir, why));
    return std::nullopt;
  }
  return ObjectCache(dir, *secret, config.warn);
}

std::optional<std::vector<char>> ObjectCache::load(CacheCategory category, const CacheKey &key) const {
  try {
    auto entry = loadUnchecked(category, key);
    if (!entry)
      return std::nullopt;
    return std::move(entry->payload);
  } catch (const std::exception &e) { // a cache problem is a miss, never a failure
    warn(fmt::format("cache read failed: {}", e.what()));
    return std::nullopt;
  }
}

void ObjectCache::store(CacheCategory category, const CacheKey &key, const std::vector<char> &payload,
                        std::string_view description, bool fullScan) const {
  try {
    storeUnchecked(category, key, payload, description.substr(0, kMaxDescription), fullScan);
  } catch (const std::exception &e) {
    warn(fmt::format("cache write failed: {}", e.what()));
  }
}

std::optional<CacheEntry> ObjectCache::loadUnchecked(CacheCategory category, const CacheKey &key) const {
  std::string path = dir_ + '/' + categoryDir(category) + '/' + toHex(key) + ".hsnn";
  // O_NONBLOCK: a FIFO planted as an entry must not block the open; it is
  // then refused as not a regular file.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return std::nullopt;
  std::vector<char> file;
  struct stat st;
  // One name only: a hard link is a file that also lives elsewhere, where
  // anyone who can write that other name changes the entry.
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == ::geteuid() &&
            st.st_size >= off_t(kHeaderSize) && st.st_size < (off_t(1) << 32);
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
  auto reject = [&]() -> std::optional<CacheEntry> {
    std::error_code ec;
    fs::remove(path, ec); // it will be rewritten with the fresh compile
    return std::nullopt;
  };
  if (!ok)
    return reject();
  const char *p = file.data();
  uint32_t version, cat, descLen;
  uint64_t size;
  std::memcpy(&version, p + 8, 4);
  std::memcpy(&cat, p + 12, 4);
  std::memcpy(&size, p + 48, 8);
  std::memcpy(&descLen, p + 88, 4);
  if (std::memcmp(p, kMagic, 8) != 0 || version != kFormatVersion || cat != uint32_t(category) ||
      std::memcmp(p + 16, key.data(), 32) != 0 || size != file.size() - kHeaderSize || descLen > size ||
      descLen > kMaxDescription)
    return reject();
  CacheKey mac = entryMac(secret_, category, key, p + kHeaderSize, size);
  if (std::memcmp(p + 56, mac.data(), 32) != 0)
    return reject();
  // Marks it recently used for the LRU; an entry used in the last minute
  // already is, and the call would be a system call more per hit.
  if (st.st_mtime + 60 < ::time(nullptr))
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  CacheEntry entry;
  entry.description.assign(p + kHeaderSize, descLen);
  file.erase(file.begin(), file.begin() + std::ptrdiff_t(kHeaderSize + descLen)); // in place: no second buffer
  entry.payload = std::move(file);
  return entry;
}

void ObjectCache::storeUnchecked(CacheCategory category, const CacheKey &key, const std::vector<char> &payload,
                                 std::string_view description, bool fullScan) const {
  std::vector<char> body(description.begin(), description.end());
  body.insert(body.end(), payload.begin(), payload.end());
  std::vector<char> file;
  file.insert(file.end(), kMagic, kMagic + 8);
  put(file, kFormatVersion);
  put(file, uint32_t(category));
  file.insert(file.end(), key.begin(), key.end());
  put(file, uint64_t(body.size()));
  CacheKey mac = entryMac(secret_, category, key, body.data(), body.size());
  file.insert(file.end(), mac.begin(), mac.end());
  put(file, uint32_t(description.size()));
  file.insert(file.end(), body.begin(), body.end());

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
  if (fullScan)
    evict(dir_);
  else
    evictAfterStore(dir_, file.size());
}

// The description an entry's header names, or "" when it cannot be read.
std::string readDescription(const fs::path &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return "";
  char head[kHeaderSize];
  std::string desc;
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::read(fd, head, kHeaderSize) == ssize_t(kHeaderSize) &&
      std::memcmp(head, kMagic, 8) == 0) {
    uint32_t len;
    std::memcpy(&len, head + 88, 4);
    if (len <= kMaxDescription) {
      desc.resize(len);
      if (::read(fd, desc.data(), len) != ssize_t(len))
        desc.clear();
    }
  }
  ::close(fd);
  return desc;
}

uint64_t cacheScans() { return gScans.load(); }

std::vector<CacheEntryInfo> listCacheEntries(const std::string &dir) {
  std::vector<CacheEntryInfo> out;
  if (dir.empty() || dir.find('\0') != std::string::npos) // no entry was ever stored there
    return out;
  for (auto &e : entries(dir, CacheCategory::All)) {
    struct stat st;
    if (::stat(e.path().c_str(), &st) != 0)
      continue;
    out.push_back({e.path().string(), e.path().parent_path().filename().string(), uint64_t(st.st_size),
                   int64_t(st.st_mtime), readDescription(e.path())});
  }
  std::sort(out.begin(), out.end(), [](auto &a, auto &b) { return a.lastUsed > b.lastUsed; });
  return out;
}

Error clearCacheEntries(const std::string &dir, CacheCategory category) {
  if (dir.empty())
    return Error::success();
  if (dir.find('\0') != std::string::npos)
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("the cache directory '{}' contains a NUL character; nothing was removed", printable(dir)));
  std::error_code ec;
  for (auto &e : entries(dir, category))
    if (!fs::remove(e.path(), ec) && ec)
      return Error(ErrorCode::Internal, fmt::format("cannot remove {}: {}", e.path().string(), ec.message()));
  return Error::success();
}

void setCacheLimit(uint64_t bytes) { gLimit = bytes; }

} // namespace detail
} // namespace hsnn
