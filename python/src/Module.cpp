//===- python/src/Module.cpp - hsnn for Python (pybind11) -----------------===//
//
// The C++ API with NumPy arrays: ActivationLayer and Loss over C-contiguous
// float32/float64 arrays, checked (shape, dtype, contiguity) with clear
// exceptions before any kernel runs; the GIL is released while kernels run.
// Errors map to Python exceptions: formula errors to hsnn.FormulaError (with
// node, position and the caret text), bad arguments to ValueError,
// unsupported requests to RuntimeError.
//
//===----------------------------------------------------------------------===//
#include <hsnn/Formula.h>
#include <hsnn/Layer.h>
#include <hsnn/Runtime.h>

#include "Bindings.h"
#include "DeviceArrays.h"
#include "OutputPool.h"
#include "RawRun.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <optional>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

namespace py = pybind11;
using namespace hsnn;
using hsnn::python::check;
using hsnn::python::choose;
using hsnn::python::raise;
using hsnn::python::take;

namespace {

// "float32", numpy.float32 or numpy.dtype("float32") (and "f32"); float64 the same.
DType parseDType(const py::object &d) {
  std::string s;
  try {
    s = py::str(py::module_::import("numpy").attr("dtype")(d));
  } catch (py::error_already_set &) {
    s = py::str(d);
  }
  if (s == "float32" || s == "f32")
    return DType::F32;
  if (s == "float64" || s == "f64")
    return DType::F64;
  throw py::value_error("dtype must be float32 or float64, got '" + s + "'");
}
Layout parseLayout(const std::string &s) {
  return choose<Layout>("layout", s, {{"nodes_major", Layout::NodesMajor}, {"batch_major", Layout::BatchMajor}});
}
Reduction parseReduction(const std::string &s) {
  return choose<Reduction>("reduction", s, {{"mean", Reduction::Mean}, {"sum", Reduction::Sum}, {"none", Reduction::None}});
}
Method parseMethodName(const std::string &s) { return take(parseMethod(s)); }

const char *numpyName(DType d) { return d == DType::F32 ? "float32" : "float64"; }

// An input array as the kernels need it: the layer's dtype, C-contiguous,
// and the shape given.
void checkArray(const py::array &a, const char *name, DType dtype, const std::vector<py::ssize_t> &shape) {
  py::dtype want = dtype == DType::F32 ? py::dtype::of<float>() : py::dtype::of<double>();
  if (!a.dtype().is(want))
    throw py::value_error(std::string("'") + name + "' has dtype " + std::string(py::str(a.dtype())) + "; expected " +
                          numpyName(dtype));
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string("'") + name + "' is not C-contiguous; pass numpy.ascontiguousarray(" + name + ")");
  std::vector<py::ssize_t> got(a.shape(), a.shape() + a.ndim());
  if (got != shape) {
    auto text = [](const std::vector<py::ssize_t> &s) {
      std::string t = "(";
      for (size_t i = 0; i < s.size(); ++i)
        t += (i ? ", " : "") + std::to_string(s[i]);
      return t + (s.size() == 1 ? ",)" : ")");
    };
    throw py::value_error(std::string("'") + name + "' has shape " + text(got) + "; expected " + text(shape));
  }
}

template <class T> std::span<T> span(py::array &a) { return {static_cast<T *>(a.mutable_data()), size_t(a.size())}; }
template <class T> std::span<const T> cspan(const py::array &a) {
  return {static_cast<const T *>(a.data()), size_t(a.size())};
}

std::vector<NodeSpec> readNodes(const py::iterable &nodes) {
  std::vector<NodeSpec> out;
  for (py::handle h : nodes) {
    if (py::isinstance<py::str>(h)) {
      out.push_back({h.cast<std::string>(), {}});
      continue;
    }
    auto t = h.cast<py::tuple>();
    if (t.size() != 2)
      throw py::value_error("each node is a formula or a (formula, constants) pair");
    std::map<std::string, double> c;
    if (!t[1].is_none())
      c = t[1].cast<std::map<std::string, double>>();
    out.push_back({t[0].cast<std::string>(), std::move(c)});
  }
  return out;
}

py::dict compileInfoDict(const CompileInfo &i) {
  py::dict d;
  d["method"] = std::string(to_string(i.method));
  d["parse_ms"] = i.parseMs;
  d["diff_ms"] = i.diffMs;
  d["emit_ms"] = i.emitMs;
  d["optimize_ms"] = i.optimizeMs;
  d["codegen_ms"] = i.codegenMs;
  d["load_ms"] = i.loadMs;
  d["cache_hit"] = i.cacheHit;
  d["linked_from_cache"] = i.linkedFromCache;
  d["model_from_cache"] = i.modelFromCache;
  d["object_bytes"] = i.objectBytes;
  d["objects_compiled"] = i.objectsCompiled;
  d["objects_from_cache"] = i.objectsFromCache;
  d["compile_estimate_ms"] = i.compileEstimateMs;
  d["interpreter_ms"] = i.interpreterMs;
  d["compile_started"] = i.compileStarted;
  d["row_segments"] = i.rowSegments;
  return d;
}

