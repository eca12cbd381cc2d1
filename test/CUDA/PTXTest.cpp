//===- test/CUDA/PTXTest.cpp - PTX for every op and kernel kind passes ptxas ---===//
//
// Without a GPU: every op and built-in, every kernel kind (and the
// populations' interpreter), f32 and f64, for sm_80 and sm_90, generated through NVPTX (with hsnn's math library: no
// libdevice, no external calls) and assembled by ptxas.
//===----------------------------------------------------------------------===//
#include "CodeGen/PTXCompiler.h"
#include "Model/CompiledModel.h"
#include "TestUtil.h"

#include "hsnn/AOT.h"
#include "hsnn/Layer.h"

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <doctest/doctest.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>

using namespace hsnn;

#ifndef HSNN_PTXAS
#define HSNN_PTXAS ""
#endif

namespace {

// A function, not a global: the built-in table is only ready after static initialisation.
const std::vector<std::string> &kFormulasList() {
  static const std::vector<std::string> list = test::activationFormulas({"sin(num)*alpha"});
  return list;
}
// A function, not a global: the built-in table is only ready after static initialisation.
const std::vector<std::string> &kLossesList() {
  static const std::vector<std::string> list = test::builtinNames(FormulaMode::Loss);
  return list;
}

// Kernels for every formula and loss, in one module: each layer kernel has
// every formula as a unit (one switch case each), per kind and layout.
struct Requests {
  std::vector<std::shared_ptr<const detail::CompiledModel>> models;
  detail::GpuModuleSpec spec;
  std::vector<std::string> symbols;
};

Requests allKernels(DType dtype) {
  Requests r;
  // The three elementwise kinds and the constant gradient, per layout.
  constexpr detail::KernelKind kKinds[] = {detail::KernelKind::Forward, detail::KernelKind::Backward,
                                           detail::KernelKind::Fused, detail::KernelKind::ConstantGradient};
  detail::GpuLayerKernel kernels[2][4];
  for (size_t l = 0; l < 2; ++l)
    for (size_t k = 0; k < 4; ++k)
      kernels[l][k] = {fmt::format("layer_{}_{}", l, detail::kindName(kKinds[k])), kKinds[k], dtype,
                       l ? Layout::BatchMajor : Layout::NodesMajor, {}};
  for (size_t i = 0; i < kFormulasList().size(); ++i) {
    std::map<std::string, double> c;
    if (kFormulasList()[i].find("alpha") != std::string::npos)
      c = {{"alpha", 2}};
    std::vector<std::string> warnings;
    auto model = detail::CompiledModel::activation({{kFormulasList()[i], c}}, {.dtype = dtype}, warnings);
    REQUIRE_OK_EXPECTED(model);
    r.models.push_back(*model);
    for (size_t l = 0; l < 2; ++l)
      for (size_t k = 0; k < 4; ++k)
        kernels[l][k].units.push_back((*model)->units[0].programs[size_t(kKinds[k])]);
  }
  for (auto &byLayout : kernels)
    for (auto &k : byLayout) {
      r.symbols.push_back(k.symbol);
      r.spec.layers.push_back(std::move(k));
    }
  for (size_t i = 0; i < kLossesList().size(); ++i) {
    std::vector<std::string> warnings;
    auto model = detail::CompiledModel::loss(kLossesList()[i], {}, {.dtype = dtype}, warnings);
    REQUIRE(model);
    r.models.push_back(*model);
    std::vector<detail::KernelKind> kinds(detail::kLossKinds.begin(), detail::kLossKinds.end());
    if (!(*model)->group(0).formula.constants.empty())
      kinds.push_back(detail::KernelKind::LossConstantGradient);
    for (detail::KernelKind k : kinds) {
      r.spec.losses.push_back(
          {fmt::format("loss{}_{}", i, detail::kindName(k)), (*model)->units[0].programs[size_t(k)], k, dtype});
      r.symbols.push_back(r.spec.losses.back().symbol);
    }
  }
  // The populations' interpreter: values, and scores with the first loss.
  r.spec.populations.push_back({"population_values", dtype, nullptr});
  r.spec.populations.push_back(
      {"population_scores", dtype, r.spec.losses.front().program});
  for (const auto &p : r.spec.populations)
    r.symbols.push_back(p.symbol);
  r.spec.sumKernel = "add_partials";
  r.symbols.push_back(r.spec.sumKernel);
  return r;
}

std::string skipReason() {
  if (std::string(HSNN_PTXAS).empty() || !std::filesystem::exists(HSNN_PTXAS))
    return "skipped: ptxas not found (install the CUDA toolkit at /usr/local/cuda)";
  return "";
}

} // namespace

