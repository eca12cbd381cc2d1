//===- lib/CPU/SharedObjectLinkerUnavailable.cpp - Builds without lld -----===//
//
// Without lld the cache keeps objects only, and every cache hit links them
// with the JIT.
//===----------------------------------------------------------------------===//
#include "SharedObject.h"

namespace hsnn::detail {

bool canLinkSharedObjects() { return false; }

Expected<std::vector<char>> linkSharedObject(std::span<const std::vector<char>>, const std::string &) {
  return Error(ErrorCode::Unsupported, "this build of hsnn has no lld to link shared objects");
}

} // namespace hsnn::detail
