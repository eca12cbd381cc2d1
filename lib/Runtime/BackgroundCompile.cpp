//===- lib/Runtime/BackgroundCompile.cpp - Compiles beside the calls ------===//
//
// Exit must neither wait for a whole compile (tens of seconds under load)
// nor tear down the process under one: static destructors registered while
// a compile ran (LLVM's, as it initialises) run before any exit handler
// registered earlier, and a compile still inside LLVM would use what they
// destroyed. So a task passes checkpoints, and once the process is exiting
// a task that reaches one parks there for good; exit goes on once every
// task has finished or parked (a checkpoint comes after each kernel, so
// that is milliseconds). The wait starts in the destructor of a
// thread_local made in the main thread when it starts a compile: glibc runs
// the exiting thread's thread_local destructors before every atexit handler
// and static destructor. An atexit handler does the same for exits from
// other threads (there only the statics made before the first compile are
// sure to outlive it).
//
// A child of fork() has none of its parent's threads: its tasks are marked
// done (failed) there, and nothing in it waits for them.
//
//===----------------------------------------------------------------------===//
#include "BackgroundCompile.h"

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <pthread.h>
#include <system_error>
#include <thread>

#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace hsnn::detail {
namespace {

struct State {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<uint64_t, std::function<void()>> running; // task id -> what a forked child does for it
  uint64_t nextId = 0;
  size_t parked = 0;
  bool exiting = false;
  bool handlersInstalled = false;
};

State &state() {
  static auto *s = new State; // never destroyed: used during exit
  return *s;
}

// Stops the tasks: each finishes or parks at its next checkpoint.
void stopForExit() {
  State &s = state();
  std::unique_lock lock(s.mutex);
  s.exiting = true;
  s.changed.notify_all();
  s.changed.wait(lock, [&] { return s.running.size() <= s.parked; });
}

bool isMainThread() {
#ifdef __linux__
  return ::syscall(SYS_gettid) == ::getpid();
#else
  return false;
#endif
}

// Destroyed first when the main thread exits (see the file comment); a
// thread_local of another thread is destroyed when that thread ends, which
// is no exit.
struct ExitGuard {
  ~ExitGuard() {
    if (isMainThread())
      stopForExit();
  }
};

void installHandlers(State &s) {
  if (s.handlersInstalled)
    return;
  s.handlersInstalled = true;
  std::atexit(stopForExit);
  ::pthread_atfork([] { state().mutex.lock(); }, [] { state().mutex.unlock(); },
                   [] {
                     State &c = state();
                     c.mutex.unlock();
                     for (auto &[id, inChild] : c.running)
                       inChild();
                     c.running.clear();
                     c.parked = 0;
                   });
}

// A compile must not take a core from the calls it serves: a worker of the
// interpreter's call preempted by it stalls the whole call for a scheduler
// slice (measured on 2 cores).
void lowerThisThreadsPriority() {
#ifdef __linux__
  (void)::setpriority(PRIO_PROCESS, id_t(::syscall(SYS_gettid)), 10);
#endif
}

} // namespace

void runInBackground(std::function<void()> task, std::function<void()> inForkedChild) {
  static thread_local ExitGuard guard;
  (void)&guard; // made on first use: this thread now stops tasks when it exits the process
  State &s = state();
  uint64_t id;
  {
    std::lock_guard lock(s.mutex);
    installHandlers(s);
    id = s.nextId++;
    s.running.emplace(id, std::move(inForkedChild));
  }
  auto body = [id, task = std::move(task)]() mutable {
    lowerThisThreadsPriority();
    backgroundCheckpoint();
    task();
    task = nullptr; // what it holds (a dropped layer's code) goes now, before exit may go on
    State &st = state();
    std::lock_guard lock(st.mutex);
    st.running.erase(id);
    st.changed.notify_all();
  };
  try {
    std::thread(body).detach(); // a copy: `body` stays usable below
  } catch (const std::system_error &) {
    body(); // no thread to be had: compile here, as an untiered compile would
  }
}

void backgroundCheckpoint() {
  State &s = state();
  std::unique_lock lock(s.mutex);
  if (!s.exiting)
    return;
  ++s.parked;
  s.changed.notify_all();
  for (;;) // parked for good: the process is ending
    s.changed.wait(lock);
}

void publishBackgroundResult(const std::function<void()> &update) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  update();
  s.changed.notify_all();
}

void waitForBackgroundResult(const std::function<bool()> &done) {
  State &s = state();
  std::unique_lock lock(s.mutex);
  s.changed.wait(lock, done);
}

size_t backgroundTasksRunning() {
  State &s = state();
  std::lock_guard lock(s.mutex);
  return s.running.size();
}

} // namespace hsnn::detail
