//===- lib/CUDA/GpuPopulation.cpp - Populations run on an NVIDIA GPU ------===//
#include "GpuPopulation.h"

#include "GpuCode.h"

#include <fmt/format.h>
#include <map>
#include <mutex>
#include <tuple>

namespace hsnn::detail {
namespace {

// Kernel indices in a module: the interpreter (values, or with a loss its
// partial sums), then with a loss the partials' adder. A search scores
// (one module a loss) and seldom asks for values (one more): neither
// carries the other's kernel, which would double its build.
constexpr size_t kRun = 0, kAdd = 1;

class GpuPopulationCode final : public GpuPopulation, GpuCode {
public:
  Error init(int device, DType dtype, const Program *loss, const GpuBuildOptions &options) {
    GpuModuleSpec spec;
    std::vector<std::string> names = {loss ? "hsnn_population_scores" : "hsnn_population_values"};
    if (loss)
      loss_ = *loss;
    spec.populations.push_back({names[0], dtype, loss ? &loss_ : nullptr});
    if (loss) {
      spec.sumKernel = "hsnn_population_add";
      names.push_back(spec.sumKernel);
    }
    description_ = fmt::format("population interpreter ({}{}), cuda {}", to_string(dtype), loss ? ", with a loss" : "",
                               device);
    CompileInfo info;
    return GpuCode::init(device, dtype, options, std::move(spec), std::move(names), &info);
  }

  Error evaluate(const DeviceCode &code, const GpuPopulationData &data, void *out) const override {
    ContextRestorer restore;
    DeviceScratch scratch;
    size_t bytes = code.formulas() * data.rows * elementSize(dtype_);
    if (!spec_.sumKernel.empty())
      return Error(ErrorCode::Internal, "this population interpreter was made for scores");
    auto d = upload(scratch, code, data, kRun);
    if (!d)
      return d.takeError();
    auto values = scratch.get(device(), kOut, bytes);
    if (!values)
      return values.takeError();
    if (Error e = launch(false, code, data, *d, *values))
      return e;
    return copyToHost(device(), out, *values, bytes);
  }

  Error lossSums(const DeviceCode &code, const GpuPopulationData &data, const std::vector<double> &lossParams,
                 double *sums) const override {
    if (spec_.sumKernel.empty())
      return Error(ErrorCode::Internal, "this population interpreter was made without a loss");
    ContextRestorer restore;
    DeviceScratch scratch;
    size_t n = code.formulas();
    auto d = upload(scratch, code, data, kRun);
    if (!d)
      return d.takeError();
    auto params = uploadTo(scratch, kLossParams, lossParams.data(), lossParams.size() * sizeof(double));
    auto partials = scratch.get(device(), kOut, n * size_t(d->shape.warps) * sizeof(double));
    auto totals = scratch.get(device(), kSums, n * sizeof(double));
    for (auto *r : {&params, &partials, &totals})
      if (!*r)
        return r->takeError();
    d->lossParams = *params;
    if (Error e = launch(true, code, data, *d, *partials))
      return e;
    int64_t warps = d->shape.warps;
    void *args[] = {&*partials, &warps, &*totals};
    if (Error e = module_->launch(kAdd, args, unsigned(n), 1, sumKernelThreads(uint64_t(warps)), {}))
      return e;
    return copyToHost(device(), sums, *totals, n * sizeof(double));
  }

private:
  // A call's device memory (DeviceScratch slots, freed when it returns: a
  // population's values can be large, and a search calls once a
  // generation): the code's five arrays, then the data and results.
  enum Slot : size_t {
    kSteps, kStepStart, kScalars, kScalarStart, kOutputs, // the code
    kX, kY, kWeights, kLossParams, kOut, kSums
  };

  // One grid shape for every chunk of formulas (so each formula's
  // partials are as many): x fills the device, at most a thread per row.
  struct Shape {
    unsigned gridX = 1, block = 32;
    int64_t warps = 1;
  };
  struct Uploaded {
    CUdeviceptr code[5] = {}, x = 0, y = 0, weights = 0, lossParams = 0;
    Shape shape;
  };

  Expected<CUdeviceptr> uploadTo(DeviceScratch &scratch, Slot slot, const void *host, size_t bytes) const {
    auto p = scratch.get(device(), slot, std::max<size_t>(bytes, 8));
    if (!p)
      return p;
    if (bytes)
      if (Error e = copyToDevice(device(), *p, host, bytes))
        return e;
    return p;
  }

