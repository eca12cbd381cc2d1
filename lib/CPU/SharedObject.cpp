//===- lib/CPU/SharedObject.cpp - dlopen from memory; background links ---===//
#include "SharedObject.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <deque>
#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <cerrno>
#include <mutex>
#include <pthread.h>
#include <set>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>

namespace hsnn::detail {
namespace {

// The memfd stays open while the library is loaded: the C library knows a
// loaded object by the name it was opened with, /proc/self/fd/N, and would
// hand back this library for a later image that reused the number N.
class SharedObjectLibrary final : public KernelLibrary {
public:
  SharedObjectLibrary(void *handle, int fd) : handle_(handle), fd_(fd) {}
  ~SharedObjectLibrary() override {
    ::dlclose(handle_);
    ::close(fd_);
  }
  void *address(const std::string &symbol) const override {
    for (auto &[name, address] : symbols_)
      if (name == symbol)
        return address;
    return nullptr;
  }
  std::vector<std::pair<std::string, void *>> symbols_;

private:
  void *handle_;
  int fd_;
};

#if defined(__x86_64__)
constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kMachine = EM_AARCH64;
#else
constexpr uint16_t kMachine = EM_NONE;
#endif

Error loadFailure(const std::string &why) {
  return Error(ErrorCode::Internal, fmt::format("cannot load the cached shared object: {}", why));
}

// One thread links the queued jobs, one at a time, each by the linker
// program (SharedObjectLinker.cpp), and stores the image. The queue is
// never destroyed: exit does not tear it down under the thread, but stops
// it (stopForExit).
class LinkQueue;
LinkQueue &linkQueue();

class LinkQueue {
public:
  struct Job {
    CacheConfig config;
    CacheKey key;
    std::vector<std::vector<char>> objects;
    std::string description;
    std::string anySymbol;
  };

  LinkQueue() {
    // A child of fork() has no worker and may have copied a locked mutex:
    // it starts empty (the parent stores its own links).
    ::pthread_atfork(
        [] {
          LinkQueue &q = linkQueue();
          q.mutex_.lock();
          q.exitMutex_.lock();
        },
        [] {
          LinkQueue &q = linkQueue();
          q.exitMutex_.unlock();
          q.mutex_.unlock();
        },
        [] {
          LinkQueue &q = linkQueue();
          q.exitMutex_.unlock();
          q.mutex_.unlock();
          q.jobs_.clear();
          q.queued_.clear();
          q.busy_ = q.started_ = false;
          q.linkerPid_ = 0; // the parent's linker, not this process's child
        });
    // The statics a store uses are never destroyed (ObjectCache.cpp), so
    // whichever exit handlers run before this one, the stores it lets
    // finish find them.
    std::atexit([] { linkQueue().stopForExit(); });
  }

  void push(Job job) {
    std::lock_guard lock(mutex_);
    if (!queued_.insert(job.key).second)
      return;
    jobs_.push_back(std::move(job));
    if (!started_) {
      std::thread([this] { run(); }).detach();
      started_ = true;
    }
    wake_.notify_all();
  }

  void wait() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return jobs_.empty() && !busy_; });
  }

