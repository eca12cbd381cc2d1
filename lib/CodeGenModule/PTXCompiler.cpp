//===- lib/CodeGenModule/PTXCompiler.cpp - Kernels to PTX through NVPTX ---===//
//
// The kernels' math is hsnn's own library (lib/CodeGen/InlineMath.h), the
// same IR as the CPU's, so nothing is linked: everything but the kernels is
// internalized and optimized away. No flush-to-zero, fast math or not.
//===----------------------------------------------------------------------===//
#include "CodeGen/PTXCompiler.h"
#include "CodeGen/Pipeline.h"

#include "CodeGenModule/ModuleParts.h"

#include "Program/Stopwatch.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/IPO/Internalize.h>

#include <chrono>
#include <fmt/format.h>
#include <mutex>
#include <set>

namespace hsnn::detail {
namespace {
constexpr const char *kTriple = "nvptx64-nvidia-cuda";
} // namespace

namespace {
const llvm::Target *nvptxTarget(std::string &err) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  return llvm::TargetRegistry::lookupTarget(kTriple, err);
}
} // namespace

Expected<std::string> nvptxArchFor(int ccMajor, int ccMinor) {
  std::string err;
  const llvm::Target *target = nvptxTarget(err);
  if (!target)
    return Error(ErrorCode::Unsupported, "this LLVM has no NVPTX backend: " + err);
  std::unique_ptr<llvm::MCSubtargetInfo> sti(target->createMCSubtargetInfo(kTriple, "", ""));
  int want = ccMajor * 10 + ccMinor, best = 0;
  for (const llvm::SubtargetSubTypeKV &kv : sti->getAllProcessorDescriptions()) {
    llvm::StringRef name(kv.Key);
    int v = 0;
    if (name.consume_front("sm_") && !name.getAsInteger(10, v) && v <= want && v > best)
      best = v;
  }
  if (!best)
    return Error(ErrorCode::Unsupported,
                 fmt::format("compute capability {}.{} is older than any architecture LLVM's NVPTX backend targets",
                             ccMajor, ccMinor));
  return fmt::format("sm_{}", best);
}

Expected<std::string> nvptxCompile(const GpuModuleSpec &spec, const PtxOptions &options, CompileStats *stats) {
  std::string err;
  const llvm::Target *target = nvptxTarget(err);
  if (!target)
    return Error(ErrorCode::Unsupported, "this LLVM has no NVPTX backend: " + err);
  if (options.arch.size() < 5 || !options.arch.starts_with("sm_") ||
      options.arch.find_first_not_of("0123456789a", 3) != std::string::npos)
    return Error(ErrorCode::InvalidArgument, fmt::format("GPU architecture '{}' is not of the form sm_XY", options.arch));
  // An architecture the backend does not know would get PTX of ISA 6.0 with
  // a warning on stderr, which ptxas then rejects: refuse it here instead.
  std::unique_ptr<llvm::MCSubtargetInfo> sti(target->createMCSubtargetInfo(kTriple, "", ""));
  if (!sti->isCPUStringValid(options.arch)) {
    std::string newest;
    for (const llvm::SubtargetSubTypeKV &kv : sti->getAllProcessorDescriptions())
      newest = kv.Key;
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("GPU architecture '{}' is not one LLVM {} generates code for (the newest is {}); devices "
                             "newer than sm_90, such as sm_100 and sm_120, run sm_90 PTX, which their driver assembles",
                             options.arch, LLVM_VERSION_STRING, newest));
  }
  std::unique_ptr<llvm::TargetMachine> tm(
      target->createTargetMachine(kTriple, options.arch, "", llvm::TargetOptions(), std::nullopt));
  if (!tm)
    return Error(ErrorCode::Unsupported, "cannot create an NVPTX target machine for " + options.arch);

  auto t0 = Clock::now();
  llvm::LLVMContext ctx;
  auto module = std::make_unique<llvm::Module>("hsnn", ctx);
  module->setDataLayout(tm->createDataLayout());
  module->setTargetTriple(kTriple);
  EmitOptions emit;
  emit.gpu = true;
  emit.fastMath = options.fastMath;
  if (llvm::Error e = emitGpuKernels(*module, spec, emit))
    return fromLLVM(std::move(e), "code generation failed");
  // Every function is the library's: a call left to something outside the
  // module would fail only when the driver loads the PTX, so it fails here.
  for (llvm::Function &f : *module)
    if (f.isDeclaration() && !f.isIntrinsic())
      return Error(ErrorCode::Internal, fmt::format("no GPU lowering for {}", f.getName().str()));
  std::set<std::string> kernels;
  for (const GpuLayerKernel &k : spec.layers)
    kernels.insert(k.symbol);
  for (const KernelRequest &r : spec.losses)
    kernels.insert(r.symbol);
  for (const GpuPopulationKernel &p : spec.populations)
    kernels.insert(p.symbol);
  for (const std::string *k : {&spec.sumKernel, &spec.valueKernel})
    if (!k->empty())
      kernels.insert(*k);
  std::string verifyMessage;
  llvm::raw_string_ostream vs(verifyMessage);
  if (llvm::verifyModule(*module, &vs))
    return Error(ErrorCode::Internal, "generated IR does not verify: " + vs.str());
  if (stats)
    stats->emitMs = msSince(t0);

  auto t1 = Clock::now();
  std::string pipelineError;
  runPasses(*module, *tm, [&](llvm::PassBuilder &pb) {
    llvm::ModulePassManager mpm;
    // Only the kernels stay visible; the math library's helpers inline and vanish.
    mpm.addPass(llvm::InternalizePass([&](const llvm::GlobalValue &g) { return kernels.count(g.getName().str()) > 0; }));
    // A kernel-sized pipeline rather than O3's: the kernels are one loop of
    // straight-line element code, and what they need is the library's
    // helpers inlined, then cleaned up, with loop-invariant constants
    // hoisted. It optimizes much faster than O3 on the bench's 256-node
    // layer, for PTX of about the same size.
    const char *pipeline =
        options.optLevel == 0
            ? "always-inline,globaldce"
            : "cgscc(inline),globaldce,function(sroa,early-cse,instcombine<no-verify-fixpoint>,"
              "simplifycfg,loop-mssa(licm),gvn,instcombine<no-verify-fixpoint>,simplifycfg)";
    if (llvm::Error e = pb.parsePassPipeline(mpm, pipeline))
      pipelineError = llvm::toString(std::move(e));
    return mpm;
  });
  if (!pipelineError.empty())
    return Error(ErrorCode::Internal, "the PTX pass pipeline does not parse: " + pipelineError);
  if (stats)
    stats->optimizeMs = msSince(t1);

  auto t2 = Clock::now();
  llvm::SmallString<0> ptx;
  {
    llvm::raw_svector_ostream os(ptx);
    llvm::legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
      return Error(ErrorCode::Unsupported, "NVPTX cannot emit PTX");
    pm.run(*module);
  }
  if (stats) {
    stats->codegenMs = msSince(t2);
    stats->objectBytes = ptx.size();
  }
  return std::string(ptx.str());
}

} // namespace hsnn::detail
