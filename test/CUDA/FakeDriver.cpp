//===- test/CUDA/FakeDriver.cpp - A stand-in libcuda for machines without a GPU ---===//
//
// Loaded through HSNN_CUDA_LIBRARY, it answers every driver entry point hsnn
// resolves, so the engine's driver-facing code runs where there is no GPU:
// device enumeration, contexts (calls without a current context fail, as on
// a real driver), device memory (host memory here, with every copy checked
// against its allocation), module loading and linking (the PTX's .target and
// .version are checked against the device and driver; with
// HSNN_FAKE_CUDA_PTXAS set, ptxas assembles it for the device), occupancy,
// launches (grid and block limits, the kernel's parameter count) and streams. It runs no kernel: device memory keeps what was copied in.
//
// Configured by environment: HSNN_FAKE_CUDA_DEVICES ("9.0,8.0": one device
// per compute capability), HSNN_FAKE_CUDA_DRIVER (cuDriverGetVersion,
// default 12040). Tests read its counters through hsnnFakeCuda* below.
//===----------------------------------------------------------------------===//
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;
// The handles as this driver keeps them.
using CUdevice = int;
using CUcontext = void *;
using CUstream = void *;
using CUmodule = void *;
using CUfunction = void *;
using CUlinkState = void *;

// cuda.h's CUresult values used here.
constexpr CUresult kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kNotInitialized = 3, kNoDevice = 100,
                   kInvalidDevice = 101, kInvalidImage = 200, kInvalidContext = 201, kNoBinaryForGpu = 209,
                   kUnsupportedPtxVersion = 222, kInvalidPtx = 218, kInvalidHandle = 400, kNotFound = 500,
                   kIllegalAddress = 700, kLaunchOutOfResources = 701;
constexpr int kAttrMaxThreadsPerBlock = 1, kAttrMultiprocessorCount = 16, kAttrCcMajor = 75, kAttrCcMinor = 76;
constexpr int kJitInfoLogBuffer = 3, kJitErrorLogBuffer = 5, kJitErrorLogBufferSize = 6;

struct Device {
  int major = 9, minor = 0;
};

struct Context {
  int device = 0;
};

struct Allocation {
  int device = 0;
  size_t bytes = 0;
};

struct Kernel {
  std::string name;
  std::vector<bool> pointerSized; ///< per parameter: .u64 / .b64 (may be a device pointer)
};

struct Module {
  int device = 0;
  std::map<std::string, std::unique_ptr<Kernel>> kernels;
};

struct LinkState {
  char *errorLog = nullptr;
  size_t errorLogSize = 0;
  std::string ptx;
  std::string cubin;
};

struct State {
  std::mutex mutex;
  bool initialized = false;
  int driverVersion = 12040;
  std::vector<Device> devices;
  std::vector<std::unique_ptr<Context>> contexts;
  std::map<CUdeviceptr, Allocation> allocations;
  std::set<Module *> modules;
  std::map<std::string, int> counters;
  std::string launches; // "name gx,gy block; ..."
  uintptr_t lastStream = 0; // the last launch's
  std::string lastTarget;
  std::string lastPtx;
};

State &state() {
  static State s;
  return s;
}

thread_local Context *current = nullptr;

int maxIsa(int driver) {
  int major = driver / 1000, minor = driver % 1000 / 10;
  if (major < 11)
    return 0;
  if (major == 11)
    return 70 + minor;
  if (major == 12)
    return minor <= 5 ? 80 + minor : minor == 6 ? 85 : 80 + minor - 1;
  return 90 + minor;
}

void writeLog(char *buf, size_t size, const std::string &text) {
  if (!buf || !size)
    return;
  std::snprintf(buf, size, "%s", text.c_str());
}

// The log-buffer options of cuModuleLoadDataEx / cuLinkCreate.
void logBuffer(unsigned n, const int *options, void **values, char **log, size_t *size) {
  for (unsigned i = 0; i < n; ++i) {
    if (options[i] == kJitErrorLogBuffer)
      *log = static_cast<char *>(values[i]);
    else if (options[i] == kJitErrorLogBufferSize)
      *size = size_t(reinterpret_cast<uintptr_t>(values[i]));
  }
}

