//===- lib/CPU/HostJITModule.cpp - The host JIT, from the code generator --===//
#include "HostJIT.h"

#include "CodeGenModule/CodeGenModule.h"

#if HSNN_HAS_CODEGEN_MODULE
#include <llvm/Config/llvm-config.h> // the version only: this file links no LLVM
#endif

namespace hsnn::detail {

Expected<HostJIT *> HostJIT::get() {
  auto m = codeGenModule();
  if (!m)
    return m.error();
  return (*m)->hostJit();
}

// Looking for the module costs a cache hit ~0.3 ms of system calls on a VM
// (readlink, stats); a module that is missing makes the compile fail, and
// that falls back like any JIT failure.
bool HostJIT::available() {
#if HSNN_HAS_CODEGEN_MODULE
  return true;
#else
  return false;
#endif
}

// Cache keys name it, and a cache hit must not load the module to ask: the
// module is built against these same headers (its token checks that).
const char *HostJIT::llvmVersion() {
#if HSNN_HAS_CODEGEN_MODULE
  return LLVM_VERSION_STRING;
#else
  return "none";
#endif
}

} // namespace hsnn::detail
