//===- lib/CPU/OpKernels.cpp - The interpreter's op kernels, built ---------===//
#include "OpKernels.h"

#include "KernelBuild.h"

#include "CodeGen/KernelSpec.h"

#include <deque>
#include <fmt/format.h>
#include <mutex>

namespace hsnn::detail {

namespace {

// Per type, as the lock that guards it.
template <class T> std::vector<std::shared_ptr<KernelLibrary>> &libraries() {
  static auto *kept = new std::vector<std::shared_ptr<KernelLibrary>>(); // never destroyed: code outlives exit's users
  return *kept;
}

template <class T> constexpr DType dtypeOf = std::is_same_v<T, float> ? DType::F32 : DType::F64;

// The table's entries are KernelSpec.h's signatures.
static_assert(std::is_same_v<OpKernels<float>::Unary, ActivationFn<float>>);
static_assert(std::is_same_v<OpKernels<float>::Binary, LossFn<float>>);

template <class T>
Expected<std::unique_ptr<OpKernels<T>>> build(const CacheConfig &cache) {
  const char *suffix = dtypeOf<T> == DType::F32 ? "f32" : "f64";
  // Tapes the requests point into, kept with the kernels' process.
  static std::deque<Program> tapes;
  std::vector<KernelRequest> requests;
  struct Slot {
    Op op;
    OpOperands how;
    int power;
  };
  std::vector<Slot> slots;
  auto add = [&](Op op, OpOperands how, int power, std::string name) {
    tapes.push_back(opKernelTape(op, how, power));
    bool loss = how == OpOperands::Arrays && opInfo(op).arity == 2;
    requests.push_back({.symbol = fmt::format("hsnn_op_{}_{}", name, suffix),
                        .program = &tapes.back(),
                        .kind = loss ? KernelKind::LossElements : KernelKind::Forward,
                        .dtype = dtypeOf<T>});
    slots.push_back({op, how, power});
  };
  for (int o = 0; o < kNumOps; ++o) {
    Op op = Op(o);
    if (!hasOpKernel(op))
      continue;
    std::string name(opInfo(op).name);
    add(op, OpOperands::Arrays, 0, name);
    if (opInfo(op).arity == 2) {
      add(op, OpOperands::VectorScalar, 0, name + "_vs");
      add(op, OpOperands::ScalarVector, 0, name + "_sv");
    }
  }
  for (int k = -kMaxKernelPower; k <= kMaxKernelPower; ++k)
    if (k != 0)
      add(Op::Pow, OpOperands::Power, k, fmt::format("pow{}{}", k < 0 ? "m" : "", std::abs(k)));
  CompileInfo info;
  auto lib = buildKernels(requests, JITOptions{}, cache, [&] { return fmt::format("op kernels ({})", suffix); }, info,
                          CompileProgress(), /*linkedOnly=*/false);
  if (!lib)
    return lib.takeError();
  auto kernels = std::make_unique<OpKernels<T>>();
  libraries<T>().push_back(*lib); // loaded for the process's life
  for (size_t i = 0; i < requests.size(); ++i) {
    void *address = (*lib)->address(requests[i].symbol);
    if (!address)
      return Error(ErrorCode::Internal, fmt::format("op kernel '{}' was compiled but not found", requests[i].symbol));
    auto activation = reinterpret_cast<typename OpKernels<T>::Unary>(address);
    size_t op = size_t(slots[i].op);
    switch (slots[i].how) {
    case OpOperands::Power:
      kernels->power[size_t(slots[i].power + kMaxKernelPower)] = activation;
      break;
    case OpOperands::VectorScalar:
      kernels->vectorScalar[op] = activation;
      break;
    case OpOperands::ScalarVector:
      kernels->scalarVector[op] = activation;
      break;
    case OpOperands::Arrays:
      if (opInfo(slots[i].op).arity == 1)
        kernels->unary[op] = activation;
      else
        kernels->binary[op] = reinterpret_cast<typename OpKernels<T>::Binary>(address);
    }
  }
  return kernels;
}

} // namespace

template <class T>
Expected<const OpKernels<T> *> compiledOpKernels(const CacheConfig &cache) {
  // One build at a time; a failure is kept (it says why there is no JIT,
  // and a second try would fail the same way).
  static std::mutex mutex;
  static Error failure;
  std::lock_guard<std::mutex> lock(mutex);
  if (const OpKernels<T> *k = installedOpKernels<T>())
    return k;
  if (failure)
    return Error(failure.code(), failure.message());
  auto built = build<T>(cache);
  if (!built) {
    failure = built.takeError();
    return Error(failure.code(), failure.message());
  }
  installOpKernels<T>(built->release()); // kept for the process, as its code
  return installedOpKernels<T>();
}

template Expected<const OpKernels<float> *> compiledOpKernels<float>(const CacheConfig &);
template Expected<const OpKernels<double> *> compiledOpKernels<double>(const CacheConfig &);

} // namespace hsnn::detail
