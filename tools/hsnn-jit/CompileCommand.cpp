//===- tools/hsnn-jit/CompileCommand.cpp - hsnn-jit compile (AOT) ---------===//
#include "Commands.h"
#include "ProgressBar.h"

#include "hsnn/Environment.h"
#include "hsnn/AOT.h"
#include "hsnn/Formula.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fmt/format.h>
#include <fstream>
#include <optional>

namespace hsnn::cli {
namespace {

constexpr const char *kCompileHelp =
    R"(usage: hsnn-jit compile SPEC.json --emit obj|asm|llvm-ir|header|ptx|cubin [-o OUT]
                        [--target TRIPLE] [--cpu NAME] [--row-shape BxP] [--gpu-arch sm_XY]
                        [--bake-constants] [-O0|-O1|-O2|-O3] [--progress] [-v]

Compiles a layer or loss described in SPEC.json ahead of time:
  {"name": "layer1", "mode": "activation", "dtype": "f32", "layout": "nodes_major",
   "nodes": [{"formula": "sin(num)*alpha", "constants": {"alpha": 2.0}},
             {"formula": "relu", "repeat": 3}]}
  {"name": "loss", "mode": "loss", "dtype": "f32", "formula": "huber",
   "constants": {"delta": 0.5}, "reduction": "mean"}
"order": K (0 to 8) compiles the formulas differentiated K times: NAME_forward
then runs f^(K), NAME_backward err * f^(K+1) (losses: NAME_elements the K-th
derivative in y_pred); compile one spec per order an application needs.
obj + header give C entry points that need no LLVM, TBB or hsnn at link time
(and no library at all for a --cpu with FMA; without FMA, -lmvec -lm); see
the header for the ABI. ptx: GPU kernels for
--gpu-arch (what LLVM 19 knows, sm_50..sm_90a; default sm_80), no GPU needed; cubin runs ptxas on
it. OUT defaults to NAME.o, NAME.s, NAME.ll, NAME.h, NAME.ptx or NAME.cubin;
-o - writes to standard output. --target takes x86_64 and aarch64 triples;
--cpu defaults to this machine's CPU. Batch-major layers' row kernels take
the shape measured best for --cpu's kind of machine (the host JIT measures
its own); --row-shape BxP fixes it: B blocks a pass (1, 2 or 4), P bytes
prefetched ahead (0 to 65536, a multiple of 64), e.g. 4x4096; the shape
changes the speed, never the results. Unknown keys in SPEC are errors.
Code generation shows a progress bar on a terminal once it has taken a
second; --progress also reports it on a pipe or file, a line per tenth.
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
  unsigned order = 0; ///< Derivatives taken of every formula.
};

constexpr size_t kMaxRepeat = 1 << 20;

using Json = nlohmann::json;

// The member `key` of an object, or null when there is none.
const Json *member(const Json &o, const char *key) {
  auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

std::optional<std::map<std::string, double>> readConstants(const Json *o, const std::string &where, std::string &err) {
  std::map<std::string, double> out;
  if (!o)
    return out;
  for (const auto &[k, v] : o->items()) {
    if (!v.is_number()) {
      err = fmt::format("{}: constant '{}' must be a number", where, k);
      return std::nullopt;
    }
    out[k] = v.get<double>();
  }
  return out;
}

// An integer, or a number with an integral value (1e3), else nothing.
std::optional<int64_t> integerOf(const Json &v) {
  if (v.is_number_integer())
    return v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? std::nullopt
                                                                               : std::optional(v.get<int64_t>());
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d >= -9.2e18 && d <= 9.2e18 && d == double(int64_t(d)))
      return int64_t(d);
  }
  return std::nullopt;
}

constexpr size_t kMaxSpecBytes = 16 << 20;
constexpr unsigned kMaxSpecNesting = 32;

