//===- lib/CodeGenModule/ModuleParts.h - Inside libhsnn-codegen -*- C++ -*-===//
//
// The LLVM-backed implementations the module's table points to; only code
// linked into the module includes this.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CodeGenModule.h"

namespace hsnn::detail {

Expected<HostJIT *> moduleHostJit();                       // HostJIT.cpp
Expected<std::string> nvptxArchFor(int ccMajor, int ccMinor); // PTXCompiler.cpp
Expected<std::string> nvptxCompile(const GpuModuleSpec &spec, const PtxOptions &options, CompileStats *stats);
Expected<std::vector<char>> aotCompile(const AotOptions &options, const AotCodeBuilder &build); // AotCodeGen.cpp
// Registers the LLVM targets AOT objects can be made for: every target LLVM was
// built with where the module links libLLVM.so, the host's alone where it
// links LLVM's archives (AotTargets.cpp, compiled once for each).
void initializeAotTargets();

} // namespace hsnn::detail
