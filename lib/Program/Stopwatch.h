//===- lib/Program/Stopwatch.h - Elapsed milliseconds for compile statistics -*- C++ -*-===//
#pragma once

#include <chrono>

namespace hsnn::detail {

using Clock = std::chrono::steady_clock;

/// Milliseconds since `t` on the steady clock.
inline double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

} // namespace hsnn::detail
