//===- lib/Cache/ObjectCache.h - Verified, atomic on-disk entries -*- C++ -*-===//
#pragma once

#include "hsnn/Cache.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hsnn::detail {

using CacheKey = std::array<uint8_t, 32>;

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

/// The on-disk cache. All methods are safe to call from several threads and
/// processes at once; a failure to read or write is reported through the
/// warning handler and treated as a miss.
class ObjectCache {
public:
  /// The cache at the configured directory, or nullopt (with a warning
  /// already given) when caching is off or the directory is refused.
  static std::optional<ObjectCache> open();

  /// The verified payload of an entry, or nullopt on a miss. A corrupt,
  /// truncated or foreign entry is a miss (and is removed).
  std::optional<std::vector<char>> load(CacheCategory category, const CacheKey &key) const;
  /// Writes an entry atomically (temporary file + rename) and evicts least
  /// recently used entries beyond the size cap.
  void store(CacheCategory category, const CacheKey &key, const std::vector<char> &payload) const;

  const std::string &dir() const { return dir_; }

private:
  explicit ObjectCache(std::string dir) : dir_(std::move(dir)) {}
  std::optional<std::vector<char>> loadUnchecked(CacheCategory category, const CacheKey &key) const;
  void storeUnchecked(CacheCategory category, const CacheKey &key, const std::vector<char> &payload) const;
  std::string dir_;
};

} // namespace hsnn::detail
