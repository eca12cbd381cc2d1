//===- lib/Runtime/Loss.cpp - A loss formula in y_pred and y_true ---------===//
#include "hsnn/Formula.h"
#include "hsnn/Layer.h"

#include "GpuLayer.h"
#include "HostKernels.h"
#include "LayerAccess.h"
#include "Program/Interpreter.h"
#include "Program/Launch.h"
#include "RunGuard.h"
#include "Warn.h"

#include "hsnn/Backend.h"
#include "hsnn/Runtime.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <cmath>
#include <fmt/format.h>

namespace hsnn {

using detail::KernelShape;
using detail::LossKernel;
using detail::Program;

namespace {
constexpr size_t kJitBlock = 16384; // elements per JIT call and per partial sum
constexpr KernelShape kShapes[4] = {KernelShape::LossElements, KernelShape::LossReduce, KernelShape::LossGradient,
                                    KernelShape::LossFused};
} // namespace

struct Loss::Impl {
  std::shared_ptr<ExprContext> ctx = std::make_shared<ExprContext>();
  Formula formula;
  Expr derivative = nullptr;
  Program programs[4]; // indexed by LossKernel
  std::vector<double> params;
  LossOptions options;
  CompileInfo info;
  RunGuard guard;
  std::shared_ptr<detail::KernelLibrary> kernels;
  std::unique_ptr<detail::GpuLoss> gpu; // Method::Cuda
  void *kernel[4] = {}; // by LossKernel

  Error compileKernels() {
    std::vector<detail::KernelRequest> requests;
    Program baked[4];
    for (size_t k = 0; k < 4; ++k) {
      if (options.bakeConstants)
        baked[k] = programs[k].withConstants(params.data());
      requests.push_back({fmt::format("hsnn_loss_{}", detail::shapeName(kShapes[k])),
                          options.bakeConstants ? &baked[k] : &programs[k], kShapes[k], options.dtype});
    }
    auto lib = detail::buildHostKernels(requests, {options.optLevel, options.fastMath}, info);
    if (!lib)
      return lib.takeError();
    kernels = std::move(*lib);
    for (size_t k = 0; k < 4; ++k)
      kernel[k] = kernels->address(requests[k].symbol);
    return Error::success();
  }

  // Runs one kernel kind over n elements with whichever engine was built.
  template <class T> double launch(LossKernel kind, const T *yp, const T *yt, T *out, T scale, size_t n) const {
    if (gpu) {
      // guard.run turns the thrown Error into an Error result.
      auto sum = gpu->runHost(int(kind), yp, yt, out, double(scale), n);
      if (!sum)
        throw std::runtime_error(sum.error().message());
      return *sum;
    }
    if (!kernels)
      return detail::interpretLoss<T>(programs[size_t(kind)], kind, params.data(), yp, yt, out, scale, n);
    auto fn = reinterpret_cast<detail::LossFn<T>>(kernel[size_t(kind)]);
    return detail::launchLoss(n, kJitBlock, [&](size_t i0, size_t len) {
      // Whole multiples of the padding go straight through; the tail runs
      // padded, per element, and its losses are added after in order.
      size_t main = len - len % detail::kKernelPadding, tail = len - main;
      double sum = main ? fn(yp + i0, yt + i0, out ? out + i0 : nullptr, params.data(), int64_t(main), scale) : 0.0;
      if (tail) {
        constexpr size_t P = detail::kKernelPadding;
        T a[P] = {}, b[P] = {}, l[P], g[P];
        std::copy_n(yp + i0 + main, tail, a);
        std::copy_n(yt + i0 + main, tail, b);
        auto elements = reinterpret_cast<detail::LossFn<T>>(kernel[size_t(LossKernel::Elements)]);
        auto gradient = reinterpret_cast<detail::LossFn<T>>(kernel[size_t(LossKernel::Gradient)]);
        if (kind != LossKernel::Gradient)
          elements(a, b, l, params.data(), int64_t(P), scale);
        if (kind == LossKernel::Gradient || kind == LossKernel::Fused)
          gradient(a, b, g, params.data(), int64_t(P), scale);
        for (size_t i = 0; i < tail; ++i) {
          if (kind == LossKernel::Reduce || kind == LossKernel::Fused)
            sum += double(l[i]);
          if (kind == LossKernel::Elements)
            out[i0 + main + i] = l[i];
          else if (kind != LossKernel::Reduce)
            out[i0 + main + i] = g[i];
        }
      }
      return sum;
    });
  }

