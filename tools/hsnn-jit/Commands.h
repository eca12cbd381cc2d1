//===- tools/hsnn-jit/Commands.h - Subcommand entry points ------*- C++ -*-===//
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace hsnn::cli {

/// Exit codes shared by every subcommand.
enum Exit { Ok = 0, BadInput = 1, BadUsage = 2 };

/// Each subcommand gets its own arguments (after the subcommand name).
int runParse(std::span<const std::string_view> args);
int runDiff(std::span<const std::string_view> args);
int runEval(std::span<const std::string_view> args);
int runBench(std::span<const std::string_view> args);
int runCache(std::span<const std::string_view> args);
int runInfo(std::span<const std::string_view> args);
int runCompile(std::span<const std::string_view> args);

/// Prints "hsnn-jit: error: <message>" and the hint to use --help.
int usageError(std::string_view command, std::string_view message);

/// A JSON string literal for s (quotes, backslashes and controls escaped).
std::string jsonQuote(std::string_view s);

} // namespace hsnn::cli
