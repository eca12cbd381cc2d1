//===- lib/CUDA/PTX.cpp - PTX facts here, PTX code in the module ----------===//
#include "CodeGen/PTXCompiler.h"

#include "CodeGenModule/CodeGenModule.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>

namespace hsnn::detail {

std::string libdevicePath() {
  if (const char *p = std::getenv("HSNN_LIBDEVICE"); p && *p)
    return p;
  return HSNN_LIBDEVICE_DEFAULT;
}

// A cache hit of GPU code asks this without loading the module.
std::string ptxGeneratorId() {
  std::string path = libdevicePath();
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  auto time = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
  return fmt::format("llvm-{} libdevice {} {} {}", codeGenLlvmVersion(), path, ec ? 0 : size, ec ? 0 : time);
}

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
  PtxOptions o = options;
  if (o.libdevice.empty())
    o.libdevice = libdevicePath();
  return (*m)->compilePtx(spec, o, stats);
}

} // namespace hsnn::detail