  Expected<Uploaded> upload(DeviceScratch &scratch, const DeviceCode &code, const GpuPopulationData &data,
                            size_t kernel) const {
    Uploaded u;
    auto bytesOf = [](const auto &v) { return v.size() * sizeof(v[0]); };
    const void *arrays[5] = {code.steps.data(), code.stepStart.data(), code.scalars.data(), code.scalarStart.data(),
                             code.outputs.data()};
    size_t sizes[5] = {bytesOf(code.steps), bytesOf(code.stepStart), bytesOf(code.scalars), bytesOf(code.scalarStart),
                       bytesOf(code.outputs)};
    for (size_t j = 0; j < 5; ++j) {
      auto p = uploadTo(scratch, Slot(kSteps + j), arrays[j], sizes[j]);
      if (!p)
        return p.takeError();
      u.code[j] = *p;
    }
    size_t es = elementSize(dtype_);
    auto x = uploadTo(scratch, kX, data.x, data.xElements * es);
    if (!x)
      return x.takeError();
    u.x = *x;
    if (data.y) {
      auto y = uploadTo(scratch, kY, data.y, data.rows * es);
      if (!y)
        return y.takeError();
      u.y = *y;
    }
    if (data.weights) {
      auto w = uploadTo(scratch, kWeights, data.weights, data.rows * es);
      if (!w)
        return w.takeError();
      u.weights = *w;
    }
    uint64_t block = module_->blockSize(kernel), full = module_->fullGrid(kernel);
    uint64_t chunk = std::clamp<uint64_t>(code.formulas(), 1, kMaxGridY);
    uint64_t blocksForRows = std::max<uint64_t>(1, (data.rows + block - 1) / block);
    uint64_t gx = std::clamp<uint64_t>((full + chunk - 1) / chunk, 1, blocksForRows);
    u.shape = {unsigned(gx), unsigned(block), int64_t(gx * block / kWarp)};
    return u;
  }

  // The interpreter over every formula, in chunks of kMaxGridY (grid y);
  // `out` receives the values, or with `scores` the partial sums.
  Error launch(bool scores, const DeviceCode &code, const GpuPopulationData &data, const Uploaded &u,
               CUdeviceptr out) const {
    const Shape &shape = u.shape;
    CUdeviceptr values = scores ? 0 : out, sums = scores ? out : 0;
    CUdeviceptr x = u.x, steps = u.code[0], stepStart = u.code[1], scalars = u.code[2], scalarStart = u.code[3],
                outputs = u.code[4], y = u.y, w = u.weights, lossParams = u.lossParams;
    int64_t rowStride = data.rowStride, varStride = data.varStride, rows = int64_t(data.rows), first = 0;
    void *args[] = {&x,       &rowStride, &varStride, &steps, &stepStart, &scalars, &scalarStart, &outputs,
                    &rows,    &first,     &values,    &y,     &w,         &lossParams, &sums};
    uint64_t n = code.formulas();
    for (uint64_t f = 0; f < n; f += kMaxGridY) {
      first = int64_t(f);
      if (Error e = module_->launch(kRun, args, shape.gridX, unsigned(std::min<uint64_t>(kMaxGridY, n - f)),
                                    shape.block, {}))
        return e;
    }
    return Error::success();
  }

  Program loss_;
};

} // namespace

Expected<std::shared_ptr<const GpuPopulation>> GpuPopulation::get(int device, DType dtype, const Program *loss,
                                                                   const GpuBuildOptions &options) {
  // Kept for the process: a search asks for the same one every generation.
  static std::mutex mutex;
  static auto *made = new std::map<std::tuple<int, DType, std::string>, std::shared_ptr<const GpuPopulation>>();
  std::lock_guard lock(mutex);
  auto key = std::make_tuple(device, dtype, loss ? loss->fingerprint() : std::string());
  if (auto it = made->find(key); it != made->end())
    return it->second;
  ContextRestorer restore;
  auto code = std::make_shared<GpuPopulationCode>();
  if (Error e = code->init(device, dtype, loss, options))
    return e;
  (*made)[key] = code;
  return std::shared_ptr<const GpuPopulation>(std::move(code));
}

} // namespace hsnn::detail
