//===- lib/CodeGenModule/ModuleParts.h - Inside libhsnn-codegen -*- C++ -*-===//
//
// The LLVM-backed implementations the module's table points to; only code
// linked into the module includes this.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CodeGenModule.h"

namespace hsnn::detail {

Expected<HostJIT *> moduleHostJit();                       // CPU/HostJIT.cpp
Expected<std::string> nvptxArchFor(int ccMajor, int ccMinor); // CUDA/PTXCompiler.cpp
Expected<std::string> nvptxCompile(const GpuModuleSpec &spec, const PtxOptions &options, CompileStats *stats);
Expected<std::vector<char>> aotCompile(const AotOptions &options, const AotCodeBuilder &build); // AOT/AotCodeGen.cpp

} // namespace hsnn::detail
