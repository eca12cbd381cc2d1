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

#include <torch/csrc/autograd/functions/utils.h>
#include <torch/extension.h>

#include <string>

namespace py = pybind11;
using torch::autograd::variable_list;

namespace {

const hsnn::python::RawEntries *entries = nullptr;

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

// What every call of one module on one dtype needs, made once: per-call
// construction of the backward's holder cost a GIL round trip when each
// graph was freed.
struct Fast {
  py::object layer;   // keeps `engine` alive
  const void *engine; // the C++ layer behind it (RawRun.h)
  c10::intrusive_ptr<SlowBackward> slow;
  int64_t nodes, maxBytes;
};

void check(int failed, const char *message) {
  if (failed)
    throw std::runtime_error(message);
}

// The backward node, written as PyTorch's own ops write theirs (a Node
// with its saved variables as members), not a torch::autograd::Function:
// that one's context (a map of saved data, per-input bookkeeping) cost
// ~1 us a step at 32 x 64.
struct HeteroBackward : torch::autograd::Node {
  torch::autograd::SavedVariable z, dfdz;
  c10::intrusive_ptr<SlowBackward> slow;

  std::string name() const override { return "HeteroActivationBackward"; }

  variable_list apply(variable_list &&grads) override {
    if (!grads[0].defined())
      return {torch::Tensor()};
    if (!torch::GradMode::is_enabled()) // first order: grad * f'(z)
      return {grads[0] * dfdz.unpack()};
    py::gil_scoped_acquire gil; // create_graph: hsnn.torch's differentiable backward
    return {slow->fn(z.unpack(), grads[0]).cast<torch::Tensor>()};
  }

  void release_variables() override {
    z.reset_data();
    dfdz.reset_data();
  }
};

torch::Tensor heteroApply(const torch::Tensor &z, const Fast &fast) {
  torch::Tensor a = torch::empty_like(z), dfdz = torch::empty_like(z);
  char message[512];
  check(entries->runLayer(fast.engine, 2, z.scalar_type() == torch::kFloat64, z.data_ptr(), nullptr, a.data_ptr(),
                          dfdz.data_ptr(), z.size(0), message, sizeof message),
        message);
  if (torch::autograd::compute_requires_grad(z)) {
    auto node = std::shared_ptr<HeteroBackward>(new HeteroBackward(), torch::autograd::deleteNode);
    node->set_next_edges(torch::autograd::collect_next_edges(z));
    node->z = torch::autograd::SavedVariable(z, false);
    node->dfdz = torch::autograd::SavedVariable(dfdz, false);
    node->slow = fast.slow;
    torch::autograd::set_history(a, node);
  }
  return a;
}

} // namespace

PYBIND11_MODULE(_torch, m) {
  m.doc() = "hsnn.torch's C++ autograd function for small CPU tensors (HeteroFunction.cpp)";
  py::capsule entry = py::module_::import("hsnn._core").attr("_raw_run")();
  entries = static_cast<const hsnn::python::RawEntries *>(entry.get_pointer());
  py::class_<Fast>(m, "Fast", "a layer, its differentiable backward and the sizes hetero_apply takes")
      .def(py::init([](py::object layer, py::object slowBackward, int64_t nodes, int64_t maxBytes) {
             char message[512];
             const void *engine = entries->layerOf(layer.ptr(), message, sizeof message);
             if (!engine)
               throw py::value_error(message);
             return Fast{std::move(layer), engine, c10::make_intrusive<SlowBackward>(std::move(slowBackward)),
                         nodes, maxBytes};
           }),
           py::arg("layer"), py::arg("slow_backward"), py::arg("nodes"), py::arg("max_bytes"));
  m.def(
      "hetero_apply",
      [](const torch::Tensor &z, const Fast &fast) -> py::object {
        // Anything else goes the Python way, which checks and explains.
        if (!z.device().is_cpu() || z.dim() != 2 || z.size(1) != fast.nodes || !z.is_contiguous() ||
            int64_t(z.nbytes()) >= fast.maxBytes ||
            (z.scalar_type() != torch::kFloat32 && z.scalar_type() != torch::kFloat64))
          return py::none();
        torch::Tensor a;
        {
          py::gil_scoped_release unlocked;
          a = heteroApply(z, fast);
        }
        return py::cast(std::move(a));
      },
      "f(z) for a contiguous (batch, nodes) CPU tensor of the layer's dtype under max_bytes, else None; "
      "backward grad * f'(z), or slow_backward(z, grad) when it must be differentiable");
}
