//===- lib/Runtime/Warn.h - The runtime's warning channel -------*- C++ -*-===//
#pragma once

#include <string_view>

namespace hsnn::detail {
/// Sends a warning to the handler set with setWarningHandler.
void warn(std::string_view message);
} // namespace hsnn::detail
