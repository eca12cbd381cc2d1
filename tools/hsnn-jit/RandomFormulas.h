//===- tools/hsnn-jit/RandomFormulas.h - Formulas a search would make -*- C++ -*-===//
#pragma once

#include <fmt/format.h>
#include <random>
#include <string>
#include <vector>

namespace hsnn::cli {

// Numbers are written into the formulas (not constants), so that every
// formula is a different tape, as in a search.
inline std::string number(std::mt19937_64 &rng) {
  std::uniform_real_distribution<double> pick(0.1, 2.0);
  return fmt::format("{:.3f}", pick(rng));
}

// `calls` math calls cycling through sin, cos, exp, log; none: a*num + b*num*num.
inline std::string mathCallFormula(int calls, std::mt19937_64 &rng) {
  if (calls == 0)
    return fmt::format("{}*num + {}*num*num", number(rng), number(rng));
  static const char *const kFns[] = {"sin", "cos", "exp", "log"};
  std::string f;
  for (int k = 0; k < calls; ++k)
    f += fmt::format("{}{}(num*{})", k ? " + " : "", kFns[k % 4], number(rng));
  return f;
}

// A random tree of `nodes` nodes: + - * / and exp, log, sin, cos (with
// `math`), leaves one of `variables` or a number. Trees of the field's
// generators.
inline std::string randomTree(size_t nodes, bool math, std::mt19937_64 &rng,
                              const std::vector<std::string> &variables = {"num"}) {
  if (nodes <= 1)
    return std::uniform_int_distribution<int>(0, 2)(rng)
               ? variables[std::uniform_int_distribution<size_t>(0, variables.size() - 1)(rng)]
               : number(rng);
  static const char *const kUnary[] = {"exp", "log", "sin", "cos"};
  if (math && nodes >= 2 && std::uniform_int_distribution<int>(0, 3)(rng) == 0)
    return fmt::format("{}({})", kUnary[std::uniform_int_distribution<int>(0, 3)(rng)], randomTree(nodes - 1, math, rng, variables));
  if (nodes == 2)
    return fmt::format("-{}", randomTree(1, math, rng, variables));
  static const char *const kBinary[] = {"+", "-", "*", "/"};
  size_t left = std::uniform_int_distribution<size_t>(1, nodes - 2)(rng);
  return fmt::format("({} {} {})", randomTree(left, math, rng, variables), kBinary[std::uniform_int_distribution<int>(0, 3)(rng)],
                     randomTree(nodes - 1 - left, math, rng, variables));
}

} // namespace hsnn::cli