// The allocation holding [p, p + bytes), or null.
Allocation *find(State &s, CUdeviceptr p, size_t bytes) {
  auto it = s.allocations.upper_bound(p);
  if (it == s.allocations.begin())
    return nullptr;
  --it;
  if (p < it->first || p - it->first > it->second.bytes || bytes > it->second.bytes - (p - it->first))
    return nullptr;
  return &it->second;
}

// The same, on the current context's device only: hsnn never touches one
// device's memory from another's context (a kernel doing so would fault).
Allocation *findHere(State &s, CUdeviceptr p, size_t bytes) {
  Allocation *a = find(s, p, bytes);
  return a && a->device == current->device ? a : nullptr;
}

const char *kFakeCubinMagic = "\x7f" "ELF fake cubin\n";

// Checks PTX for the current device the way the driver's JIT would: the
// target must not be newer than the device, the ISA not newer than the
// driver; ptxas (when configured) must accept it for the device.
CUresult checkPtx(State &s, const std::string &ptx, std::string &log) {
  const Device &d = s.devices[size_t(current->device)];
  int target = 0, vmaj = 0, vmin = 0;
  size_t t = ptx.find(".target sm_"), v = ptx.find(".version ");
  if (t == std::string::npos || v == std::string::npos || std::sscanf(ptx.c_str() + t + 11, "%d", &target) != 1 ||
      std::sscanf(ptx.c_str() + v + 9, "%d.%d", &vmaj, &vmin) != 2) {
    log = "ptx: no .version or .target sm_XY directive";
    return kInvalidPtx;
  }
  s.lastTarget = "sm_" + std::to_string(target);
  s.lastPtx = ptx;
  if (vmaj * 10 + vmin > maxIsa(s.driverVersion)) {
    log = "ptxas application ptx input, line 1; fatal   : Unsupported .version " + std::to_string(vmaj) + "." +
          std::to_string(vmin);
    return kUnsupportedPtxVersion;
  }
  if (target > d.major * 10 + d.minor) {
    log = "ptxas fatal   : the device cannot run " + s.lastTarget;
    return kNoBinaryForGpu;
  }
  const char *ptxas = std::getenv("HSNN_FAKE_CUDA_PTXAS");
  if (!ptxas || !*ptxas)
    return kSuccess;
  char dir[] = "/tmp/hsnn-fake-cuda-XXXXXX";
  if (!::mkdtemp(dir))
    return kInvalidPtx;
  std::string in = std::string(dir) + "/k.ptx", out = std::string(dir) + "/k.cubin", err = std::string(dir) + "/log";
  if (FILE *f = std::fopen(in.c_str(), "w")) {
    std::fwrite(ptx.data(), 1, ptx.size(), f);
    std::fclose(f);
  }
  // The device's own architecture, as the driver's JIT would assemble it
  // (for devices newer than the PTX target, the target's).
  int cc = d.major * 10 + d.minor;
  std::string arch = "-arch=sm_" + std::to_string(cc > 90 ? target : cc);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (FILE *f = std::freopen(err.c_str(), "w", stderr))
      (void)f;
    ::execl(ptxas, ptxas, arch.c_str(), in.c_str(), "-o", out.c_str(), static_cast<char *>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (FILE *f = std::fopen(err.c_str(), "r")) {
    char buf[4096];
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    log = buf;
    std::fclose(f);
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
  std::remove(err.c_str());
  ::rmdir(dir);
  ++s.counters["ptxas"];
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? kSuccess : kInvalidPtx;
}

// The kernels of a PTX text and their parameter counts.
void parseKernels(const std::string &ptx, Module &m) {
  size_t at = 0;
  while ((at = ptx.find(".entry ", at)) != std::string::npos) {
    size_t name = at + 7, open = ptx.find('(', name), close = ptx.find(')', open);
    auto k = std::make_unique<Kernel>();
    k->name = ptx.substr(name, open - name);
    for (size_t p = ptx.find(".param", open); p != std::string::npos && p < close; p = ptx.find(".param", p + 1))
      k->pointerSized.push_back(ptx.compare(p, 11, ".param .u64") == 0 || ptx.compare(p, 11, ".param .b64") == 0);
    m.kernels[k->name] = std::move(k);
    at = close;
  }
}

#define NEED_CONTEXT()                                                                                                 \
  if (!current)                                                                                                        \
  return kInvalidContext

} // namespace

extern "C" {

// Every entry point hsnn resolves, declared from its list: a definition
// below that differs from the list is a conflicting declaration (a compile
// error), and one missing makes the engine refuse this driver (every GPU
// test fails).
#define HSNN_CUDA_ENTRY(member, symbol, group, params) CUresult symbol params;
#include "CUDA/DriverEntryPoints.def"

// ---- counters for tests ----
int hsnnFakeCudaCount(const char *what) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  if (std::strcmp(what, "live_allocations") == 0)
    return int(s.allocations.size());
  if (std::strcmp(what, "live_modules") == 0)
    return int(s.modules.size());
  return s.counters[what];
}
const char *hsnnFakeCudaLaunches() { return state().launches.c_str(); }
uintptr_t hsnnFakeCudaLastStream() { return state().lastStream; }
const char *hsnnFakeCudaLastTarget() { return state().lastTarget.c_str(); }
const char *hsnnFakeCudaLastPtx() { return state().lastPtx.c_str(); }
void hsnnFakeCudaClearLaunches() { state().launches.clear(); }

// ---- initialization and devices ----
CUresult cuInit(unsigned) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  if (s.initialized)
    return kSuccess;
  const char *devs = std::getenv("HSNN_FAKE_CUDA_DEVICES");
  std::string list = devs ? devs : "9.0";
  for (size_t p = 0; p < list.size();) {
    size_t comma = list.find(',', p);
    std::string one = list.substr(p, comma == std::string::npos ? std::string::npos : comma - p);
    Device d;
    if (std::sscanf(one.c_str(), "%d.%d", &d.major, &d.minor) == 2)
      s.devices.push_back(d);
    p = comma == std::string::npos ? list.size() : comma + 1;
  }
  if (const char *v = std::getenv("HSNN_FAKE_CUDA_DRIVER"))
    s.driverVersion = std::atoi(v);
  s.initialized = true;
  return kSuccess;
}
CUresult cuDriverGetVersion(int *v) {
  *v = state().driverVersion;
  return kSuccess;
}
CUresult cuDeviceGetCount(int *n) {
  if (!state().initialized)
    return kNotInitialized;
  *n = int(state().devices.size());
  return kSuccess;
}
CUresult cuDeviceGet(int *dev, int ordinal) {
  if (ordinal < 0 || size_t(ordinal) >= state().devices.size())
    return kInvalidDevice;
  *dev = ordinal;
  return kSuccess;
}
CUresult cuDeviceGetName(char *name, int len, int dev) {
  const Device &d = state().devices.at(size_t(dev));
  std::snprintf(name, size_t(len), "hsnn fake GPU (sm_%d%d)", d.major, d.minor);
  return kSuccess;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  if (dev < 0 || size_t(dev) >= state().devices.size())
    return kInvalidDevice;
  const Device &d = state().devices[size_t(dev)];
  switch (attr) {
  case kAttrCcMajor: *v = d.major; return kSuccess;
  case kAttrCcMinor: *v = d.minor; return kSuccess;
  case kAttrMultiprocessorCount: *v = 4; return kSuccess;
  case kAttrMaxThreadsPerBlock: *v = 1024; return kSuccess;
  default: return kInvalidValue;
  }
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, int) {
  *bytes = size_t(1) << 30;
  return kSuccess;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
  switch (r) {
  case kSuccess: *s = "no error"; break;
  case kInvalidValue: *s = "invalid argument"; break;
  case kOutOfMemory: *s = "out of memory"; break;
  case kInvalidContext: *s = "invalid device context"; break;
  case kInvalidImage: *s = "device kernel image is invalid"; break;
  case kNoBinaryForGpu: *s = "no kernel image is available for execution on the device"; break;
  case kUnsupportedPtxVersion: *s = "the provided PTX was compiled with an unsupported toolchain."; break;
  case kInvalidPtx: *s = "a PTX JIT compilation failed"; break;
  case kNotFound: *s = "named symbol not found"; break;
  case kIllegalAddress: *s = "an illegal memory access was encountered"; break;
  case kLaunchOutOfResources: *s = "too many resources requested for launch"; break;
  default: *s = "unknown error"; break;
  }
  return kSuccess;
}

