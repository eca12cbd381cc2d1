// The host as identified without LLVM (lib/CPU/HostId.h): the same on every
// core, and the vector width it implies is the one LLVM's features give.
#include "CPU/HostId.h"
#include "CodeGen/HostJIT.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <sched.h>
#include <thread>

using namespace hsnn::detail;

namespace {

// Identifies the host from core `cpu`, or nullopt when it cannot run there.
std::optional<HostId> identifyOn(int cpu) {
  std::optional<HostId> id;
  std::thread t([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) == 0)
      id = identifyHost();
  });
  t.join();
  return id;
}

} // namespace

TEST_CASE("the host's fingerprint is the same on every core and from call to call") {
  HostId first = identifyHost();
#if defined(__x86_64__)
  REQUIRE_FALSE(first.fingerprint.empty());
  CHECK(first.fingerprint.starts_with("x86_64;0.0="));
  CHECK(first.fingerprint.find(";xcr0=") != std::string::npos);
#endif
  CHECK(identifyHost().fingerprint == first.fingerprint);
  CHECK(hostId().fingerprint == first.fingerprint);
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int compared = 0;
  for (unsigned cpu = 0; cpu < std::min(cores, 64u); ++cpu)
    if (auto id = identifyOn(int(cpu))) {
      CHECK(id->fingerprint == first.fingerprint); // no APIC id in it
      ++compared;
    }
  CHECK(compared >= 1);
}

TEST_CASE("the vector width known without LLVM is LLVM's") {
  auto jit = HostJIT::get();
  if (!jit) {
    MESSAGE("skipped: " << jit.error().message());
    return;
  }
  const HostTarget &t = (*jit)->target();
  INFO("cpu " << t.cpu << ", features " << t.features);
  if (hostId().fingerprint.empty()) {
    MESSAGE("skipped: this host is not identified without LLVM");
    return;
  }
  CHECK(hostId().vectorBits == t.vectorBits);
}

#if defined(__x86_64__) && __has_include(<sys/platform/x86.h>)
#include <cpuid.h>
#include <sys/platform/x86.h>

// The fingerprint takes most leaves from glibc's copies: they must be the
// CPU's raw values (not glibc's "active" ones, which tunables can mask).
TEST_CASE("glibc's copies of the cpuid leaves are the raw values") {
  struct Leaf {
    unsigned index, leaf, subleaf;
  };
  for (Leaf l : {Leaf{CPUID_INDEX_7, 7, 0}, Leaf{CPUID_INDEX_7_ECX_1, 7, 1}, Leaf{CPUID_INDEX_D_ECX_1, 0xd, 1},
                 Leaf{CPUID_INDEX_80000001, 0x80000001, 0}, Leaf{CPUID_INDEX_80000008, 0x80000008, 0}}) {
    unsigned r[4];
    __cpuid_count(l.leaf, l.subleaf, r[0], r[1], r[2], r[3]);
    const cpuid_feature *c = __x86_get_cpuid_feature_leaf(l.index);
    INFO("leaf " << std::hex << l.leaf << "." << l.subleaf);
    for (int k = 0; k < 4; ++k)
      CHECK(c->cpuid_array[k] == r[k]);
  }
}
#endif
