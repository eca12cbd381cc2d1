//===- tools/hsnn-jit/CompileCommand.cpp - hsnn-jit compile (AOT) ---------===//
#include "Commands.h"

#include "hsnn/AOT.h"
#include "hsnn/Formula.h"

#include <llvm/Support/JSON.h>
#include <llvm/Support/MemoryBuffer.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>
#include <fmt/format.h>
#include <fstream>
#include <optional>

namespace hsnn::cli {
namespace {

constexpr const char *kCompileHelp =
    R"(usage: hsnn-jit compile SPEC.json --emit obj|asm|llvm-ir|header|ptx|cubin [-o OUT]
                        [--target TRIPLE] [--cpu NAME] [--gpu-arch sm_XY]
                        [--bake-constants] [-O0|-O1|-O2|-O3] [-v]

Compiles a layer or loss described in SPEC.json ahead of time:
  {"name": "layer1", "mode": "activation", "dtype": "f32", "layout": "nodes_major",
   "nodes": [{"formula": "sin(num)*alpha", "constants": {"alpha": 2.0}},
             {"formula": "relu", "repeat": 3}]}
  {"name": "loss", "mode": "loss", "dtype": "f32", "formula": "huber",
   "constants": {"delta": 0.5}, "reduction": "mean"}
obj + header give C entry points that need no LLVM, TBB or hsnn at link time
(link with -lmvec -lm); see the header for the ABI. ptx: GPU kernels for
--gpu-arch (default sm_80), no GPU needed; cubin runs ptxas on it. OUT defaults to NAME.o, NAME.s,
NAME.ll, NAME.h or NAME.ptx. --cpu defaults to this machine's CPU.
)";

struct Spec {
  std::string name;
  FormulaMode mode = FormulaMode::Activation;
  DType dtype = DType::F32;
  Layout layout = Layout::NodesMajor;
  Reduction reduction = Reduction::Mean;
  std::vector<NodeSpec> nodes;
  std::string formula;
  std::map<std::string, double> constants;
};

constexpr size_t kMaxRepeat = 1 << 20;

std::optional<std::map<std::string, double>> readConstants(const llvm::json::Object *o, const std::string &where,
                                                          std::string &err) {
  std::map<std::string, double> out;
  if (!o)
    return out;
  for (const auto &[k, v] : *o) {
    auto d = v.getAsNumber();
    if (!d) {
      err = fmt::format("{}: constant '{}' must be a number", where, k.str());
      return std::nullopt;
    }
    out[k.str()] = *d;
  }
  return out;
}

// Parses and checks a spec; on failure returns the message.
std::variant<Spec, std::string> readSpec(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf)
    return fmt::format("cannot read {}: {}", path, buf.getError().message());
  auto json = llvm::json::parse((*buf)->getBuffer());
  if (!json)
    return fmt::format("{}: invalid JSON: {}", path, llvm::toString(json.takeError()));
  const llvm::json::Object *o = json->getAsObject();
  if (!o)
    return fmt::format("{}: the spec must be a JSON object", path);
  Spec s;
  auto str = [&](const char *key, std::string fallback) -> std::optional<std::string> {
    const llvm::json::Value *v = o->get(key);
    if (!v)
      return fallback;
    auto st = v->getAsString();
    if (!st)
      return std::nullopt;
    return st->str();
  };
  auto name = str("name", "");
  if (!name || name->empty())
    return fmt::format("{}: \"name\" (a string) is required", path);
  s.name = *name;
  auto mode = str("mode", "activation"), dtype = str("dtype", "f32"), layout = str("layout", "nodes_major"),
       reduction = str("reduction", "mean");
  if (!mode || (*mode != "activation" && *mode != "loss"))
    return fmt::format("{}: \"mode\" must be \"activation\" or \"loss\"", path);
  if (!dtype || (*dtype != "f32" && *dtype != "f64"))
    return fmt::format("{}: \"dtype\" must be \"f32\" or \"f64\"", path);
  if (!layout || (*layout != "nodes_major" && *layout != "batch_major"))
    return fmt::format("{}: \"layout\" must be \"nodes_major\" or \"batch_major\"", path);
  if (!reduction || (*reduction != "mean" && *reduction != "sum" && *reduction != "none"))
    return fmt::format("{}: \"reduction\" must be \"mean\", \"sum\" or \"none\"", path);
  s.mode = *mode == "loss" ? FormulaMode::Loss : FormulaMode::Activation;
  s.dtype = *dtype == "f64" ? DType::F64 : DType::F32;
  s.layout = *layout == "batch_major" ? Layout::BatchMajor : Layout::NodesMajor;
  s.reduction = *reduction == "sum" ? Reduction::Sum : *reduction == "none" ? Reduction::None : Reduction::Mean;
  std::string err;
  if (s.mode == FormulaMode::Loss) {
    auto f = str("formula", "");
    if (!f || f->empty())
      return fmt::format("{}: a loss needs \"formula\" (a string)", path);
    s.formula = *f;
    auto c = readConstants(o->getObject("constants"), path, err);
    if (!c)
      return err;
    s.constants = *c;
    return s;
  }
  const llvm::json::Array *nodes = o->getArray("nodes");
  if (!nodes || nodes->empty())
    return fmt::format("{}: an activation layer needs \"nodes\" (a non-empty array)", path);
  for (size_t i = 0; i < nodes->size(); ++i) {
    std::string where = fmt::format("{}: nodes[{}]", path, i);
    const llvm::json::Object *n = (*nodes)[i].getAsObject();
    if (!n)
      return where + ": each node must be an object";
    auto f = n->getString("formula");
    if (!f)
      return where + ": \"formula\" (a string) is required";
    auto c = readConstants(n->getObject("constants"), where, err);
    if (!c)
      return err;
    int64_t repeat = 1;
    if (const llvm::json::Value *r = n->get("repeat")) {
      auto ri = r->getAsInteger();
      if (!ri || *ri < 1 || size_t(*ri) > kMaxRepeat)
        return fmt::format("{}: \"repeat\" must be an integer from 1 to {}", where, kMaxRepeat);
      repeat = *ri;
    }
    if (s.nodes.size() + size_t(repeat) > kMaxRepeat)
      return fmt::format("{}: more than {} nodes in all", where, kMaxRepeat);
    for (int64_t k = 0; k < repeat; ++k)
      s.nodes.push_back({f->str(), *c});
  }
  return s;
}

