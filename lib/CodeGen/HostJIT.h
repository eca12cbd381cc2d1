//===- lib/CodeGen/HostJIT.h - Kernels to native code in this process -*- C++ -*-===//
//
// LLVM-free interface to the host JIT: compile kernel requests to an object
// file (the unit the disk cache stores), and load objects into the running
// process. Loading runs no optimizer, so a cache hit costs only the link.
// The implementation is lib/CodeGenModule/HostJIT.cpp, built into the code generator
// module; the interface sits here, below both the module's table and the
// cpu_jit engine that loads it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CodeGen/KernelSpec.h"
#include "CodeGen/Pipeline.h"

#include "hsnn/Error.h"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hsnn::detail {

struct JITOptions {
  int optLevel = 3;      ///< 0..3
  bool fastMath = false; ///< Opt-in; IEEE otherwise.
  /// Batch-major row kernels' shape (RowShape.h). Unset: the one measured
  /// best for the host's kind of CPU (fixedRowShape); the cpu_jit engine
  /// sets the host's own (RowCalibration.h).
  std::optional<RowShape> rowShape{};
};

struct HostTarget {
  std::string triple;     ///< e.g. x86_64-pc-linux-gnu
  std::string cpu;        ///< e.g. skylake-avx512
  std::string features;   ///< "+avx2,+avx512f,..." in a stable order
  std::string capability; ///< AVX512, AVX2 or DEFAULT
  std::string llvmVersion;
  std::string vectorMath; ///< e.g. "libmvec:edb" (ISAs offered), or "scalar"
  unsigned vectorBits = 128; ///< Width of the kernels' vectors.
};

/// Kernels loaded into the process; they stay callable while this lives.
class KernelLibrary {
public:
  virtual ~KernelLibrary() = default;
  /// Address of a kernel by symbol, or null.
  virtual void *address(const std::string &symbol) const = 0;
};

/// The process-wide host JIT. Thread-safe.
class HostJIT {
public:
  virtual ~HostJIT() = default;
  /// The JIT, or an Error saying why there is none (this build has no LLVM,
  /// or LLVM cannot target this CPU).
  static Expected<HostJIT *> get();
  /// Whether this build has the JIT, without loading or starting anything
  /// (a cache hit of linked kernels never asks LLVM); get() can still fail,
  /// when the code generator module cannot be loaded, and says why.
  static bool available();
  /// The LLVM version kernels are compiled with ("none" without the JIT).
  static const char *llvmVersion();

  virtual const HostTarget &target() const = 0;
  /// Emits, optimizes and compiles the kernels into one object file; the
  /// math functions they call (calledMathFunctions) are not in it.
  virtual Expected<std::vector<char>> compileObject(std::span<const KernelRequest> requests, const JITOptions &options,
                                                    CompileStats *stats) = 0;
  /// The math functions that such objects' kernels call (MathCalls.h),
  /// compiled into one object, for load() to link beside them.
  virtual Expected<std::vector<char>> compileMath(std::span<const MathFunction> functions, const JITOptions &options,
                                                  CompileStats *stats) = 0;
  /// Links objects into the process (one JITDylib) and resolves the symbols.
  virtual Expected<std::shared_ptr<KernelLibrary>> load(std::span<const std::vector<char>> objects,
                                                        std::span<const std::string> symbols, CompileStats *stats) = 0;
};

} // namespace hsnn::detail