// ---- contexts ----
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  if (dev < 0 || size_t(dev) >= s.devices.size())
    return kInvalidDevice;
  s.contexts.resize(s.devices.size());
  if (!s.contexts[size_t(dev)])
    s.contexts[size_t(dev)] = std::make_unique<Context>(Context{dev});
  *ctx = s.contexts[size_t(dev)].get();
  ++s.counters["retain"];
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRelease_v2(int) { return kSuccess; }
CUresult cuCtxSetCurrent(void *ctx) {
  current = static_cast<Context *>(ctx);
  return kSuccess;
}
CUresult cuCtxGetCurrent(void **ctx) {
  *ctx = current;
  return kSuccess;
}
CUresult cuCtxSynchronize() {
  NEED_CONTEXT();
  ++state().counters["synchronize"];
  return kSuccess;
}

// ---- memory ----
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  NEED_CONTEXT();
  if (!bytes)
    return kInvalidValue;
  void *mem = std::calloc(1, bytes);
  if (!mem)
    return kOutOfMemory;
  State &s = state();
  std::lock_guard lock(s.mutex);
  *p = reinterpret_cast<CUdeviceptr>(mem);
  s.allocations[*p] = {current->device, bytes};
  ++s.counters["alloc"];
  return kSuccess;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  NEED_CONTEXT();
  State &s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.allocations.find(p);
  if (it == s.allocations.end())
    return kInvalidValue;
  s.allocations.erase(it);
  std::free(reinterpret_cast<void *>(p));
  return kSuccess;
}
CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
  NEED_CONTEXT();
  *total = size_t(1) << 30;
  *free = *total / 2;
  return kSuccess;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
  NEED_CONTEXT();
  State &s = state();
  std::lock_guard lock(s.mutex);
  if (!findHere(s, dst, bytes) || (bytes && !src))
    return kInvalidValue;
  std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
  ++s.counters["htod"];
  return kSuccess;
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
  NEED_CONTEXT();
  State &s = state();
  std::lock_guard lock(s.mutex);
  if (!findHere(s, src, bytes) || (bytes && !dst))
    return kInvalidValue;
  std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
  ++s.counters["dtoh"];
  return kSuccess;
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  NEED_CONTEXT();
  State &s = state();
  std::lock_guard lock(s.mutex);
  if (!findHere(s, dst, bytes) || !findHere(s, src, bytes))
    return kInvalidValue;
  std::memmove(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), bytes);
  ++s.counters["dtod"];
  return kSuccess;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, void *) {
  ++state().counters["async"];
  return cuMemcpyHtoD_v2(dst, src, bytes);
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, void *) {
  ++state().counters["async"];
  return cuMemcpyDtoH_v2(dst, src, bytes);
}

