//===- tools/hsnn-jit/CompileUnavailable.cpp - compile without LLVM -------===//
#include "Commands.h"

#include <fmt/format.h>

namespace hsnn::cli {
int runCompile(std::span<const std::string_view> args) {
  for (std::string_view a : args)
    if (a == "-h" || a == "--help") {
      fmt::print("usage: hsnn-jit compile SPEC.json --emit obj|asm|llvm-ir|header|ptx [-o OUT] ...\n\n"
                 "Not available in this build: it has no LLVM code generator (HSNN_ENABLE_JIT=OFF).\n");
      return Ok;
    }
  fmt::print(stderr, "hsnn-jit compile: error: this build has no LLVM code generator (HSNN_ENABLE_JIT=OFF)\n");
  return BadInput;
}
} // namespace hsnn::cli
