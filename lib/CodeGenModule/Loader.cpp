//===- lib/CodeGenModule/Loader.cpp - Finding and loading the module ------===//
//
// Where libhsnn-codegen.so is looked for, in order: $HSNN_CODEGEN_MODULE
// (that file only); beside the program or shared object this code is part
// of (a Python wheel, a bundle); ../LIBDIR/hsnn/ from there (an installed
// hsnn-jit, or a build tree's bin/); hsnn/ from there (an installed shared
// libhsnn); by its bare name, so the program's run path and
// LD_LIBRARY_PATH apply (the installed CMake package adds LIBDIR/hsnn to
// the run path of what links it); the build tree it was built in; the
// install prefix it was configured with.
//
//===----------------------------------------------------------------------===//
#include "CodeGenModule.h"

#include "CodeGenModuleToken.h"

#if HSNN_HAS_CODEGEN_MODULE
#include <llvm/Config/llvm-config.h> // the version only: the loader links no LLVM
#endif

#include <dlfcn.h>
#include <filesystem>
#include <fmt/format.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hsnn::detail {
namespace {

constexpr const char *kFileName = "libhsnn-codegen.so";

#if HSNN_HAS_CODEGEN_MODULE // the search; builds without code generators look for nothing
std::string directoryOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The directory of the executable or shared object that holds this code.
std::string ownDirectory() {
  Dl_info info{};
  link_map *map = nullptr;
  if (::dladdr1(reinterpret_cast<void *>(&codeGenModulePath), &info, reinterpret_cast<void **>(&map),
                RTLD_DL_LINKMAP) &&
      map && map->l_name && map->l_name[0] == '/')
    return directoryOf(map->l_name);
  // The main program has no name in its link map.
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0)
    return "";
  return directoryOf(std::string(buf, size_t(n)));
}

std::vector<std::string> candidates() {
  if (const char *p = std::getenv("HSNN_CODEGEN_MODULE"); p && *p)
    return {p};
  std::vector<std::string> c;
  if (std::string dir = ownDirectory(); !dir.empty()) {
    c.push_back(fmt::format("{}/{}", dir, kFileName));
    c.push_back(fmt::format("{}/../{}/hsnn/{}", dir, HSNN_INSTALL_LIBDIR, kFileName));
    c.push_back(fmt::format("{}/hsnn/{}", dir, kFileName));
  }
  c.push_back(kFileName);
  c.push_back(HSNN_CODEGEN_MODULE_BUILD_PATH);
  c.push_back(HSNN_CODEGEN_MODULE_INSTALL_PATH);
  return c;
}

// A bare name is the dynamic linker's to find.
bool isFile(const std::string &path) {
  if (path.find('/') == std::string::npos)
    return true;
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

#endif

struct Loaded {
  const CodeGenModule *module = nullptr;
  std::string path;
  Error failure;
};

#if HSNN_HAS_CODEGEN_MODULE
// Opens one candidate; on failure says why and closes it again.
const CodeGenModule *open(const std::string &path, std::string &why) {
  void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *e = ::dlerror();
    // A bare name not on the search path was simply not there.
    if (path.find('/') != std::string::npos)
      why = fmt::format("{}: {}", path, e ? e : "dlopen failed");
    return nullptr;
  }
  using EntryFn = const CodeGenModule *(*)();
  auto entry = reinterpret_cast<EntryFn>(::dlsym(handle, "hsnn_codegen_module_v1"));
  const CodeGenModule *m = entry ? entry() : nullptr;
  if (!m) {
    why = fmt::format("{}: not an hsnn code generator module", path);
    ::dlclose(handle);
    return nullptr;
  }
  if (m->size != sizeof(CodeGenModule) || !m->buildToken ||
      std::string_view(m->buildToken) != HSNN_CODEGEN_MODULE_TOKEN) {
    why = fmt::format("{}: built from another hsnn build (token {}, this library's {})", path,
                      m->buildToken ? m->buildToken : "none", HSNN_CODEGEN_MODULE_TOKEN);
    ::dlclose(handle);
    return nullptr;
  }
  // Never unloaded: kernels, the JIT and objects from it live to the end.
  ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  return m;
}
#endif

const Loaded &loaded() {
  static const Loaded *state = [] {
    auto *s = new Loaded(); // never destroyed: used by kernels released at exit
#if HSNN_HAS_CODEGEN_MODULE
    std::vector<std::string> tried, reasons;
    for (const std::string &path : candidates()) {
      tried.push_back(path);
      if (!isFile(path))
        continue;
      std::string why;
      if (const CodeGenModule *m = open(path, why)) {
        s->module = m;
        s->path = std::filesystem::path(path).lexically_normal().string();
        if (path.find('/') == std::string::npos)
          if (Dl_info info{}; ::dladdr(reinterpret_cast<const void *>(m), &info) && info.dli_fname)
            s->path = info.dli_fname;
        return s;
      }
      if (!why.empty())
        reasons.push_back(why);
    }
    if (reasons.empty())
      s->failure = Error(ErrorCode::Unsupported,
                         fmt::format("the code generator module {} was not found (looked for {}); set "
                                     "HSNN_CODEGEN_MODULE to its path",
                                     kFileName, fmt::join(tried, ", ")));
    else
      s->failure = Error(ErrorCode::Unsupported, fmt::format("the code generator module cannot be used: {}",
                                                             fmt::join(reasons, "; ")));
#else
    s->failure = Error(ErrorCode::Unsupported, "hsnn was built without the LLVM JIT (HSNN_ENABLE_JIT=OFF)");
#endif
    return s;
  }();
  return *state;
}

} // namespace

Expected<const CodeGenModule *> codeGenModule() {
  const Loaded &l = loaded();
  if (!l.module)
    return l.failure;
  return l.module;
}

std::string codeGenModulePath() { return loaded().path; }

const char *codeGenLlvmVersion() {
#if HSNN_HAS_CODEGEN_MODULE
  return LLVM_VERSION_STRING;
#else
  return "none";
#endif
}

} // namespace hsnn::detail
