//===- lib/CUDA/PTX.cpp - PTX facts here, PTX code in the module ----------===//
#include "CodeGen/PTXCompiler.h"

#include "CodeGenModule/CodeGenModule.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>

namespace hsnn::detail {

// A cache hit of GPU code asks this without loading the module.
std::string ptxGeneratorId() { return fmt::format("llvm-{}", codeGenLlvmVersion()); }

int ptxIsaVersion(std::string_view ptx) {
  size_t at = ptx.find(".version ");
  if (at == std::string_view::npos)
    return 0;
  int major = 0, minor = 0;
  if (std::sscanf(std::string(ptx.substr(at + 9, 8)).c_str(), "%d.%d", &major, &minor) != 2)
    return 0;
  return major * 10 + minor;
}

Expected<std::string> ptxArchFor(int ccMajor, int ccMinor) {
  auto m = codeGenModule();
  if (!m)
    return m.error();
  return (*m)->ptxArchFor(ccMajor, ccMinor);
}

Expected<std::string> compilePtx(const GpuModuleSpec &spec, const PtxOptions &options, CompileStats *stats) {
  auto m = codeGenModule();
  if (!m)
    return m.error();
  return (*m)->compilePtx(spec, options, stats);
}

} // namespace hsnn::detail
