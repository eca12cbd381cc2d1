//===- lib/CPU/SharedObjectLinker.cpp - Objects to a shared object --------===//
//
// The system's linker as a program (binutils' ld.bfd when the build found
// it, else ld.lld; HSNN_LINKER overrides, and an empty HSNN_LINKER turns
// linking off). A program, not lld as a library:
// lld keeps global state and function-local statics that exit would
// destroy under a running link, and a separate program needs neither a
// fork of this (possibly large) process nor lld's archives in a static
// build. posix_spawn starts it without copying this process's page
// tables. Undefined symbols (libmvec's, libm's) stay undefined and resolve
// when the image is loaded; the image names libmvec and libm as needed (the
// files this process has loaded), because a library loaded RTLD_LOCAL, as
// Python loads extensions, does not put its own dependencies in the scope
// the image's symbols are looked up in.
//===----------------------------------------------------------------------===//
#include "SharedObject.h"

#include "hsnn/Environment.h"

#include <cerrno>
#include <dlfcn.h>
#include <link.h>
#include <chrono>
#include <cstring>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iterator>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

#ifndef HSNN_LINKER_DEFAULT
#define HSNN_LINKER_DEFAULT ""
#endif

namespace hsnn::detail {
namespace {

// The files of the libraries kernels call into, as this process loaded
// them (the kernels were compiled for this process's libmvec). Never
// destroyed: links run on a thread that exit waits for after statics go.
const std::vector<std::string> &neededLibraries() {
  static const std::vector<std::string> *libs = new std::vector<std::string>([] {
    std::vector<std::string> out;
    for (const char *soname : {"libmvec.so.1", "libm.so.6"}) {
      void *h = ::dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
      link_map *map = nullptr;
      if (h && ::dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0] == '/')
        out.push_back(map->l_name);
      if (h)
        ::dlclose(h); // NOLOAD took a reference
    }
    return out;
  }());
  return *libs;
}

Error linkFailure(const std::string &why) {
  return Error(ErrorCode::Internal, fmt::format("cannot link the kernels into a shared object for the cache: {}", why));
}

// A link of one layer takes tens of milliseconds; one that takes this long
// is stuck and is killed.
constexpr auto kLinkDeadline = std::chrono::seconds(30);

} // namespace

const std::string &linkerProgram() {
  // Never destroyed: the link thread may read it during exit.
  static const std::string *program = [] {
    const char *p = environmentValue(EnvironmentVariable::Linker);
    return new std::string(p ? p : HSNN_LINKER_DEFAULT);
  }();
  return *program;
}

bool canLinkSharedObjects() {
  static const bool usable = !linkerProgram().empty() && ::access(linkerProgram().c_str(), X_OK) == 0;
  return usable;
}

namespace {
std::string tempDir() {
  const char *tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}
constexpr std::string_view kWorkDirPrefix = "hsnn-link-";
} // namespace

std::string makeLinkWorkDir() {
  // The pid in the name lets a later process tell a dead link's directory.
  std::string dir = fmt::format("{}/{}{}-XXXXXX", tempDir(), kWorkDirPrefix, ::getpid());
  return ::mkdtemp(dir.data()) ? dir : std::string();
}

