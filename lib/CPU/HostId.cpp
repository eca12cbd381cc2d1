//===- lib/CPU/HostId.cpp - The host CPU, identified without LLVM ---------===//
#include "HostId.h"

#include <array>
#include <cstdint>
#include <fmt/format.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace hsnn::detail {
namespace {

#if defined(__x86_64__)
std::array<uint32_t, 4> cpuid(uint32_t leaf, uint32_t subleaf) {
  std::array<uint32_t, 4> r{};
  __cpuid_count(leaf, subleaf, r[0], r[1], r[2], r[3]);
  return r;
}

uint64_t xcr0() {
  uint32_t lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

HostId identifyX86() {
  HostId id;
  std::string &f = id.fingerprint;
  f = "x86_64";
  auto add = [&](uint32_t leaf, uint32_t subleaf, std::array<uint32_t, 4> r) {
    f += fmt::format(";{:x}.{:x}={:x},{:x},{:x},{:x}", leaf, subleaf, r[0], r[1], r[2], r[3]);
  };
  auto leaf1 = cpuid(1, 0);
  auto leaf7 = cpuid(7, 0);
  add(0, 0, cpuid(0, 0));
  add(1, 0, {leaf1[0], leaf1[1] & 0x00ffffffu, leaf1[2], leaf1[3]}); // EBX[31:24]: this core's APIC id
  add(7, 0, leaf7);
  for (auto [leaf, subleaf] : {std::pair<uint32_t, uint32_t>{7, 1}, {0xd, 1}, {0x14, 0}, {0x19, 0}, {0x24, 0},
                               {0x80000000, 0}, {0x80000001, 0}, {0x80000008, 0}})
    add(leaf, subleaf, cpuid(leaf, subleaf));
  // As LLVM decides: AVX needs the OS to save YMM state (XCR0 bits 1-2),
  // AVX-512 also opmask and ZMM state (bits 5-7).
  bool osxsave = leaf1[2] & (1u << 27), avx = leaf1[2] & (1u << 28);
  uint64_t xcr = osxsave ? xcr0() : 0;
  f += fmt::format(";xcr0={:x}", xcr);
  bool avxState = osxsave && avx && (xcr & 0x6) == 0x6;
  bool avx512State = avxState && (xcr & 0xe0) == 0xe0;
  if (avx512State && (leaf7[1] & (1u << 16)))
    id.vectorBits = 512;
  else if (avxState && (leaf7[1] & (1u << 5)))
    id.vectorBits = 256;
  return id;
}
#endif

} // namespace

HostId identifyHost() {
#if defined(__x86_64__)
  return identifyX86();
#else
  return {};
#endif
}

const HostId &hostId() {
  static const HostId *id = new HostId(identifyHost()); // never destroyed: read by threads at exit
  return *id;
}

} // namespace hsnn::detail
