//===- test/CUDA/GpuEmulation.cpp - GPU kernels run on the CPU's threads --===//
#include "GpuEmulation.h"

#include "TestUtil.h"

#include "CodeGen/IREmitter.h"

#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/TargetSelect.h>

#include <barrier>
#include <deque>
#include <map>
#include <thread>
#include <vector>

namespace hsnn::test {
namespace {

// ---- CUDA's thread model on OS threads ----
struct Warp {
  std::barrier<> sync{32};
  uint32_t slots[32] = {};
};
struct ThreadState {
  uint32_t tid = 0, ntid = 0, ctaidX = 0, ctaidY = 0, nctaidX = 0, nctaidY = 0;
  Warp *warp = nullptr;
  std::barrier<> *block = nullptr; // __syncthreads
};
thread_local ThreadState self;

extern "C" uint32_t emuTidX() { return self.tid; }
extern "C" uint32_t emuNtidX() { return self.ntid; }
extern "C" uint32_t emuCtaidX() { return self.ctaidX; }
extern "C" uint32_t emuCtaidY() { return self.ctaidY; }
extern "C" uint32_t emuNctaidX() { return self.nctaidX; }
extern "C" uint32_t emuNctaidY() { return self.nctaidY; }
// shfl.sync.down with the whole warp as one segment: lanes past the end
// keep their own value.
extern "C" void emuBarrier0() { self.block->arrive_and_wait(); }
extern "C" float emuLdgF32(const float *p, int32_t) { return *p; }
extern "C" double emuLdgF64(const double *p, int32_t) { return *p; }
extern "C" uint32_t emuShflDown(uint32_t, uint32_t v, uint32_t delta, uint32_t) {
  uint32_t lane = self.tid % 32;
  self.warp->slots[lane] = v;
  self.warp->sync.arrive_and_wait();
  uint32_t r = lane + delta < 32 ? self.warp->slots[lane + delta] : v;
  self.warp->sync.arrive_and_wait();
  return r;
}

} // namespace

void launch(unsigned gx, unsigned gy, unsigned block, const std::function<void()> &body) {
  REQUIRE(block % 32 == 0);
  for (unsigned by = 0; by < gy; ++by)
    for (unsigned bx = 0; bx < gx; ++bx) {
      std::deque<Warp> warps(block / 32);
      std::barrier<> sync(block);
      std::vector<std::thread> threads;
      for (unsigned t = 0; t < block; ++t)
        threads.emplace_back([&, t] {
          self = {t, block, bx, by, gx, gy, &warps[t / 32], &sync};
          body();
        });
      for (auto &th : threads)
        th.join();
    }
}

EmulatedModule::EmulatedModule(const detail::GpuModuleSpec &spec) {
  static bool once = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)once;
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto m = std::make_unique<llvm::Module>("emulated", *ctx);
  auto jit = llvm::orc::LLJITBuilder().create();
  REQUIRE(jit);
  jit_ = std::move(*jit);
  m->setDataLayout(jit_->getDataLayout());
  m->setTargetTriple(jit_->getTargetTriple().str());
  detail::EmitOptions emit;
  emit.gpu = true;
  llvm::Error e = detail::emitGpuKernels(*m, spec, emit);
  REQUIRE_MESSAGE(!e, llvm::toString(std::move(e)));

  // Shared memory (address space 3) becomes host memory: blocks run one
  // after another, so one array serves each in turn.
  std::vector<llvm::GlobalVariable *> shared;
  for (llvm::GlobalVariable &g : m->globals())
    if (g.getAddressSpace() == 3)
      shared.push_back(&g);
  for (llvm::GlobalVariable *g : shared) {
    auto *host = new llvm::GlobalVariable(*m, g->getValueType(), false, llvm::GlobalValue::InternalLinkage,
                                          llvm::Constant::getNullValue(g->getValueType()), g->getName() + ".host");
    host->setAlignment(g->getAlign());
    for (llvm::User *u : std::vector<llvm::User *>(g->user_begin(), g->user_end())) {
      auto *cast = llvm::dyn_cast<llvm::ConstantExpr>(u);
      REQUIRE_MESSAGE((cast && cast->getOpcode() == llvm::Instruction::AddrSpaceCast),
                      "shared memory is reached through an addrspacecast to a generic pointer");
      cast->replaceAllUsesWith(host);
    }
    g->eraseFromParent();
  }
  // Special registers and shuffles become calls into the emulation.
  static const std::map<std::string, void *> kEmulated = {
      {"llvm.nvvm.read.ptx.sreg.tid.x", reinterpret_cast<void *>(&emuTidX)},
      {"llvm.nvvm.read.ptx.sreg.ntid.x", reinterpret_cast<void *>(&emuNtidX)},
      {"llvm.nvvm.read.ptx.sreg.ctaid.x", reinterpret_cast<void *>(&emuCtaidX)},
      {"llvm.nvvm.read.ptx.sreg.ctaid.y", reinterpret_cast<void *>(&emuCtaidY)},
      {"llvm.nvvm.read.ptx.sreg.nctaid.x", reinterpret_cast<void *>(&emuNctaidX)},
      {"llvm.nvvm.read.ptx.sreg.nctaid.y", reinterpret_cast<void *>(&emuNctaidY)},
      {"llvm.nvvm.shfl.sync.down.i32", reinterpret_cast<void *>(&emuShflDown)},
      {"llvm.nvvm.barrier0", reinterpret_cast<void *>(&emuBarrier0)},
      {"llvm.nvvm.ldg.global.f.f32.p1", reinterpret_cast<void *>(&emuLdgF32)},
      {"llvm.nvvm.ldg.global.f.f64.p1", reinterpret_cast<void *>(&emuLdgF64)}};
  llvm::orc::SymbolMap symbols;
  std::vector<llvm::Function *> fns;
  for (llvm::Function &f : *m)
    fns.push_back(&f);
  for (llvm::Function *f : fns) {
    std::string name = f->getName().str();
    void *address = nullptr;
    if (auto it = kEmulated.find(name); it != kEmulated.end())
      address = it->second;
    else if (name.starts_with("llvm.nvvm."))
      FAIL("the emulation does not know " << name);
    else
      continue;
    REQUIRE_MESSAGE(address, "no host function for " << name);
    std::string stand = "emu." + name;
    llvm::Function *replacement =
        llvm::Function::Create(f->getFunctionType(), llvm::Function::ExternalLinkage, stand, *m);
    f->replaceAllUsesWith(replacement);
    f->eraseFromParent();
    symbols[jit_->mangleAndIntern(stand)] = {llvm::orc::ExecutorAddr::fromPtr(address),
                                             llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
  }
  REQUIRE_FALSE(static_cast<bool>(jit_->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(symbols)))));
  auto process =
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(jit_->getDataLayout().getGlobalPrefix());
  REQUIRE(process);
  jit_->getMainJITDylib().addGenerator(std::move(*process));
  REQUIRE_FALSE(static_cast<bool>(jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx)))));
}

EmulatedModule::~EmulatedModule() = default;

void *EmulatedModule::address(const std::string &name) {
  auto address = jit_->lookup(name);
  REQUIRE(address);
  return address->toPtr<void *>();
}

} // namespace hsnn::test
