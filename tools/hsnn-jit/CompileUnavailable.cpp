//===- tools/hsnn-jit/CompileUnavailable.cpp - compile without LLVM -------===//
#include "Commands.h"

#include <fmt/format.h>

namespace hsnn::cli {
int runCompile(std::span<const std::string_view>) {
  fmt::print(stderr, "hsnn-jit compile: error: this build has no LLVM code generator (HSNN_ENABLE_JIT=OFF)\n");
  return BadInput;
}
} // namespace hsnn::cli
