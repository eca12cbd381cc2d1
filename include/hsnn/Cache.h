//===- hsnn/Cache.h - The on-disk kernel cache ------------------*- C++ -*-===//
//
// Compiled kernels are kept on disk so that a process compiling a layer it
// has compiled before only loads the object. Location: the cacheDir flag
// (HSNN_CACHE_DIR), else $XDG_CACHE_HOME/hsnn, else ~/.cache/hsnn. The
// directory is created with mode 0700 and refused (warning; no disk cache)
// if another user owns it or group/others may write it. Entries are keyed
// by a BLAKE3 hash of everything that affects the code, written atomically,
// and verified on every load; anything that fails verification is
// recompiled, never trusted.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hsnn {

enum class CacheCategory { All, Cpu, Gpu };

struct CacheEntryInfo {
  std::string path;
  std::string category; ///< "cpu" or "gpu"
  uint64_t bytes = 0;
  int64_t lastUsed = 0; ///< Seconds since the epoch.
  std::string description; ///< What it holds: kind, dtype, formulas.
};

/// The directory the cache would use now (it may not exist yet).
std::string kernelCacheDir();
/// Entries, most recently used first.
Expected<std::vector<CacheEntryInfo>> listKernelCache();
/// Removes the entries of one category (or all).
Error clearKernelCache(CacheCategory category = CacheCategory::All);
/// Size cap in bytes; least recently used entries go first. Default 256 MiB.
void setKernelCacheLimit(uint64_t bytes);

} // namespace hsnn