  template <class T> Error check(const T *yp, const T *yt, const void *out, size_t n) const {
    constexpr DType want = std::is_same_v<T, float> ? DType::F32 : DType::F64;
    if (options.dtype != want)
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("loss was compiled for {}, called with {} arrays", to_string(options.dtype), to_string(want)));
    if (n && (!yp || !yt || !out))
      return Error(ErrorCode::InvalidArgument, "null array pointer with a non-empty input");
    return Error::success();
  }

  template <class T> T scale(size_t n) const {
    return options.reduction == Reduction::Mean && n ? T(1.0 / double(n)) : T(1);
  }

  Expected<double> reduce(double sum, size_t n) const {
    if (options.reduction == Reduction::Mean) {
      if (n == 0)
        return Error(ErrorCode::InvalidArgument, "the mean of zero elements is undefined");
      return sum / double(n);
    }
    return sum;
  }

  template <class T> Expected<double> forward(const T *yp, const T *yt, size_t n) const {
    if (options.reduction == Reduction::None)
      return Error(ErrorCode::InvalidArgument, "reduction is none: use forwardElements for per-element losses");
    if (Error e = check(yp, yt, yp, n))
      return e;
    double sum = 0;
    Error e = guard.run([&] {
      sum = launch<T>(LossKernel::Reduce, yp, yt, nullptr, T(1), n);
    });
    if (e)
      return e;
    return reduce(sum, n);
  }

  template <class T> Error elementwise(LossKernel kind, const T *yp, const T *yt, T *out, size_t n) const {
    if (Error e = check(yp, yt, out, n))
      return e;
    return guard.run([&] { launch<T>(kind, yp, yt, out, scale<T>(n), n); });
  }

  template <class T> Expected<double> fused(const T *yp, const T *yt, T *grad, size_t n) const {
    if (Error e = check(yp, yt, grad, n))
      return e;
    double sum = 0;
    Error e = guard.run([&] {
      sum = launch<T>(LossKernel::Fused, yp, yt, grad, scale<T>(n), n);
    });
    if (e)
      return e;
    if (options.reduction == Reduction::None)
      return 0.0;
    return reduce(sum, n);
  }

  Expected<size_t> index(std::string_view name) const {
    auto it = std::find(formula.constants.begin(), formula.constants.end(), name);
    if (it == formula.constants.end())
      return Error(ErrorCode::InvalidArgument,
                   formula.constants.empty()
                       ? fmt::format("the loss has no constants (asked for '{}')", name)
                       : fmt::format("the loss has no constant '{}'; it has: {}", name, fmt::join(formula.constants, ", ")));
    return size_t(it - formula.constants.begin());
  }
};

// Nothing thrown inside (allocation failure, a filesystem error) crosses the API.
Expected<Loss> Loss::compile(std::string_view text, const std::map<std::string, double> &constants,
                             const LossOptions &options) {
  try {
    return compileImpl(text, constants, options);
  } catch (const std::exception &e) {
    return Error(ErrorCode::Internal, fmt::format("compile failed: {}", e.what()));
  }
}

