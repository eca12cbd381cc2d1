//===- lib/Runtime/Warn.h - The runtime's warning channel -------*- C++ -*-===//
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hsnn::detail {
/// Sends a warning to the handler set with setWarningHandler.
void warn(std::string_view message);

/// The warnings about HSNN_* values that could not be read (given once,
/// when the runtime first read the environment).
std::vector<std::string> environmentWarnings();

} // namespace hsnn::detail