// ---- streams ----
CUresult cuStreamCreate(void **stream, unsigned) {
  NEED_CONTEXT();
  *stream = new int(0);
  ++state().counters["streams"];
  return kSuccess;
}
CUresult cuStreamDestroy_v2(void *stream) {
  delete static_cast<int *>(stream);
  --state().counters["streams"];
  return kSuccess;
}
CUresult cuStreamSynchronize(void *) {
  NEED_CONTEXT();
  ++state().counters["stream_synchronize"];
  return kSuccess;
}
// Stream-ordered allocation: memory like cuMemAlloc's, counted apart.
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, void *) {
  CUresult r = cuMemAlloc_v2(p, bytes);
  if (r == kSuccess) {
    std::lock_guard lock(state().mutex);
    --state().counters["alloc"];
    ++state().counters["alloc_async"];
  }
  return r;
}
CUresult cuMemFreeAsync(CUdeviceptr p, void *) {
  CUresult r = cuMemFree_v2(p);
  if (r == kSuccess) {
    std::lock_guard lock(state().mutex);
    ++state().counters["free_async"];
  }
  return r;
}
// ---- modules and launches ----
CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned n, int *options, void **values) {
  NEED_CONTEXT();
  State &s = state();
  std::lock_guard lock(s.mutex);
  char *log = nullptr;
  size_t size = 0;
  logBuffer(n, options, values, &log, &size);
  std::string text = static_cast<const char *>(image);
  std::string ptx;
  if (text.rfind(kFakeCubinMagic, 0) == 0) {
    // A "cubin" from cuLinkComplete: the PTX it was linked from, tagged with
    // the compute capability it was assembled for.
    int major = 0, minor = 0;
    size_t at = std::strlen(kFakeCubinMagic);
    if (std::sscanf(text.c_str() + at, "cc %d.%d\n", &major, &minor) != 2) {
      writeLog(log, size, "not a cubin");
      return kInvalidImage;
    }
    const Device &d = s.devices[size_t(current->device)];
    if (major != d.major || minor != d.minor) {
      writeLog(log, size, "cubin for another architecture");
      return kNoBinaryForGpu;
    }
    ptx = text.substr(text.find('\n', at) + 1);
    ++s.counters["load_cubin"];
  } else {
    std::string why;
    if (CUresult r = checkPtx(s, text, why)) {
      writeLog(log, size, why);
      return r;
    }
    ptx = text;
    ++s.counters["load_ptx"];
  }
  auto *m = new Module{current->device, {}};
  parseKernels(ptx, *m);
  s.modules.insert(m);
  *module = m;
  return kSuccess;
}
CUresult cuModuleUnload(void *module) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  auto *m = static_cast<Module *>(module);
  if (!s.modules.erase(m))
    return kInvalidHandle;
  delete m;
  return kSuccess;
}
CUresult cuModuleGetFunction(void **fn, void *module, const char *name) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  auto *m = static_cast<Module *>(module);
  if (!s.modules.count(m))
    return kInvalidHandle;
  auto it = m->kernels.find(name);
  if (it == m->kernels.end())
    return kNotFound;
  *fn = it->second.get();
  return kSuccess;
}
CUresult cuOccupancyMaxPotentialBlockSize(int *minGrid, int *block, void *, size_t (*)(int), size_t, int) {
  *minGrid = 8; // 4 SMs x 2 blocks
  *block = 256;
  return kSuccess;
}
CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
  NEED_CONTEXT();
  State &s = state();
  std::lock_guard lock(s.mutex);
  auto *k = static_cast<Kernel *>(fn);
  if (!k || !gx || !gy || !gz || !bx || !by || !bz || gy > 65535 || gz > 65535 || gx > 0x7fffffffu)
    return kInvalidValue;
  if (uint64_t(bx) * by * bz > 1024 || shared > 48 * 1024)
    return kLaunchOutOfResources;
  if (!params || extra)
    return kInvalidValue;
  for (size_t i = 0; i < k->pointerSized.size(); ++i) {
    if (!params[i])
      return kInvalidValue;
    // A 64-bit argument that points into device memory must point into
    // this device's.
    CUdeviceptr v = 0;
    if (k->pointerSized[i])
      std::memcpy(&v, params[i], sizeof v);
    if (v && find(s, v, 0) && !findHere(s, v, 0))
      return kIllegalAddress;
  }
  s.lastStream = reinterpret_cast<uintptr_t>(stream);
  s.launches += k->name + " " + std::to_string(gx) + "," + std::to_string(gy) + " " + std::to_string(bx) + ";";
  ++s.counters["launch"];
  return kSuccess;
}