Expected<Loss> Loss::compileImpl(std::string_view text, const std::map<std::string, double> &constants,
                                 const LossOptions &options) {
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  if (Error e = impl->guard.configure(options.threads))
    return e;
  auto method = detail::checkedMethod(options.method, options.optLevel, options.gpuId);
  if (!method)
    return method.takeError();
  auto parsed = parseFormulaDetailed(*impl->ctx, text, {FormulaMode::Loss});
  if (auto *d = std::get_if<Diagnostic>(&parsed))
    return toError({*d});
  impl->formula = std::get<Formula>(std::move(parsed));
  auto bound = bindConstants(impl->formula, constants);
  if (auto *d = std::get_if<Diagnostic>(&bound))
    return toError({*d});
  impl->params = std::get<std::vector<double>>(std::move(bound));

  impl->derivative = differentiate(*impl->ctx, impl->formula.expr, Variable::YPred);
  Expr both[] = {impl->formula.expr, impl->derivative};
  const auto &names = impl->formula.constants;
  impl->programs[size_t(LossKernel::Elements)] = Program::lower({both, 1}, names);
  impl->programs[size_t(LossKernel::Reduce)] = Program::lower({both, 1}, names);
  impl->programs[size_t(LossKernel::Gradient)] = Program::lower({both + 1, 1}, names);
  impl->programs[size_t(LossKernel::Fused)] = Program::lower(both, names);

  auto compileGpu = [&]() -> Error {
    std::array<const Program *, 4> progs = {&impl->programs[0], &impl->programs[1], &impl->programs[2],
                                            &impl->programs[3]};
    auto g = detail::GpuLoss::create(options.gpuId, options.dtype, {options.optLevel, options.fastMath}, progs,
                                     impl->params, &impl->info);
    if (!g)
      return g.takeError();
    impl->gpu = std::move(*g);
    return Error::success();
  };
  auto used = detail::compileForMethod(*method, compileGpu, [&] { return impl->compileKernels(); });
  if (!used)
    return used.takeError();
  impl->info.method = *used;
  return Loss(std::move(impl));
}

Reduction Loss::reduction() const { return impl_->options.reduction; }
DType Loss::dtype() const { return impl_->options.dtype; }
Method Loss::method() const { return impl_->info.method; }
const CompileInfo &Loss::compileInfo() const { return impl_->info; }

Expected<double> Loss::forward(const float *yp, const float *yt, size_t n) const { return impl_->forward(yp, yt, n); }
Expected<double> Loss::forward(const double *yp, const double *yt, size_t n) const { return impl_->forward(yp, yt, n); }
Error Loss::forwardElements(const float *yp, const float *yt, float *out, size_t n) const {
  return impl_->elementwise(LossKernel::Elements, yp, yt, out, n);
}
Error Loss::forwardElements(const double *yp, const double *yt, double *out, size_t n) const {
  return impl_->elementwise(LossKernel::Elements, yp, yt, out, n);
}
Error Loss::gradient(const float *yp, const float *yt, float *grad, size_t n) const {
  return impl_->elementwise(LossKernel::Gradient, yp, yt, grad, n);
}
Error Loss::gradient(const double *yp, const double *yt, double *grad, size_t n) const {
  return impl_->elementwise(LossKernel::Gradient, yp, yt, grad, n);
}
Expected<double> Loss::fused(const float *yp, const float *yt, float *grad, size_t n) const {
  return impl_->fused(yp, yt, grad, n);
}
Expected<double> Loss::fused(const double *yp, const double *yt, double *grad, size_t n) const {
  return impl_->fused(yp, yt, grad, n);
}

namespace {
// Checks buffers against the loss and runs `kind` on them; returns the reduced loss.
Expected<double> runBuffers(const Loss::Impl &impl, LossKernel kind, const DeviceBuffer &yp, const DeviceBuffer &yt,
                            const DeviceBuffer *out, size_t n) {
  size_t es = impl.options.dtype == DType::F32 ? 4 : 8;
  std::string where = impl.gpu ? fmt::format("cuda:{}", impl.gpu->device()) : "cpu";
  for (const DeviceBuffer *b : {&yp, &yt, out}) {
    if (!b)
      continue;
    if (b->backend() != where)
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("buffer on backend {} given to a loss that runs on {}", b->backend(), where));
    if (n > b->bytes() / es)
      return Error(ErrorCode::InvalidArgument, fmt::format("buffer of {} bytes is smaller than {} {} elements",
                                                           b->bytes(), n, to_string(impl.options.dtype)));
  }
  void *o = out ? out->data() : nullptr;
  if (impl.gpu) {
    auto sum = impl.gpu->run(int(kind), reinterpret_cast<detail::CUdeviceptr>(yp.data()),
                             reinterpret_cast<detail::CUdeviceptr>(yt.data()), reinterpret_cast<detail::CUdeviceptr>(o),
                             impl.options.reduction == Reduction::Mean && kind != LossKernel::Reduce && n ? 1.0 / double(n) : 1.0, n);
    if (!sum || kind == LossKernel::Gradient)
      return sum;
    if (impl.options.reduction == Reduction::None)
      return 0.0; // as on the CPU: fused with no reduction returns no loss
    if (impl.options.reduction == Reduction::Mean)
      return n ? *sum / double(n) : Expected<double>(Error(ErrorCode::InvalidArgument, "the mean of zero elements is undefined"));
    return *sum;
  }
  auto call = [&](auto zero) -> Expected<double> {
    using T = decltype(zero);
    const T *p = static_cast<const T *>(yp.data()), *t = static_cast<const T *>(yt.data());
    switch (kind) {
    case LossKernel::Reduce:
      return impl.forward(p, t, n);
    case LossKernel::Gradient:
      if (Error e = impl.elementwise(LossKernel::Gradient, p, t, static_cast<T *>(o), n))
        return e;
      return 0.0;
    default:
      return impl.fused(p, t, static_cast<T *>(o), n);
    }
  };
  return impl.options.dtype == DType::F32 ? call(0.0f) : call(0.0);
}
} // namespace

