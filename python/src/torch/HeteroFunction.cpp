// hsnn._torch: HeteroActivation and FormulaLoss on contiguous CPU and CUDA
// tensors as PyTorch's own ops are made: one C++ call that runs the kernel
// on the tensors' memory (through _core's raw entries, RawRun.h) and
// attaches an autograd Node holding what its backward needs. On CUDA the
// kernels are queued on PyTorch's current stream, the outputs (the loss's
// value too) come from its caching allocator, and nothing waits for the
// device. The Python
// torch.autograd.Function it replaces cost about as much in glue a call as
// torch.tanh takes at 32 x 64. The first-order backward is
// grad * f'(z), f' saved from the fused kernel; a backward that must be
// differentiable (create_graph) calls back into hsnn.torch's Python
// functions, which build it of hsnn kernels.
#include "../RawRun.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/extension.h>

#include <string>
#include <type_traits>

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
  int64_t nodes;
  int device; // the CUDA device the layer runs on; -1: the CPU
};

// PyTorch's current stream on t's device as a CUstream handle, without
// CUDA's headers (the bindings build against CPU-only PyTorch too):
// c10::Stream::native_handle() where this PyTorch has it (2.7 on) and its
// CUDA guard implements it, else torch._C._cuda_getCurrentRawStream (one
// call of a C function through Python; the GIL is held here).
template <class S, class = void> struct HasNativeHandle : std::false_type {};
template <class S>
struct HasNativeHandle<S, std::void_t<decltype(std::declval<const S &>().native_handle())>> : std::true_type {};

template <class S = c10::Stream> uintptr_t currentStream(const torch::Tensor &t) {
  S stream = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(t.device()); // S: the branch not taken is not compiled
  if constexpr (HasNativeHandle<S>::value) {
    static bool implemented = true;
    if (implemented) {
      try {
        return reinterpret_cast<uintptr_t>(stream.native_handle());
      } catch (const c10::Error &) {
        implemented = false;
      }
    }
  }
  // Never destroyed: the interpreter may be gone at exit.
  static auto *raw = new py::object(py::module_::import("torch._C").attr("_cuda_getCurrentRawStream"));
  return (*raw)(int(t.device().index())).template cast<uintptr_t>();
}

// An output like `like`: from PyTorch's allocator when small, from _core's
// pool when large (a fresh multi-MiB block is an mmap whose pages all fault
// in on first write: OutputPool.h).
torch::Tensor output(const torch::Tensor &like) {
  const size_t bytes = like.nbytes();
  if (bytes < entries->minPooledBytes) // straight to the CPU allocator: the dispatcher's empty_like measured costly
    return at::detail::empty_cpu(like.sizes(), like.scalar_type());
  return torch::from_blob(entries->poolTake(bytes), like.sizes(), [](void *data) { entries->poolGive(data); },
                          like.options());
}

// grad * f', into a pooled output when large and on the CPU.
torch::Tensor times(const torch::Tensor &grad, const torch::Tensor &derivative) {
  if (!derivative.device().is_cpu() || grad.scalar_type() != derivative.scalar_type() ||
      !grad.sizes().equals(derivative.sizes()) || derivative.nbytes() < entries->minPooledBytes)
    return grad * derivative;
  torch::Tensor out = output(derivative);
  return at::mul_out(out, grad, derivative);
}

// hsnn's kernels spread over PyTorch's intra-op threads, not hsnn's own: on
// the same cores the two pools competed (PyTorch's OpenMP threads spin for
// a while after each op), and the W1 layer's kernels at 4096 x 256 f32 ran
// several times slower between PyTorch ops than alone.
void torchParallelFor(void *, size_t tasks, size_t grain, void (*body)(void *, size_t, size_t), void *ctx) {
  at::parallel_for(0, int64_t(tasks), int64_t(grain),
                   [&](int64_t begin, int64_t end) { body(ctx, size_t(begin), size_t(end)); });
}

void check(int failed, const char *message) {
  if (failed)
    throw std::runtime_error(message);
}

