//===- lib/CPU/SharedObject.cpp - dlopen from memory; background links ---===//
#include "SharedObject.h"

#include <atomic>
#include <cstdlib>
#include <condition_variable>
#include <deque>
#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <cerrno>
#include <csignal>
#include <mutex>
#include <pthread.h>
#include <set>
#include <sys/mman.h>
#include <sys/wait.h>
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

// One thread hands each job to a child process, one at a time, and waits
// for it. The child links (lld keeps global state, and function-local
// statics it creates would be destroyed at this process's exit under a
// link still running), stores the entry, and leaves by _exit. The queue is
// never destroyed: exit neither waits for it nor tears it down under the
// thread; a child still linking then finishes on its own, and a job not
// started by then is left to a later process.
class LinkQueue;
LinkQueue &linkQueue();

class LinkQueue {
public:
  struct Job {
    CacheConfig config;
    CacheKey key;
    std::vector<std::vector<char>> objects;
    std::string description;
  };

  LinkQueue() {
    // A child of fork() has no worker and may have copied a locked mutex:
    // it starts empty (the parent stores its own links).
    ::pthread_atfork([] { linkQueue().mutex_.lock(); }, [] { linkQueue().mutex_.unlock(); },
                     [] {
                       LinkQueue &q = linkQueue();
                       q.mutex_.unlock();
                       q.jobs_.clear();
                       q.queued_.clear();
                       q.busy_ = q.started_ = false;
                     });
    std::atexit([] {
      LinkQueue &q = linkQueue();
      std::lock_guard lock(q.forkMutex_);
      q.exiting_ = true;
    });
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
      linkInChild(job);
      lock.lock();
      busy_ = false;
      queued_.erase(job.key);
      idle_.notify_all();
    }
  }

  // The files a child links through: removed when it ends, by the alarm
  // too (only read in the handler). A plain pointer: a static with a
  // destructor would register it with the C library's atexit lock.
  static inline std::vector<std::string> *childFiles = nullptr;
  [[noreturn]] static void leaveChild(int) {
    if (childFiles) {
      for (size_t i = 1; i < childFiles->size(); ++i)
        ::unlink((*childFiles)[i].c_str());
      ::rmdir((*childFiles)[0].c_str());
    }
    ::_exit(0);
  }

  void linkInChild(const Job &job) {
    pid_t pid;
    {
      // Never a fork once exit has begun: the exiting thread holds the C
      // library's locks between its exit handlers, and a child would
      // inherit them locked.
      std::lock_guard lock(forkMutex_);
      if (exiting_)
        return;
      pid = ::fork();
    }
    if (pid < 0)
      return;
    if (pid == 0) {
      // Quietly: a failed link only means later processes load the
      // objects through the JIT (and the warning handler may be the
      // parent's Python). Eviction scans the directory: the size
      // estimate's lock may have been held at the fork. None of the
      // parent's files (a harness waits for its pipes to close), and an
      // alarm ends a child that would wait on a lock another thread held
      // at the fork.
      ::signal(SIGALRM, leaveChild);
      ::alarm(30);
      if (int null = ::open("/dev/null", O_RDWR); null >= 0)
        ::dup2(null, 0), ::dup2(null, 1), ::dup2(null, 2);
      ::close_range(3, ~0u, 0);
      const char *tmp = std::getenv("TMPDIR");
      std::string dir = fmt::format("{}/hsnn-link-XXXXXX", tmp && *tmp ? tmp : "/tmp");
      if (!::mkdtemp(dir.data()))
        ::_exit(0);
      auto *files = new std::vector<std::string>{dir};
      for (size_t i = 0; i <= job.objects.size(); ++i)
        files->push_back(linkWorkFile(dir, i));
      childFiles = files;
      CacheConfig quiet{job.config.enabled, job.config.dir, nullptr};
      if (std::optional<ObjectCache> cache = ObjectCache::open(quiet))
        if (auto image = linkSharedObject(job.objects, dir))
          cache->store(CacheCategory::Cpu, job.key, *image, job.description, /*fullScan=*/true);
      leaveChild(0);
    }
    // A link takes milliseconds; a child that hangs ends by its alarm.
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }

  std::mutex mutex_, forkMutex_;
  bool exiting_ = false;
  std::condition_variable wake_, idle_;
  std::deque<Job> jobs_;
  std::set<CacheKey> queued_;
  bool busy_ = false, started_ = false;
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

Expected<std::shared_ptr<KernelLibrary>> loadSharedObject(const std::vector<char> &image,
                                                          std::span<const std::string> symbols) {
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
  void *handle = ::dlopen(fmt::format("/proc/self/fd/{}", fd).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    ::close(fd);
    gLinkedUnusable = true;
    const char *why = ::dlerror();
    return loadFailure(why ? why : "dlopen failed");
  }
  auto lib = std::make_shared<SharedObjectLibrary>(handle, fd);
  for (const std::string &s : symbols) {
    void *address = ::dlsym(handle, s.c_str());
    if (!address)
      return loadFailure(fmt::format("it has no kernel '{}'", s));
    lib->symbols_.emplace_back(s, address);
  }
  return std::shared_ptr<KernelLibrary>(std::move(lib));
}

void storeLinkedLater(const CacheConfig &config, const CacheKey &key, std::vector<std::vector<char>> objects,
                      std::string description) {
  if (!config.enabled || !canLinkSharedObjects() || gLinkedUnusable)
    return;
  linkQueue().push({config, key, std::move(objects), std::move(description)});
}

void waitForLinkedStores() { linkQueue().wait(); }

} // namespace hsnn::detail