Expected<double> Loss::forward(const DeviceBuffer &yp, const DeviceBuffer &yt, size_t n) const {
  if (impl_->options.reduction == Reduction::None)
    return Error(ErrorCode::InvalidArgument, "reduction is none: use forwardElements for per-element losses");
  return runBuffers(*impl_, LossKernel::Reduce, yp, yt, nullptr, n);
}
Error Loss::gradient(const DeviceBuffer &yp, const DeviceBuffer &yt, const DeviceBuffer &grad, size_t n) const {
  return runBuffers(*impl_, LossKernel::Gradient, yp, yt, &grad, n).takeError();
}
Expected<double> Loss::fused(const DeviceBuffer &yp, const DeviceBuffer &yt, const DeviceBuffer &grad, size_t n) const {
  return runBuffers(*impl_, LossKernel::Fused, yp, yt, &grad, n);
}

Error Loss::setGpuId(int id) { return detail::moveGpuCode(impl_->gpu.get(), id, impl_->params, impl_->info, "loss"); }

int Loss::gpuId() const { return impl_->gpu ? impl_->gpu->device() : -1; }

Error Loss::setConstant(std::string_view name, double value) {
  auto i = impl_->index(name);
  if (!i)
    return i.takeError();
  if (impl_->kernels && impl_->options.bakeConstants)
    return Error(ErrorCode::InvalidArgument,
                 "constants are baked into this loss's code (bakeConstants); compile a new loss to change them");
  if (!std::isfinite(value))
    return Error(ErrorCode::InvalidArgument, fmt::format("constant '{}' must be finite, got {}", name, value));
  impl_->params[*i] = value;
  if (impl_->gpu)
    return impl_->gpu->uploadParams(impl_->params);
  return Error::success();
}

Expected<double> Loss::constant(std::string_view name) const {
  auto i = impl_->index(name);
  if (!i)
    return i.takeError();
  return impl_->params[*i];
}

std::string Loss::formula() const { return print(impl_->formula.expr); }
std::string Loss::derivative() const { return print(impl_->derivative); }

std::string_view to_string(DType d) { return d == DType::F32 ? "f32" : "f64"; }
std::string_view to_string(Layout l) { return l == Layout::NodesMajor ? "nodes_major" : "batch_major"; }
std::string_view to_string(Reduction r) {
  return r == Reduction::Mean ? "mean" : r == Reduction::Sum ? "sum" : "none";
}
std::string_view to_string(Method m) {
  switch (m) {
  case Method::Auto: return "auto";
  case Method::CpuJit: return "cpu_jit";
  case Method::CpuInterp: return "cpu_interp";
  case Method::Cuda: return "cuda";
  }
  return "?";
}

} // namespace hsnn

namespace hsnn::detail {
LayerAccess::LossModel LayerAccess::loss(const Loss &loss) {
  const Loss::Impl &impl = *loss.impl_;
  return {{&impl.programs[0], &impl.programs[1], &impl.programs[2], &impl.programs[3]}, impl.formula.constants, impl.params};
}
} // namespace hsnn::detail
