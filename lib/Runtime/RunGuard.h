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
  Error configure(unsigned threads) {
    if (threads > 4096)
      return Error(ErrorCode::InvalidArgument, fmt::format("threads = {} is not a sensible thread count", threads));
    if (threads)
      arena_ = std::make_shared<tbb::task_arena>(int(threads));
    return Error::success();
  }

  /// Rejects sizes whose element count overflows size_t.
  static Error checkSize(size_t rows, size_t cols) {
    if (cols && rows > std::numeric_limits<size_t>::max() / cols)
      return Error(ErrorCode::InvalidArgument, fmt::format("{} x {} elements overflow the address space", rows, cols));
    return Error::success();
  }

  template <class F> Error run(F &&f) const {
    try {
      if (arena_)
        arena_->execute(f);
      else
        f();
    } catch (const std::exception &e) {
      return Error(ErrorCode::Internal, fmt::format("kernel failed: {}", e.what()));
    }
    return Error::success();
  }

private:
  std::shared_ptr<tbb::task_arena> arena_;
};

} // namespace hsnn
