//===- lib/CodeGenModule/AotTargets.cpp - The targets AOT objects use -----===//
//
// Part of the code generator module, and the one file of it compiled twice:
// with libLLVM.so every backend LLVM was built with is there for --target;
// the module linked with LLVM's archives (the one a Python source
// distribution carries) holds the host's backend and NVPTX only, and asking
// the registry for the others would name symbols it does not link.
//===----------------------------------------------------------------------===//
#include "CodeGenModule/ModuleParts.h"

#include <llvm/Support/TargetSelect.h>

#ifndef HSNN_AOT_ALL_TARGETS
#error "HSNN_AOT_ALL_TARGETS must be 0 or 1 (lib/CodeGenModule/CMakeLists.txt)"
#endif

namespace hsnn::detail {

void initializeAotTargets() {
#if HSNN_AOT_ALL_TARGETS
  llvm::InitializeAllTargetInfos();
  llvm::InitializeAllTargets();
  llvm::InitializeAllTargetMCs();
  llvm::InitializeAllAsmPrinters();
#else
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
#endif
}

} // namespace hsnn::detail
