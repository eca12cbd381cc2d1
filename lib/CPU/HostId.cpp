//===- lib/CPU/HostId.cpp - The host CPU, identified without LLVM ---------===//
#include "HostId.h"

#include <array>
#include <cstdint>
#include <charconv>

#if defined(__x86_64__)
#include <cpuid.h>
#if __has_include(<sys/platform/x86.h>)
// glibc >= 2.33: the leaves it read at start-up. The header is C (its inline
// helpers return _Bool, which clang's C++ does not accept); only its struct
// and one function are used here.
#if defined(__clang__)
#define _Bool bool
#endif
#include <sys/platform/x86.h>
#if defined(__clang__)
#undef _Bool
#endif
#define HSNN_GLIBC_CPUID_LEAVES 1
#endif
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

// `sep` then v in lowercase hex. Not fmt: this runs on every cache hit, and
// fmt's formatting code, cold in a fresh process, measured a noticeable
// share of one.
void appendHex(std::string &f, char sep, uint64_t v) {
  char buf[17];
  f += sep;
  f.append(buf, std::to_chars(buf, buf + sizeof buf, v, 16).ptr);
}

HostId identifyX86() {
  HostId id;
  std::string &f = id.fingerprint;
  f = "x86_64";
  auto add = [&](uint32_t leaf, uint32_t subleaf, std::array<uint32_t, 4> r) {
    appendHex(f, ';', leaf);
    appendHex(f, '.', subleaf);
    appendHex(f, '=', r[0]);
    for (int i = 1; i < 4; ++i)
      appendHex(f, ',', r[i]);
  };
  // A cpuid exits the virtual machine, slowly: on the reference VM the 13 of
  // them were a large share of a cache hit. glibc keeps the raw
  // values of most of these leaves from its start-up (zeros for a leaf the
  // CPU does not have, so the maximum extended leaf needs no entry of its
  // own); leaf 0 (the vendor) and AVX10's leaf 0x24 are asked directly.
  auto leaf0 = cpuid(0, 0);
#if HSNN_GLIBC_CPUID_LEAVES
  auto leaf = [](unsigned index) {
    const cpuid_feature *c = __x86_get_cpuid_feature_leaf(index);
    return std::array<uint32_t, 4>{c->cpuid_array[0], c->cpuid_array[1], c->cpuid_array[2], c->cpuid_array[3]};
  };
  auto leaf1 = leaf(CPUID_INDEX_1), leaf7 = leaf(CPUID_INDEX_7), leaf7s1 = leaf(CPUID_INDEX_7_ECX_1);
  add(0, 0, leaf0);
  add(1, 0, {leaf1[0], leaf1[1] & 0x00ffffffu, leaf1[2], leaf1[3]}); // EBX[31:24]: the APIC id of glibc's core
  add(7, 0, leaf7);
  add(7, 1, leaf7s1);
  add(0xd, 1, leaf(CPUID_INDEX_D_ECX_1));
  add(0x14, 0, leaf(CPUID_INDEX_14_ECX_0));
  add(0x19, 0, leaf(CPUID_INDEX_19));
  if (leaf0[0] >= 0x24 && (leaf7s1[3] & (1u << 19))) // AVX10
    add(0x24, 0, cpuid(0x24, 0));
  add(0x80000001, 0, leaf(CPUID_INDEX_80000001));
  add(0x80000008, 0, leaf(CPUID_INDEX_80000008));
#else
  auto leaf1 = cpuid(1, 0);
  auto leaf7 = cpuid(7, 0);
  add(0, 0, leaf0);
  add(1, 0, {leaf1[0], leaf1[1] & 0x00ffffffu, leaf1[2], leaf1[3]}); // EBX[31:24]: this core's APIC id
  add(7, 0, leaf7);
  for (auto [leaf, subleaf] : {std::pair<uint32_t, uint32_t>{7, 1}, {0xd, 1}, {0x14, 0}, {0x19, 0}, {0x24, 0},
                               {0x80000000, 0}, {0x80000001, 0}, {0x80000008, 0}})
    add(leaf, subleaf, cpuid(leaf, subleaf));
#endif
  // As LLVM decides: AVX needs the OS to save YMM state (XCR0 bits 1-2),
  // AVX-512 also opmask and ZMM state (bits 5-7).
  bool osxsave = leaf1[2] & (1u << 27), avx = leaf1[2] & (1u << 28);
  uint64_t xcr = osxsave ? xcr0() : 0;
  f += ";xcr0";
  appendHex(f, '=', xcr);
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
