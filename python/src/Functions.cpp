//===- python/src/Functions.cpp - hsnn's module-level functions -----------===//
//
// What is not a layer or a loss: the symbolic front end (parse, diff), the
// built-ins' table, what the runtime detected and its flags, the kernel
// cache, and where warnings go.
//
//===----------------------------------------------------------------------===//
#include <hsnn/Cache.h>
#include <hsnn/Formula.h>
#include <hsnn/Runtime.h>

#include "Bindings.h"

#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

namespace hsnn::python {

void bindFunctions(py::module_ &m) {
  auto mode = [](const std::string &s) {
    return choose<FormulaMode>("mode", s, {{"activation", FormulaMode::Activation}, {"loss", FormulaMode::Loss}});
  };
  m.def("parse", [mode](const std::string &formula, const std::string &m, bool guards, bool sympy) {
        ExprContext ctx;
        Formula f = take(parseFormula(ctx, formula, {mode(m)}));
        py::dict d;
        d["canonical"] = print(f.expr, {.variable = f.variable, .guards = guards, .sympy = sympy});
        d["constants"] = f.constants;
        d["defaults"] = f.defaults;
        return d;
      }, py::arg("formula"), py::arg("mode") = "activation", py::arg("guards") = false, py::arg("sympy") = false,
      "the canonical form and the constants a formula needs (guards: also the branches kernels take at a "
      "built-in's tails; sympy: sigmoid, softplus, log1p and expm1 in SymPy's terms)");
  // Derivatives are mostly read into SymPy, so they are written in its
  // terms by default; the canonical form is hsnn's own (it reads back exactly).
  m.def("diff", [mode](const std::string &formula, const std::string &m, bool guards, bool sympy) {
        ExprContext ctx;
        FormulaMode fm = mode(m);
        Formula f = take(parseFormula(ctx, formula, {fm}));
        return print(differentiate(ctx, f.expr, fm == FormulaMode::Loss ? Variable::YPred : Variable::Num),
                     {.variable = f.variable, .guards = guards, .sympy = sympy});
      }, py::arg("formula"), py::arg("mode") = "activation", py::arg("guards") = false, py::arg("sympy") = true,
      "the simplified derivative (d/dnum, or d/dy_pred), in SymPy's terms (sympy=False: hsnn's own sigmoid, "
      "softplus, log1p, expm1); guards: also the branches kernels take at a built-in's tails, where its "
      "floating-point form is inf*0");

  m.def("builtins", [] {
    py::list out;
    for (const BuiltinInfo &b : hsnn::builtins()) {
      py::dict d;
      d["name"] = std::string(b.name);
      d["mode"] = b.mode == FormulaMode::Loss ? "loss" : "activation";
      d["definition"] = std::string(b.definition);
      py::dict params;
      for (auto [name, value] : b.params)
        params[py::str(std::string(name))] = value;
      d["params"] = params;
      out.append(d);
    }
    return out;
  }, "the named activations and losses: name, mode, definition, params (defaults)");
  m.def("runtime_info", [] {
    const RuntimeInfo &i = runtimeInfo();
    py::dict d;
    d["gpu_enabled"] = i.gpuEnabled;
    d["num_gpus"] = i.numGpus;
    d["gpu_unavailable_reason"] = i.gpuUnavailableReason;
    d["cpu_jit_enabled"] = i.cpuJitEnabled;
    d["cpu_jit_unavailable_reason"] = i.cpuJitUnavailableReason;
    d["cpu_name"] = i.cpuName;
    d["cpu_capability"] = i.cpuCapability;
    d["cache_linker"] = i.cacheLinker;
    d["code_generator"] = i.codeGenerator;
    d["default_method"] = std::string(to_string(i.defaultMethod));
    return d;
  });
  m.def("runtime_flags", [] {
    RuntimeFlags f = runtimeFlags();
    py::dict d;
    d["use_kernel_cache"] = f.useKernelCache;
    d["strict"] = f.strict;
    d["threads"] = f.threads;
    d["cache_dir"] = f.cacheDir;
    return d;
  });
  m.def("update_runtime_flags", [](std::optional<bool> cache, std::optional<bool> strict, std::optional<unsigned> threads,
                                   std::optional<std::string> dir) {
        if (dir && dir->find('\0') != std::string::npos)
          throw py::value_error("cache_dir contains a NUL character");
        updateRuntimeFlags({cache, strict, threads, dir});
      }, py::arg("use_kernel_cache") = py::none(), py::arg("strict") = py::none(), py::arg("threads") = py::none(),
      py::arg("cache_dir") = py::none(), "changes only the flags given");
  m.def("clear_kernel_cache", [](const std::string &which) {
        CacheCategory c = choose<CacheCategory>(
            "category", which, {{"all", CacheCategory::All}, {"cpu", CacheCategory::Cpu}, {"gpu", CacheCategory::Gpu}});
        check(clearKernelCache(c));
      }, py::arg("category") = "all", "removes the kernel cache's entries of a category");
  m.def("flush_kernel_cache", [] {
        py::gil_scoped_release unlocked;
        flushKernelCache();
      }, "waits for the cache writes compile() left running (shared objects linked in the background)");
  m.def("kernel_cache_dir", &kernelCacheDir);
  m.def("set_warning_handler", [](py::object handler) {
    if (handler.is_none()) {
      setWarningHandler(nullptr);
      return;
    }
    // Warnings can come from any thread, with or without the GIL held.
    auto shared = std::make_shared<py::object>(std::move(handler));
    setWarningHandler([shared](std::string_view message) {
      py::gil_scoped_acquire locked;
      try {
        (*shared)(std::string(message));
      } catch (py::error_already_set &e) {
        e.discard_as_unraisable("hsnn warning handler");
      }
    });
  }, "calls handler(message) for every warning; None silences them");

}

} // namespace hsnn::python