// tiered=True: blocks (without the GIL) until the JIT's code runs.
constexpr const char *kWaitDoc = "tiered=True: wait until the JIT's code runs";
template <class T> void waitForCompile(const T &code) {
  Error e;
  {
    py::gil_scoped_release unlocked;
    e = code.waitForCompile();
  }
  check(e);
}

// An ActivationLayer or Loss as Python holds it, with the arguments it was
// made from (for pickling). pybind11 makes an instance's C++ object lazily,
// from uninitialised memory and without a constructor, when a method is
// called on an instance that __new__ made without __init__
// (type(o).__new__(type(o))). That memory is zeroed here, so `ready_` is
// false in it, and every access checks it.
template <class T, class Args, const char *Name> struct Held {
  Held(T value, Args args) : value_(std::move(value)), args(std::move(args)) {}
  static void *operator new(size_t size) { return std::memset(::operator new(size), 0, size); }
  static void operator delete(void *p) { ::operator delete(p); }
  const T &get() const { return checked(); }
  T &get() { return const_cast<T &>(checked()); }
  /// Unpickling a derived layer: the object made from the parent's
  /// arguments becomes the derivative it was.
  void replace(T value) { value_ = std::move(value); }

private:
  const T &checked() const {
    if (!ready_)
      throw py::type_error(std::string("this ") + Name + " was never initialised (made by __new__ without __init__); "
                           "create one with hsnn." + Name + "(...)");
    return value_;
  }
  bool ready_ = true;
  T value_;

public:
  Args args;
};
constexpr char kLayerName[] = "ActivationLayer", kLossName[] = "Loss";

// What unpickling calls: hsnn._restore(cls, args, state) makes the object
// and sets its constants. (A method named __setstate__ would be taken by
// pybind11 for a constructor.)
py::object restorer() { return py::module_::import("hsnn").attr("_restore"); }

// The arguments a layer or loss was made with (its current constants are
// read from it): enough to make it again in another process.
struct LayerArgs {
  std::vector<NodeSpec> nodes;
  std::string dtype = "float32", layout = "nodes_major", method = "auto";
  unsigned threads = 0;
  int optLevel = 3;
  bool fastMath = false, bake = false;
  int gpuId = 0;
  bool tiered = false;
  /// The derivation steps of a derived layer ("d", "t"), in order.
  std::vector<std::string> derivation{};
};
struct LossArgs {
  std::string formula;
  std::map<std::string, double> constants;
  std::string reduction = "mean", dtype = "float32", method = "auto";
  bool tiered = false;
  std::vector<std::string> derivation{}; ///< "d", "c:NAME"
};

// A derived object through the public calls that make it, one step at a
// time; its arguments record the steps (pickling makes it again so).
template <class Held, class Make>
Held derivedFrom(const Held &parent, const std::vector<std::string> &steps, Make make) {
  auto args = parent.args;
  auto value = parent.get();
  for (const std::string &step : steps) {
    std::optional<decltype(make(value, step))> made; // compiles: without the GIL, raised with it
    {
      py::gil_scoped_release unlocked;
      made.emplace(make(value, step));
    }
    value = take(std::move(*made));
    args.derivation.push_back(step);
  }
  return Held(std::move(value), std::move(args));
}
// `value` as an object of self's class (hsnn.ActivationLayer keeps its
// DLPack-aware methods): that class's copy constructor shares the code.
template <class Held> py::object sameClass(const py::object &self, Held value) {
  return py::type::of(self)(py::cast(std::move(value)));
}
Expected<ActivationLayer> layerStep(const ActivationLayer &l, const std::string &step) {
  if (step == "d")
    return l.derivativeLayer(1);
  if (step == "t")
    return l.constantTangentLayer();
  return Error(ErrorCode::InvalidArgument, "unknown derivation step '" + step + "'");
}
Expected<Loss> lossStep(const Loss &l, const std::string &step) {
  if (step == "d")
    return l.derivativeLoss(1);
  if (step == "y")
    return l.targetDerivativeLoss();
  if (step.starts_with("c:"))
    return l.constantDerivativeLoss(step.substr(2));
  return Error(ErrorCode::InvalidArgument, "unknown derivation step '" + step + "'");
}

