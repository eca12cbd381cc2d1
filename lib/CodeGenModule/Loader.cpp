//===- lib/CodeGenModule/Loader.cpp - Finding and loading the module ------===//
//
// Where libhsnn-codegen.so is looked for, in order: $HSNN_CODEGEN_MODULE
// (that file only: the user's own choice, loaded as named); beside the
// program or shared object this code is part of (a Python wheel, a
// bundle); ../LIBDIR/hsnn/ from there (an installed hsnn-jit, or a build
// tree's bin/); hsnn/ from there (an installed shared libhsnn); the
// directories the dynamic linker would search (LD_LIBRARY_PATH, the run
// path, the system's); the build tree it was built in, only while this
// code runs from inside that tree; the install prefix it was configured
// with.
//
// Loading a module runs its code (its constructors run inside dlopen,
// before the build token can be checked), so a module found by the search
// (but the build tree's, for code running from that tree) is opened only if
// no other user could have put it there: the file and
// its directory belong to this user or root and no one else can write
// them, and so does every directory above (one that others can write is
// allowed above the module's own only with the sticky bit, as /tmp has:
// there no one else can rename or remove what is ours).
//
//===----------------------------------------------------------------------===//
#include "CodeGenModule.h"

#include "hsnn/Environment.h"

#include "CodeGenModuleToken.h"

#if HSNN_HAS_CODEGEN_MODULE
#include <llvm/Config/llvm-config.h> // the version only: the loader links no LLVM
#endif

#include <cerrno>
#include <cstdlib>
#include <cstring>
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

// The path with every link resolved, or "" (errno says why).
std::string realPath(const std::string &path) {
  char *real = path.empty() ? nullptr : ::realpath(path.c_str(), nullptr);
  if (!real)
    return "";
  std::string out = real;
  std::free(real);
  return out;
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

// The directories the dynamic linker searches for a bare name dlopen'ed
// from this code (LD_LIBRARY_PATH, the run path, the system's): each is
// looked in by path, so that what is found there is checked like the rest.
// (The installed CMake package adds LIBDIR/hsnn to the run path of what
// links it.)
std::vector<std::string> linkerSearchDirectories() {
  Dl_info info{};
  link_map *map = nullptr;
  void *handle = nullptr;
  if (::dladdr1(reinterpret_cast<void *>(&codeGenModulePath), &info, reinterpret_cast<void **>(&map),
                RTLD_DL_LINKMAP) &&
      map && map->l_name && map->l_name[0] == '/')
    handle = ::dlopen(map->l_name, RTLD_LAZY | RTLD_NOLOAD);
  else
    handle = ::dlopen(nullptr, RTLD_LAZY); // the main program
  std::vector<std::string> dirs;
  Dl_serinfo size{};
  if (handle && ::dlinfo(handle, RTLD_DI_SERINFOSIZE, &size) == 0 && size.dls_size >= sizeof(Dl_serinfo)) {
    auto *list = static_cast<Dl_serinfo *>(std::malloc(size.dls_size));
    if (list) {
      *list = size;
      if (::dlinfo(handle, RTLD_DI_SERINFOSIZE, list) == 0 && ::dlinfo(handle, RTLD_DI_SERINFO, list) == 0)
        for (unsigned i = 0; i < list->dls_cnt; ++i)
          if (const char *d = list->dls_serpath[i].dls_name; d && *d)
            dirs.emplace_back(d);
      std::free(list);
    }
  }
  if (handle)
    ::dlclose(handle);
  return dirs;
}

std::vector<std::string> candidates() {
  if (const char *p = environmentValue(EnvironmentVariable::CodegenModule); p && *p)
    return {p};
  std::vector<std::string> c;
  if (std::string dir = ownDirectory(); !dir.empty()) {
    c.push_back(fmt::format("{}/{}", dir, kFileName));
    c.push_back(fmt::format("{}/../{}/hsnn/{}", dir, HSNN_INSTALL_LIBDIR, kFileName));
    c.push_back(fmt::format("{}/hsnn/{}", dir, kFileName));
  }
  for (const std::string &dir : linkerSearchDirectories())
    if (dir.front() == '/') // a relative one would be the working directory's
      c.push_back(fmt::format("{}/{}", dir, kFileName));
  // An installed copy never looks in the tree it was built in (which may
  // be anywhere, /tmp included, long after the build).
  if (std::string own = realPath(ownDirectory()); !own.empty() && (own + "/").starts_with(HSNN_BUILD_DIR "/"))
    c.push_back(HSNN_CODEGEN_MODULE_BUILD_PATH);
  c.push_back(HSNN_CODEGEN_MODULE_INSTALL_PATH);
  return c;
}

bool isFile(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Why another user could have written the module at `path` (or a file put
// in its place), or "" when only this user and root can.
std::string untrusted(const std::string &path) {
  std::string real = realPath(path);
  if (real.empty())
    return fmt::format("cannot resolve the path: {}", std::strerror(errno));
  uid_t me = ::geteuid();
  auto ownerIsOther = [&](const struct stat &st) { return st.st_uid != me && st.st_uid != 0; };
  struct stat st;
  if (::lstat(real.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return "it is not a regular file";
  if (ownerIsOther(st))
    return fmt::format("it is owned by uid {}, neither this user (uid {}) nor root", st.st_uid, me);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("it is writable by group or others (mode {:o})", st.st_mode & 07777);
  std::string dir = real;
  for (bool own = true; dir.size() > 1; own = false) {
    dir = directoryOf(dir);
    if (dir.empty())
      dir = "/";
    if (::stat(dir.c_str(), &st) != 0)
      return fmt::format("cannot stat {}: {}", dir, std::strerror(errno));
    if (ownerIsOther(st))
      return fmt::format("{} is owned by uid {}, neither this user (uid {}) nor root", dir, st.st_uid, me);
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && (own || !(st.st_mode & S_ISVTX)))
      return fmt::format("{} is writable by group or others (mode {:o})", dir, st.st_mode & 07777);
  }
  return "";
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
    const char *chosen = environmentValue(EnvironmentVariable::CodegenModule);
    for (const std::string &path : candidates()) {
      tried.push_back(path);
      if (!isFile(path))
        continue;
      std::string why;
      std::string file = path;
      // The user's own choice is loaded as named; so is the build tree's
      // module for code running from that tree (whoever can write the
      // tree can change that code itself).
      if (!(chosen && *chosen) && path != HSNN_CODEGEN_MODULE_BUILD_PATH) {
        if (std::string reason = untrusted(path); !reason.empty()) {
          reasons.push_back(fmt::format("{}: refused, not loaded: {}", path, reason));
          continue;
        }
        file = realPath(path); // what was checked is what is opened
      }
      if (const CodeGenModule *m = open(file, why)) {
        s->module = m;
        s->path = std::filesystem::path(path).lexically_normal().string();
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