std::string findPtxas() {
  if (const char *p = std::getenv("HSNN_PTXAS"); p && *p)
    return p;
  for (const char *p : {"/usr/local/cuda/bin/ptxas", "/usr/bin/ptxas"})
    if (::access(p, X_OK) == 0)
      return p;
  return "";
}

// Runs argv[0] with the arguments, without a shell; returns its exit status.
int runProgram(const std::vector<std::string> &argv) {
  std::vector<char *> args;
  for (const std::string &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) < 0)
    return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace

int runCompile(std::span<const std::string_view> args) {
  std::optional<std::string> specPath, out, emit;
  std::string gpuArch = "sm_80";
  bool verbose = false;
  AotOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    auto value = [&]() -> std::optional<std::string> {
      return i + 1 < args.size() ? std::optional(std::string(args[++i])) : std::nullopt;
    };
    if (a == "-h" || a == "--help") {
      fmt::print("{}", kCompileHelp);
      return Ok;
    } else if (a == "--emit") {
      emit = value();
    } else if (a == "-o") {
      out = value();
      if (!out)
        return usageError("compile", "-o needs a file name");
    } else if (a == "--target" || a == "--cpu") {
      auto v = value();
      if (!v)
        return usageError("compile", fmt::format("{} needs a value", a));
      (a == "--target" ? o.triple : o.cpu) = *v;
    } else if (a == "--gpu-arch") {
      auto v = value();
      if (!v)
        return usageError("compile", "--gpu-arch needs sm_XY");
      gpuArch = *v;
    } else if (a == "-v" || a == "--verbose") {
      verbose = true;
    } else if (a == "--bake-constants") {
      o.bakeConstants = true;
    } else if (a.size() == 3 && a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3') {
      o.optLevel = a[2] - '0';
    } else if (a.starts_with("-")) {
      return usageError("compile", fmt::format("unknown option '{}'", a));
    } else if (!specPath) {
      specPath = std::string(a);
    } else {
      return usageError("compile", fmt::format("unexpected argument '{}'", a));
    }
  }
  if (!specPath)
    return usageError("compile", "no spec file given");
  if (!emit)
    return usageError("compile", "--emit is required (obj, asm, llvm-ir or header)");
  std::string ptxas;
  if (*emit == "cubin") {
    ptxas = findPtxas();
    if (ptxas.empty()) {
      fmt::print(stderr, "hsnn-jit compile: error: --emit cubin needs ptxas (set HSNN_PTXAS, or install the CUDA "
                         "toolkit at /usr/local/cuda); --emit ptx works without it\n");
      return BadInput;
    }
  }
  if (*emit != "obj" && *emit != "asm" && *emit != "llvm-ir" && *emit != "header" && *emit != "ptx" && *emit != "cubin")
    return usageError("compile", fmt::format("--emit takes obj, asm, llvm-ir, header, ptx or cubin, not '{}'", *emit));
  o.output = *emit == "asm" ? AotOutput::Assembly : *emit == "llvm-ir" ? AotOutput::LLVMIR : AotOutput::Object;

  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
  auto spec = readSpec(*specPath);
  if (auto *e = std::get_if<std::string>(&spec)) {
    fmt::print(stderr, "hsnn-jit compile: error: {}\n", *e);
    return BadInput;
  }
  Spec &s = std::get<Spec>(spec);
  if (*emit == "ptx" || *emit == "cubin") {
    auto ptx = s.mode == FormulaMode::Loss ? compileLossPtx(s.name, s.formula, s.constants, s.dtype, gpuArch, o.optLevel)
                                           : compileLayerPtx(s.name, s.nodes, s.dtype, gpuArch, o.optLevel);
    if (!ptx) {
      fmt::print(stderr, "{}\n", ptx.error().message());
      return BadInput;
    }
    if (verbose)
      fmt::print(stderr, "read spec, parse, differentiate, emit, optimise and generate PTX: {:.2f} ms\n", elapsed());
    std::string path = *emit == "ptx" ? out.value_or(s.name + ".ptx") : out.value_or(s.name + ".cubin") + ".ptx";
    {
      std::ofstream f(path);
      f << *ptx;
      if (!f.good()) {
        fmt::print(stderr, "hsnn-jit compile: error: cannot write {}\n", path);
        return BadInput;
      }
    }
    if (*emit == "cubin") {
      // The PTX goes through ptxas as an argument list, never a shell.
      std::string cubin = out.value_or(s.name + ".cubin");
      int status = runProgram({ptxas, "-arch=" + gpuArch, path, "-o", cubin});
      std::remove(path.c_str());
      if (status != 0) {
        fmt::print(stderr, "hsnn-jit compile: error: {} failed (exit status {})\n", ptxas, status);
        return BadInput;
      }
    }
    return Ok;
  }
  auto artifact = s.mode == FormulaMode::Loss ? compileLossAot(s.name, s.formula, s.constants, s.dtype, o)
                                              : compileLayerAot(s.name, s.nodes, s.dtype, s.layout, o);
  if (!artifact) {
    fmt::print(stderr, "{}\n", artifact.error().message());
    return BadInput;
  }
  if (verbose)
    fmt::print(stderr, "read spec, parse, differentiate, emit, optimise and generate code: {:.2f} ms\n", elapsed());
  std::string ext = *emit == "obj" ? ".o" : *emit == "asm" ? ".s" : *emit == "llvm-ir" ? ".ll" : ".h";
  std::string path = out.value_or(s.name + ext);
  std::ofstream f(path, std::ios::binary);
  if (*emit == "header")
    f << artifact->header;
  else
    f.write(artifact->bytes.data(), std::streamsize(artifact->bytes.size()));
  if (!f.good()) {
    fmt::print(stderr, "hsnn-jit compile: error: cannot write {}\n", path);
    return BadInput;
  }
  return Ok;
}

} // namespace hsnn::cli
