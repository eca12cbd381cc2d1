//===- lib/Runtime/Loss.cpp - A loss formula in y_pred and y_true ---------===//
#include "hsnn/Formula.h"
#include "hsnn/Layer.h"

#include "../Program/Interpreter.h"
#include "RunGuard.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace hsnn {

using detail::LossKernel;
using detail::Program;

struct Loss::Impl {
  std::shared_ptr<ExprContext> ctx = std::make_shared<ExprContext>();
  Formula formula;
  Expr derivative = nullptr;
  Program programs[4]; // indexed by LossKernel
  std::vector<double> params;
  LossOptions options;
  Method method = Method::CpuInterp;
  RunGuard guard;

  template <class T> Error check(const T *yp, const T *yt, const void *out, size_t n) const {
    constexpr DType want = std::is_same_v<T, float> ? DType::F32 : DType::F64;
    if (options.dtype != want)
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("loss was compiled for {}, called with {} arrays", toString(options.dtype), toString(want)));
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
      sum = detail::interpretLoss<T>(programs[size_t(LossKernel::Reduce)], LossKernel::Reduce, params.data(), yp, yt,
                                     nullptr, T(1), n);
    });
    if (e)
      return e;
    return reduce(sum, n);
  }

  template <class T> Error elementwise(LossKernel kind, const T *yp, const T *yt, T *out, size_t n) const {
    if (Error e = check(yp, yt, out, n))
      return e;
    return guard.run([&] {
      detail::interpretLoss<T>(programs[size_t(kind)], kind, params.data(), yp, yt, out, scale<T>(n), n);
    });
  }

  template <class T> Expected<double> fused(const T *yp, const T *yt, T *grad, size_t n) const {
    if (Error e = check(yp, yt, grad, n))
      return e;
    double sum = 0;
    Error e = guard.run([&] {
      sum = detail::interpretLoss<T>(programs[size_t(LossKernel::Fused)], LossKernel::Fused, params.data(), yp, yt, grad,
                                     scale<T>(n), n);
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

Expected<Loss> Loss::compile(std::string_view text, const std::map<std::string, double> &constants,
                             const LossOptions &options) {
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  if (Error e = impl->guard.configure(options.threads))
    return e;
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
  return Loss(std::move(impl));
}

Reduction Loss::reduction() const { return impl_->options.reduction; }
DType Loss::dtype() const { return impl_->options.dtype; }
Method Loss::method() const { return impl_->method; }

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

Error Loss::setConstant(std::string_view name, double value) {
  auto i = impl_->index(name);
  if (!i)
    return i.takeError();
  if (!std::isfinite(value))
    return Error(ErrorCode::InvalidArgument, fmt::format("constant '{}' must be finite, got {}", name, value));
  impl_->params[*i] = value;
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

std::string_view toString(DType d) { return d == DType::F32 ? "f32" : "f64"; }
std::string_view toString(Layout l) { return l == Layout::NodesMajor ? "nodes_major" : "batch_major"; }
std::string_view toString(Reduction r) {
  return r == Reduction::Mean ? "mean" : r == Reduction::Sum ? "sum" : "none";
}
std::string_view toString(Method m) { return m == Method::Auto ? "auto" : "cpu_interp"; }

} // namespace hsnn
