//===- lib/CUDA/Driver.h - The CUDA driver API, loaded at run time -*- C++ -*-===//
//
// libcuda is opened with dlopen (HSNN_CUDA_LIBRARY overrides the name), so
// the same binary runs where there is no driver; the entry points are the
// versioned symbols cuda.h's macros stand for (cuMemAlloc -> cuMemAlloc_v2).
// LLVM-free, and free of cuda.h: the few types are declared here.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hsnn/Error.h"

#include <string>
#include <vector>

namespace hsnn::detail {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUstream = struct CUstream_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUlinkState = struct CUlinkState_st *;

struct GpuDevice {
  int ordinal = 0;
  int multiprocessors = 0;
  std::string name;
  int ccMajor = 0, ccMinor = 0;
  size_t totalMemory = 0;
  std::string arch() const { return "sm_" + std::to_string(ccMajor) + std::to_string(ccMinor); }
};

/// Function pointers into libcuda, resolved once per process.
struct CudaDriver {
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int *) = nullptr;
  CUresult (*cuDeviceGetCount)(int *) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice *, int) = nullptr;
  CUresult (*cuDeviceGetName)(char *, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t *, CUdevice) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char **) = nullptr;
  // Memory and contexts (the _v2 symbols cuda.h's macros name).
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext *) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemGetInfo)(size_t *, size_t *) = nullptr;
  // Modules and launches.
  CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **) = nullptr;
  CUresult (*cuOccupancyMaxPotentialBlockSize)(int *, int *, CUfunction, size_t (*)(int), size_t, int) = nullptr;
  // Streams, async and device-to-device copies.
  CUresult (*cuStreamCreate)(CUstream *, unsigned) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t) = nullptr;
  // Stream-ordered allocation (optional: CUDA 11.2 on).
  CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream) = nullptr;
  CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream) = nullptr;
  // PTX to cubin (optional: without them the cache keeps PTX).
  CUresult (*cuLinkCreate)(unsigned, int *, void **, CUlinkState *) = nullptr;
  CUresult (*cuLinkAddData)(CUlinkState, int, void *, size_t, const char *, unsigned, int *, void **) = nullptr;
  CUresult (*cuLinkComplete)(CUlinkState, void **, size_t *) = nullptr;
  CUresult (*cuLinkDestroy)(CUlinkState) = nullptr;

  /// The device's primary context, retained once for the process.
  Expected<CUcontext> context(int ordinal) const;

  int driverVersion = 0; ///< e.g. 13000 for CUDA 13.0
  std::string library;   ///< The file dlopen found.
  std::vector<GpuDevice> devices;

  /// The driver with its devices enumerated, or why there is none (no
  /// library, a missing entry point, cuInit failing, no device).
  static Expected<const CudaDriver *> get();
  /// True once the process is exiting: frees and unloads are then skipped
  /// (the driver's own state may already be gone; the OS reclaims it all).
  static bool exiting();
  std::string errorString(CUresult r) const;
};

/// The newest PTX ISA version (times 10: 78 is 7.8) a driver of
/// `driverVersion` (cuDriverGetVersion's 1000 * major + 10 * minor) loads.
int maxPtxIsa(int driverVersion);
/// "12.4" from 12040.
std::string driverVersionString(int driverVersion);

} // namespace hsnn::detail
