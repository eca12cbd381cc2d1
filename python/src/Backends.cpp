//===- python/src/Backends.cpp - hsnn::Backend for Python -------------------===//
//
// The C++ backends (host memory, CUDA devices) and their typed buffers as
// _core._Backend and _core._DeviceArray, which hsnn.backends wraps in the
// seed's Backend surface. A device array exports itself through DLPack
// (the capsule keeps the buffer alive), so NumPy, PyTorch and hsnn's own
// layers read it without a copy.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"
#include "DeviceArrays.h"

#include <hsnn/Backend.h>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace py = pybind11;

namespace hsnn::python {
namespace {

constexpr int32_t kDLCPU = 1;

struct PyDeviceArray {
  DeviceBuffer buffer;
  std::vector<int64_t> shape;
  int deviceId = -1;

  size_t size() const { return buffer.count(); }
  const char *dtypeName() const { return buffer.dtype() == DType::F32 ? "float32" : "float64"; }
};

// What a capsule's DLManagedTensor owns: the buffer (kept alive while the
// consumer holds the tensor) and the shape it points to.
struct Exported {
  DLManagedTensor tensor{};
  DeviceBuffer buffer;
  std::vector<int64_t> shape;
};

py::capsule exportDLPack(const PyDeviceArray &a) {
  auto *e = new Exported{{}, a.buffer, a.shape};
  DLTensor &t = e->tensor.dl_tensor;
  t.data = a.buffer.data();
  t.device = {a.deviceId < 0 ? kDLCPU : kDLCUDA, a.deviceId < 0 ? 0 : a.deviceId};
  t.ndim = int32_t(e->shape.size());
  t.dtype = {2, uint8_t(a.buffer.dtype() == DType::F32 ? 32 : 64), 1};
  t.shape = e->shape.data();
  t.strides = nullptr; // C-contiguous
  t.byte_offset = 0;
  e->tensor.manager_ctx = e;
  e->tensor.deleter = [](DLManagedTensor *m) { delete static_cast<Exported *>(m->manager_ctx); };
  // A capsule no consumer took frees the tensor itself; a consumer renames
  // it "used_dltensor" and calls the deleter when done.
  return py::capsule(&e->tensor, "dltensor", [](PyObject *capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor")) {
      auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(capsule, "dltensor"));
      m->deleter(m);
    } else {
      PyErr_Clear();
    }
  });
}

DType dtypeOf(const py::object &d) {
  std::string s = py::str(py::module_::import("numpy").attr("dtype")(d));
  if (s == "float32")
    return DType::F32;
  if (s == "float64")
    return DType::F64;
  throw py::type_error("hsnn arrays hold float32 or float64, not " + s);
}

std::vector<int64_t> shapeOf(const py::object &shape) {
  std::vector<int64_t> out;
  if (py::isinstance<py::int_>(shape))
    out.push_back(shape.cast<int64_t>());
  else
    for (py::handle h : shape)
      out.push_back(h.cast<int64_t>());
  for (int64_t d : out)
    if (d < 0)
      throw py::value_error("a shape's dimensions are not negative");
  return out;
}

size_t countOf(const std::vector<int64_t> &shape) {
  size_t n = 1;
  for (int64_t d : shape) {
    if (d && n > SIZE_MAX / size_t(d))
      throw py::value_error("the shape's element count overflows");
    n *= size_t(d);
  }
  return n;
}

struct PyBackend {
  std::shared_ptr<Backend> backend;

  PyDeviceArray allocate(const py::object &shape, const py::object &dtype) const {
    std::vector<int64_t> s = shapeOf(shape);
    DeviceBuffer b = take(backend->allocate(countOf(s), dtypeOf(dtype)));
    return {std::move(b), std::move(s), backend->deviceId()};
  }
  PyDeviceArray toDevice(const py::array &host) const {
    DType d = dtypeOf(host.dtype());
    py::array c = py::array::ensure(host, py::array::c_style);
    std::vector<int64_t> s(c.shape(), c.shape() + c.ndim());
    DeviceBuffer b = take(backend->allocate(countOf(s), d));
    {
      py::gil_scoped_release unlocked;
      check(backend->toDevice(b, c.data(), b.bytes()));
    }
    return {std::move(b), std::move(s), backend->deviceId()};
  }
  py::array toHost(const PyDeviceArray &a) const {
    std::vector<py::ssize_t> s(a.shape.begin(), a.shape.end());
    py::array out = a.buffer.dtype() == DType::F32 ? py::array(py::array_t<float>(s)) : py::array(py::array_t<double>(s));
    py::gil_scoped_release unlocked;
    check(backend->toHost(out.mutable_data(), a.buffer, a.buffer.bytes()));
    return out;
  }
};

} // namespace