private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return !jobs_.empty(); });
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
      lock.unlock();
      link(job);
      lock.lock();
      busy_ = false;
      queued_.erase(job.key);
      idle_.notify_all();
    }
  }

  void link(const Job &job) {
    // Once a process, on this thread: what killed processes left behind.
    static std::once_flag sweep;
    std::call_once(sweep, [] { removeStaleLinkWorkDirs(); });
    std::string dir;
    {
      std::lock_guard lock(exitMutex_);
      if (exiting_ || (dir = makeLinkWorkDir()).empty())
        return;
      linkerPid_ = 0;
    }
    // Each look at the linker under the exit lock, so that exit and this
    // thread never both reap (or kill) one process.
    auto poll = [&](pid_t pid, bool overdue) -> std::optional<int> {
      std::lock_guard lock(exitMutex_);
      if (exiting_) {
        if (linkerPid_ != -1) // started after exit looked
          pollLinker(pid, /*stop=*/true);
        return kLinkAbandoned;
      }
      std::optional<int> status = pollLinker(pid, overdue);
      linkerPid_ = status ? 0 : pid;
      return status;
    };
    auto image = linkSharedObject(job.objects, dir, linkerProgram(), poll, imageBindingSymbol(job.key), job.anySymbol);
    std::lock_guard lock(exitMutex_);
    if (image && !exiting_) {
      // Quietly: a failed store only means later processes load the
      // objects through the JIT, and the warning handler may be Python's.
      CacheConfig quiet{job.config.enabled, job.config.dir, nullptr};
      if (std::optional<ObjectCache> cache = ObjectCache::open(quiet))
        cache->store(CacheCategory::Cpu, job.key, *image, job.description);
    }
    removeWorkDir(dir, job.objects.size());
  }

  static void removeWorkDir(const std::string &dir, size_t objects) {
    for (size_t i = 0; i <= objects; ++i)
      ::unlink(linkWorkFile(dir, i).c_str());
    ::rmdir(dir.c_str());
  }

  // Exit first lets the queue finish, for a while: a short process (one
  // compile, then exit) would otherwise never leave a linked entry, and a
  // link with ld.bfd is quick (exit waits at most a second, however
  // many layers are queued). Then it stops the thread: a linker
  // still running is killed, and the thread removes its files.
  void stopForExit() {
    {
      std::unique_lock lock(mutex_);
      idle_.wait_for(lock, kExitGrace, [&] { return jobs_.empty() && !busy_; });
    }
    {
      std::lock_guard lock(exitMutex_);
      exiting_ = true;
      if (linkerPid_ > 0) {
        pollLinker(linkerPid_, /*stop=*/true);
        linkerPid_ = -1;
      }
    }
    std::unique_lock lock(mutex_);
    idle_.wait_for(lock, kExitGrace, [&] { return !busy_; });
  }
  static constexpr auto kExitGrace = std::chrono::seconds(1);

  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Job> jobs_;
  std::set<CacheKey> queued_;
  bool busy_ = false, started_ = false;
  // The linker process of the job being linked, for exit (0 when none runs
  // that this thread has seen, -1 once exit has ended it).
  std::mutex exitMutex_;
  bool exiting_ = false;
  pid_t linkerPid_ = 0;
  friend LinkQueue &linkQueue();
};

LinkQueue &linkQueue() {
  static LinkQueue *queue = new LinkQueue; // never destroyed (see LinkQueue)
  return *queue;
}

// Set when a linked image would not load here (no memfd, noexec memory):
// then this process links no more, as every later image would fail alike.
std::atomic<bool> gLinkedUnusable{false};

} // namespace

std::string imageBindingSymbol(const CacheKey &key) { return "hsnn_image_" + toHex(key).substr(0, 32); }

Expected<std::shared_ptr<KernelLibrary>> loadSharedObject(const std::vector<char> &image,
                                                          std::span<const std::string> symbols,
                                                          const std::string &binding) {
  // A 64-bit shared object for this machine, or not worth a dlopen (and a
  // dlopen that fails on one says this process cannot load them at all).
  Elf64_Ehdr header;
  if (image.size() < sizeof header)
    return loadFailure("it is too short to be a shared object");
  std::memcpy(&header, image.data(), sizeof header);
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64 ||
      header.e_type != ET_DYN || header.e_machine != kMachine)
    return loadFailure("it is not a shared object for this machine");
  int fd = ::memfd_create("hsnn-kernels", MFD_CLOEXEC);
  if (fd < 0) {
    gLinkedUnusable = true;
    return loadFailure("memfd_create failed");
  }
  size_t written = 0;
  while (written < image.size()) {
    ssize_t n = ::write(fd, image.data() + written, image.size() - written);
    if (n <= 0) {
      ::close(fd);
      return loadFailure("cannot write the image to memory");
    }
    written += size_t(n);
  }
  // RTLD_LOCAL: two layers' kernels never resolve against each other.
  void *handle = ::dlopen(("/proc/self/fd/" + std::to_string(fd)).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    ::close(fd);
    gLinkedUnusable = true;
    const char *why = ::dlerror();
    return loadFailure(why ? why : "dlopen failed");
  }
  auto lib = std::make_shared<SharedObjectLibrary>(handle, fd);
  if (!binding.empty() && !::dlsym(handle, binding.c_str()))
    return loadFailure("it was linked for another cache key (another layer's kernels)");
  for (const std::string &s : symbols) {
    void *address = ::dlsym(handle, s.c_str());
    if (!address)
      return loadFailure(fmt::format("it has no kernel '{}'", s));
    lib->symbols_.emplace_back(s, address);
  }
  return std::shared_ptr<KernelLibrary>(std::move(lib));
}

void storeLinkedLater(const CacheConfig &config, const CacheKey &key, std::vector<std::vector<char>> objects,
                      std::string description, std::string anySymbol) {
  if (!config.enabled || !canLinkSharedObjects() || gLinkedUnusable)
    return;
  linkQueue().push({config, key, std::move(objects), std::move(description), std::move(anySymbol)});
}

void waitForLinkedStores() { linkQueue().wait(); }

} // namespace hsnn::detail
