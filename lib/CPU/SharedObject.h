//===- lib/CPU/SharedObject.h - Cached kernels loaded without LLVM -*- C++ -*-===//
//
// A layer's kernel objects, once compiled, are also linked into one shared
// object (by lld, in the background) and kept in the disk cache beside the
// objects. A later process that finds it loads it with the C library's
// dlopen: no LLVM target, JIT session or JITLink, which were most of a cache
// hit's time. The image is loaded from memory (a memfd), so what runs is
// what the cache verified, not a file that could change after the check.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Cache/ObjectCache.h"
#include "HostJIT.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hsnn::detail {

/// Loads a verified shared-object image and resolves every symbol in
/// `symbols`; an Error (never a crash) when the image does not load here.
Expected<std::shared_ptr<KernelLibrary>> loadSharedObject(const std::vector<char> &image,
                                                          std::span<const std::string> symbols);

/// Whether this build can link shared objects (it has lld).
bool canLinkSharedObjects();

/// Links `objects` into one shared object with lld and stores it in the
/// cache under `key`, on a background thread: compile() does not wait for
/// it. Links run one at a time and a key already queued is not queued
/// again; exit waits for the queue.
void storeLinkedLater(const CacheConfig &config, const CacheKey &key, std::vector<std::vector<char>> objects,
                      std::string description);

/// Waits until every link queued so far is stored (or has failed).
void waitForLinkedStores();

/// Links objects into a shared object image with lld, in this process,
/// through files in `workDir` (linkWorkFile names them; the caller removes
/// them). Background links call it in a child process.
Expected<std::vector<char>> linkSharedObject(std::span<const std::vector<char>> objects, const std::string &workDir);
/// The i-th input object's file in `workDir`; i = the number of inputs is
/// the output.
inline std::string linkWorkFile(const std::string &workDir, size_t i) { return workDir + "/k" + std::to_string(i) + ".o"; }

} // namespace hsnn::detail
