//===- lib/Runtime/PopulationGpu.cpp - A population on the GPU ------------===//
//
// Method::Cuda: the members' value code flattened for the GPU interpreter
// (Program/DeviceCode.h) and run there in one launch (CUDA/GpuPopulation.h).
// Members that are not valid are in the code too, as a NaN, so formula i is
// launch row i.
//
//===----------------------------------------------------------------------===//
#include "PopulationImpl.h"

#include "LayerState.h"

#include "CUDA/GpuPopulation.h"

#include <fmt/format.h>

namespace hsnn {

using namespace detail;

namespace detail {

Expected<DeviceCode> deviceCode(const Population::Impl &impl, const double *constants) {
  DeviceCode code;
  for (size_t i = 0; i < impl.members.size(); ++i) {
    const Member &m = impl.members[i];
    if (Error e = code.append(m.valid ? &m.value : nullptr, constants + impl.offsets[i]))
      return Error(e.code(), fmt::format("formula {}: {}", i, e.message()));
  }
  return code;
}

namespace {

template <class T> constexpr DType dtypeOf = std::is_same_v<T, float> ? DType::F32 : DType::F64;

template <class T> GpuPopulationData dataOf(const Population::Impl &impl, const PopulationData<T> &d) {
  bool rowMajor = d.layout == DataLayout::RowMajor;
  size_t v = impl.options.variables.size();
  return {.x = d.x.data(),
          .xElements = d.x.size(),
          .rows = d.rows,
          .rowStride = int64_t(rowMajor ? v : 1),
          .varStride = int64_t(rowMajor ? 1 : d.rows),
          .y = d.y.empty() ? nullptr : d.y.data(),
          .weights = d.weights.empty() ? nullptr : d.weights.data()};
}

GpuBuildOptions buildOptions() { return {.optLevel = 3, .fastMath = false, .cache = cacheConfig()}; }

} // namespace

template <class T>
Error gpuEvaluate(const Population::Impl &impl, const std::vector<double> &constants, const PopulationData<T> &d,
                  std::span<T> out) {
  if (impl.members.empty() || d.rows == 0)
    return Error::success();
  auto gpu = GpuPopulation::get(impl.options.gpuId, dtypeOf<T>, nullptr, buildOptions());
  if (!gpu)
    return gpu.takeError();
  auto code = deviceCode(impl, constants.data());
  if (!code)
    return code.takeError();
  return (*gpu)->evaluate(*code, dataOf(impl, d), out.data());
}

template <class T>
Error gpuLossSums(const Population::Impl &impl, const std::vector<double> &constants, const PopulationData<T> &d,
                  const LossCode &loss, double *sums) {
  if (impl.members.empty())
    return Error::success();
  if (d.rows == 0) {
    std::fill_n(sums, impl.members.size(), 0.0);
    return Error::success();
  }
  auto gpu = GpuPopulation::get(impl.options.gpuId, dtypeOf<T>, &loss.sumTape, buildOptions());
  if (!gpu)
    return gpu.takeError();
  auto code = deviceCode(impl, constants.data());
  if (!code)
    return code.takeError();
  return (*gpu)->lossSums(*code, dataOf(impl, d), loss.params, sums);
}

template Error gpuEvaluate<float>(const Population::Impl &, const std::vector<double> &, const PopulationData<float> &,
                                  std::span<float>);
template Error gpuEvaluate<double>(const Population::Impl &, const std::vector<double> &,
                                   const PopulationData<double> &, std::span<double>);
template Error gpuLossSums<float>(const Population::Impl &, const std::vector<double> &, const PopulationData<float> &,
                                  const LossCode &, double *);
template Error gpuLossSums<double>(const Population::Impl &, const std::vector<double> &,
                                   const PopulationData<double> &, const LossCode &, double *);

} // namespace detail
} // namespace hsnn
