//===- lib/Runtime/Warn.h - The runtime's warning channel -------*- C++ -*-===//
#pragma once

#include "hsnn/Error.h"

#include <string_view>

namespace hsnn::detail {
/// Sends a warning to the handler set with setWarningHandler.
void warn(std::string_view message);

/// Applies the fallback policy to a failed JIT compile: an Error in strict
/// mode, else a warning (the caller keeps the interpreter) and success.
Error jitFailed(const Error &failure);
} // namespace hsnn::detail
