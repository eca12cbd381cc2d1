// The linker program behind linked cache entries, with stand-in linkers:
// its failures are errors, a stuck one is killed and reaped, and it runs
// silent and with none of this process's descriptors.
#include "CPU/SharedObject.h"

#include <doctest/doctest.h>

#include <dlfcn.h>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <optional>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace hsnn;
namespace fs = std::filesystem;

namespace {

// A private directory with a stand-in linker script and room for a link.
struct LinkDir {
  std::string dir;
  LinkDir() {
    char tmpl[] = "/tmp/hsnn-linker-test-XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  ~LinkDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string script(const std::string &body) const {
    std::string path = dir + "/linker.sh";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0700);
    return path;
  }
};

const std::vector<std::vector<char>> kObjects = {std::vector<char>(64, 'o')};

// No child is left behind, running or as a zombie.
bool noChildren() { return ::waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD; }

// The cache's own background links (from tests before these, when the
// whole binary runs in one process) finished, so that the only children
// are the ones a test makes.
struct NoBackgroundLinks {
  NoBackgroundLinks() { detail::waitForLinkedStores(); }
};

} // namespace

TEST_CASE("a linker that fails or cannot start is an error naming it") {
  NoBackgroundLinks quiet;
  LinkDir d;
  std::string failing = d.script("exit 3");
  auto r = detail::linkSharedObject(kObjects, d.dir, failing);
  REQUIRE_FALSE(r);
  CHECK(r.error().message() == "cannot link the kernels into a shared object for the cache: '" + failing + "' failed");

  auto missing = detail::linkSharedObject(kObjects, d.dir, d.dir + "/no-such-linker");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message() == "cannot link the kernels into a shared object for the cache: cannot start '" +
                                         d.dir + "/no-such-linker': No such file or directory");

  auto none = detail::linkSharedObject(kObjects, d.dir, "");
  REQUIRE_FALSE(none);
  CHECK(none.error().message() ==
        "cannot link the kernels into a shared object for the cache: no linker program (HSNN_LINKER is empty)");

  auto empty = detail::linkSharedObject(kObjects, d.dir, d.script("exit 0"));
  REQUIRE_FALSE(empty);
  CHECK(empty.error().message() == "cannot link the kernels into a shared object for the cache: the linker wrote an "
                                   "empty file");
  CHECK(noChildren());
}

