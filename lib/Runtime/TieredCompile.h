//===- lib/Runtime/TieredCompile.h - The interpreter first, the JIT when it pays -*- C++ -*-===//
//
// Tiered compilation (LayerOptions::tiered): a layer answers from the
// interpreter at once while the host JIT's kernels compile on a background
// thread, started by a cost model (performance guide, "Tiered
// compilation"); LayerState adopts the JIT's engine at its first call after
// it is ready. LayerState::startTiered is in TieredCompile.cpp.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "LayerState.h"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <unistd.h>

namespace hsnn::detail {

// The JIT's engine compiling on a background thread (tiered compilation).
// The task holds it until done, so a layer dropped meanwhile costs nothing
// after: the task's result (the engine, its loaded code) goes with the
// task. Written by the task before `ready` is set; read after it is seen set.
//
// The compile starts when it pays (the cost model, performance guide
// "Tiered compilation"): once the time the JIT would have saved on the
// interpreter's calls so far (the layer's and its copies') reaches what the
// compile is estimated to take (a layer of new formulas scored once never
// compiles), at once where that estimate is below kStartAtOnceMs, or when
// a caller waits for it.
struct LayerState::PendingTier {
  std::atomic<bool> ready{false};
  std::shared_ptr<const Engine> engine; ///< Null: the JIT failed (warned), the interpreter stays.
  Error error;
  CompileInfo info;

  double estimateMs = 0;
  /// The share of the interpreter's time the JIT's code would save.
  double savedShare = 1;
  std::atomic<int64_t> interpreterUs{0};
  std::atomic<bool> started{false};
  std::once_flag once;
  std::function<void(const std::shared_ptr<PendingTier> &)> launch; ///< Cleared once started.
  pid_t owner = ::getpid();

  void start(const std::shared_ptr<PendingTier> &self) {
    std::call_once(once, [&] {
      started.store(true, std::memory_order_release);
      if (::getpid() != owner) { // a forked child: no compile thread of its own
        error = Error(ErrorCode::Unsupported,
                      "this process was forked from the one that compiled this layer before its JIT compile started; "
                      "the interpreter runs");
        ready.store(true, std::memory_order_release);
      } else {
        launch(self);
      }
      launch = nullptr;
    });
  }
  bool waiting() const { return !started.load(std::memory_order_acquire); }
  /// The interpreter ran for `ms` on the layer: the compile starts once it pays.
  void interpreted(const std::shared_ptr<PendingTier> &self, double ms) {
    int64_t us = int64_t(ms * 1000);
    if (double(interpreterUs.fetch_add(us, std::memory_order_relaxed) + us) * savedShare >= estimateMs * 1000)
      start(self);
  }
};

} // namespace hsnn::detail