void bindBackends(py::module_ &m) {
  py::class_<PyDeviceArray>(m, "_DeviceArray", "Typed memory of one backend, exported through DLPack")
      .def_property_readonly("shape", [](const PyDeviceArray &a) { return py::tuple(py::cast(a.shape)); })
      .def_property_readonly("dtype", [](const PyDeviceArray &a) { return py::module_::import("numpy").attr("dtype")(a.dtypeName()); })
      .def_property_readonly("size", &PyDeviceArray::size)
      .def_property_readonly("nbytes", [](const PyDeviceArray &a) { return a.buffer.bytes(); })
      .def_property_readonly("backend", [](const PyDeviceArray &a) { return a.buffer.backend(); })
      .def("__dlpack__", [](const PyDeviceArray &a, const py::object &) { return exportDLPack(a); },
           py::arg("stream") = py::none(), "the array as a DLPack capsule (no copy; hsnn's work is synchronous)")
      .def("__dlpack_device__", [](const PyDeviceArray &a) {
        return py::make_tuple(a.deviceId < 0 ? kDLCPU : kDLCUDA, a.deviceId < 0 ? 0 : a.deviceId);
      })
      // Host memory: a writable NumPy view (np.asarray(a)); NumPy's DLPack import is read-only.
      .def_property_readonly("__array_interface__", [](const PyDeviceArray &a) -> py::object {
        if (a.deviceId >= 0)
          throw py::attribute_error("a CUDA array has no NumPy view: use to_host(), or DLPack (__dlpack__)");
        py::dict d;
        d["shape"] = py::tuple(py::cast(a.shape));
        d["typestr"] = a.buffer.dtype() == DType::F32 ? "<f4" : "<f8";
        d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(a.buffer.data()), false);
        d["version"] = 3;
        return d;
      })
      .def("__len__", [](const PyDeviceArray &a) { return a.shape.empty() ? 0 : a.shape[0]; })
      .def("reshape", [](const PyDeviceArray &a, const py::args &shape) {
             // One tuple or the dimensions themselves, as NumPy takes them.
             std::vector<int64_t> s = shapeOf(shape.size() == 1 && !py::isinstance<py::int_>(shape[0])
                                                  ? py::object(shape[0]) : py::object(shape));
             if (countOf(s) != a.size())
               throw py::value_error("cannot reshape an array of " + std::to_string(a.size()) + " elements to " +
                                     py::str(py::tuple(py::cast(s))).cast<std::string>());
             return PyDeviceArray{a.buffer, std::move(s), a.deviceId};
           },
           "A view of the same memory with another shape of as many elements.");

  py::class_<PyBackend>(m, "_Backend", "hsnn::Backend: where arrays live and how they move")
      .def(py::init([](const std::string &spec) { return PyBackend{take(getBackend(spec))}; }), py::arg("spec"))
      .def_property_readonly("name", [](const PyBackend &b) { return b.backend->name(); })
      .def_property_readonly("device_id", [](const PyBackend &b) { return b.backend->deviceId(); })
      .def_property_readonly("device_name", [](const PyBackend &b) { return b.backend->deviceName(); })
      .def_property_readonly("compute_capability", [](const PyBackend &b) { return b.backend->computeCapability(); })
      .def_property_readonly("is_available", [](const PyBackend &b) { return b.backend->isAvailable(); })
      .def("allocate", &PyBackend::allocate, py::arg("shape"), py::arg("dtype") = "float32")
      .def("to_device", &PyBackend::toDevice, py::arg("host"))
      .def("to_host", &PyBackend::toHost, py::arg("array"))
      .def("synchronize", [](const PyBackend &b) {
        py::gil_scoped_release unlocked;
        check(b.backend->synchronize());
      })
      .def("get_memory_info", [](const PyBackend &b) {
        MemoryInfo i = take(b.backend->memoryInfo());
        return py::make_tuple(i.free, i.total);
      })
      .def("supports_feature", [](const PyBackend &b, const std::string &f) { return b.backend->supportsFeature(f); },
           py::arg("feature"));
}

} // namespace hsnn::python