TEST_CASE("a stuck linker is killed and reaped when overdue or when the caller stops waiting") {
  NoBackgroundLinks quiet;
  LinkDir d;
  std::string stuck = d.script("exec sleep 60");
  auto t0 = std::chrono::steady_clock::now();
  int polls = 0;
  auto overdue = detail::linkSharedObject(kObjects, d.dir, stuck, [&](pid_t pid, bool) {
    return detail::pollLinker(pid, /*stop=*/++polls == 3); // past its deadline at the third look
  });
  REQUIRE_FALSE(overdue);
  CHECK(overdue.error().message() == "cannot link the kernels into a shared object for the cache: '" + stuck +
                                         "' failed");
  CHECK(polls == 3);
  CHECK(noChildren());

  auto stopped = detail::linkSharedObject(kObjects, d.dir, stuck, [&](pid_t pid, bool) -> std::optional<int> {
    detail::pollLinker(pid, /*stop=*/true);
    return detail::kLinkAbandoned;
  });
  REQUIRE_FALSE(stopped);
  CHECK(stopped.error().message() == "cannot link the kernels into a shared object for the cache: the link was stopped");
  CHECK(noChildren());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

TEST_CASE("the linker runs silent, with none of this process's descriptors, on the objects given") {
  LinkDir d;
  // Inheritable descriptors, as a harness's pipe is; numbered high, apart
  // from those the script's shell opens itself.
  int pipeFds[2];
  REQUIRE(::pipe(pipeFds) == 0);
  int fds[2] = {::dup2(pipeFds[0], 100), ::dup2(pipeFds[1], 101)};
  ::close(pipeFds[0]);
  ::close(pipeFds[1]);
  REQUIRE(fds[0] == 100);
  REQUIRE(fds[1] == 101);
  // Writes what it sees as its "shared object": its stdout and stderr, its
  // descriptors, and its arguments.
  std::string spy = d.script("o=$(readlink /proc/$$/fd/1); e=$(readlink /proc/$$/fd/2); fds=$(ls /proc/$$/fd); "
                             "{ echo \"$o\"; echo \"$e\"; echo \"$fds\"; echo \"$@\"; cat \"${10}\"; } > \"$3\"");
  auto r = detail::linkSharedObject(kObjects, d.dir, spy);
  ::close(fds[0]);
  ::close(fds[1]);
  REQUIRE(r);
  std::string seen(r->begin(), r->end());
  INFO(seen);
  CHECK(seen.starts_with("/dev/null\n/dev/null\n"));
  CHECK(seen.find(fmt::format("\n{}\n", fds[0])) == std::string::npos);
  CHECK(seen.find(fmt::format("\n{}\n", fds[1])) == std::string::npos);
  std::string out = detail::linkWorkFile(d.dir, 1), in = detail::linkWorkFile(d.dir, 0);
  // The objects, then this process's libmvec and libm as needed libraries.
  CHECK(seen.find(fmt::format("-shared -o {} -z now -z relro --build-id=none --hash-style=gnu {} --no-as-needed /", out,
                              in)) != std::string::npos);
  // libmvec where this process has it (builds with the JIT link it in).
  if (void *mvec = ::dlopen("libmvec.so.1", RTLD_LAZY | RTLD_NOLOAD)) {
    ::dlclose(mvec);
    CHECK(seen.find("/libmvec.so.1 /") != std::string::npos);
  }
  CHECK(seen.find("/libm.so.6\n") != std::string::npos);
  CHECK(seen.ends_with(std::string(64, 'o')));
}

// TMPDIR set for a test's length, restored however it ends.
struct ScopedTmpDir {
  std::optional<std::string> saved;
  explicit ScopedTmpDir(const std::string &dir) {
    if (const char *old = std::getenv("TMPDIR"))
      saved = old;
    ::setenv("TMPDIR", dir.c_str(), 1);
  }
  ~ScopedTmpDir() {
    if (saved)
      ::setenv("TMPDIR", saved->c_str(), 1);
    else
      ::unsetenv("TMPDIR");
  }
};

TEST_CASE("work directories of dead links are removed, and only those") {
  NoBackgroundLinks quiet; // none of the cache's own links in this directory
  LinkDir tmp;
  ScopedTmpDir scoped(tmp.dir);
  // A pid that no longer exists: a child that has exited and been reaped.
  pid_t child = ::fork();
  if (child == 0)
    ::_exit(0);
  REQUIRE(child > 0);
  ::waitpid(child, nullptr, 0);
  auto make = [&](const std::string &name, std::initializer_list<const char *> files, bool aged) {
    std::string d = tmp.dir + "/" + name;
    fs::create_directory(d);
    for (const char *f : files)
      std::ofstream(d + "/" + f) << "x";
    if (aged)
      fs::last_write_time(d, fs::file_time_type::clock::now() - std::chrono::hours(1));
    return d;
  };
  std::string dead = make(fmt::format("hsnn-link-{}-aaaaaa", child), {"k0.o", "k1.o", "k2.o"}, true);
  std::string young = make(fmt::format("hsnn-link-{}-bbbbbb", child), {"k0.o"}, false);
  std::string mine = make(fmt::format("hsnn-link-{}-cccccc", ::getpid()), {"k0.o"}, true);
  std::string foreign = make(fmt::format("hsnn-link-{}-dddddd", child), {"k0.o", "notes.txt"}, true);
  std::string other = make("hsnn-linker-elsewhere", {"k0.o"}, true);

  CHECK(detail::removeStaleLinkWorkDirs(std::chrono::minutes(10)) == 1);
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(young + "/k0.o"));   // a link may still be writing it
  CHECK(fs::exists(mine + "/k0.o"));    // this process is alive
  CHECK(fs::exists(foreign + "/notes.txt")); // not a link's file: the directory stays
  CHECK(fs::exists(other + "/k0.o"));   // not a work directory's name

  std::string fresh = detail::makeLinkWorkDir();
  CHECK(fresh.starts_with(fmt::format("{}/hsnn-link-{}-", tmp.dir, ::getpid())));
  CHECK(fs::is_directory(fresh));
}
