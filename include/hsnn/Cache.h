//===- hsnn/Cache.h - The on-disk kernel cache ------------------*- C++ -*-===//
//
// Compiled kernels are kept on disk so that a process compiling a layer it
// has compiled before only loads the object. Location: the cacheDir flag
// (HSNN_CACHE_DIR), else $XDG_CACHE_HOME/hsnn, else ~/.cache/hsnn. The
// directory is created with mode 0700 and refused (warning; no disk cache)
// if another user owns it or group/others may write it. Entries are keyed
// by a BLAKE3 hash of everything that affects the code, written atomically,
// and verified on every load; anything that fails verification is
// recompiled, never trusted. A cpu_jit layer's objects are also kept
// linked into one shared object (by the system's linker, run as a
// program; HSNN_LINKER overrides it), loaded from
// memory with dlopen after verification: a cache hit then needs no LLVM.
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
/// Waits for the cache writes compile() left running: a cpu_jit layer's
/// kernels are also linked into one shared object on a background thread,
/// which later processes load without starting LLVM. Exit waits for them
/// too; call this to have them before starting another process.
void flushKernelCache();

} // namespace hsnn
