//===- lib/Runtime/BackgroundCompile.h - Compiles beside the calls -*- C++ -*-===//
//
// Tiered compilation builds the JIT's code on detached threads while the
// interpreter serves calls. This is what makes such threads safe at the
// ends of a process: exit, fork and a layer dropped before its code is done.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <functional>

namespace hsnn::detail {

/// Runs `task` on a detached thread of lower priority (or on this thread
/// when no thread can be had). `inForkedChild` runs in the child of a fork()
/// made while the task was in flight, where its thread does not exist: it
/// must mark the task's result done (failed) without blocking. Exits from
/// the calling thread are guarded (guardExitsOfThisThread).
void runInBackground(std::function<void()> task, std::function<void()> inForkedChild);

/// Called by a background task between steps (before it loads the code
/// generator, after each kernel it builds). Once the process is exiting it
/// never returns: the task stays parked there, touching nothing that exit
/// tears down, and exit goes on without waiting for the rest of it.
void backgroundCheckpoint();

/// Applies `update` under the lock that waiters check their condition
/// under, and wakes them (a task publishing its result).
void publishBackgroundResult(const std::function<void()> &update);
/// Blocks until `done()` (read under that lock) is true.
void waitForBackgroundResult(const std::function<bool()> &done);

/// Tasks not yet finished (parked ones included): for tests.
size_t backgroundTasksRunning();

} // namespace hsnn::detail