// The backward node, written as PyTorch's own ops write theirs (a Node
// with its saved variables as members), not a torch::autograd::Function:
// that one's context (a map of saved data, per-input bookkeeping) was a
// measurable cost a step on small tensors.
struct HeteroBackward : torch::autograd::Node {
  torch::autograd::SavedVariable z, dfdz;
  c10::intrusive_ptr<SlowBackward> slow;

  std::string name() const override { return "HeteroActivationBackward"; }

  variable_list apply(variable_list &&grads) override {
    if (!grads[0].defined())
      return {torch::Tensor()};
    if (!torch::GradMode::is_enabled()) // first order: grad * f'(z)
      return {times(grads[0], dfdz.unpack())};
    py::gil_scoped_acquire gil; // create_graph: hsnn.torch's differentiable backward
    return {slow->fn(z.unpack(), grads[0]).cast<torch::Tensor>()};
  }

  void release_variables() override {
    z.reset_data();
    dfdz.reset_data();
  }
};

// stream: the CUDA stream to queue on, for a CUDA tensor.
torch::Tensor heteroApply(const torch::Tensor &z, const Fast &fast, uintptr_t stream) {
  const bool cuda = fast.device >= 0;
  torch::Tensor a = cuda ? at::empty_like(z) : output(z), dfdz = cuda ? at::empty_like(z) : output(z);
  char message[512];
  const int f64 = z.scalar_type() == torch::kFloat64;
  check(cuda ? entries->runLayerDevice(fast.engine, 2, f64, z.data_ptr(), nullptr, a.data_ptr(), dfdz.data_ptr(),
                                       z.size(0), stream, message, sizeof message)
             : entries->runLayerFused(fast.engine, f64, z.data_ptr(), a.data_ptr(), dfdz.data_ptr(), z.size(0),
                                      torchParallelFor, message, sizeof message),
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

// FormulaLoss (mean or sum) the same way: the fused kernel gives the value
// and the gradient, already scaled, saved for the backward.
struct FastLoss {
  py::object loss;
  const void *engine;
  c10::intrusive_ptr<SlowBackward> slow;
  int device; // as Fast's
};

struct LossBackward : torch::autograd::Node {
  torch::autograd::SavedVariable yPred, yTrue, grad;
  c10::intrusive_ptr<SlowBackward> slow;

  std::string name() const override { return "FormulaLossBackward"; }

  variable_list apply(variable_list &&grads) override {
    if (!grads[0].defined())
      return {torch::Tensor()};
    if (!torch::GradMode::is_enabled()) { // an upstream 1 (loss.backward()) leaves the gradient as it is
      torch::Tensor g = grad.unpack();
      if (!g.device().is_cpu()) // reading the upstream value would wait for the device
        return {g * grads[0]};
      return {grads[0].item<double>() == 1.0 ? g : g * grads[0]};
    }
    py::gil_scoped_acquire gil;
    return {slow->fn(yPred.unpack(), yTrue.unpack(), grads[0]).cast<torch::Tensor>()};
  }

  void release_variables() override {
    yPred.reset_data();
    yTrue.reset_data();
    grad.reset_data();
  }
};

torch::Tensor lossApply(const torch::Tensor &yPred, const torch::Tensor &yTrue, const FastLoss &fast, uintptr_t stream) {
  const int f64 = yPred.scalar_type() == torch::kFloat64;
  char message[512];
  torch::Tensor grad, out;
  if (fast.device >= 0) { // the value stays on the device: nothing waits
    grad = at::empty_like(yPred);
    out = at::empty({}, yPred.options());
    check(entries->runLossDevice(fast.engine, f64, yPred.data_ptr(), yTrue.data_ptr(), grad.data_ptr(),
                                 out.data_ptr(), yPred.numel(), stream, message, sizeof message),
          message);
  } else {
    grad = output(yPred);
    double value = 0;
    check(entries->runLossFused(fast.engine, f64, yPred.data_ptr(), yTrue.data_ptr(), grad.data_ptr(), yPred.numel(),
                                &value, torchParallelFor, message, sizeof message),
          message);
    out = torch::scalar_tensor(value, yPred.options());
  }
  if (torch::autograd::compute_requires_grad(yPred)) {
    auto node = std::shared_ptr<LossBackward>(new LossBackward(), torch::autograd::deleteNode);
    node->set_next_edges(torch::autograd::collect_next_edges(yPred));
    node->yPred = torch::autograd::SavedVariable(yPred, false);
    node->yTrue = torch::autograd::SavedVariable(yTrue, false);
    node->grad = torch::autograd::SavedVariable(grad, false);
    node->slow = fast.slow;
    torch::autograd::set_history(out, node);
  }
  return out;
}

// A contiguous float tensor in the memory the object runs on (device -1:
// the CPU; else that CUDA device).
bool runsOn(const torch::Tensor &t, int device) {
  bool there = device < 0 ? t.device().is_cpu() : t.device().is_cuda() && t.device().index() == device;
  return there && t.is_contiguous() && (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kFloat64);
}

} // namespace

PYBIND11_MODULE(_torch, m) {
  m.doc() = "hsnn.torch's autograd nodes for contiguous CPU and CUDA tensors (HeteroFunction.cpp)";
  py::capsule entry = py::module_::import("hsnn._core").attr("_raw_run")();
  entries = static_cast<const hsnn::python::RawEntries *>(entry.get_pointer());
  py::class_<Fast>(m, "Fast", "a layer, its differentiable backward and its number of nodes, for hetero_apply")
      .def(py::init([](py::object layer, py::object slowBackward, int64_t nodes, int device) {
             char message[512];
             const void *engine = entries->layerOf(layer.ptr(), message, sizeof message);
             if (!engine)
               throw py::value_error(message);
             return Fast{std::move(layer), engine, c10::make_intrusive<SlowBackward>(std::move(slowBackward)),
                         nodes, device};
           }),
           py::arg("layer"), py::arg("slow_backward"), py::arg("nodes"), py::arg("device") = -1);
  m.def(
      "hetero_apply",
      [](const torch::Tensor &z, const Fast &fast) -> py::object {
        // Anything else goes the Python way, which checks and explains.
        if (!runsOn(z, fast.device) || z.dim() != 2 || z.size(1) != fast.nodes)
          return py::none();
        uintptr_t stream = fast.device >= 0 ? currentStream(z) : 0;
        torch::Tensor a;
        {
          py::gil_scoped_release unlocked;
          a = heteroApply(z, fast, stream);
        }
        return py::cast(std::move(a));
      },
      "f(z) for a contiguous (batch, nodes) tensor of the layer's dtype on its device (CUDA: queued on the current "
      "stream), else None; backward grad * f'(z), or slow_backward(z, grad) when it must be differentiable");
  py::class_<FastLoss>(m, "FastLoss", "a mean or sum loss and its differentiable backward, for loss_apply")
      .def(py::init([](py::object loss, py::object slowBackward, int device) {
             char message[512];
             const void *engine = entries->lossOf(loss.ptr(), message, sizeof message);
             if (!engine)
               throw py::value_error(message);
             return FastLoss{std::move(loss), engine, c10::make_intrusive<SlowBackward>(std::move(slowBackward)),
                             device};
           }),
           py::arg("loss"), py::arg("slow_backward"), py::arg("device") = -1);
  m.def(
      "loss_apply",
      [](const torch::Tensor &yPred, const torch::Tensor &yTrue, const FastLoss &fast) -> py::object {
        if (!runsOn(yPred, fast.device) || !runsOn(yTrue, fast.device) || yTrue.scalar_type() != yPred.scalar_type() ||
            !yTrue.sizes().equals(yPred.sizes()) || yPred.numel() == 0)
          return py::none();
        uintptr_t stream = fast.device >= 0 ? currentStream(yPred) : 0;
        torch::Tensor value;
        {
          py::gil_scoped_release unlocked;
          value = lossApply(yPred, yTrue, fast, stream);
        }
        return py::cast(std::move(value));
      },
      "the reduced loss of contiguous tensors of one dtype and shape on the loss's device (CUDA: queued on the "
      "current stream, the value left there), else None; backward its gradient (times grad unless 1 on the CPU), or "
      "slow_backward(y_pred, y_true, grad) when it must be differentiable");
}
