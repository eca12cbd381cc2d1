//===- test/fuzz/SnapshotFuzzer.cpp - libFuzzer target for model snapshots -===//
//
// A model snapshot is read from the disk cache (lib/Model/ModelSnapshot.cpp).
// The input edits a valid snapshot of a mixed layer: pairs of (position, xor
// byte), then a length to cut it to, so the fuzzer reaches deep into the
// format instead of failing at the magic. What reads back must run through
// the interpreter without a crash or sanitizer report.
//===----------------------------------------------------------------------===//
#include "Model/CompiledModel.h"
#include "Program/Interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

using namespace hsnn;
using namespace hsnn::detail;

namespace {

const ModelOptions kOptions{DType::F64, Layout::NodesMajor, false, false};

const std::vector<NodeSpec> &nodes() {
  static const std::vector<NodeSpec> n = {
      {"gelu", {}},
      {"sin(num)*alpha + beta", {{"alpha", 2}, {"beta", -0.5}}},
      {"Piecewise((num, num > 0), (slope*num, True))", {{"slope", 0.1}}},
      {"elu", {}},
      {"0.25", {}},
      {"tanh(num)", {{"unused", 3}}},
  };
  return n;
}

const std::vector<char> &validSnapshot() {
  static const std::vector<char> bytes = [] {
    std::vector<std::string> warnings;
    auto m = CompiledModel::activation(nodes(), kOptions, warnings);
    if (!m)
      std::abort();
    return (*m)->snapshot(warnings);
  }();
  return bytes;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<char> bytes = validSnapshot();
  size_t i = 0;
  for (; i + 3 <= size && data[i] != 0xff; i += 3) {
    size_t at = (size_t(data[i]) << 8 | data[i + 1]) % bytes.size();
    bytes[at] = char(bytes[at] ^ data[i + 2]);
  }
  if (i + 3 <= size) // 0xff: then a length to cut to
    bytes.resize(std::min(bytes.size(), size_t(data[i + 1]) << 8 | data[i + 2]));
  std::vector<std::string> warnings;
  auto m = CompiledModel::fromSnapshot(bytes, kOptions, nodes().size(), warnings);
  if (!m)
    return 0;
  std::vector<double> z = {-3, -0.5, 0, 0.5, 3, 1e300, -1e-300, std::nan("")};
  size_t constants = 0; // a tape reads its formula's constants only (checked on reading)
  for (const FormulaGroup &g : m->groups)
    constants = std::max(constants, g.formula.constants.size());
  std::vector<double> params(constants + 1, 0.5);
  const double *vars[3] = {z.data(), nullptr, nullptr};
  for (const FormulaGroup &g : m->groups)
    for (const Program &p : g.programs) {
      std::vector<std::vector<double>> out(p.outputs.size(), std::vector<double>(z.size()));
      std::vector<double *> outs;
      for (auto &o : out)
        outs.push_back(o.data());
      runBlock<double>(p, vars, params.data(), outs.data(), z.size());
    }
  return 0;
}
