//===- lib/CPU/HostId.h - The host CPU, identified without LLVM -*- C++ -*-===//
//
// A cache hit of linked kernels must not start LLVM: asking LLVM for the
// host's CPU name and features was a large share of such a hit (cpuid exits
// the VM, ~13 times, and LLVM's detection code runs cold). The host is
// instead identified by the raw values of every cpuid leaf and the XCR0
// register that LLVM 19's host detection reads (llvm/lib/TargetParser/
// Host.cpp: leaves 0, 1, 7.0, 7.1, 0xD.1, 0x14, 0x19, 0x24, 0x80000000,
// 0x80000001, 0x80000008, and xgetbv), without the per-core APIC id. LLVM's
// answer is a function of those values, so two processes with the same
// fingerprint get the same target from LLVM: a key made from it is at
// least as specific as one made from LLVM's answer. A leaf LLVM does not
// read only makes keys more specific (a miss, never a wrong hit). With
// glibc, most leaves are the copies it read at start-up (HostId.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace hsnn::detail {

struct HostId {
  /// The raw values as text, empty where the CPU is not identified this
  /// way (not x86-64): keys then come from LLVM's answer.
  std::string fingerprint;
  /// The kernels' vector width LLVM's features imply (AVX-512F with its
  /// state enabled: 512; AVX2: 256; else 128).
  unsigned vectorBits = 128;
};

/// This process's host, computed once.
const HostId &hostId();
/// Computes it afresh on the calling thread's core (for tests).
HostId identifyHost();

} // namespace hsnn::detail