// A layer over (nodes, batch) or (batch, nodes) arrays.
struct PyLayer : Held<ActivationLayer, LayerArgs, kLayerName> {
  explicit PyLayer(ActivationLayer l, LayerArgs a = {}) : Held(std::move(l), std::move(a)) {}

  std::vector<py::ssize_t> shapeFor(const py::array &z) const {
    if (z.ndim() != 2)
      throw py::value_error("'z' must be 2-D: (nodes, batch) for nodes_major, (batch, nodes) for batch_major");
    py::ssize_t nodes = py::ssize_t(get().numNodes());
    bool nm = get().layout() == Layout::NodesMajor;
    py::ssize_t batch = nm ? z.shape(0) == nodes ? z.shape(1) : -1 : z.shape(1) == nodes ? z.shape(0) : -1;
    if (batch < 0)
      throw py::value_error("'z' has " + std::to_string(nm ? z.shape(0) : z.shape(1)) + " nodes along axis " +
                            (nm ? "0" : "1") + "; the layer has " + std::to_string(nodes));
    return nm ? std::vector<py::ssize_t>{nodes, batch} : std::vector<py::ssize_t>{batch, nodes};
  }
  size_t batchOf(const std::vector<py::ssize_t> &shape) const {
    return size_t(get().layout() == Layout::NodesMajor ? shape[1] : shape[0]);
  }
  py::array output(const std::vector<py::ssize_t> &shape) const {
    return python::pooledArray(get().dtype() == DType::F32, shape);
  }
  py::array outputOr(const py::object &out, const char *name, const std::vector<py::ssize_t> &shape) const {
    if (out.is_none())
      return output(shape);
    py::array a = out.cast<py::array>();
    checkArray(a, name, get().dtype(), shape);
    if (!a.writeable())
      throw py::value_error(std::string("'") + name + "' is read-only");
    return a;
  }

  template <class T> Error run3(int kind, const py::array &z, const py::array *err, py::array &o0, py::array *o1,
                               size_t batch) const {
    py::gil_scoped_release unlocked;
    if (kind == 0)
      return get().forward(cspan<T>(z), span<T>(o0), batch);
    if (kind == 1)
      return get().backward(cspan<T>(z), cspan<T>(*err), span<T>(o0), batch);
    return get().fused(cspan<T>(z), span<T>(o0), span<T>(*o1), batch);
  }
  Error run(int kind, const py::array &z, const py::array *err, py::array &o0, py::array *o1, size_t batch) const {
    return get().dtype() == DType::F32 ? run3<float>(kind, z, err, o0, o1, batch) : run3<double>(kind, z, err, o0, o1, batch);
  }

  py::array forward(const py::array &z, const py::object &out) const {
    auto shape = shapeFor(z);
    checkArray(z, "z", get().dtype(), shape);
    py::array a = outputOr(out, "out", shape);
    check(run(0, z, nullptr, a, nullptr, batchOf(shape)));
    return a;
  }
  py::array backward(const py::array &z, const py::array &err, const py::object &out) const {
    auto shape = shapeFor(z);
    checkArray(z, "z", get().dtype(), shape);
    checkArray(err, "err", get().dtype(), shape);
    py::array d = outputOr(out, "out", shape);
    check(run(1, z, &err, d, nullptr, batchOf(shape)));
    return d;
  }
  py::tuple fused(const py::array &z) const {
    auto shape = shapeFor(z);
    checkArray(z, "z", get().dtype(), shape);
    py::array a = output(shape), d = output(shape);
    check(run(2, z, nullptr, a, &d, batchOf(shape)));
    return py::make_tuple(a, d);
  }
  // CUDA arrays (DLPack capsules): kind 0 forward (z, a), 1 backward (z,
  // err, delta), 2 fused (z, a, dfdz); outputs are the caller's.
  void runDevice(int kind, const py::list &capsules, const py::object &stream) const {
    static const char *names[3][3] = {{"z", "out", ""}, {"z", "err", "out"}, {"z", "a", "dfdz"}};
    size_t count = kind == 0 ? 2 : 3;
    if (capsules.size() != count)
      throw py::value_error("expected " + std::to_string(count) + " arrays");
    std::vector<python::DeviceArray> arrays;
    for (size_t i = 0; i < count; ++i)
      arrays.push_back(python::deviceArray(capsules[i].cast<py::capsule>(), names[kind][i], get().dtype()));
    const auto &shape = arrays[0].shape;
    if (shape.size() != 2)
      throw py::value_error("'z' must be 2-D: (nodes, batch) for nodes_major, (batch, nodes) for batch_major");
    bool nm = get().layout() == Layout::NodesMajor;
    if (shape[nm ? 0 : 1] != int64_t(get().numNodes()))
      throw py::value_error("'z' has " + std::to_string(shape[nm ? 0 : 1]) + " nodes along axis " + (nm ? "0" : "1") +
                            "; the layer has " + std::to_string(get().numNodes()));
    for (size_t i = 1; i < count; ++i)
      if (arrays[i].shape != shape)
        throw py::value_error(std::string("'") + names[kind][i] + "' must have the shape of 'z'");
    size_t batch = size_t(shape[nm ? 1 : 0]);
    auto scope = python::streamScope(stream, arrays[0].buffer);
    Error e;
    {
      py::gil_scoped_release unlocked;
      e = kind == 0   ? get().forward(arrays[0].buffer, arrays[1].buffer, batch)
          : kind == 1 ? get().backward(arrays[0].buffer, arrays[1].buffer, arrays[2].buffer, batch)
                      : get().fused(arrays[0].buffer, arrays[1].buffer, arrays[2].buffer, batch);
    }
    check(std::move(e));
  }

