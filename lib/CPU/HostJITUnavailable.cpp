//===- lib/CPU/HostJITUnavailable.cpp - HostJIT in builds without LLVM ----===//
#include "HostJIT.h"

namespace hsnn::detail {

Expected<HostJIT *> HostJIT::get() {
  return Error(ErrorCode::Unsupported, "hsnn was built without the LLVM JIT (HSNN_ENABLE_JIT=OFF)");
}

bool HostJIT::available() { return false; }
const char *HostJIT::llvmVersion() { return "none"; }

} // namespace hsnn::detail
