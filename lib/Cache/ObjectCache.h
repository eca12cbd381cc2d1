//===- lib/Cache/ObjectCache.h - Verified, atomic on-disk entries -*- C++ -*-===//
#pragma once

#include "hsnn/Cache.h"

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hsnn::detail {

using CacheKey = std::array<uint8_t, 32>;
/// A cache directory's secret key, which authenticates its entries.
using CacheSecret = std::array<uint8_t, 32>;

/// Accumulates the text that identifies a compiled object and hashes it.
class CacheKeyBuilder {
public:
  CacheKeyBuilder &add(std::string_view field, std::string_view value);
  CacheKeyBuilder &add(std::string_view field, uint64_t value);
  CacheKey finish() const;
  const std::string &text() const { return text_; }

private:
  std::string text_;
};

std::string toHex(const CacheKey &key);

/// A verified entry: what it holds and the payload.
struct CacheEntry {
  std::string description;
  std::vector<char> payload;
};

/// Where a problem with the cache is reported (a problem is never an error:
/// the cache is then a miss).
using CacheWarningSink = std::function<void(std::string_view)>;

/// What the cache needs from its user: whether to cache, where, and where
/// to report problems. The runtime fills it from its flags.
struct CacheConfig {
  bool enabled = true;
  std::string dir; ///< Empty: no directory could be found.
  CacheWarningSink warn;
};

/// The on-disk cache. All methods are safe to call from several threads and
/// processes at once; a failure to read or write is reported through the
/// config's warning sink and treated as a miss.
class ObjectCache {
public:
  /// The cache at the configured directory, or nullopt (with a warning
  /// already given) when caching is off or the directory is refused.
  static std::optional<ObjectCache> open(const CacheConfig &config);

  /// The verified payload of an entry, or nullopt on a miss. A corrupt,
  /// truncated or foreign entry (one this directory's secret did not
  /// authenticate, or a hard link) is a miss (and is removed).
  std::optional<std::vector<char>> load(CacheCategory category, const CacheKey &key) const;
  /// Writes an entry atomically (temporary file + rename) and evicts least
  /// recently used entries beyond the size cap. `description` says what it
  /// holds (formulas, dtype, kinds) for `hsnn-jit cache list`.
  /// `fullScan` evicts by scanning the directory instead of from this
  /// process's running estimate, whose lock a forked child must not take.
  void store(CacheCategory category, const CacheKey &key, const std::vector<char> &payload,
             std::string_view description = {}, bool fullScan = false) const;

  const std::string &dir() const { return dir_; }

private:
  ObjectCache(std::string dir, const CacheSecret &secret, CacheWarningSink warn)
      : dir_(std::move(dir)), secret_(secret), warn_(std::move(warn)) {}
  void warn(const std::string &message) const {
    if (warn_)
      warn_(message);
  }
  std::optional<CacheEntry> loadUnchecked(CacheCategory category, const CacheKey &key) const;
  void storeUnchecked(CacheCategory category, const CacheKey &key, const std::vector<char> &payload,
                      std::string_view description, bool fullScan) const;
  std::string dir_;
  CacheSecret secret_;
  CacheWarningSink warn_;
};

/// The entries under a cache directory, most recently used first.
std::vector<CacheEntryInfo> listCacheEntries(const std::string &dir);
/// Removes the entries of one category (or all) under a cache directory.
Error clearCacheEntries(const std::string &dir, CacheCategory category);
/// Size cap for every cache in the process.
void setCacheLimit(uint64_t bytes);
/// Directory scans for eviction so far in this process (tests check that a
/// store does not scan every time).
uint64_t cacheScans();

} // namespace hsnn::detail
