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
#define HSNN_CUDA_ENTRY(member, symbol, group, params) CUresult(*member) params = nullptr;
#include "DriverEntryPoints.def"

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