// ---- the linker ----
CUresult cuLinkCreate_v2(unsigned n, int *options, void **values, void **state_) {
  NEED_CONTEXT();
  auto *l = new LinkState;
  logBuffer(n, options, values, &l->errorLog, &l->errorLogSize);
  *state_ = l;
  return kSuccess;
}
CUresult cuLinkAddData_v2(void *link, int type, void *data, size_t bytes, const char *, unsigned, int *, void **) {
  auto *l = static_cast<LinkState *>(link);
  if (type != 1 || !data || !bytes)
    return kInvalidValue;
  l->ptx.assign(static_cast<const char *>(data), strnlen(static_cast<const char *>(data), bytes));
  State &s = state();
  std::lock_guard lock(s.mutex);
  std::string why;
  if (CUresult r = checkPtx(s, l->ptx, why)) {
    writeLog(l->errorLog, l->errorLogSize, why);
    return r;
  }
  return kSuccess;
}
CUresult cuLinkComplete(void *link, void **cubin, size_t *bytes) {
  NEED_CONTEXT();
  auto *l = static_cast<LinkState *>(link);
  State &s = state();
  const Device &d = s.devices[size_t(current->device)];
  l->cubin = std::string(kFakeCubinMagic) + "cc " + std::to_string(d.major) + "." + std::to_string(d.minor) + "\n" +
             l->ptx;
  *cubin = l->cubin.data();
  *bytes = l->cubin.size();
  ++s.counters["link"];
  return kSuccess;
}
CUresult cuLinkDestroy(void *link) {
  delete static_cast<LinkState *>(link);
  return kSuccess;
}

} // extern "C"