  py::array_t<double> constantGradients(const py::array &z, const py::array &err) const {
    auto shape = shapeFor(z);
    checkArray(z, "z", get().dtype(), shape);
    checkArray(err, "err", get().dtype(), shape);
    py::array_t<double> g(py::ssize_t(get().params().size()));
    std::span<double> out(g.mutable_data(), size_t(g.size()));
    size_t batch = batchOf(shape);
    Error e;
    {
      py::gil_scoped_release unlocked;
      e = get().dtype() == DType::F32 ? get().constantGradients(cspan<float>(z), cspan<float>(err), out, batch)
                                      : get().constantGradients(cspan<double>(z), cspan<double>(err), out, batch);
    }
    check(std::move(e));
    return g;
  }
};

// A loss over arrays of any shape (y_pred and y_true of the same shape).
struct PyLoss : Held<Loss, LossArgs, kLossName> {
  explicit PyLoss(Loss l, LossArgs a = {}) : Held(std::move(l), std::move(a)) {}

  void checkPair(const py::array &yp, const py::array &yt) const {
    std::vector<py::ssize_t> shape(yp.shape(), yp.shape() + yp.ndim());
    checkArray(yp, "y_pred", get().dtype(), shape);
    checkArray(yt, "y_true", get().dtype(), shape);
  }
  py::array like(const py::array &yp) const {
    std::vector<py::ssize_t> shape(yp.shape(), yp.shape() + yp.ndim());
    return python::pooledArray(get().dtype() == DType::F32, shape);
  }
  template <class T> Expected<double> call(int kind, const py::array &yp, const py::array &yt, py::array *out) const {
    py::gil_scoped_release unlocked;
    auto p = cspan<T>(yp), t = cspan<T>(yt);
    switch (kind) {
    case 0:
      return get().forward(p, t);
    case 1:
      if (Error e = get().forwardElements(p, t, span<T>(*out)))
        return e;
      return 0.0;
    case 2:
      if (Error e = get().gradient(p, t, span<T>(*out)))
        return e;
      return 0.0;
    default:
      return get().fused(p, t, span<T>(*out));
    }
  }
  double run(int kind, const py::array &yp, const py::array &yt, py::array *out) const {
    checkPair(yp, yt);
    return take(get().dtype() == DType::F32 ? call<float>(kind, yp, yt, out) : call<double>(kind, yp, yt, out));
  }
  // CUDA arrays (DLPack capsules): kind 0 forward (y_pred, y_true), 1
  // elements, 2 gradient, 3 fused (the third array is the caller's output),
  // 4 fused with the reduced loss left in a fourth, one-element array (no
  // value comes back to the host: nothing waits for the device).
  double runDevice(int kind, const py::list &capsules, const py::object &stream) const {
    static const char *names[4] = {"y_pred", "y_true", "out", "value"};
    size_t count = kind == 0 ? 2 : kind == 4 ? 4 : 3;
    if (capsules.size() != count)
      throw py::value_error("expected " + std::to_string(count) + " arrays");
    std::vector<python::DeviceArray> a;
    for (size_t i = 0; i < count; ++i)
      a.push_back(python::deviceArray(capsules[i].cast<py::capsule>(), names[i], get().dtype()));
    for (size_t i = 1; i < std::min<size_t>(count, 3); ++i)
      if (a[i].shape != a[0].shape)
        throw py::value_error(std::string("'") + names[i] + "' must have the shape of 'y_pred'");
    auto scope = python::streamScope(stream, a[0].buffer);
    Expected<double> r = 0.0;
    {
      py::gil_scoped_release unlocked;
      if (kind == 4)
        r = errorOr(get().fused(a[0].buffer, a[1].buffer, a[2].buffer, a[3].buffer));
      else if (kind == 0)
        r = get().forward(a[0].buffer, a[1].buffer);
      else if (kind == 1)
        r = errorOr(get().forwardElements(a[0].buffer, a[1].buffer, a[2].buffer));
      else if (kind == 2)
        r = errorOr(get().gradient(a[0].buffer, a[1].buffer, a[2].buffer));
      else
        r = get().fused(a[0].buffer, a[1].buffer, a[2].buffer);
    }
    return take(std::move(r));
  }
  static Expected<double> errorOr(Error e) {
    if (e)
      return e;
    return 0.0;
  }
};

} // namespace

