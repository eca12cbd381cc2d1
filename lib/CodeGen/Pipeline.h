//===- lib/CodeGen/Pipeline.h - Requests to optimised machine code -*- C++ -*-===//
//
// The one path from kernel requests to bytes, shared by the host JIT and
// ahead-of-time compilation: emit IR, verify, run the kernel pipeline, and
// write an object, assembly or IR.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "IREmitter.h"

#include "hsnn/Error.h"

#include <functional>
#include <string_view>
#include <vector>

namespace llvm {
class Error;
class TargetMachine;
class PassBuilder;
class Module;
template <typename IRUnitT, typename AnalysisManagerT, typename... ExtraArgTs> class PassManager;
template <typename IRUnitT, typename... ExtraArgTs> class AnalysisManager;
using ModulePassManager = PassManager<Module, AnalysisManager<Module>>;
} // namespace llvm

namespace hsnn::detail {

/// Where the time of one compile went (milliseconds).
struct CompileStats {
  double emitMs = 0, optimizeMs = 0, codegenMs = 0, loadMs = 0;
  size_t objectBytes = 0;
  bool cacheHit = false;
};

enum class OutputKind { Object, Assembly, LLVMIR };

struct PipelineOptions {
  int optLevel = 3; ///< 0: no optimisation; 1: fast code generation; 2, 3: full
  EmitOptions emit;
  OutputKind output = OutputKind::Object;
  /// Told after each function's machine code is generated (done, total):
  /// code generation is most of a large compile.
  std::function<void(size_t, size_t)> progress;
};

/// An LLVM error as hsnn's (Internal): "WHAT: LLVM's message". Consumes it.
Error fromLLVM(llvm::Error e, std::string_view what);

/// Adds more functions to the module before optimisation (AOT entry points).
using ModuleExtender = std::function<llvm::Error(llvm::Module &)>;

/// Runs a module pass pipeline built by `build` (given a PassBuilder set up
/// for `tm` with all analyses registered).
void runPasses(llvm::Module &module, llvm::TargetMachine &tm,
               const std::function<llvm::ModulePassManager(llvm::PassBuilder &)> &build);

/// The math functions' definitions (MathCalls.h), hidden, in one object.
Expected<std::vector<char>> compileMathFunctions(llvm::TargetMachine &tm, std::span<const MathFunction> functions,
                                                 const PipelineOptions &options, CompileStats *stats);

Expected<std::vector<char>> compileRequests(llvm::TargetMachine &tm, std::span<const KernelRequest> requests,
                                            const PipelineOptions &options, CompileStats *stats,
                                            const ModuleExtender &extend = {});

} // namespace hsnn::detail
