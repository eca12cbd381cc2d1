//===- lib/CUDA/GpuCode.h - A module of GPU kernels, built or cached, loaded -*- C++ -*-===//
//
// What every GPU engine holds (layers, losses: GpuEngine.cpp; populations:
// GpuPopulation.cpp): a module spec (KernelSpec.h) compiled to PTX for the
// device's architecture, assembled by the driver's linker, cached on disk
// under the GPU category and loaded on one device.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "GpuEngine.h"
#include "GpuModule.h"

#include "CodeGen/KernelSpec.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace hsnn::detail {

inline size_t elementSize(DType d) { return d == DType::F32 ? 4 : 8; }
inline constexpr unsigned kWarp = 32, kMaxGridY = 65535;
inline constexpr uint64_t kMaxGridX = 0x7fffffff;

/// `values` in new device memory (at least one element's worth).
template <class T> Expected<DeviceMemory> uploaded(int device, const std::vector<T> &values) {
  auto mem = DeviceMemory::allocate(device, std::max<size_t>(1, values.size()) * sizeof(T));
  if (!mem)
    return mem.takeError();
  if (!values.empty())
    if (Error e = mem->upload(values.data(), values.size() * sizeof(T)))
      return e;
  return mem;
}

/// The device's description, or an error naming the valid ids.
Expected<const GpuDevice *> deviceInfo(int device);

// What every GPU engine holds: the module spec, the loaded image and its
// element type. Constants are not here: each run passes its ParamSet's.
class GpuCode {
public:
  virtual ~GpuCode() = default;
  int device() const { return module_->device(); }

protected:
  /// Builds (or loads from the cache) the module for `device`.
  Error init(int device, DType dtype, GpuBuildOptions options, GpuModuleSpec spec, std::vector<std::string> kernels,
             CompileInfo *info) {
    options_ = std::move(options);
    spec_ = std::move(spec);
    kernels_ = std::move(kernels);
    dtype_ = dtype;
    return build(device, info);
  }
  /// The same code as `from` on `device`: its image reloaded when the
  /// compute capability is the same, else rebuilt (or taken from the cache).
  Error initFrom(const GpuCode &from, int device, CompileInfo *info) {
    options_ = from.options_;
    spec_ = from.spec_;
    description_ = from.description_;
    kernels_ = from.kernels_;
    dtype_ = from.dtype_;
    auto dev = deviceInfo(device);
    if (!dev)
      return dev.takeError();
    if ((*dev)->ccMajor != from.ccMajor_ || (*dev)->ccMinor != from.ccMinor_)
      return build(device, info);
    auto m = GpuModule::load(device, from.image_, kernels_);
    if (!m)
      return m.takeError();
    module_ = std::move(*m);
    image_ = from.image_;
    ccMajor_ = from.ccMajor_, ccMinor_ = from.ccMinor_;
    return Error::success();
  }
  /// Builds (or takes from the cache) and loads the module for `device`.
  Error build(int device, CompileInfo *info);

  GpuBuildOptions options_;
  GpuModuleSpec spec_;
  std::vector<std::string> kernels_;
  std::vector<char> image_; ///< cubin, or PTX where the driver has no linker
  std::string description_; ///< What a cache entry of it holds
  int ccMajor_ = 0, ccMinor_ = 0;
  std::shared_ptr<GpuModule> module_;
  DType dtype_ = DType::F32;
};


} // namespace hsnn::detail
