//===- test/CUDA/GpuEmulation.h - GPU kernels run on the CPU's threads -*- C++ -*-===//
//
// Without a GPU, the logic of the GPU kernels still runs: their IR, as
// lib/CodeGen emits it for NVPTX, is compiled for the host instead, with the
// special registers and warp shuffles replaced by calls into a small
// emulation of CUDA's thread model (one OS thread per GPU thread, a barrier
// per warp for shuffles). The math is hsnn's library, the same IR as the CPU
// kernels', so results can be compared with the CPU's bit for bit. What this
// cannot check is the NVPTX backend itself: ptxas checks what it emits
// (PTXTest.cpp), a real GPU runs it (GpuTest.cpp).
//===----------------------------------------------------------------------===//
#pragma once

#include "CodeGen/KernelSpec.h"

#include <functional>
#include <memory>
#include <string>

namespace llvm::orc {
class LLJIT;
}

namespace hsnn::test {

/// Runs `body` as every thread of a (gx, gy) grid of `block`-thread blocks;
/// blocks one after another (nothing synchronizes across blocks).
void launch(unsigned gx, unsigned gy, unsigned block, const std::function<void()> &body);

/// The kernels of a GPU module spec, compiled for the host.
class EmulatedModule {
public:
  explicit EmulatedModule(const detail::GpuModuleSpec &spec);
  ~EmulatedModule();
  template <class F> F *kernel(const std::string &name) { return reinterpret_cast<F *>(address(name)); }

private:
  void *address(const std::string &name);
  std::unique_ptr<llvm::orc::LLJIT> jit_;
};

} // namespace hsnn::test
