//===- lib/CodeGenModule/HostJIT.cpp - ORC LLJIT for the host CPU ---------===//
//
// Compiles with our own TargetMachine and new-pass-manager pipeline to an
// object, then hands the object to LLJIT: the object is what the disk cache
// keeps, and loading one never runs the optimizer. Each loaded object gets
// its own JITDylib, removed when the last layer using it goes away.
//===----------------------------------------------------------------------===//
#include "CodeGen/HostJIT.h"

#include "hsnn/Environment.h"

#include "CodeGen/Pipeline.h"
#include "CodeGenModule/ModuleParts.h"
#include "Program/Stopwatch.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>
#include <llvm/TargetParser/X86TargetParser.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <fmt/format.h>
#include <mutex>

namespace hsnn::detail {
namespace {

constexpr const char *kLibmvec = "libmvec.so.1";

class LoadedObject final : public KernelLibrary {
public:
  LoadedObject(llvm::orc::LLJIT &jit, llvm::orc::JITDylib &jd) : jit_(jit), jd_(jd) {}
  ~LoadedObject() override {
    if (llvm::Error e = jit_.getExecutionSession().removeJITDylib(jd_))
      llvm::consumeError(std::move(e)); // nothing useful to do at teardown
  }
  void *address(const std::string &symbol) const override {
    auto it = std::find_if(symbols_.begin(), symbols_.end(), [&](auto &p) { return p.first == symbol; });
    return it == symbols_.end() ? nullptr : it->second;
  }
  std::vector<std::pair<std::string, void *>> symbols_;

private:
  llvm::orc::LLJIT &jit_;
  llvm::orc::JITDylib &jd_;
};

/// The features of the x86 CPU LLVM calls `name` ("haswell", "znver3"),
/// for HSNN_TARGET_CPU: kernels for an older CPU than this one (measuring
/// AVX2 code on an AVX-512 machine). Refused where this CPU lacks one of
/// them, since the kernels would fault.
Expected<std::vector<std::string>> namedCpuFeatures(std::string_view name, const llvm::StringMap<bool> &host) {
  auto refuse = [&](const std::string &why) {
    return Error(ErrorCode::InvalidArgument, fmt::format("HSNN_TARGET_CPU='{}': {}", name, why));
  };
  llvm::Triple triple(llvm::sys::getProcessTriple());
  if (!triple.isX86())
    return refuse("only x86 CPUs can be named");
  if (!llvm::X86::parseArchX86(name, /*Only64Bit=*/true))
    return refuse("LLVM knows no x86-64 CPU of that name (haswell, skylake-avx512, znver3, ...)");
  llvm::SmallVector<llvm::StringRef, 64> named;
  llvm::X86::getFeaturesForCPU(name, named);
  std::vector<std::string> out;
  // Only the instruction sets compiled code can use: system features
  // (invpcid, sgx, ...) never appear in kernels.
  auto computes = [](llvm::StringRef f) {
    for (const char *p : {"avx", "sse", "ssse", "fma", "f16c", "bmi", "popcnt", "lzcnt", "movbe", "adx", "aes",
                          "pclmul", "vpclmul", "gfni", "vaes", "sha", "evex512", "cx16"})
      if (f.starts_with(p))
        return true;
    return false;
  };
  for (llvm::StringRef f : named) {
    auto it = host.find(f);
    if (computes(f) && it != host.end() && !it->second)
      return refuse(fmt::format("it has {}, which this CPU ({}) lacks", f.str(), llvm::sys::getHostCPUName().str()));
    out.push_back("+" + f.str());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class HostJITImpl final : public HostJIT {
public:
  // Only what cache keys need: the target and libmvec. The JIT itself
  // starts on the first compile or object load (ensureJIT), so a layer
  // that loads linked kernels from the cache never starts it.
  static Expected<std::unique_ptr<HostJITImpl>> create() {
    // What JITTargetMachineBuilder::detectHost() finds, asked once each
    // (it would ask for the features again, a noticeable share of a cache
    // hit).
    auto self = std::unique_ptr<HostJITImpl>(new HostJITImpl());
    HostTarget &t = self->target_;
    t.triple = llvm::sys::getProcessTriple();
    t.cpu = llvm::sys::getHostCPUName().str();
    llvm::StringMap<bool> host = llvm::sys::getHostCPUFeatures();
    std::vector<std::string> feats;
    if (const char *named = environmentValue(EnvironmentVariable::TargetCpu); named && *named) {
      auto chosen = namedCpuFeatures(named, host);
      if (!chosen)
        return chosen.error();
      t.cpu = named;
      feats = std::move(*chosen);
    } else {
      for (auto &f : host) {
        std::string name = f.second ? "+" : "-"; // appended: "+" + string&& is a GCC 12 false -Wrestrict
        name.append(f.first().data(), f.first().size());
        feats.push_back(std::move(name));
      }
    }
    std::sort(feats.begin(), feats.end());
    for (const std::string &f : feats) {
      t.features += t.features.empty() ? "" : ",";
      t.features += f;
    }
    auto has = [&](const char *f) { return std::find(feats.begin(), feats.end(), std::string("+") + f) != feats.end(); };
    t.capability = has("avx512f") ? "AVX512" : has("avx2") ? "AVX2" : "DEFAULT";
    t.llvmVersion = LLVM_VERSION_STRING;
    t.vectorMath = "scalar";
    self->features_ = feats;

    self->emit_.hasFMA = has("fma");
    if (const char *math = environmentValue(EnvironmentVariable::CpuMath); math && *math) {
      if (std::string_view(math) == "libmvec")
        self->emit_.ownMath = false;
      else if (std::string_view(math) != "hsnn")
        return Error(ErrorCode::InvalidArgument, fmt::format("HSNN_CPU_MATH='{}' is not hsnn or libmvec", math));
    }
    self->emit_.sumParts = true; // blocks' sums added by launchLoss
    self->emit_.cpu = t.cpu;
    self->emit_.rowShape = fixedRowShape(t.cpu);
    self->emit_.vectorBits = t.vectorBits = has("avx512f") ? 512 : has("avx2") ? 256 : 128;
    // libmvec supplies the vector math; without it math runs lane by lane.
    std::string err;
    self->libmvec_ = llvm::sys::DynamicLibrary::getPermanentLibrary(kLibmvec, &err);
    if (self->libmvec_.isValid()) {
      self->emit_.vectorISAs = has("avx512f") ? "edb" : has("avx2") ? "db" : "b";
      t.vectorMath = "libmvec:" + self->emit_.vectorISAs;
      auto lib = self->libmvec_;
      self->emit_.hasVectorVariant = [lib](const std::string &name) mutable {
        return lib.getAddressOfSymbol(name.c_str()) != nullptr;
      };
    }
    if (self->emit_.hasFMA && self->emit_.ownMath) // libmvec only for what hsnn's library lacks
      t.vectorMath = "hsnn+" + t.vectorMath;
    return self;
  }

  const HostTarget &target() const override { return target_; }

  Expected<std::vector<char>> compileObject(std::span<const KernelRequest> requests, const JITOptions &options,
                                            CompileStats *stats) override {
    return withTargetMachine(options, [&](llvm::TargetMachine &tm, PipelineOptions &po) {
      po.emit.fastMath = options.fastMath;
      if (options.rowShape)
        po.emit.rowShape = *options.rowShape;
      po.emit.externalMath = true; // linked from compileMath's objects
      return compileRequests(tm, requests, po, stats);
    });
  }

  Expected<std::vector<char>> compileMath(std::span<const MathFunction> functions, const JITOptions &options,
                                          CompileStats *stats) override {
    return withTargetMachine(options, [&](llvm::TargetMachine &tm, PipelineOptions &po) {
      return compileMathFunctions(tm, functions, po, stats);
    });
  }

  Expected<std::shared_ptr<KernelLibrary>> load(std::span<const std::vector<char>> objects,
                                                std::span<const std::string> symbols, CompileStats *stats) override {
    auto t0 = Clock::now();
    if (Error e = ensureJIT())
      return e;
    std::string name = fmt::format("hsnn.{}", counter_.fetch_add(1));
    auto jd = jit_->createJITDylib(name);
    if (!jd)
      return fromLLVM(jd.takeError(), "cannot create a JITDylib");
    char prefix = jit_->getDataLayout().getGlobalPrefix();
    auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix);
    if (!process)
      return fromLLVM(process.takeError(), "cannot search the process's symbols");
    jd->addGenerator(std::move(*process));
    if (libmvec_.isValid()) {
      if (auto mvec = llvm::orc::DynamicLibrarySearchGenerator::Load(kLibmvec, prefix))
        jd->addGenerator(std::move(*mvec));
      else
        llvm::consumeError(mvec.takeError());
    }

    auto lib = std::make_shared<LoadedObject>(*jit_, *jd);
    for (const std::vector<char> &object : objects) {
      auto buffer = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()), name);
      if (llvm::Error e = jit_->addObjectFile(*jd, std::move(buffer)))
        return fromLLVM(std::move(e), "cannot load the compiled object");
    }
    // One lookup for every symbol: each lookup is a round of the session's
    // work queue.
    llvm::orc::SymbolLookupSet wanted;
    for (const std::string &s : symbols)
      wanted.add(jit_->mangleAndIntern(s));
    auto found = jit_->getExecutionSession().lookup(llvm::orc::makeJITDylibSearchOrder(&*jd), std::move(wanted));
    if (!found)
      return fromLLVM(found.takeError(), "cannot resolve the kernels");
    for (const std::string &s : symbols) {
      auto it = found->find(jit_->mangleAndIntern(s));
      if (it == found->end())
        return Error(ErrorCode::Internal, fmt::format("cannot resolve kernel '{}'", s));
      lib->symbols_.emplace_back(s, it->second.getAddress().toPtr<void *>());
    }
    if (stats)
      stats->loadMs = msSince(t0);
    return std::shared_ptr<KernelLibrary>(std::move(lib));
  }

private:
  // compile(a target machine of its own, the JIT's pipeline options at
  // options' level).
  template <class F> Expected<std::vector<char>> withTargetMachine(const JITOptions &options, F &&compile) {
    if (Error e = ensureJIT())
      return e;
    auto tm = jtmb_->createTargetMachine();
    if (!tm)
      return fromLLVM(tm.takeError(), "cannot create a target machine");
    PipelineOptions po;
    po.optLevel = options.optLevel;
    po.emit = emit_;
    return compile(**tm, po);
  }

