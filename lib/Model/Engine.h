//===- lib/Model/Engine.h - One interface for every way of running a model -*- C++ -*-===//
//
// An engine owns its whole path for one compiled model: cache key, code
// generation, loading and launching. The interpreter, the host JIT
// (lib/CPU) and the CUDA engine (lib/CUDA) implement it; ActivationLayer
// and Loss are facades over it plus the fallback policy. Engines are
// immutable once built except for what they build lazily (fused kernels),
// which they guard themselves, so one engine serves many threads and many
// copies of a layer.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CompiledModel.h"

#include "hsnn/Error.h"
#include "hsnn/Layer.h"

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

namespace hsnn::detail {

/// One consistent set of constant values as an engine reads them. Never
/// changed after it is made: setConstant makes a new set, and a run holds
/// the set it started with until it returns.
struct ParamSet {
  virtual ~ParamSet() = default;
  std::vector<double> values;
};

/// Arrays of numNodes() * batch elements in the model's dtype and layout.
/// `onDevice`: device pointers of the engine's GPU; otherwise host memory.
struct ActivationArgs {
  const void *z = nullptr, *err = nullptr;
  void *out0 = nullptr, *out1 = nullptr;
  size_t batch = 0;
  bool onDevice = false;
};

/// Arrays of n elements; `scale` multiplies gradients (1/n for a mean).
struct LossArgs {
  const void *yPred = nullptr, *yTrue = nullptr;
  void *out = nullptr;
  size_t n = 0;
  double scale = 1;
  bool onDevice = false;
  /// On a device, a summing kind may leave its result there instead:
  /// value[0] = T(sum / divisor), queued without waiting (GPU engines only).
  void *value = nullptr;
  double divisor = 1;
};

/// The fallback policy for kernels an engine builds after compile()
/// returned: given the failure, an Error (strict mode) or success after a
/// warning, in which case the engine runs that kind on the interpreter.
using LazyFailurePolicy = std::function<Error(const Error &)>;

class Engine {
public:
  explicit Engine(std::shared_ptr<const CompiledModel> model) : model_(std::move(model)) {}
  virtual ~Engine() = default;
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;

  virtual Method method() const = 0;
  /// The device its code runs on; -1 for CPU engines.
  virtual int gpuId() const { return -1; }
  const CompiledModel &model() const { return *model_; }

  /// The constants as this engine reads them (also a device copy on a GPU).
  virtual Expected<std::shared_ptr<const ParamSet>> makeParams(std::vector<double> values) const;
  virtual Error runActivation(KernelKind kind, const ActivationArgs &args, const ParamSet &params) const = 0;
  /// The sum of the losses, in double, for summing kinds; 0 otherwise.
  virtual Expected<double> runLoss(KernelKind kind, const LossArgs &args, const ParamSet &params) const = 0;
  /// The same code on another GPU; an error for CPU engines.
  virtual Expected<std::shared_ptr<const Engine>> moveTo(int device, CompileInfo *info) const;

protected:
  std::shared_ptr<const CompiledModel> model_;
};

/// The block interpreter: always available, the fallback and the oracle.
std::shared_ptr<const Engine> makeInterpreterEngine(std::shared_ptr<const CompiledModel> model);

} // namespace hsnn::detail
