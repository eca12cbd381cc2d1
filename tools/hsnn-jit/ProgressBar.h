//===- tools/hsnn-jit/ProgressBar.h - Progress on stderr ---------*- C++ -*-===//
//
// For work that may turn out long (AOT code generation of thousands of
// formulas): on a terminal a bar redrawn in place, shown only once the work
// has taken a second, so short runs print nothing; with --progress also on a
// pipe or file, one line per tenth, from the start (logs, tests).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <fmt/format.h>
#include <string>
#include <unistd.h>

namespace hsnn::cli {

class ProgressBar {
public:
  ProgressBar(std::string what, std::string unit, bool always)
      : what_(std::move(what)), unit_(std::move(unit)), tty_(::isatty(STDERR_FILENO) == 1), always_(always) {}
  ProgressBar(const ProgressBar &) = delete;
  ProgressBar &operator=(const ProgressBar &) = delete;
  ~ProgressBar() {
    if (drawn_ && tty_)
      std::fputc('\n', stderr);
  }

  void update(size_t done, size_t total) {
    if (total == 0)
      return;
    auto now = Clock::now();
    size_t percent = done * 100 / total;
    if (tty_) {
      // Redrawn at most every 100 ms, and at the end once it is visible.
      bool visible = always_ || now - start_ >= std::chrono::seconds(1);
      if (!visible || (done < total && drawn_ && now - last_ < std::chrono::milliseconds(100)))
        return;
      constexpr size_t kWidth = 30;
      size_t filled = done * kWidth / total;
      fmt::print(stderr, "\r{} [{}{}] {}/{} {} {:3}%", what_, std::string(filled, '#'), std::string(kWidth - filled, ' '),
                 done, total, unit_, percent);
      std::fflush(stderr);
      drawn_ = true;
      last_ = now;
    } else if (always_ && percent / 10 > lastTenth_) {
      lastTenth_ = percent / 10;
      fmt::print(stderr, "{}: {}% ({}/{} {})\n", what_, lastTenth_ * 10, done, total, unit_);
      drawn_ = true;
    }
  }

private:
  using Clock = std::chrono::steady_clock;
  std::string what_, unit_;
  bool tty_, always_, drawn_ = false;
  size_t lastTenth_ = 0;
  Clock::time_point start_ = Clock::now(), last_;
};

} // namespace hsnn::cli
