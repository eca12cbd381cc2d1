//===- lib/CPU/SharedObjectLinker.cpp - Objects to a shared object by lld -===//
//
// lld as a library: the ELF driver on files in a private temporary
// directory (lld reads and writes paths). Background links call it in a
// child process (SharedObject.cpp), so lld's global state stays there. Undefined symbols (libmvec's and
// libm's) stay undefined and resolve when the image is loaded, against the
// libraries the process already has (the host JIT keeps libmvec loaded), so
// linking reads no system library and needs no -dev package.
//===----------------------------------------------------------------------===//
#include "SharedObject.h"

#include <lld/Common/Driver.h>
#include <llvm/Support/raw_ostream.h>

#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <iterator>
#include <mutex>

LLD_HAS_DRIVER(elf)

namespace hsnn::detail {
namespace {

Error linkFailure(const std::string &why) {
  return Error(ErrorCode::Internal, fmt::format("cannot link the kernels into a shared object for the cache: {}", why));
}

} // namespace

bool canLinkSharedObjects() { return true; }

Expected<std::vector<char>> linkSharedObject(std::span<const std::vector<char>> objects, const std::string &workDir) {
  // lld's driver keeps global state: one link at a time, and none after a
  // link that says it cannot run again.
  static std::mutex mutex;
  static bool broken = false;
  std::lock_guard lock(mutex);
  if (broken)
    return linkFailure("an earlier link left lld unusable");
  std::vector<std::string> inputs;
  for (size_t i = 0; i < objects.size(); ++i) {
    inputs.push_back(linkWorkFile(workDir, i));
    std::ofstream out(inputs.back(), std::ios::binary);
    out.write(objects[i].data(), std::streamsize(objects[i].size()));
    if (!out)
      return linkFailure("cannot write an object to " + inputs.back());
  }
  std::string output = linkWorkFile(workDir, objects.size());
  std::vector<const char *> args = {"ld.lld", "-shared", "-o", output.c_str(), "-z", "now", "-z", "relro",
                                    "--build-id=none", "--hash-style=gnu", "--threads=1"}; // no soname: see SharedObject.cpp
  for (const std::string &in : inputs)
    args.push_back(in.c_str());

  std::string diagnostics;
  llvm::raw_string_ostream errs(diagnostics);
  llvm::raw_null_ostream outs;
  lld::Result r = lld::lldMain(args, outs, errs, {{lld::Gnu, &lld::elf::link}});
  broken = !r.canRunAgain;
  if (r.retCode != 0)
    return linkFailure(errs.str().empty() ? "lld failed" : errs.str());

  std::ifstream in(output, std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (image.empty())
    return linkFailure("lld wrote an empty file");
  return image;
}

} // namespace hsnn::detail
