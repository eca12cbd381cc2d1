//===- lib/Runtime/RunGuard.h - Thread budget and no-throw kernel calls -*- C++ -*-===//
#pragma once

#include "hsnn/Error.h"

#include <fmt/format.h>
#include <limits>
#include <memory>
#include <tbb/task_arena.h>

namespace hsnn {

/// Runs kernels inside the layer's thread budget and turns any exception
/// (allocation failure in TBB or scratch space) into an Error, so nothing
/// escapes the public API.
class RunGuard {
public:
  /// The most threads a layer, loss or the runtime will use: more only
  /// costs memory (TBB reserves per thread), and absurd values (a typo in
  /// HSNN_NUM_THREADS) would exhaust it.
  static constexpr unsigned kMaxThreads = 1024;

  Error configure(unsigned threads) {
    if (threads > kMaxThreads)
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("threads = {} is not a sensible thread count (at most {})", threads, kMaxThreads));
    if (threads)
      arena_ = std::make_shared<tbb::task_arena>(int(threads));
    return Error::success();
  }

  /// `f` returns an Error (or an Expected); an exception becomes an Error too.
  template <class F> auto run(F &&f) const -> decltype(f()) {
    try {
      if (arena_)
        return arena_->execute(f);
      return f();
    } catch (const std::exception &e) {
      return Error(ErrorCode::Internal, fmt::format("kernel failed: {}", e.what()));
    }
  }

private:
  std::shared_ptr<tbb::task_arena> arena_;
};

} // namespace hsnn
