//===- hsnn/Environment.h - The environment variables hsnn reads -*- C++ -*-===//
//
// The variables are listed once, in hsnn/Environment.def; what each does is
// the configuration guide's table. Header-only, so every part of hsnn (the
// library, the code generator module, hsnn-jit) reads them the same way.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string_view>

namespace hsnn {

enum class EnvironmentVariable {
#define HSNN_ENVIRONMENT(Id, Name) Id,
#include "hsnn/Environment.def"
};

/// Every variable's name, in the order of Environment.def.
inline constexpr std::string_view kEnvironmentVariableNames[] = {
#define HSNN_ENVIRONMENT(Id, Name) Name,
#include "hsnn/Environment.def"
};

inline constexpr const char *environmentVariableName(EnvironmentVariable v) {
  return kEnvironmentVariableNames[size_t(v)].data();
}

/// The variable's value, or null when it is not set.
inline const char *environmentValue(EnvironmentVariable v) { return std::getenv(environmentVariableName(v)); }

} // namespace hsnn