  HostJITImpl() = default;

  Error ensureJIT() {
    std::call_once(jitOnce_, [this] {
      llvm::InitializeNativeTarget();
      llvm::InitializeNativeTargetAsmPrinter();
      jtmb_ = std::make_unique<llvm::orc::JITTargetMachineBuilder>(llvm::Triple(target_.triple));
      jtmb_->setCPU(target_.cpu);
      jtmb_->addFeatures(features_);
      jtmb_->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
      // Position-independent: the cache also keeps a layer's objects linked
      // into one shared object (SharedObject.h), which needs PIC.
      jtmb_->setRelocationModel(llvm::Reloc::PIC_);
      // Small, not the JIT's default large model: JITLink allocates each
      // object's sections together and reaches other symbols through its own
      // GOT and stubs, so 32-bit offsets suffice. In the large model the
      // constants' addresses take a movabs each, so LLVM keeps them in
      // registers, spills them across libmvec calls (every zmm is
      // caller-saved) and reloads 64 bytes per use: gelu's backward ran
      // much slower than the same IR compiled ahead of time (small model).
      jtmb_->setCodeModel(llvm::CodeModel::Small);
      // No platform: kernels have no static initializers to run, and setting
      // one up measured a noticeable share of a cache hit in a fresh process.
      auto jit = llvm::orc::LLJITBuilder()
                     .setJITTargetMachineBuilder(*jtmb_)
                     .setPlatformSetUp(llvm::orc::setUpInactivePlatform)
                     .create();
      if (jit)
        jit_ = std::move(*jit);
      else
        jitFailure_ = fromLLVM(jit.takeError(), "cannot start the LLVM JIT");
    });
    return jit_ ? Error::success() : Error(jitFailure_);
  }

  std::once_flag jitOnce_;
  Error jitFailure_;
  HostTarget target_;
  std::vector<std::string> features_;
  std::unique_ptr<llvm::orc::JITTargetMachineBuilder> jtmb_; // made with the JIT
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  llvm::sys::DynamicLibrary libmvec_;
  EmitOptions emit_;
  std::atomic<uint64_t> counter_{0};
};

} // namespace

Expected<HostJIT *> moduleHostJit() {
  // Never destroyed: kernels of layers held in globals are released at
  // exit, after function-local statics are gone, and need the JIT then.
  static std::once_flag once;
  static HostJITImpl *jit = nullptr;
  static Error *failure = nullptr;
  std::call_once(once, [] {
    auto j = HostJITImpl::create();
    if (j)
      jit = j->release();
    else
      failure = new Error(j.takeError());
  });
  if (!jit)
    return *failure;
  return static_cast<HostJIT *>(jit);
}

} // namespace hsnn::detail