size_t removeStaleLinkWorkDirs(std::chrono::seconds minAge) {
  namespace fs = std::filesystem;
  std::error_code ec;
  size_t removed = 0;
  const auto now = std::chrono::system_clock::now();
  // increment(ec), not range-for: its operator++ throws, on a thread where
  // an exception would end the process.
  for (fs::directory_iterator it(tempDir(), ec), done; !ec && it != done; it.increment(ec)) {
    const fs::directory_entry &entry = *it;
    std::string name = entry.path().filename().string();
    if (!name.starts_with(kWorkDirPrefix))
      continue;
    // hsnn-link-PID-XXXXXX: a pid that no longer exists here, a directory of
    // ours (not a link), old enough that no live link can be using it.
    char *end = nullptr;
    long pid = std::strtol(name.c_str() + kWorkDirPrefix.size(), &end, 10);
    struct stat st;
    if (pid <= 0 || *end != '-' || pid == ::getpid() || ::lstat(entry.path().c_str(), &st) != 0 ||
        !S_ISDIR(st.st_mode) || st.st_uid != ::getuid())
      continue;
    if (now - std::chrono::system_clock::from_time_t(st.st_mtime) < minAge)
      continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH)
      continue;
    // Only the files a link writes (linkWorkFile: k0.o, k1.o, ...), then the
    // directory, which is left in place if anything else is in it.
    std::error_code inner;
    for (fs::directory_iterator f(entry.path(), inner), last; !inner && f != last; f.increment(inner)) {
      std::string file = f->path().filename().string();
      std::error_code ignored;
      if (file.size() > 3 && file[0] == 'k' && file.ends_with(".o") &&
          file.find_first_not_of("0123456789", 1) == file.size() - 2 && f->is_regular_file(ignored))
        fs::remove(f->path(), ignored);
    }
    std::error_code ignored;
    if (fs::remove(entry.path(), ignored))
      ++removed;
  }
  return removed;
}

std::optional<int> pollLinker(pid_t pid, bool stop) {
  if (stop)
    ::kill(pid, SIGKILL);
  int status = 0;
  pid_t r;
  while ((r = ::waitpid(pid, &status, stop ? 0 : WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r == pid)
    return status;
  if (r < 0) // not our child any more: as good as failed
    return kLinkAbandoned;
  return std::nullopt;
}

Expected<std::vector<char>> linkSharedObject(std::span<const std::vector<char>> objects, const std::string &workDir,
                                             const std::string &program, const LinkerPoll &poll,
                                             const std::string &binding, const std::string &bindTo) {
  if (program.empty())
    return linkFailure("no linker program (HSNN_LINKER is empty)");
  std::vector<std::string> inputs;
  for (size_t i = 0; i < objects.size(); ++i) {
    inputs.push_back(linkWorkFile(workDir, i));
    std::ofstream out(inputs.back(), std::ios::binary);
    out.write(objects[i].data(), std::streamsize(objects[i].size()));
    if (!out)
      return linkFailure("cannot write an object to " + inputs.back());
  }
  std::string output = linkWorkFile(workDir, objects.size());
  // No soname: glibc would know two images by it (see SharedObject.cpp).
  std::vector<std::string> args = {program, "-shared", "-o", output, "-z", "now", "-z", "relro",
                                   "--build-id=none", "--hash-style=gnu"};
  if (!binding.empty())
    args.push_back(fmt::format("--defsym={}={}", binding, bindTo));
  args.insert(args.end(), inputs.begin(), inputs.end());
  args.push_back("--no-as-needed");
  for (const std::string &lib : neededLibraries())
    args.push_back(lib);
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  // Silent (its messages would land in the caller's terminal or a
  // harness's pipe) and with none of this process's descriptors.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int fd = 0; fd < 3; ++fd)
    posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return linkFailure(fmt::format("cannot start '{}': {}", argv[0], std::strerror(rc)));

  // Polled, so that the caller can stop waiting (at exit) and a stuck
  // linker is killed.
  auto deadline = std::chrono::steady_clock::now() + kLinkDeadline;
  auto pause = std::chrono::microseconds(500);
  int status = 0;
  for (;;) {
    bool overdue = std::chrono::steady_clock::now() > deadline;
    std::optional<int> done = poll ? poll(pid, overdue) : pollLinker(pid, overdue);
    if (done) {
      status = *done;
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(8000));
  }
  if (status == kLinkAbandoned)
    return linkFailure("the link was stopped");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return linkFailure(fmt::format("'{}' failed", argv[0]));

  std::ifstream in(output, std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (image.empty())
    return linkFailure("the linker wrote an empty file");
  return image;
}

} // namespace hsnn::detail