// The spec's text: a regular file of at most kMaxSpecBytes (a device such as
// /dev/zero or a FIFO would never end), or the reason it cannot be read.
std::variant<std::string, std::string> readSpecText(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return std::variant<std::string, std::string>(std::in_place_index<1>,
                                                  fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  struct stat st;
  std::string why;
  if (::fstat(fd, &st) != 0)
    why = fmt::format("cannot read {}: {}", path, std::strerror(errno));
  else if (!S_ISREG(st.st_mode))
    why = fmt::format("{} is not a regular file", path);
  else if (size_t(st.st_size) > kMaxSpecBytes)
    why = fmt::format("{} is {} bytes; a spec may have at most {}", path, st.st_size, kMaxSpecBytes);
  std::string text;
  if (why.empty()) {
    text.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n <= 0)
        break;
      got += size_t(n);
    }
    text.resize(got);
  }
  ::close(fd);
  if (!why.empty())
    return std::variant<std::string, std::string>(std::in_place_index<1>, why);
  return std::variant<std::string, std::string>(std::in_place_index<0>, std::move(text));
}

// How deep arrays and objects nest, outside strings: checked before the
// (recursive) JSON parser sees the text.
unsigned jsonNesting(std::string_view text) {
  unsigned depth = 0, most = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      most = std::max(most, ++depth);
    } else if ((c == ']' || c == '}') && depth) {
      --depth;
    }
  }
  return most;
}

// A key the spec format does not have is an error: "dtyp" would otherwise
// silently give the default.
std::optional<std::string> unknownKey(const Json &o, std::initializer_list<std::string_view> known,
                                      const std::string &where) {
  for (const auto &kv : o.items()) {
    const std::string &k = kv.key();
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      std::string list;
      for (std::string_view n : known)
        list += (list.empty() ? "" : ", ") + std::string(n);
      return fmt::format("{}: unknown key \"{}\" (known: {})", where, k, list);
    }
  }
  return std::nullopt;
}

// Parses and checks a spec; on failure returns the message.
std::variant<Spec, std::string> readSpec(const std::string &path) {
  auto text = readSpecText(path);
  if (text.index() == 1)
    return std::get<1>(text);
  if (unsigned depth = jsonNesting(std::get<0>(text)); depth > kMaxSpecNesting)
    return fmt::format("{}: JSON nested {} levels deep; a spec nests at most {}", path, depth, kMaxSpecNesting);
  Json json;
  try {
    json = Json::parse(std::get<0>(text));
  } catch (const Json::exception &e) {
    // parse_error, or out_of_range for a number no double holds (1e999).
    // what() starts with the library's "[json.exception.KIND.N] ".
    std::string_view why = e.what();
    if (size_t end = why.find("] "); why.starts_with("[json.exception") && end != why.npos)
      why.remove_prefix(end + 2);
    return fmt::format("{}: invalid JSON: {}", path, why);
  }
  if (!json.is_object())
    return fmt::format("{}: the spec must be a JSON object", path);
  const Json *o = &json;
  Spec s;
  auto str = [&](const char *key, std::string fallback) -> std::optional<std::string> {
    const Json *v = member(*o, key);
    if (!v)
      return fallback;
    if (!v->is_string())
      return std::nullopt;
    return v->get<std::string>();
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
  if (auto e = s.mode == FormulaMode::Loss
                   ? unknownKey(*o, {"name", "mode", "dtype", "formula", "constants", "reduction", "order"}, path)
                   : unknownKey(*o, {"name", "mode", "dtype", "layout", "nodes", "order"}, path))
    return *e;
  if (const Json *order = member(*o, "order")) {
    auto k = integerOf(*order);
    if (!k || *k < 0 || *k > 8)
      return fmt::format("{}: \"order\" must be an integer from 0 to 8", path);
    s.order = unsigned(*k);
  }
  s.dtype = *dtype == "f64" ? DType::F64 : DType::F32;
  s.layout = *layout == "batch_major" ? Layout::BatchMajor : Layout::NodesMajor;
  s.reduction = *reduction == "sum" ? Reduction::Sum : *reduction == "none" ? Reduction::None : Reduction::Mean;
  std::string err;
  if (s.mode == FormulaMode::Loss) {
    auto f = str("formula", "");
    if (!f || f->empty())
      return fmt::format("{}: a loss needs \"formula\" (a string)", path);
    s.formula = *f;
    const Json *constants = member(*o, "constants");
    if (constants && !constants->is_object())
      return fmt::format("{}: \"constants\" must be an object of numbers", path);
    auto c = readConstants(constants, path, err);
    if (!c)
      return err;
    s.constants = *c;
    return s;
  }
  const Json *nodes = member(*o, "nodes");
  if (!nodes || !nodes->is_array() || nodes->empty())
    return fmt::format("{}: an activation layer needs \"nodes\" (a non-empty array)", path);
  for (size_t i = 0; i < nodes->size(); ++i) {
    std::string where = fmt::format("{}: nodes[{}]", path, i);
    const Json &n = (*nodes)[i];
    if (!n.is_object())
      return where + ": each node must be an object";
    if (auto e = unknownKey(n, {"formula", "constants", "repeat"}, where))
      return *e;
    const Json *f = member(n, "formula");
    if (!f || !f->is_string())
      return where + ": \"formula\" (a string) is required";
    const Json *constants = member(n, "constants");
    if (constants && !constants->is_object())
      return where + ": \"constants\" must be an object of numbers";
    auto c = readConstants(constants, where, err);
    if (!c)
      return err;
    int64_t repeat = 1;
    if (const Json *r = member(n, "repeat")) {
      auto ri = integerOf(*r);
      if (!ri || *ri < 1 || size_t(*ri) > kMaxRepeat)
        return fmt::format("{}: \"repeat\" must be an integer from 1 to {}", where, kMaxRepeat);
      repeat = *ri;
    }
    if (s.nodes.size() + size_t(repeat) > kMaxRepeat)
      return fmt::format("{}: more than {} nodes in all", where, kMaxRepeat);
    for (int64_t k = 0; k < repeat; ++k)
      s.nodes.push_back({f->get<std::string>(), *c});
  }
  return s;
}

std::string findPtxas() {
  if (const char *p = environmentValue(EnvironmentVariable::Ptxas); p && *p)
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

// Writes all of `bytes` to `fd`; false on a short write.
bool writeAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    bytes.remove_prefix(size_t(n));
  }
  return true;
}

