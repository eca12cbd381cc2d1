//===- python/src/DeviceArrays.h - CUDA arrays through DLPack ---*- C++ -*-===//
//
// A CUDA tensor's memory, read from its DLPack capsule, as the DeviceBuffer
// the C++ API runs on: no copy, no ownership (the caller keeps the tensor
// and the capsule alive for the call; the capsule stays unconsumed, so its
// producer frees what it exported). The structs are DLPack's ABI, which
// every framework shares; Debian ships no dlpack.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <hsnn/Backend.h>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hsnn::python {

struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code; // 2: float
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides; // null: C-contiguous
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(DLManagedTensor *);
};

inline constexpr int32_t kDLCUDA = 2;

struct DeviceArray {
  DeviceBuffer buffer;
  std::vector<int64_t> shape;
};

/// The CUDA array behind `capsule` (a "dltensor" capsule), checked: CUDA
/// memory, `dtype` elements, C-contiguous. Errors name the argument.
inline DeviceArray deviceArray(const pybind11::capsule &capsule, const std::string &name, DType dtype) {
  auto *managed = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (!managed)
    throw pybind11::error_already_set();
  const DLTensor &t = managed->dl_tensor;
  if (t.device.device_type != kDLCUDA)
    throw pybind11::value_error("'" + name + "' is not CUDA memory (DLPack device type " +
                                std::to_string(t.device.device_type) + ")");
  unsigned bits = dtype == DType::F32 ? 32 : 64;
  if (t.dtype.code != 2 || t.dtype.bits != bits || t.dtype.lanes != 1)
    throw pybind11::type_error("'" + name + "' must hold float" + std::to_string(bits) + " (DLPack type code " +
                               std::to_string(t.dtype.code) + ", " + std::to_string(t.dtype.bits) + " bits)");
  DeviceArray a;
  int64_t count = 1, stride = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.strides && t.shape[d] > 1 && t.strides[d] != stride)
      throw pybind11::value_error("'" + name + "' must be C-contiguous");
    stride *= t.shape[d];
  }
  for (int32_t d = 0; d < t.ndim; ++d) {
    a.shape.push_back(t.shape[d]);
    count *= t.shape[d];
  }
  void *data = static_cast<char *>(t.data) + t.byte_offset;
  a.buffer = DeviceBuffer(std::shared_ptr<void>(data, [](void *) {}), size_t(count), dtype,
                          "cuda:" + std::to_string(t.device.device_id));
  return a;
}

/// The scope that queues a device call on the caller's stream (`stream`: a
/// CUstream handle as an int, e.g. torch.cuda.current_stream().cuda_stream;
/// None: no scope, the legacy default stream, waited for). Made on the
/// thread that runs the call.
inline std::unique_ptr<StreamScope> streamScope(const pybind11::object &stream, const DeviceBuffer &on) {
  if (stream.is_none())
    return nullptr;
  auto handle = stream.cast<std::uintptr_t>();
  auto backend = getBackend(on.backend());
  if (!backend)
    throw pybind11::value_error(backend.error().message());
  auto s = (*backend)->borrowStream(handle);
  if (!s)
    throw pybind11::value_error(s.error().message());
  return std::make_unique<StreamScope>(std::move(*s));
}

} // namespace hsnn::python
