//===- tools/hsnn-jit/main.cpp - The hsnn command-line tool ---------------===//
#include "Commands.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <new>
#include <fmt/format.h>
#include <vector>

#include "hsnn/Version.h"


namespace hsnn::cli {

int usageError(std::string_view command, std::string_view message, bool json) {
  if (json)
    return reportError(command, message, BadUsage, true);
  fmt::print(stderr, "hsnn-jit{}{}: error: {}\nTry 'hsnn-jit{}{} --help'.\n", command.empty() ? "" : " ", command,
             message, command.empty() ? "" : " ", command);
  return BadUsage;
}

int reportError(std::string_view command, std::string_view message, int exitCode, bool json) {
  if (json)
    fmt::print("{{\"error\": {{\"command\": {}, \"message\": {}, \"exit_code\": {}}}}}\n", jsonQuote(command),
               jsonQuote(message), exitCode);
  else
    fmt::print(stderr, "hsnn-jit{}{}: error: {}\n", command.empty() ? "" : " ", command, message);
  return exitCode;
}

bool wantsJson(std::span<const std::string_view> args) {
  return std::find(args.begin(), args.end(), "--json") != args.end();
}

namespace {
// Length of the well-formed UTF-8 sequence at s[i], or 0 (RFC 3629: no
// overlong forms, no surrogates, nothing past U+10FFFF).
size_t utf8Length(std::string_view s, size_t i) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = at(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size())
    return 0;
  uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (size_t k = 1; k < n; ++k) {
    if ((at(i + k) & 0xC0) != 0x80)
      return 0;
    cp = cp << 6 | (at(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}
} // namespace

std::string jsonQuote(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    char c = s[i];
    size_t n = utf8Length(s, i);
    if (n == 0) { // a byte that is not UTF-8 (a file name can hold any): U+FFFD, so the JSON stays valid
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (n == 1 && (c == '"' || c == '\\'))
      out += '\\';
    if (n == 1 && static_cast<unsigned char>(c) < 0x20)
      out += fmt::format("\\u{:04x}", int(c));
    else
      out.append(s.substr(i, n));
    i += n;
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

namespace {
int dispatch(int argc, char **argv) {
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
} // namespace

// The last line of defence: every command reports its own errors, but no
// input may end the tool with an uncaught exception (an abort and a core).
int main(int argc, char **argv) {
  using namespace hsnn::cli;
  bool json = false;
  try {
    std::vector<std::string_view> args(argv + 1, argv + argc);
    json = wantsJson(args);
    return dispatch(argc, argv);
  } catch (const std::bad_alloc &) {
    return reportError("", "out of memory", BadInput, json);
  } catch (const std::exception &e) {
    return reportError("", fmt::format("internal error: {}", e.what()), BadInput, json);
  } catch (...) {
    return reportError("", "internal error: an unknown exception", BadInput, json);
  }
}
