//===- lib/Runtime/BackendRegistry.cpp - getBackend: backends by name -----===//
#include "hsnn/Backend.h"

#include "hsnn/Runtime.h"

#include "Backend/CpuBackend.h"
#include "CUDA/CudaBackend.h"

#include <charconv>
#include <fmt/format.h>
#include <map>
#include <mutex>

namespace hsnn {

Expected<std::shared_ptr<Backend>> getBackend(std::string_view spec) {
  const RuntimeInfo &info = runtimeInfo();
  if (spec == "cpu" || (spec == "auto" && info.numGpus == 0)) {
    return detail::cpuBackend();
  }
  if (spec == "auto" || spec == "cuda" || spec.starts_with("cuda:")) {
    int device = 0;
    if (spec.starts_with("cuda:")) {
      std::string_view n = spec.substr(5);
      auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), device);
      if (ec != std::errc() || p != n.data() + n.size() || device < 0)
        return Error(ErrorCode::InvalidArgument, fmt::format("bad backend '{}': expected cuda:N with N a device number", spec));
    }
    // The backend (device memory) works wherever the driver finds a device,
    // even while the cuda *method* cannot run layers yet.
    if (info.numGpus == 0)
      return Error(ErrorCode::Unsupported, fmt::format("backend '{}' is unavailable: {}", spec, info.gpuUnavailableReason));
    if (device >= info.numGpus)
      return Error(ErrorCode::InvalidArgument,
                   fmt::format("backend '{}': device {} does not exist; valid devices are 0..{}", spec, device, info.numGpus - 1));
    static std::mutex mutex;
    static std::map<int, std::shared_ptr<Backend>> backends; // one primary context per device
    std::lock_guard lock(mutex);
    if (auto it = backends.find(device); it != backends.end())
      return it->second;
    auto backend = detail::makeCudaBackend(device);
    if (!backend)
      return backend.takeError();
    backends[device] = *backend;
    return std::move(*backend);
  }
  return Error(ErrorCode::InvalidArgument, fmt::format("unknown backend '{}'; use auto, cpu, cuda or cuda:N", spec));
}

} // namespace hsnn
