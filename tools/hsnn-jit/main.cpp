//===- tools/hsnn-jit/main.cpp - The hsnn command-line tool ---------------===//
#include "Commands.h"

#include <cstdio>
#include <fmt/format.h>
#include <vector>

#include "hsnn/Version.h"


namespace hsnn::cli {

int usageError(std::string_view command, std::string_view message) {
  fmt::print(stderr, "hsnn-jit{}{}: error: {}\nTry 'hsnn-jit{}{} --help'.\n", command.empty() ? "" : " ", command,
             message, command.empty() ? "" : " ", command);
  return BadUsage;
}

std::string jsonQuote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", int(c));
      continue;
    }
    out += c;
  }
  return out + "\"";
}

} // namespace hsnn::cli

namespace {

constexpr const char *kUsage = R"(usage: hsnn-jit <command> [options]

Turns formulas into numeric kernels.

commands:
  parse FORMULA     print the canonical form and the constants it needs
  diff FORMULA      print the simplified derivative
  eval FORMULA      evaluate with the interpreter at a point
  bench             time the kernels next to a memory-bandwidth reference
  cache             list, size or clear the on-disk kernel cache
  info              what the runtime detected (CPU, JIT, GPUs, cache)
  compile SPEC      ahead-of-time: an object and a C header from a JSON spec

options:
  -h, --help        show help (also after a command)
  --version         print the version

Formulas use SymPy syntax: activations in num (or x, z), losses in y_pred
and y_true. Exit codes: 0 success, 1 bad input, 2 bad usage.
)";

} // namespace

int main(int argc, char **argv) {
  using namespace hsnn::cli;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty())
    return usageError("", "no command given");
  std::string_view cmd = args[0];
  std::span<const std::string_view> rest(args.data() + 1, args.size() - 1);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    fmt::print("{}", kUsage);
    return Ok;
  }
  if (cmd == "--version") {
    fmt::print("hsnn-jit {}\n", HSNN_VERSION);
    return Ok;
  }
  if (cmd == "parse")
    return runParse(rest);
  if (cmd == "diff")
    return runDiff(rest);
  if (cmd == "eval")
    return runEval(rest);
  if (cmd == "bench")
    return runBench(rest);
  if (cmd == "cache")
    return runCache(rest);
  if (cmd == "info")
    return runInfo(rest);
  if (cmd == "compile")
    return runCompile(rest);
  return usageError("", fmt::format("unknown command '{}'", cmd));
}
