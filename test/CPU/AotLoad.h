//===- test/CPU/AotLoad.h - AOT objects loaded for tests -*- C++ -*-===//
#pragma once

#include "TestUtil.h"

#include "CodeGen/HostJIT.h"
#include "hsnn/AOT.h"
#include "hsnn/Layer.h"

#include <memory>
#include <string>
#include <vector>

namespace hsnn::test {

// A layer's AOT object, loaded into this process through the JIT's linker.
template <class T> struct AotLayer {
  using Forward = void (*)(const T *, T *, int64_t, const double *);
  using Fused = void (*)(const T *, T *, T *, int64_t, const double *);
  using Backward = void (*)(const T *, const T *, T *, int64_t, const double *);
  using ForwardRange = void (*)(const T *, T *, int64_t, const double *, int64_t, int64_t);
  std::shared_ptr<detail::KernelLibrary> lib;
  Forward forward = nullptr;
  Fused fused = nullptr;
  Backward backward = nullptr;
  ForwardRange forwardRange = nullptr;
  const double *params = nullptr;
};

template <class T>
AotLayer<T> loadAot(const std::string &name, const std::vector<NodeSpec> &nodes, Layout layout,
                    const AotOptions &options = {}) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  auto art = compileLayerAot(name, nodes, dt, layout, options);
  REQUIRE_OK_EXPECTED(art);
  auto jit = detail::HostJIT::get();
  REQUIRE_OK_EXPECTED(jit);
  std::vector<std::vector<char>> objects = {art->bytes};
  std::vector<std::string> symbols = {name + "_forward", name + "_fused", name + "_forward_range",
                                      name + "_default_params", name + "_backward"};
  auto lib = (*jit)->load(objects, symbols, nullptr);
  REQUIRE_OK_EXPECTED(lib);
  AotLayer<T> a;
  a.lib = *lib;
  a.forward = reinterpret_cast<typename AotLayer<T>::Forward>(a.lib->address(symbols[0]));
  a.fused = reinterpret_cast<typename AotLayer<T>::Fused>(a.lib->address(symbols[1]));
  a.forwardRange = reinterpret_cast<typename AotLayer<T>::ForwardRange>(a.lib->address(symbols[2]));
  a.params = static_cast<const double *>(a.lib->address(symbols[3]));
  a.backward = reinterpret_cast<typename AotLayer<T>::Backward>(a.lib->address(symbols[4]));
  REQUIRE((a.forward && a.fused && a.forwardRange && a.params && a.backward));
  return a;
}

} // namespace hsnn::test
