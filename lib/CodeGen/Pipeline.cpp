//===- lib/CodeGen/Pipeline.cpp - Requests to optimised machine code ------===//
#include "Pipeline.h"

#include "Program/Stopwatch.h"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/Pass.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Transforms/IPO/AlwaysInliner.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/InstCombine/InstCombine.h>
#include <llvm/Transforms/Scalar/EarlyCSE.h>
#include <llvm/Transforms/Scalar/SimplifyCFG.h>

#include <chrono>
#include <fmt/format.h>

namespace hsnn::detail {
namespace {
/// A legacy function pass that only counts: the code generator is a legacy
/// pass pipeline, and this is how one sees inside it.
class ProgressPass : public llvm::FunctionPass {
public:
  static char ID;
  explicit ProgressPass(std::function<void()> tick) : llvm::FunctionPass(ID), tick_(std::move(tick)) {}
  bool runOnFunction(llvm::Function &f) override {
    if (!f.isDeclaration())
      tick_();
    return false;
  }
  void getAnalysisUsage(llvm::AnalysisUsage &au) const override { au.setPreservesAll(); }
  llvm::StringRef getPassName() const override { return "hsnn progress"; }

private:
  std::function<void()> tick_;
};
char ProgressPass::ID = 0;
} // namespace
namespace {

// The emitter's kernels are single loops over straight-line vector code,
// already CSE'd, with constants hoisted: they need a cleanup, not the whole
// O3 pipeline (which took much longer for the same machine code).
llvm::FunctionPassManager kernelPipeline(llvm::OptimizationLevel level) {
  llvm::FunctionPassManager fpm;
  fpm.addPass(llvm::InstCombinePass());
  fpm.addPass(llvm::SimplifyCFGPass(llvm::SimplifyCFGOptions().convertSwitchRangeToICmp(true)));
  if (level.getSpeedupLevel() >= 2)
    fpm.addPass(llvm::EarlyCSEPass());
  return fpm;
}

} // namespace

Error fromLLVM(llvm::Error e, std::string_view what) {
  return Error(ErrorCode::Internal, fmt::format("{}: {}", what, llvm::toString(std::move(e))));
}

void runPasses(llvm::Module &module, llvm::TargetMachine &tm,
               const std::function<llvm::ModulePassManager(llvm::PassBuilder &)> &build) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  build(pb).run(module, mam);
}

namespace {
// Emits through `emit`, verifies, optimizes and writes the module.
Expected<std::vector<char>> compileModule(llvm::TargetMachine &tm, const PipelineOptions &options, CompileStats *stats,
                                          llvm::function_ref<llvm::Error(llvm::Module &)> emit) {
  auto t0 = Clock::now();
  // -O1 uses the fast instruction selector and register allocator: a much
  // shorter compile for somewhat slower code (bench W1-W4).
  tm.setOptLevel(options.optLevel <= 1   ? llvm::CodeGenOptLevel::None
                 : options.optLevel == 2 ? llvm::CodeGenOptLevel::Default
                                         : llvm::CodeGenOptLevel::Aggressive);
  llvm::LLVMContext ctx;
  llvm::Module module("hsnn", ctx);
  module.setDataLayout(tm.createDataLayout());
  module.setTargetTriple(tm.getTargetTriple().str());
  if (llvm::Error e = emit(module))
    return fromLLVM(std::move(e), "code generation failed");
  std::string verifyMessage;
  llvm::raw_string_ostream vs(verifyMessage);
  if (llvm::verifyModule(module, &vs))
    return Error(ErrorCode::Internal, "generated IR does not verify: " + vs.str());
  if (stats)
    stats->emitMs = msSince(t0);

  auto t1 = Clock::now();
  llvm::OptimizationLevel ol = options.optLevel <= 0   ? llvm::OptimizationLevel::O0
                               : options.optLevel == 1 ? llvm::OptimizationLevel::O1
                               : options.optLevel == 2 ? llvm::OptimizationLevel::O2
                                                       : llvm::OptimizationLevel::O3;
  runPasses(module, tm, [&](llvm::PassBuilder &pb) {
    llvm::ModulePassManager mpm;
    if (ol == llvm::OptimizationLevel::O0)
      mpm = pb.buildO0DefaultPipeline(ol);
    else {
      // The math library's small helpers with a branch (MathTrig.cpp) are
      // always-inline functions of their own.
      mpm.addPass(llvm::AlwaysInlinerPass());
      mpm.addPass(llvm::createModuleToFunctionPassAdaptor(kernelPipeline(ol)));
    }
    return mpm;
  });
  if (stats)
    stats->optimizeMs = msSince(t1);

  auto t2 = Clock::now();
  llvm::SmallVector<char, 0> buffer;
  {
    llvm::raw_svector_ostream os(buffer);
    if (options.output == OutputKind::LLVMIR) {
      module.print(os, nullptr);
    } else {
      llvm::legacy::PassManager pm;
      auto kind = options.output == OutputKind::Object ? llvm::CodeGenFileType::ObjectFile
                                                       : llvm::CodeGenFileType::AssemblyFile;
      if (tm.addPassesToEmitFile(pm, os, nullptr, kind))
        return Error(ErrorCode::Unsupported,
                     fmt::format("target {} cannot emit this kind of file", tm.getTargetTriple().str()));
      if (options.progress) {
        size_t total = 0;
        for (const llvm::Function &f : module)
          total += !f.isDeclaration();
        // Appended after the code generator's per-function passes, so it
        // runs as each function's machine code is done.
        pm.add(new ProgressPass([&, done = size_t(0)]() mutable { options.progress(++done, total); }));
      }
      pm.run(module);
    }
  }
  if (stats) {
    stats->codegenMs = msSince(t2);
    stats->objectBytes = buffer.size();
  }
  return std::vector<char>(buffer.begin(), buffer.end());
}
} // namespace

Expected<std::vector<char>> compileRequests(llvm::TargetMachine &tm, std::span<const KernelRequest> requests,
                                            const PipelineOptions &options, CompileStats *stats,
                                            const ModuleExtender &extend) {
  return compileModule(tm, options, stats, [&](llvm::Module &module) -> llvm::Error {
    if (llvm::Error e = emitKernels(module, requests, options.emit))
      return e;
    return extend ? extend(module) : llvm::Error::success();
  });
}

Expected<std::vector<char>> compileMathFunctions(llvm::TargetMachine &tm, std::span<const MathFunction> functions,
                                                 const PipelineOptions &options, CompileStats *stats) {
  return compileModule(tm, options, stats, [&](llvm::Module &module) {
    return emitMathFunctions(module, functions, options.emit);
  });
}

} // namespace hsnn::detail