// hsnn._torch's way to the C++ object behind a Python layer or loss
// (RawRun.h; the entries that run them are RawRun.cpp's).
namespace raw {

template <class Held> const void *objectOf(PyObject *object, char *message, size_t size) {
  try {
    return &py::handle(object).cast<const Held &>().get();
  } catch (const std::exception &e) {
    std::snprintf(message, size, "%s", e.what());
    return nullptr;
  }
}

const void *layerOf(PyObject *object, char *message, size_t size) {
  const void *l = objectOf<PyLayer>(object, message, size);
  if (l && static_cast<const ActivationLayer *>(l)->layout() != Layout::BatchMajor) {
    std::snprintf(message, size, "%s", "the layer is nodes_major; hsnn._torch runs batch_major layers");
    return nullptr;
  }
  return l;
}

const void *lossOf(PyObject *object, char *message, size_t size) { return objectOf<PyLoss>(object, message, size); }

} // namespace raw

PYBIND11_MODULE(_core, m) {
  m.doc() = "hsnn: formulas to fast numeric kernels (the C++ engine's Python bindings)";
  m.attr("__version__") = HSNN_PYTHON_VERSION;
  m.def("_set_formula_error", [](py::object cls) { python::formulaErrorClass() = std::move(cls); });

  py::class_<PyLayer>(m, "ActivationLayer", "One formula per node, run over (nodes, batch) or (batch, nodes) arrays.")
      // A copy (copy.copy keeps the caller's class): shares the compiled code, owns its constants.
      .def(py::init([](const PyLayer &other) { return PyLayer(other.get(), other.args); }), py::arg("other"))
      .def(py::init([](const py::iterable &nodes, const py::object &dtype, const std::string &layout,
                       const std::string &method, unsigned threads, int optLevel, bool fastMath, bool bake, int gpuId,
                       bool tiered, const py::object &progress) {
             LayerOptions o{parseMethodName(method), parseDType(dtype), parseLayout(layout), threads, optLevel, fastMath,
                            bake, gpuId, tiered};
             std::vector<NodeSpec> specs = readNodes(nodes);
             LayerArgs args{specs, numpyName(o.dtype), layout, method, threads, optLevel, fastMath, bake, gpuId, tiered};
             if (progress.is_none())
               return PyLayer(take(ActivationLayer::compile(specs, o)), std::move(args));
             // Compile threads call back into Python: the GIL must be free while compiling.
             // Its last owner may be a compile thread: drop the reference under the GIL.
             std::shared_ptr<py::object> callback(new py::object(progress), [](py::object *p) {
               py::gil_scoped_acquire locked;
               delete p;
             });
             o.progress = [callback](size_t done, size_t total) {
               py::gil_scoped_acquire locked;
               try {
                 (*callback)(done, total);
               } catch (py::error_already_set &e) {
                 e.discard_as_unraisable("hsnn progress callback");
               }
             };
             std::optional<Expected<ActivationLayer>> compiled;
             {
               py::gil_scoped_release unlocked;
               compiled.emplace(ActivationLayer::compile(specs, o));
             }
             return PyLayer(take(std::move(*compiled)), std::move(args));
           }),
           py::arg("nodes"), py::arg("dtype") = "float32", py::arg("layout") = "nodes_major", py::arg("method") = "auto",
           py::arg("threads") = 0, py::arg("opt_level") = 3, py::arg("fast_math") = false,
           py::arg("bake_constants") = false, py::arg("gpu_id") = 0, py::arg("tiered") = false,
           py::arg("progress") = py::none())
      .def("wait_for_compile", [](const PyLayer &l) { waitForCompile(l.get()); }, kWaitDoc)
      .def("forward", &PyLayer::forward, py::arg("z"), py::arg("out") = py::none(), "a = f(z)")
      .def("backward", &PyLayer::backward, py::arg("z"), py::arg("err"), py::arg("out") = py::none(),
           "delta = err * f'(z)")
      .def("fused", &PyLayer::fused, py::arg("z"), "(f(z), f'(z)) in one pass")
      .def("_run_device", &PyLayer::runDevice, py::arg("kind"), py::arg("capsules"), py::arg("stream") = py::none(),
           "CUDA DLPack capsules: 0 forward (z, a), 1 backward (z, err, delta), 2 fused (z, a, dfdz); on `stream` "
           "(a CUstream handle, queued without waiting) or, if None, the legacy default stream (waited for)")
      .def("_time_forward", [](const PyLayer &l, const py::array &z, py::array out, int reps) {
             // The same forward timed inside C++ (median ms), for hsnn.bench's Python-overhead figure.
             auto shape = l.shapeFor(z);
             checkArray(z, "z", l.get().dtype(), shape);
             checkArray(out, "out", l.get().dtype(), shape);
             std::vector<double> ms;
             for (int r = 0; r < std::max(1, reps); ++r) {
               auto t0 = std::chrono::steady_clock::now();
               check(l.run(0, z, nullptr, out, nullptr, l.batchOf(shape)));
               ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
             }
             std::sort(ms.begin(), ms.end());
             return ms[ms.size() / 2];
           }, py::arg("z"), py::arg("out"), py::arg("reps") = 9)
      .def("set_constant", [](PyLayer &l, size_t node, const std::string &name, double v) { check(l.get().setConstant(node, name, v)); },
           py::arg("node"), py::arg("name"), py::arg("value"))
      .def("set_params", [](PyLayer &l, py::array_t<double, py::array::c_style | py::array::forcecast> v) {
             check(l.get().setParams({v.data(), size_t(v.size())}));
           }, py::arg("values"), "every constant at once, in params order")
      .def("constant_gradients", &PyLayer::constantGradients, py::arg("z"), py::arg("err"),
           "per params entry: the sum over its node's batch of err * df/dc (float64)")
      .def("constant", [](const PyLayer &l, size_t node, const std::string &name) { return take(l.get().constant(node, name)); },
           py::arg("node"), py::arg("name"))
      .def("constant_names", [](const PyLayer &l, size_t node) { return l.get().constantNames(node); })
      .def("formula", [](const PyLayer &l, size_t node) { return l.get().formula(node); })
      .def("derivative", [](const PyLayer &l, size_t node) { return l.get().derivative(node); })
      .def("compile_info", [](const PyLayer &l) { return compileInfoDict(l.get().compileInfo()); })
      .def("derivative_layer", [](const py::object &self, unsigned order) {
             const PyLayer &l = self.cast<const PyLayer &>();
             if (order > 8) // the engine says so too; a huge count must not build a huge list first
               check(l.get().derivativeLayer(order).takeError());
             return sameClass(self, derivedFrom(l, std::vector<std::string>(order, "d"), layerStep));
           }, py::arg("order") = 1,
           "A layer over the same nodes whose formulas are these differentiated `order` times in num: its forward\n"
           "is f^(k), backward err * f^(k+1), fused both, constant_gradients sums err * d f^(k)/dc. Same options\n"
           "and current constants; compiled now (keep it).")
      .def("constant_tangent_layer", [](const py::object &self) {
             return sameClass(self, derivedFrom(self.cast<const PyLayer &>(), {"t"}, layerStep));
           },
           "A layer whose node n runs sum_i t_i * df_n/dc_i: its params are, per node, these constants followed by\n"
           "the directions t (named c', 0 until set).")
      .def_property_readonly("derivation", [](const PyLayer &l) { return l.args.derivation; })
      .def("set_gpu_id", [](PyLayer &l, int id) { check(l.get().setGpuId(id)); }, py::arg("id"))
      .def_property_readonly("gpu_id", [](const PyLayer &l) { return l.get().gpuId(); })
      .def("__copy__", [](const py::object &self) { return py::type::of(self)(self); })
      .def("__deepcopy__", [](const py::object &self, const py::dict &) { return py::type::of(self)(self); })
      // Pickled as what it was made from and its current constants, in any protocol.
      .def("__reduce__", [](const py::object &self) {
             const PyLayer &l = self.cast<const PyLayer &>();
             py::list nodes;
             for (const NodeSpec &n : l.args.nodes)
               nodes.append(py::make_tuple(n.formula, n.constants));
             const LayerArgs &a = l.args;
             py::tuple init = py::make_tuple(nodes, a.dtype, a.layout, a.method, a.threads, a.optLevel, a.fastMath, a.bake,
                                             a.gpuId, a.tiered);
             // Baked constants cannot change, so there is nothing to restore.
             py::object params = a.bake ? py::object(py::none()) : py::cast(l.get().params());
             py::object state = a.derivation.empty() ? params : py::object(py::make_tuple(a.derivation, params));
             return py::make_tuple(restorer(), py::make_tuple(py::type::of(self), init, state));
           })
      .def("_set_state", [](PyLayer &l, const py::object &state) {
             py::object params = state;
             if (py::isinstance<py::tuple>(state)) { // (derivation, params): a derived layer
               auto steps = state[py::int_(0)].cast<std::vector<std::string>>();
               PyLayer derived = derivedFrom(l, steps, layerStep);
               l.replace(derived.get());
               l.args = derived.args;
               params = state[py::int_(1)];
             }
             if (!params.is_none())
               check(l.get().setParams(params.cast<std::vector<double>>()));
           })
      .def_property_readonly("num_nodes", [](const PyLayer &l) { return l.get().numNodes(); })
      .def_property_readonly("dtype", [](const PyLayer &l) { return numpyName(l.get().dtype()); })
      .def_property_readonly("layout", [](const PyLayer &l) { return std::string(to_string(l.get().layout())); })
      .def_property_readonly("method", [](const PyLayer &l) { return std::string(to_string(l.get().method())); })
      .def_property_readonly("params", [](const PyLayer &l) { return l.get().params(); })
      .def_property_readonly("offsets", [](const PyLayer &l) {
        auto o = l.get().offsets();
        return std::vector<uint64_t>(o.begin(), o.end());
      });

  py::class_<PyLoss>(m, "Loss", "A loss formula in y_pred and y_true.")
      .def(py::init([](const PyLoss &other) { return PyLoss(other.get(), other.args); }), py::arg("other"))
      .def(py::init([](const std::string &formula, const py::object &constants, const std::string &reduction,
                       const py::object &dtype, const std::string &method, bool tiered) {
             std::map<std::string, double> c;
             if (!constants.is_none())
               c = constants.cast<std::map<std::string, double>>();
             LossOptions o{parseMethodName(method), parseDType(dtype), parseReduction(reduction)};
             o.tiered = tiered;
             LossArgs args{formula, c, reduction, numpyName(o.dtype), method, tiered};
             return PyLoss(take(Loss::compile(formula, c, o)), std::move(args));
           }),
           py::arg("formula"), py::arg("constants") = py::none(), py::arg("reduction") = "mean",
           py::arg("dtype") = "float32", py::arg("method") = "auto", py::arg("tiered") = false)
      .def("wait_for_compile", [](const PyLoss &l) { waitForCompile(l.get()); }, kWaitDoc)
      .def("__copy__", [](const py::object &self) { return py::type::of(self)(self); })
      .def("__deepcopy__", [](const py::object &self, const py::dict &) { return py::type::of(self)(self); })
      .def("__reduce__", [](const py::object &self) {
             const PyLoss &l = self.cast<const PyLoss &>();
             const LossArgs &a = l.args;
             py::dict constants;
             for (const std::string &name : l.get().constantNames())
               constants[py::str(name)] = take(l.get().constant(name));
             py::tuple init = py::make_tuple(a.formula, a.constants, a.reduction, a.dtype, a.method, a.tiered);
             py::object state = a.derivation.empty() ? py::object(constants)
                                                     : py::object(py::make_tuple(a.derivation, constants));
             return py::make_tuple(restorer(), py::make_tuple(py::type::of(self), init, state));
           })
      .def("_set_state", [](PyLoss &l, const py::object &state) {
             py::object constants = state;
             if (py::isinstance<py::tuple>(state)) { // (derivation, constants): a derived loss
               PyLoss derived = derivedFrom(l, state[py::int_(0)].cast<std::vector<std::string>>(), lossStep);
               l.replace(derived.get());
               l.args = derived.args;
               constants = state[py::int_(1)];
             }
             for (const auto &[name, value] : constants.cast<std::map<std::string, double>>())
               check(l.get().setConstant(name, value));
           })
      .def("derivative_loss", [](const py::object &self, unsigned order) {
             const PyLoss &l = self.cast<const PyLoss &>();
             if (order > 8)
               check(l.get().derivativeLoss(order).takeError());
             return sameClass(self, derivedFrom(l, std::vector<std::string>(order, "d"), lossStep));
           }, py::arg("order") = 1,
           "A loss whose formula is this one differentiated `order` times in y_pred (forward_elements gives\n"
           "d^k l/dy_pred^k per element; gradient the next order). Same options and current constants.")
      .def("constant_derivative_loss", [](const py::object &self, const std::string &name) {
             return sameClass(self, derivedFrom(self.cast<const PyLoss &>(), {"c:" + name}, lossStep));
           }, py::arg("name"), "A loss whose formula is dl/d(name), per element with forward_elements.")
      .def("target_derivative_loss", [](const py::object &self) {
             return sameClass(self, derivedFrom(self.cast<const PyLoss &>(), {"y"}, lossStep));
           }, "A loss whose formula is dl/dy_true, per element with forward_elements (differentiable again).")
      .def_property_readonly("derivation", [](const PyLoss &l) { return l.args.derivation; })
      .def("forward", [](const PyLoss &l, const py::array &yp, const py::array &yt) { return l.run(0, yp, yt, nullptr); },
           py::arg("y_pred"), py::arg("y_true"), "the reduced loss")
      .def("forward_elements", [](const PyLoss &l, const py::array &yp, const py::array &yt) {
             py::array out = l.like(yp);
             l.run(1, yp, yt, &out);
             return out;
           }, py::arg("y_pred"), py::arg("y_true"))
      .def("gradient", [](const PyLoss &l, const py::array &yp, const py::array &yt) {
             py::array out = l.like(yp);
             l.run(2, yp, yt, &out);
             return out;
           }, py::arg("y_pred"), py::arg("y_true"), "d loss / d y_pred (scaled by 1/n for mean)")
      .def("fused", [](const PyLoss &l, const py::array &yp, const py::array &yt) {
             py::array out = l.like(yp);
             double v = l.run(3, yp, yt, &out);
             return py::make_tuple(v, out);
           }, py::arg("y_pred"), py::arg("y_true"), "(loss, gradient) in one pass")
      .def("_run_device", &PyLoss::runDevice, py::arg("kind"), py::arg("capsules"), py::arg("stream") = py::none(),
           "CUDA DLPack capsules: 0 forward, 1 elements, 2 gradient, 3 fused (y_pred, y_true[, out]), 4 fused with "
           "the loss left in a one-element fourth array (returns 0); `stream` as for layers")
      .def("set_constant", [](PyLoss &l, const std::string &name, double v) { check(l.get().setConstant(name, v)); })
      .def("constant", [](const PyLoss &l, const std::string &name) { return take(l.get().constant(name)); })
      .def("constant_names", [](const PyLoss &l) { return l.get().constantNames(); })
      .def("constant_gradients", [](const PyLoss &l, const py::array &yp, const py::array &yt) {
             l.checkPair(yp, yt);
             py::array_t<double> g(py::ssize_t(l.get().constantNames().size()));
             std::span<double> out(g.mutable_data(), size_t(g.size()));
             Error e;
             {
               py::gil_scoped_release unlocked;
               e = l.get().dtype() == DType::F32 ? l.get().constantGradients(cspan<float>(yp), cspan<float>(yt), out)
                                                : l.get().constantGradients(cspan<double>(yp), cspan<double>(yt), out);
             }
             check(std::move(e));
             return g;
           }, py::arg("y_pred"), py::arg("y_true"), "d(loss)/dc per constant (constant_names order), reduced as the loss")
      .def("formula", [](const PyLoss &l) { return l.get().formula(); })
      .def("derivative", [](const PyLoss &l) { return l.get().derivative(); })
      .def("compile_info", [](const PyLoss &l) { return compileInfoDict(l.get().compileInfo()); })
      .def("set_gpu_id", [](PyLoss &l, int id) { check(l.get().setGpuId(id)); }, py::arg("id"))
      .def_property_readonly("gpu_id", [](const PyLoss &l) { return l.get().gpuId(); })
      .def_property_readonly("reduction", [](const PyLoss &l) { return std::string(to_string(l.get().reduction())); })
      .def_property_readonly("dtype", [](const PyLoss &l) { return numpyName(l.get().dtype()); })
      .def_property_readonly("method", [](const PyLoss &l) { return std::string(to_string(l.get().method())); });

  m.def("_empty", [](const std::vector<py::ssize_t> &shape, const std::string &dtype) {
    if (dtype != "float32" && dtype != "float64")
      throw py::value_error("dtype must be 'float32' or 'float64'");
    return python::pooledArray(dtype == "float32", shape);
  }, py::arg("shape"), py::arg("dtype"), "an uninitialised result array from the pool of recycled blocks");
  m.attr("_min_pooled_bytes") = python::kMinPooledBytes;
  m.def("_pooled_bytes", &python::pooledBytes, "bytes of freed results waiting for reuse");
  m.def("_multiply", &python::multiply, py::arg("a"), py::arg("b"), "a * b into a pooled array, on TBB's threads");
  m.def("_raw_run", [] {
    static const python::RawEntries entries = python::rawEntries(raw::layerOf, raw::lossOf);
    return py::capsule(const_cast<python::RawEntries *>(&entries), python::kRawRunCapsule);
  },
        "for hsnn._torch: a capsule holding the C entries that run layers and losses on raw host arrays (RawRun.h)");
  python::bindFunctions(m);
  python::bindBackends(m);
  python::bindPopulation(m);
}