// Writes the result to `path`, or to standard output for "-"; reports a
// failure. Nothing the user named is ever removed: a file (new or not) is
// written to a temporary beside it and renamed over it only when whole, so
// a failed write leaves the old file as it was; anything else that exists
// (a device such as /dev/null, a FIFO) is written in place.
bool writeOutput(const std::string &path, std::string_view bytes) {
  if (path == "-") {
    if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size() && std::fflush(stdout) == 0)
      return true;
    fmt::print(stderr, "hsnn-jit compile: error: cannot write to standard output\n");
    return false;
  }
  auto failed = [&](int err) {
    fmt::print(stderr, "hsnn-jit compile: error: cannot write {}: {}\n", path, std::strerror(err));
    return false;
  };
  // A symbolic link is written through, as compilers do: the file it names is replaced.
  std::string target = path;
  if (char *real = ::realpath(path.c_str(), nullptr)) {
    target = real;
    std::free(real);
  }
  struct stat st;
  bool exists = ::stat(target.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode))
      return failed(EISDIR);
    int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      return failed(errno);
    bool ok = writeAll(fd, bytes);
    int err = errno;
    if (::close(fd) != 0 && ok)
      ok = false, err = errno;
    return ok || failed(err);
  }
  size_t slash = target.rfind('/');
  std::string dir = slash == std::string::npos ? "." : target.substr(0, slash + 1);
  std::string name = slash == std::string::npos ? target : target.substr(slash + 1);
  std::string tmp = fmt::format("{}/.{}.tmp-XXXXXX", dir, name);
  int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    return failed(errno);
  // The mode a new file would get (0666 less the umask), or the old file's.
  mode_t mode = exists ? st.st_mode & 07777 : [] {
    mode_t mask = ::umask(0);
    ::umask(mask);
    return 0666 & ~mask;
  }();
  bool ok = writeAll(fd, bytes) && ::fchmod(fd, mode) == 0;
  int err = errno;
  if (::close(fd) != 0 && ok)
    ok = false, err = errno;
  if (ok && ::rename(tmp.c_str(), target.c_str()) != 0)
    ok = false, err = errno;
  if (!ok)
    ::unlink(tmp.c_str()); // ours: the temporary, never the target
  return ok || failed(err);
}

} // namespace

