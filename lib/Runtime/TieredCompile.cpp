//===- lib/Runtime/TieredCompile.cpp - The interpreter first, the JIT when it pays ===//
#include "TieredCompile.h"

#include "BackgroundCompile.h"
#include "CPU/HostJitEngine.h"
#include "CodeGen/MathCalls.h"
#include "FallbackPolicy.h"
#include "InterpreterKernels.h"

#include <algorithm>
#include <tbb/task_arena.h>

namespace hsnn::detail {

namespace {
// Compiles estimated to take less start with the first result.
constexpr double kStartAtOnceMs = 50;
// PendingTier::savedShare.
constexpr double kSavedArithmetic = 0.7, kSavedWithMath = 0.4;
} // namespace


Error LayerState::startTiered(std::shared_ptr<const CompiledModel> model, const EngineRequest &request) {
  auto pending = std::make_shared<PendingTier>();
  pending->info = info_;
  pending->estimateMs = estimatedCompileMs(*model);
  // The interpreter's steps are the JIT's op kernels, so math functions run
  // there close to the compiled speed and arithmetic well below it (every
  // instruction through memory; the performance guide has the ratios): the
  // JIT saves most of the interpreter's time on arithmetic, less with math.
  const bool callsMath = std::any_of(model->units.begin(), model->units.end(), [](const CodeUnit &u) {
    return std::any_of(u.programs.begin(), u.programs.end(), [](const Program *p) { return p && mathCallSites(*p) > 0; });
  });
  pending->savedShare = callsMath ? kSavedWithMath : kSavedArithmetic;
  CacheConfig cache = cacheConfig();
  // The task only touches its PendingTier, which lives until the task ends.
  pending->launch = [model, request, cache](const std::shared_ptr<PendingTier> &self) {
    auto compile = [pending = self, model, request, cache] {
      PendingTier *p = pending.get();
      CompileInfo tierInfo = p->info;
      // A checkpoint after each kernel, so that exit does not wait for the
      // whole compile; the kernels build one after another on this thread
      // (an arena of one), where the checkpoints can stop them.
      CompileProgress progress = [user = request.progress](size_t done, size_t total) {
        backgroundCheckpoint();
        if (user)
          user(done, total);
      };
      Expected<std::shared_ptr<const Engine>> jit = Error::success();
      tbb::task_arena(1).execute([&] {
        jit = makeHostJitEngine(model, {{request.optLevel, request.fastMath}, cache, jitFailed, progress}, tierInfo);
      });
      backgroundCheckpoint();
      std::shared_ptr<const Engine> engine;
      Error error;
      if (jit) {
        engine = std::move(*jit);
        tierInfo.method = Method::CpuJit;
      } else {
        error = jit.takeError();
        (void)jitFailed(error); // the fallback warning; strict mode never tiers
      }
      publishBackgroundResult([&] {
        p->engine = std::move(engine);
        p->error = std::move(error);
        p->info = tierInfo;
        p->ready.store(true, std::memory_order_release);
      });
    };
    // A forked child has no compile thread: its copies keep the interpreter.
    auto inForkedChild = [p = self.get()] {
      p->error = Error(ErrorCode::Unsupported,
                       "the JIT compile was running in the parent when this process forked; the interpreter runs");
      p->ready.store(true, std::memory_order_release);
    };
    runInBackground(compile, inForkedChild);
  };
  if (pending->estimateMs < kStartAtOnceMs)
    pending->start(pending);
  pending_ = std::move(pending);
  info_.method = Method::CpuInterp;
  prepareOpKernels(model->options.dtype);
  return install(makeInterpreterEngine(model));
}

} // namespace hsnn::detail
