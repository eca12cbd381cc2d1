//===- lib/CodeGenModule/AotCodeGen.cpp - AOT objects for any target ------===//
//
// Part of the code generator module. Same tapes, emitter and pipeline as the
// JIT; only the target machine (any triple/CPU LLVM knows) and the C entry
// points differ. The front end is lib/AOT/AotCompiler.cpp.
//===----------------------------------------------------------------------===//
#include "CodeGen/Pipeline.h"
#include "CodeGenModule/ModuleParts.h"

#include <llvm/ADT/StringMap.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/Error.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <fmt/format.h>
#include <mutex>

namespace hsnn::detail {
namespace {

struct Target {
  std::unique_ptr<llvm::TargetMachine> tm;
  EmitOptions emit;
};

Expected<Target> makeTarget(const AotOptions &o) {
  static std::once_flag once;
  std::call_once(once, initializeAotTargets);
  std::string host = llvm::sys::getDefaultTargetTriple();
  std::string triple = o.triple.empty() ? host : o.triple;
  // Kernels use 64-bit indices, doubles and libm: LLVM's other backends
  // (bpf, amdgcn, 32-bit ones) stop the process with a fatal error on them,
  // so only the targets the emitter is made for get further. Checked before
  // the registry, which in a static build holds the host's backend only.
  llvm::Triple::ArchType arch = llvm::Triple(triple).getArch();
  if (arch != llvm::Triple::UnknownArch && arch != llvm::Triple::x86_64 && arch != llvm::Triple::aarch64)
    return Error(ErrorCode::Unsupported,
                 fmt::format("target '{}' is not supported for CPU kernels: use an x86_64 or aarch64 triple (GPU "
                             "kernels: --emit ptx)",
                             triple));
  std::string err;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target)
    return Error(ErrorCode::InvalidArgument, fmt::format("unknown target '{}': {}", triple, err));
  bool native = llvm::Triple(triple).getArch() == llvm::Triple(host).getArch() && o.cpu.empty();
  std::string cpu = !o.cpu.empty() ? o.cpu : native ? llvm::sys::getHostCPUName().str() : "generic";
  std::string features = o.features;
  if (native)
    for (auto &f : llvm::sys::getHostCPUFeatures())
      if (f.second)
        features += (features.empty() ? "+" : ",+") + f.first().str();
  std::unique_ptr<llvm::MCSubtargetInfo> sti(target->createMCSubtargetInfo(triple, cpu, features));
  if (!sti || (!o.cpu.empty() && !sti->isCPUStringValid(cpu)))
    return Error(ErrorCode::InvalidArgument, fmt::format("CPU '{}' is not known for target {}", cpu, triple));
  if (arch == llvm::Triple::x86_64 && !sti->checkFeatures("+64bit"))
    return Error(ErrorCode::InvalidArgument,
                 fmt::format("CPU '{}' has no 64-bit mode, which x86_64 code needs (try x86-64 or x86-64-v3)", cpu));
  llvm::TargetOptions to;
  Target t;
  t.tm.reset(target->createTargetMachine(triple, cpu, features, to, llvm::Reloc::PIC_));
  if (!t.tm)
    return Error(ErrorCode::Unsupported, fmt::format("cannot create a target machine for {}", triple));

  // libmvec's x86-64 vector variants, for the ISAs this CPU has; their
  // presence is checked in this machine's libmvec (the program links it).
  llvm::Triple tt(triple);
  auto has = [&](const char *f) { return sti->checkFeatures(std::string("+") + f); };
  t.emit.cpu = cpu;
  t.emit.rowShape = fixedRowShape(cpu);
  if (!o.rowShape.empty()) {
    std::optional<RowShape> shape = parseRowShape(o.rowShape);
    if (!shape)
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("row shape '{}' is not BxP (B blocks a pass: 1, 2 or 4; P bytes prefetched ahead: 0 "
                               "to 65536, a multiple of 64), e.g. 4x4096",
                               o.rowShape));
    t.emit.rowShape = *shape;
  }
  t.emit.hasFMA = tt.getArch() == llvm::Triple::aarch64 || (tt.getArch() == llvm::Triple::x86_64 && has("fma"));
  if (tt.getArch() == llvm::Triple::x86_64)
    t.emit.vectorBits = has("avx512f") ? 512 : has("avx2") ? 256 : 128;
  if (tt.getArch() == llvm::Triple::x86_64 && tt.isOSLinux()) {
    std::string e;
    auto lib = llvm::sys::DynamicLibrary::getPermanentLibrary("libmvec.so.1", &e);
    if (lib.isValid()) {
      t.emit.vectorISAs = has("avx512f") ? "edb" : has("avx2") ? "db" : "b";
      t.emit.hasVectorVariant = [lib](const std::string &name) mutable { return lib.getAddressOfSymbol(name.c_str()) != nullptr; };
    }
  }
  return t;
}

PipelineOptions pipelineOptions(const Target &target, const AotOptions &options) {
  PipelineOptions po;
  po.optLevel = options.optLevel;
  po.progress = options.progress;
  po.emit = target.emit;
  po.output = options.output == AotOutput::Object     ? OutputKind::Object
              : options.output == AotOutput::Assembly ? OutputKind::Assembly
                                                      : OutputKind::LLVMIR;
  return po;
}

} // namespace

Expected<std::vector<char>> aotCompile(const AotOptions &options, const AotCodeBuilder &build) {
  auto target = makeTarget(options);
  if (!target)
    return target.takeError();
  auto code = build(target->emit.vectorBits);
  if (!code)
    return code.takeError();
  return compileRequests(*target->tm, code->requests, pipelineOptions(*target, options), nullptr,
                         [&](llvm::Module &m) {
                           return code->layer ? emitLayerEntryPoints(m, *code->layer)
                                              : emitDefaultParams(m, code->lossName, code->lossDefaults);
                         });
}

} // namespace hsnn::detail
