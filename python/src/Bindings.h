//===- python/src/Bindings.h - Errors to Python exceptions ------*- C++ -*-===//
//
// What every binding file shares: hsnn's Error values as Python exceptions
// (formula errors as hsnn.FormulaError with node and column, bad arguments
// as ValueError, the rest as RuntimeError), and the binding functions.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <hsnn/Error.h>

#include <pybind11/pybind11.h>

#include <cstdlib>
#include <initializer_list>
#include <utility>
#include <string>

namespace hsnn::python {

namespace py = pybind11;

/// hsnn.FormulaError, set by the package at import.
inline py::object &formulaErrorClass() {
  static py::object *cls = new py::object(); // never destroyed: Python may be gone at exit
  return *cls;
}

// Raises the Python exception for an Error (which must be a failure).
[[noreturn]] inline void raise(const Error &e) {
  if (e.code() == ErrorCode::InvalidFormula && formulaErrorClass()) {
    // The nodes come with the error; the column from the first block's
    // caret line: "node(s) ...: error: ..." then the formula and the caret.
    const std::string &m = e.message();
    size_t column = 0;
    size_t caretLine = m.find("\n  ", m.find("\n  ") + 1);
    if (caretLine != std::string::npos && caretLine < m.find("\nnode")) {
      size_t caret = m.find('^', caretLine);
      if (caret != std::string::npos && caret < m.find('\n', caretLine + 1))
        column = caret - caretLine - 3 + 1;
    }
    std::vector<int> named = e.nodes();
    if (named.empty() && m.rfind("node ", 0) == 0) // one node's error made elsewhere: "node N: ..."
      named.push_back(std::atoi(m.c_str() + 5));
    py::list nodes;
    for (int n : named)
      nodes.append(n);
    py::object first = named.empty() ? py::none() : py::object(py::int_(named[0]));
    PyErr_SetObject(formulaErrorClass().ptr(),
                    formulaErrorClass()(m, first, column ? py::object(py::int_(column)) : py::none(), nodes).ptr());
    throw py::error_already_set();
  }
  if (e.code() == ErrorCode::InvalidArgument || e.code() == ErrorCode::InvalidFormula)
    throw py::value_error(e.message());
  throw std::runtime_error(e.message());
}

inline void check(const Error &e) {
  if (e)
    raise(e);
}
template <class T> T take(Expected<T> v) {
  if (!v)
    raise(v.error());
  return std::move(*v);
}


/// One of a few names, or a ValueError listing them.
template <class E> E choose(const char *what, const std::string &s, std::initializer_list<std::pair<const char *, E>> names) {
  std::string list;
  for (const auto &[name, value] : names) {
    if (s == name)
      return value;
    list += (list.empty() ? "'" : ", '") + std::string(name) + "'";
  }
  throw py::value_error(std::string(what) + " must be one of " + list + ", got '" + s + "'");
}

/// _core._Backend and _core._DeviceArray (Backends.cpp).
void bindBackends(py::module_ &m);
/// The module's functions: parse, diff, builtins, runtime information and
/// flags, the kernel cache, the warning handler (Functions.cpp).
void bindFunctions(py::module_ &m);
/// _core._Population (Population.cpp).
void bindPopulation(py::module_ &m);

} // namespace hsnn::python