TEST_CASE("PTX for every op, built-in and kernel kind assembles with ptxas for sm_80 and sm_90") {
  if (std::string why = skipReason(); !why.empty()) {
    MESSAGE(why);
    return;
  }
  auto dir = std::filesystem::temp_directory_path() / fmt::format("hsnn-ptx-{}", ::getpid());
  std::filesystem::create_directories(dir);
  for (DType dtype : {DType::F32, DType::F64})
    for (const char *arch : {"sm_80", "sm_90"}) {
      CAPTURE(arch);
      CAPTURE(std::string(to_string(dtype)));
      Requests r = allKernels(dtype);
      detail::CompileStats stats;
      auto ptx = detail::compilePtx(r.spec, {.arch = arch}, &stats);
      INFO((ptx ? std::string() : ptx.error().message()));
      REQUIRE(ptx.has_value());
      CHECK(ptx->find(".target " + std::string(arch)) != std::string::npos);
      CHECK(ptx->find(".extern") == std::string::npos); // hsnn's math library: nothing outside the module
      for (const std::string &symbol : r.symbols)
        CHECK(ptx->find(".entry " + symbol + "(") != std::string::npos);
      // One warp-shuffle tree per summing kernel; no atomics anywhere.
      CHECK(ptx->find("shfl.sync.down.b32") != std::string::npos);
      CHECK(ptx->find("atom.") == std::string::npos);
      auto file = dir / fmt::format("kernels_{}_{}.ptx", to_string(dtype), arch);
      std::ofstream(file) << *ptx;
      std::string cmd = fmt::format("{} -arch={} {} -o {} 2>&1", HSNN_PTXAS, arch, file.string(), (dir / "out.cubin").string());
      FILE *p = ::popen(cmd.c_str(), "r");
      REQUIRE(p);
      std::string out;
      char buf[512];
      while (std::fgets(buf, sizeof buf, p))
        out += buf;
      int status = ::pclose(p);
      INFO(out);
      CHECK(status == 0);
    }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("a bad GPU architecture is a clear error") {
  Requests r;
  auto ptx = detail::compilePtx(r.spec, {.arch = "gfx90a"});
  REQUIRE_FALSE(ptx);
  CHECK(ptx.error().message() == "GPU architecture 'gfx90a' is not of the form sm_XY");
}

TEST_CASE("ahead-of-time targets and GPU architectures LLVM cannot serve are errors, not a stopped process") {
  std::vector<NodeSpec> nodes = {{"gelu", {}}};
  for (const char *triple : {"bpf", "amdgcn", "i386-pc-linux-gnu"}) {
    CAPTURE(triple);
    auto r = compileLayerAot("l", nodes, DType::F32, Layout::NodesMajor, {.triple = triple});
    REQUIRE_FALSE(r);
    CHECK(r.error().message() == fmt::format("target '{}' is not supported for CPU kernels: use an x86_64 or aarch64 "
                                             "triple (GPU kernels: --emit ptx)",
                                             triple));
  }
  auto i386 = compileLossAot("l", "mse", {}, DType::F32, {.triple = "x86_64-pc-linux-gnu", .cpu = "i386"});
  REQUIRE_FALSE(i386);
  CHECK(i386.error().message() == "CPU 'i386' has no 64-bit mode, which x86_64 code needs (try x86-64 or x86-64-v3)");
#if HSNN_AOT_ALL_TARGETS
  REQUIRE_OK_EXPECTED(compileLayerAot("l", nodes, DType::F32, Layout::NodesMajor, {.triple = "aarch64-linux-gnu"}));
#else
  MESSAGE("skipped: aarch64 code (this build links LLVM statically, with the host's backend only)");
#endif
  for (const char *arch : {"sm_999", "sm_100", "sm_120"}) {
    CAPTURE(arch);
    auto ptx = compileLayerPtx("l", nodes, DType::F32, arch);
    REQUIRE_FALSE(ptx);
    CHECK(ptx.error().message().starts_with(fmt::format("GPU architecture '{}' is not one LLVM", arch)));
  }
}