int runCompile(std::span<const std::string_view> args) {
  std::optional<std::string> specPath, out, emit;
  std::string gpuArch = "sm_80";
  bool verbose = false, progress = false;
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
    } else if (a == "--target" || a == "--cpu" || a == "--row-shape") {
      auto v = value();
      if (!v)
        return usageError("compile", fmt::format("{} needs a value", a));
      (a == "--target" ? o.triple : a == "--cpu" ? o.cpu : o.rowShape) = *v;
    } else if (a == "--gpu-arch") {
      auto v = value();
      if (!v)
        return usageError("compile", "--gpu-arch needs sm_XY");
      gpuArch = *v;
    } else if (a == "-v" || a == "--verbose") {
      verbose = true;
    } else if (a == "--progress") {
      progress = true;
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
  auto fail = [](std::string_view message) {
    fmt::print(stderr, "hsnn-jit compile: error: {}\n", message);
    return BadInput;
  };
  // Formula diagnostics come rendered (node, caret); other errors get the prefix.
  auto failWith = [&](const Error &e) {
    if (e.code() == ErrorCode::InvalidFormula) {
      fmt::print(stderr, "{}\n", e.message());
      return BadInput;
    }
    return fail(e.message());
  };
  if (*emit == "ptx" || *emit == "cubin") {
    auto ptx = s.mode == FormulaMode::Loss
                   ? compileLossPtx(s.name, s.formula, s.constants, s.dtype, gpuArch, o.optLevel, s.order)
                   : compileLayerPtx(s.name, s.nodes, s.dtype, gpuArch, o.optLevel, s.order);
    if (!ptx)
      return failWith(ptx.error());
    if (verbose)
      fmt::print(stderr, "read spec, parse, differentiate, emit, optimise and generate PTX: {:.2f} ms\n", elapsed());
    if (*emit == "ptx")
      return writeOutput(out.value_or(s.name + ".ptx"), *ptx) ? Ok : BadInput;
    // The PTX goes through ptxas as an argument list, never a shell, in a
    // private directory that is removed whatever happens.
    char dir[] = "/tmp/hsnn-cubin-XXXXXX";
    if (!::mkdtemp(dir))
      return fail(fmt::format("cannot create a temporary directory: {}", std::strerror(errno)));
    std::string ptxPath = std::string(dir) + "/kernels.ptx", cubinPath = std::string(dir) + "/kernels.cubin";
    int status = writeOutput(ptxPath, *ptx) ? runProgram({ptxas, "-arch=" + gpuArch, ptxPath, "-o", cubinPath}) : -2;
    std::string cubin;
    if (status == 0) {
      std::ifstream in(cubinPath, std::ios::binary);
      cubin.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    std::remove(ptxPath.c_str());
    std::remove(cubinPath.c_str());
    ::rmdir(dir);
    if (status != 0)
      return fail(fmt::format("{} failed (exit status {})", ptxas, status));
    return writeOutput(out.value_or(s.name + ".cubin"), cubin) ? Ok : BadInput;
  }
  o.reduction = s.reduction;
  o.order = s.order;
  ProgressBar bar("generating code", "functions", progress);
  if (*emit != "llvm-ir" && *emit != "header")
    o.progress = [&](size_t done, size_t total) { bar.update(done, total); };
  auto artifact = s.mode == FormulaMode::Loss ? compileLossAot(s.name, s.formula, s.constants, s.dtype, o)
                                              : compileLayerAot(s.name, s.nodes, s.dtype, s.layout, o);
  if (!artifact)
    return failWith(artifact.error());
  if (verbose)
    fmt::print(stderr, "read spec, parse, differentiate, emit, optimise and generate code: {:.2f} ms\n", elapsed());
  std::string ext = *emit == "obj" ? ".o" : *emit == "asm" ? ".s" : *emit == "llvm-ir" ? ".ll" : ".h";
  std::string_view bytes = *emit == "header" ? std::string_view(artifact->header)
                                             : std::string_view(artifact->bytes.data(), artifact->bytes.size());
  return writeOutput(out.value_or(s.name + ext), bytes) ? Ok : BadInput;
}

} // namespace hsnn::cli
