//===- python/src/Population.cpp - hsnn.Population's native half ----------===//
//
// _core._Population over NumPy arrays the Python class (hsnn/population.py)
// has already shaped: X C-contiguous (rows x variables) or Fortran-ordered
// (read in place), y and weights contiguous, all of the population's dtype.
// The GIL is released while formulas are prepared and scored.
//
//===----------------------------------------------------------------------===//
#include <hsnn/Population.h>
#include <hsnn/Runtime.h>

#include "Bindings.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

namespace hsnn::python {
namespace {

template <class T> std::span<const T> values(const py::array &a) {
  return {static_cast<const T *>(a.data()), size_t(a.size())};
}

// The data as the population reads it; arrays are kept alive by the caller.
template <class T>
PopulationData<T> dataOf(const py::array &x, size_t rows, bool colMajor, const py::object &y, const py::object &w) {
  PopulationData<T> d{.x = values<T>(x), .rows = rows, .layout = colMajor ? DataLayout::ColMajor : DataLayout::RowMajor};
  if (!y.is_none())
    d.y = values<T>(y.cast<py::array>());
  if (!w.is_none())
    d.weights = values<T>(w.cast<py::array>());
  return d;
}

PopulationLoss lossOf(const std::string &formula, const std::map<std::string, double> &constants,
                      const std::string &reduction) {
  return {formula, constants, choose<Reduction>("reduction", reduction, {{"mean", Reduction::Mean}, {"sum", Reduction::Sum}})};
}

template <class T>
py::array evaluate(const Population &p, const py::array &x, size_t rows, bool colMajor, bool variables) {
  size_t per = variables ? p.options().variables.size() : 1;
  py::array_t<T> out(std::vector<py::ssize_t>{py::ssize_t(p.size()), py::ssize_t(per), py::ssize_t(rows)});
  std::span<T> o(out.mutable_data(), size_t(out.size()));
  auto d = dataOf<T>(x, rows, colMajor, py::none(), py::none());
  Error e;
  {
    py::gil_scoped_release release;
    e = variables ? p.variableGradients(d, o) : p.evaluate(d, o);
  }
  check(e);
  if (!variables)
    return out.reshape({py::ssize_t(p.size()), py::ssize_t(rows)});
  return out;
}

template <class T>
py::object score(const Population &p, const py::array &x, size_t rows, bool colMajor, const py::object &y,
                 const py::object &w, const PopulationLoss &loss, bool gradients) {
  py::array_t<double> scores(py::ssize_t(p.size()));
  py::array_t<double> grads(py::ssize_t(p.allConstants().size()));
  auto d = dataOf<T>(x, rows, colMajor, y, w);
  std::span<double> s(scores.mutable_data(), p.size()), g(grads.mutable_data(), size_t(grads.size()));
  Error e;
  {
    py::gil_scoped_release release;
    e = gradients ? p.constantGradients(d, s, g, loss) : p.fitness(d, s, loss);
  }
  check(e);
  if (gradients)
    return py::make_tuple(scores, grads);
  return scores;
}

PopulationOptions optionsOf(std::vector<std::string> variables, bool f64, bool literals, const std::string &method,
                            int gpuId) {
  return {.variables = std::move(variables),
          .dtype = f64 ? DType::F64 : DType::F32,
          .literalsAsConstants = literals,
          .method = take(parseMethod(method)),
          .gpuId = gpuId};
}

} // namespace

void bindPopulation(py::module_ &m) {
  py::class_<Population>(m, "_Population")
      .def(py::init([](const std::vector<std::pair<std::string, std::map<std::string, double>>> &members,
                       std::vector<std::string> variables, bool f64, bool literals, const std::string &method,
                       int gpuId) {
             std::vector<PopulationMember> ms;
             ms.reserve(members.size());
             for (const auto &[f, c] : members)
               ms.push_back({f, c});
             PopulationOptions o = optionsOf(std::move(variables), f64, literals, method, gpuId);
             py::gil_scoped_release release;
             return take(Population::create(ms, o));
           }),
           py::arg("members"), py::arg("variables"), py::arg("f64"), py::arg("literals_as_constants"),
           py::arg("method") = "auto", py::arg("gpu_id") = 0)
      .def_static(
          "from_arrays",
          [](py::array_t<int32_t, py::array::c_style | py::array::forcecast> codes,
             py::array_t<double, py::array::c_style | py::array::forcecast> vals,
             py::array_t<int64_t, py::array::c_style | py::array::forcecast> offsets, bool postfix,
             std::vector<std::string> variables, bool f64, bool literals, const std::string &method, int gpuId) {
            PopulationArrays a{.codes = {codes.data(), size_t(codes.size())},
                               .values = {vals.data(), size_t(vals.size())},
                               .offsets = {offsets.data(), size_t(offsets.size())},
                               .postfix = postfix};
            PopulationOptions o = optionsOf(std::move(variables), f64, literals, method, gpuId);
            py::gil_scoped_release release;
            return take(Population::fromArrays(a, o));
          },
          py::arg("codes"), py::arg("values"), py::arg("offsets"), py::arg("postfix"), py::arg("variables"),
          py::arg("f64"), py::arg("literals_as_constants"), py::arg("method") = "auto", py::arg("gpu_id") = 0)
      .def("__len__", &Population::size)
      .def_property_readonly("errors",
                             [](const Population &p) {
                               py::list out;
                               for (const Diagnostic &d : p.errors())
                                 out.append(py::make_tuple(d.node, d.column, d.message, d.render()));
                               return out;
                             })
      .def("valid", &Population::valid)
      .def("simplified", &Population::simplified)
      .def("constant_names", &Population::constantNames)
      .def_property_readonly("constants",
                             [](const Population &p) {
                               auto c = p.allConstants();
                               return py::array_t<double>(py::ssize_t(c.size()), c.data());
                             })
      .def_property_readonly("offsets",
                             [](const Population &p) {
                               py::array_t<int64_t> o(py::ssize_t(p.size() + 1));
                               for (size_t i = 0; i <= p.size(); ++i)
                                 o.mutable_data()[i] = int64_t(i < p.size() ? p.constantOffset(i) : p.allConstants().size());
                               return o;
                             })
      .def("set_constants",
           [](Population &p, py::array_t<double, py::array::c_style | py::array::forcecast> v) {
             check(p.setConstants({v.data(), size_t(v.size())}));
           })
      .def("evaluate",
           [](const Population &p, const py::array &x, size_t rows, bool colMajor, bool f64, bool variables) {
             return f64 ? evaluate<double>(p, x, rows, colMajor, variables)
                        : evaluate<float>(p, x, rows, colMajor, variables);
           })
      .def("score", [](const Population &p, const py::array &x, size_t rows, bool colMajor, bool f64, const py::object &y,
                       const py::object &w, const std::string &loss, const std::map<std::string, double> &lossConstants,
                       const std::string &reduction, bool gradients) {
        PopulationLoss l = lossOf(loss, lossConstants, reduction);
        return f64 ? score<double>(p, x, rows, colMajor, y, w, l, gradients)
                   : score<float>(p, x, rows, colMajor, y, w, l, gradients);
      });
  m.def("_population_op_codes", [] {
    py::dict d;
    for (auto &[name, code] : populationOpCodes())
      d[py::str(name)] = code;
    return d;
  });
}

} // namespace hsnn::python
