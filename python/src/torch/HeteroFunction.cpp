// hsnn._torch: HeteroActivation's forward and backward as one C++ autograd
// function, for CPU tensors below hsnn.torch's pooled size. There the glue
// of a Python torch.autograd.Function (12.5 us forward + backward for one
// that only clones) was most of the call: 27 us at 32 x 64 against
// torch.tanh's 14. Outputs come from PyTorch's allocator, the kernels run
// on the tensors' memory through _core's raw entry (RawRun.h), and the
// first-order backward is grad * f'(z) in PyTorch. A backward that must be
// differentiable (create_graph) calls back into hsnn.torch's Python
// functions, which build it of hsnn kernels.
#include "../RawRun.h"

#include <torch/extension.h>

#include <string>

namespace py = pybind11;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

hsnn::python::RawRunFn rawRun = nullptr;

// What the backward needs beyond tensors: the Python callable that builds a
// differentiable backward, held with the GIL taken to drop it (autograd may
// free the graph on a thread that does not hold it).
struct SlowBackward : torch::CustomClassHolder {
  py::object fn;
  explicit SlowBackward(py::object f) : fn(std::move(f)) {}
  ~SlowBackward() override {
    if (!Py_IsInitialized()) { // the interpreter is gone: nothing to return the reference to
      fn.release();
      return;
    }
    py::gil_scoped_acquire gil;
    fn = py::object();
  }
};

struct HeteroApply : torch::autograd::Function<HeteroApply> {
  static torch::Tensor forward(AutogradContext *ctx, const torch::Tensor &z, PyObject *layer,
                               const py::object &slowBackward) {
    torch::Tensor a = torch::empty_like(z), dfdz = torch::empty_like(z);
    char message[512];
    if (rawRun(layer, 2, z.scalar_type() == torch::kFloat64, z.data_ptr(), nullptr, a.data_ptr(), dfdz.data_ptr(),
               z.size(0), message, sizeof message))
      throw std::runtime_error(message);
    ctx->save_for_backward({z, dfdz});
    ctx->saved_data["slow"] = c10::IValue::make_capsule(c10::make_intrusive<SlowBackward>(slowBackward));
    return a;
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    if (!torch::GradMode::is_enabled()) // first order: grad * f'(z)
      return {grads[0] * saved[1], torch::Tensor(), torch::Tensor()};
    auto slow = c10::static_intrusive_pointer_cast<SlowBackward>(ctx->saved_data["slow"].toCapsule());
    py::gil_scoped_acquire gil;
    return {slow->fn(saved[0], grads[0]).cast<torch::Tensor>(), torch::Tensor(), torch::Tensor()};
  }
};

} // namespace

PYBIND11_MODULE(_torch, m) {
  m.doc() = "hsnn.torch's C++ autograd function for small CPU tensors (HeteroFunction.cpp)";
  py::capsule entry = py::module_::import("hsnn._core").attr("_raw_run")();
  rawRun = reinterpret_cast<hsnn::python::RawRunFn>(entry.get_pointer());
  m.def(
      "hetero_apply",
      [](const torch::Tensor &z, const py::object &layer, const py::object &slowBackward, int64_t nodes,
         int64_t maxBytes) -> py::object {
        // Anything else goes the Python way, which checks and explains.
        if (!z.device().is_cpu() || z.dim() != 2 || z.size(1) != nodes || !z.is_contiguous() ||
            int64_t(z.nbytes()) >= maxBytes || (z.scalar_type() != torch::kFloat32 && z.scalar_type() != torch::kFloat64))
          return py::none();
        return py::cast(HeteroApply::apply(z, layer.ptr(), slowBackward));
      },
      py::arg("z"), py::arg("layer"), py::arg("slow_backward"), py::arg("nodes"), py::arg("max_bytes"),
      "f(z) for a contiguous (batch, nodes) CPU tensor of the layer's dtype under max_bytes, else None; "
      "backward grad * f'(z), or slow_backward(z, grad) when it must be differentiable");
}
