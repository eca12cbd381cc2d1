//===- lib/CPU/HostJITModule.cpp - The host JIT, from the code generator --===//
#include "CodeGen/HostJIT.h"

#include "CodeGenModule/CodeGenModule.h"

namespace hsnn::detail {

Expected<HostJIT *> HostJIT::get() {
  auto m = codeGenModule();
  if (!m)
    return m.error();
  return (*m)->hostJit();
}

// Not looked for: that would cost a cache hit system calls (readlink,
// stats), slow on a VM; a module that is missing makes the compile fail,
// and that falls back like any JIT failure.
bool HostJIT::available() {
#if HSNN_HAS_CODEGEN_MODULE
  return true;
#else
  return false;
#endif
}

const char *HostJIT::llvmVersion() { return codeGenLlvmVersion(); }

} // namespace hsnn::detail
