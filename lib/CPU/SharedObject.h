//===- lib/CPU/SharedObject.h - Cached kernels loaded without LLVM -*- C++ -*-===//
//
// A layer's kernel objects, once compiled, are also linked into one shared
// object (by the linker program, in the background) and kept in the disk cache beside the
// objects. A later process that finds it loads it with the C library's
// dlopen: no LLVM target, JIT session or JITLink, which were most of a cache
// hit's time. The image is loaded from memory (a memfd), so what runs is
// what the cache verified, not a file that could change after the check.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Cache/ObjectCache.h"
#include "CodeGen/HostJIT.h"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <sys/types.h>
#include <span>
#include <string>
#include <vector>

namespace hsnn::detail {

/// The symbol that ties a linked image to the cache key it was linked for
/// ("hsnn_image_" and the key's first 16 bytes in hex): the linker defines
/// it, and a load under another key does not find it.
std::string imageBindingSymbol(const CacheKey &key);

/// Loads a verified shared-object image and resolves every symbol in
/// `symbols`; an Error (never a crash) when the image does not load here,
/// or when `binding` is given and the image lacks it (an image stored
/// under another layer's key would compute another layer's formulas).
Expected<std::shared_ptr<KernelLibrary>> loadSharedObject(const std::vector<char> &image,
                                                          std::span<const std::string> symbols,
                                                          const std::string &binding = {});

/// Whether this process can link shared objects: it has a linker program
/// (HSNN_LINKER, else the one the build found).
bool canLinkSharedObjects();

/// Links `objects` into one shared object and stores it in the cache under
/// `key`, on a background thread: compile() does not wait for it. Links run
/// one at a time and a key already queued is not queued again; exit stops
/// the queue (a job not done is left to a later process).
/// `anySymbol` is one the objects define: the image's binding symbol
/// (imageBindingSymbol(key)) is made its alias.
void storeLinkedLater(const CacheConfig &config, const CacheKey &key, std::vector<std::vector<char>> objects,
                      std::string description, std::string anySymbol);

/// Waits until every link queued so far is stored (or has failed).
void waitForLinkedStores();

/// A wait status no process returns: the wait was abandoned.
constexpr int kLinkAbandoned = -1;
/// One look at a linker process: its wait status once it has ended, else
/// std::nullopt; `stop` kills it and reaps it.
std::optional<int> pollLinker(pid_t pid, bool stop);
/// How linkSharedObject waits for its linker: called until it returns a
/// status (pollLinker's, or kLinkAbandoned once the process is ended); the
/// second argument says the linker is past its deadline.
using LinkerPoll = std::function<std::optional<int>(pid_t, bool)>;

/// The linker program: HSNN_LINKER when set (empty: none), else the one
/// the build found.
const std::string &linkerProgram();

/// Links objects into a shared object image by running `program` on files
/// in `workDir` (linkWorkFile names them; the caller removes them), waiting
/// through `poll` (pollLinker when empty). With `binding`, the image also
/// exports that symbol as an alias of `bindTo` (a symbol the objects define).
Expected<std::vector<char>> linkSharedObject(std::span<const std::vector<char>> objects, const std::string &workDir,
                                             const std::string &program, const LinkerPoll &poll = {},
                                             const std::string &binding = {}, const std::string &bindTo = {});
/// A fresh work directory for one link, "TMPDIR/hsnn-link-PID-XXXXXX"
/// (/tmp without TMPDIR), or "" when none can be made.
std::string makeLinkWorkDir();
/// Removes the work directories in the temporary directory that processes
/// which no longer exist left there (killed, or ended by _exit, mid-link):
/// only this user's, only past `minAge` (a link is killed at 30 s).
/// Returns how many it removed.
size_t removeStaleLinkWorkDirs(std::chrono::seconds minAge = std::chrono::minutes(10));
/// The i-th input object's file in `workDir`; i = the number of inputs is
/// the output.
inline std::string linkWorkFile(const std::string &workDir, size_t i) { return workDir + "/k" + std::to_string(i) + ".o"; }

} // namespace hsnn::detail
