//===- test/CodeGenModule/HostileModule.cpp - Code that is not ours -------===//
//
// A shared object whose constructor leaves a marker file (the path in
// HSNN_TEST_MARKER) the moment it is loaded, before anyone can look at what
// it exports. Tests plant it where hsnn looks for code (the code generator
// module's search path, a cache entry) and assert that the marker never
// appears.
//===----------------------------------------------------------------------===//
#include <cstdio>
#include <cstdlib>

namespace {
__attribute__((constructor)) void leaveMarker() {
  const char *path = std::getenv("HSNN_TEST_MARKER");
  if (!path || !*path)
    return;
  if (std::FILE *f = std::fopen(path, "a")) {
    std::fputs("hostile code ran\n", f);
    std::fclose(f);
  }
}
} // namespace

// Looks like a kernel to a loader that only asks for symbols.
extern "C" int hsnn_layer_u0_forward() { return 0; }
