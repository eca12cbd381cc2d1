//===- lib/CodeGen/PTXCompiler.h - Kernels to PTX through NVPTX ----*- C++ -*-===//
//
// LLVM-free: compilePtx and ptxArchFor run in the code generator module
// (CodeGenModule.h, lib/CodeGenModule/PTXCompiler.cpp), the rest in the cuda engine
// (lib/CUDA/PTX.cpp). Here, below both, so that the module's table needs
// nothing from the engines that load it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CodeGen/Pipeline.h"

#include <string>

namespace hsnn::detail {

struct PtxOptions {
  std::string arch = "sm_80"; ///< sm_XY
  int optLevel = 3;
  bool fastMath = false;      ///< LLVM's fast-math flags outside the math library's functions.
};

/// The newest architecture this LLVM's NVPTX backend knows that a device of
/// compute capability major.minor runs: sm_XY itself when known, else the
/// closest older one (PTX is forward compatible: the driver assembles it for
/// the newer device).
Expected<std::string> ptxArchFor(int ccMajor, int ccMinor);

/// What identifies the PTX generator in cache keys: LLVM's version (the math
/// library is hsnn's, so the format keys cover it).
std::string ptxGeneratorId();

/// The ISA version a PTX text declares (".version 7.8" -> 78), 0 if none.
int ptxIsaVersion(std::string_view ptx);

/// PTX text for the kernels of `spec` (KernelSpec.h; the same tapes, element
/// lowering and math library as the CPU): it needs nothing but the driver.
Expected<std::string> compilePtx(const GpuModuleSpec &spec, const PtxOptions &options, CompileStats *stats = nullptr);

} // namespace hsnn::detail
