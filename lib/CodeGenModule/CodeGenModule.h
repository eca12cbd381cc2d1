//===- lib/CodeGenModule/CodeGenModule.h - LLVM behind dlopen ---*- C++ -*-===//
//
// Everything that needs LLVM (the IR emitter, the host JIT, NVPTX, ahead-of-
// time objects) lives in one loadable module, libhsnn-codegen.so, which the
// library loads on the first compile. A cache hit of linked kernels, the
// interpreter and the CLI's other commands never load it: starting libLLVM
// (the shared one's loading, or the static one's constructors and page
// faults) is then no part of a process's start.
//
// Both sides are built from one tree and pass C++ objects (std::string,
// Expected, the kernel requests) through the table below, so the module
// carries the build's token and is refused unless it matches exactly.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CodeGen/HostJIT.h"
#include "CodeGen/PTXCompiler.h"

#include "hsnn/AOT.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hsnn::detail {

/// What an ahead-of-time object holds, given the width of the target's
/// vectors (row kernels are planned for it).
struct AotCode {
  std::vector<KernelRequest> requests;
  /// A layer's entry points; a loss has its default constants instead.
  std::optional<LayerEntryPoints> layer;
  std::string lossName;
  std::vector<double> lossDefaults;
};
using AotCodeBuilder = std::function<Expected<AotCode>(unsigned vectorBits)>;

/// The module's entry points. A new member goes at the end; `size` and the
/// token tell the loader whether the module is the one it was built with.
struct CodeGenModule {
  size_t size = sizeof(CodeGenModule);
  const char *buildToken = nullptr;
  /// The process-wide host JIT (created on the first call).
  Expected<HostJIT *> (*hostJit)() = nullptr;
  Expected<std::string> (*ptxArchFor)(int ccMajor, int ccMinor) = nullptr;
  Expected<std::string> (*compilePtx)(const GpuModuleSpec &spec, const PtxOptions &options,
                                      CompileStats *stats) = nullptr;
  /// Checks the target, asks `build` for the code and compiles it.
  Expected<std::vector<char>> (*compileAot)(const AotOptions &options, const AotCodeBuilder &build) = nullptr;
};

/// The module, loaded on the first call; the error says where it was looked
/// for and why it could not be used. Thread-safe; never unloaded.
Expected<const CodeGenModule *> codeGenModule();
/// The path of the module in use (loading it), else "".
std::string codeGenModulePath();
/// The LLVM version the module is built with ("none" without one), known
/// without loading it: cache keys name it, and a cache hit must not load
/// LLVM to ask (the module's token checks it was built with the same).
const char *codeGenLlvmVersion();

} // namespace hsnn::detail

/// The module's one exported symbol.
extern "C" const hsnn::detail::CodeGenModule *hsnn_codegen_module_v1();
