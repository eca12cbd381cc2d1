//===- lib/Runtime/PopulationImpl.h - A population's prepared formulas -*- C++ -*-===//
//
// What Population.cpp (preparing, derivatives, losses), PopulationArrays.cpp
// (trees given as arrays) and PopulationScore.cpp (the tiles) share.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Population.h"

#include "CodeGen/HostJIT.h"
#include "CodeGen/KernelSpec.h"
#include "Program/BlockCode.h"
#include "Program/DeviceCode.h"
#include "Program/Launch.h"

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace hsnn {
namespace detail {

constexpr size_t kNotACopy = size_t(-1);

struct Member {
  /// A member written like an earlier one (a search's populations repeat
  /// their parents: elites, tournament winners) is prepared once: this is
  /// that one's index, and the member its copy.
  size_t sameAs = kNotACopy;
  bool valid = false;
  std::optional<Diagnostic> error;
  Formula formula;
  std::vector<double> constants; ///< Initial values, in formula.constants' order.
  BlockCode value;          ///< Outputs: the formula.
  BlockCode constantGrad;   ///< Outputs: the formula, then d/dc for each constant (lazy).
  BlockCode variableGrad;   ///< Outputs: d/dx for each variable (lazy).
};

// A loss's bytecode: outputs the loss, then its derivative in y_pred.
struct LossCode {
  BlockCode code;
  std::vector<double> params;
  /// The loss alone, and its sum compiled by the host JIT (a LossSum kernel,
  /// once per loss and dtype: a search's loss is the same every generation),
  /// which a fitness without weights calls once a block for the loss and its
  /// sum; null where there is no JIT.
  Program sumTape;
  std::once_flag compiled[2];
  void *sum[2] = {nullptr, nullptr};
  std::shared_ptr<KernelLibrary> library[2];

  /// The compiled sum, made at its first call (null where there is no JIT).
  template <class T> LossFn<T> sumKernel();
};

} // namespace detail

struct Population::Impl {
  using Member = detail::Member;
  using LossCode = detail::LossCode;
  PopulationOptions options;
  std::unique_ptr<ExprContext> ctx = std::make_unique<ExprContext>(); ///< Losses'
  std::vector<Member> members;
  /// Members are prepared (and differentiated) in chunks, in parallel, each
  /// chunk in a context of its own: chunk k is members [chunkStart[k],
  /// chunkStart[k+1]) in contexts[k].
  std::vector<size_t> chunkStart;
  std::vector<std::unique_ptr<ExprContext>> contexts;
  std::vector<Diagnostic> errors;
  std::vector<size_t> offsets{0}; ///< Constants of member i at [offsets[i], offsets[i+1]).

  std::mutex lazy; ///< Derivatives and losses, made at their first use.
  bool haveConstantGrads = false, haveVariableGrads = false;
  std::map<std::pair<std::string, std::map<std::string, double>>, std::shared_ptr<LossCode>> losses;

  void fail(size_t i, Diagnostic d) {
    d.node = int(i);
    members[i].error = std::move(d);
    members[i].valid = false;
  }
  /// fn(context, i) for every member but copies, the chunks in parallel;
  /// then the copies take their original's result.
  template <class Fn> void forMembers(Fn &&fn) {
    detail::forBlocks(contexts.size(), 1 << 16, [&](size_t k) {
      for (size_t i = chunkStart[k]; i < chunkStart[k + 1]; ++i)
        if (members[i].sameAs == detail::kNotACopy)
          fn(*contexts[k], i);
    });
    for (size_t i = 0; i < members.size(); ++i)
      if (size_t j = members[i].sameAs; j != detail::kNotACopy) {
        members[i] = members[j];
        members[i].sameAs = j;
        if (members[i].error)
          members[i].error->node = int(i);
      }
  }
  /// Marks members whose key (their text, or their arrays) an earlier one has.
  template <class Key> void markCopies(size_t n, Key &&key) {
    std::unordered_map<std::string, size_t> first;
    first.reserve(n);
    for (size_t i = 0; i < n; ++i)
      if (auto [it, fresh] = first.emplace(key(i), i); !fresh)
        members[i].sameAs = it->second;
  }
  // A parsed formula's constants, checked against what was given.
  void bind(size_t i, const std::map<std::string, double> &given);
  Expected<std::shared_ptr<LossCode>> loss(const PopulationLoss &l);
  void deriveConstants();
  void deriveVariables();
  /// Each valid member's `code`, lowered from roots(context, formula), made
  /// once (`made`), at the first call that needs it.
  template <class Roots> void derive(bool &made, detail::BlockCode Member::*code, Roots &&roots);
};

namespace detail {
/// A population for `n` members, its chunks laid out (Impl::forMembers).
std::shared_ptr<Population::Impl> makePopulation(const PopulationOptions &options, size_t n);
/// Gathers the members' errors and constants once they are prepared.
void finishPopulation(Population::Impl &impl, std::vector<double> &constants);
/// Why the options cannot make a population (variable names, method), or
/// success.
Error checkOptions(const PopulationOptions &o);

/// The members' values as the GPU interpreter runs them, with `constants`
/// (allConstants() order); an error names a formula the GPU cannot hold.
Expected<DeviceCode> deviceCode(const Population::Impl &impl, const double *constants);
/// Population::evaluate and the loss sums of fitness (sums[i], not yet
/// divided) on the GPU of the options (PopulationGpu.cpp); X is checked.
template <class T>
Error gpuEvaluate(const Population::Impl &impl, const std::vector<double> &constants, const PopulationData<T> &d,
                  std::span<T> out);
template <class T>
Error gpuLossSums(const Population::Impl &impl, const std::vector<double> &constants, const PopulationData<T> &d,
                  const LossCode &loss, double *sums);
} // namespace detail

} // namespace hsnn
