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

/// Prints "hsnn-jit: error: <message>" and the hint to use --help (as JSON
/// with `json`); returns BadUsage.
int usageError(std::string_view command, std::string_view message, bool json = false);

/// Reports a command's failure and returns `exitCode`: "hsnn-jit COMMAND:
/// error: MESSAGE" on stderr, or with --json one object on stdout,
/// {"error": {"command": ..., "message": ..., "exit_code": N}}.
int reportError(std::string_view command, std::string_view message, int exitCode, bool json);

/// Whether --json is among the arguments (looked at first, so that even a
/// usage error comes out as JSON).
bool wantsJson(std::span<const std::string_view> args);

/// A JSON string literal for s (quotes, backslashes and controls escaped).
std::string jsonQuote(std::string_view s);

} // namespace hsnn::cli
