//===- tools/hsnn-jit/Prefault.cpp - The executable's .bss in one call ----===//
//
// With LLVM linked in statically, starting hsnn-jit runs LLVM's ~390 static
// constructors (cl::opt registrations), which write all over a 400 KB .bss:
// ~100 page faults before main, each a trip through the kernel (and, on the
// reference machine, a virtual machine's slow fault path). One
// madvise(MADV_POPULATE_WRITE) maps those zero pages at once: `hsnn-jit
// --version` started through a shell took 20.0-20.3 ms against 21.0-21.2
// without it (medians of 60 interleaved runs, `-DHSNN_LLVM_STATIC=ON`).
// Populating the 30 MB of code the same way (MADV_POPULATE_READ, where it is
// in the page cache) cost more than the ~200 faults it saved (20.9 ms), and
// so did the whole data segment, whose file-backed pages would be copied.
//
// This constructor runs before LLVM's: priority 101 sorts first in
// .init_array. Linux < 5.14 has no MADV_POPULATE_WRITE: the call fails and
// the pages fault in as before.
//===----------------------------------------------------------------------===//
#include <cstdint>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace {

int populateBss(dl_phdr_info *info, size_t, void *) {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  auto up = [&](uintptr_t a) { return (a + page - 1) & ~(page - 1); };
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_W))
      continue;
    // The zero-filled tail of the writable segment (.bss), whole pages.
    uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    uintptr_t b = up(start + ph.p_filesz), e = up(start + ph.p_memsz);
    if (e > b)
      ::madvise(reinterpret_cast<void *>(b), e - b, MADV_POPULATE_WRITE);
  }
  return 1; // the first object is the executable
}

__attribute__((constructor(101))) void populateExecutableBss() { ::dl_iterate_phdr(populateBss, nullptr); }

} // namespace
