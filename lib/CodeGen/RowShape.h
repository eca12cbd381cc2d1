//===- lib/CodeGen/RowShape.h - How a row kernel's loop is laid out -*- C++ -*-===//
//
// The choices of a batch-major row kernel (RowKernel.cpp) that depend on
// the machine and not on the formulas: how many blocks a pass of its loop
// runs side by side, and how far ahead it prefetches its inputs. Every
// shape gives the same bits; only the time differs, so the host JIT picks
// one by timing them on the host (RowCalibration.h) and ahead-of-time
// builds take a fixed one.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hsnn::detail {

struct RowShape {
  /// Full blocks a pass runs, their slots emitted side by side: 1, 2 or 4.
  unsigned blocksPerPass = 1;
  /// Bytes ahead of each block's input that the pass prefetches; 0: none.
  unsigned prefetchBytes = 4096;

  bool operator==(const RowShape &) const = default;
};

/// The shape measured best on machines of LLVM's CPU name `cpu`, without
/// timing anything: for ahead-of-time objects (`--cpu`) and where the host
/// cannot be measured. Zen (znver*): four blocks a pass, no prefetch (on a
/// Zen 4, 4 KiB ahead left W2's batch-major backward well behind its
/// nodes-major one, and no prefetch ahead of it); others: one block, 4 KiB
/// ahead (on an Intel Xeon VM four blocks made W1's forward much slower).
/// The DEVLOG has the runs.
inline RowShape fixedRowShape(std::string_view cpu) {
  return RowShape{.blocksPerPass = cpu.starts_with("znver") ? 4u : 1u,
                  .prefetchBytes = cpu.starts_with("znver") ? 0u : 4096u};
}

/// "4x4096" (blocks a pass x prefetch bytes), as the cache and
/// HSNN_ROW_SHAPE write it.
inline std::string to_string(const RowShape &shape) {
  return std::to_string(shape.blocksPerPass) + "x" + std::to_string(shape.prefetchBytes);
}

/// Reads to_string's form; nullopt for anything else (blocks 1, 2 or 4;
/// prefetch 0 to 65536, a multiple of 64).
inline std::optional<RowShape> parseRowShape(std::string_view text) {
  size_t x = text.find('x');
  if (x == std::string_view::npos)
    return std::nullopt;
  auto number = [](std::string_view s) -> std::optional<unsigned> {
    unsigned v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size())
      return std::nullopt;
    return v;
  };
  std::optional<unsigned> blocks = number(text.substr(0, x)), ahead = number(text.substr(x + 1));
  if (!blocks || !ahead || (*blocks != 1 && *blocks != 2 && *blocks != 4) || *ahead > 65536 || *ahead % 64)
    return std::nullopt;
  return RowShape{.blocksPerPass = *blocks, .prefetchBytes = *ahead};
}

} // namespace hsnn::detail
