//===- lib/Program/Launch.cpp - The pool a thread's kernels spread over ---===//
#include "Launch.h"

namespace hsnn {
namespace detail {

ParallelFor &threadParallelFor() {
  thread_local ParallelFor pool;
  return pool;
}

} // namespace detail

ScopedParallelFor::ScopedParallelFor(const ParallelFor &pool) : saved_(detail::threadParallelFor()) {
  detail::threadParallelFor() = pool;
}

ScopedParallelFor::~ScopedParallelFor() { detail::threadParallelFor() = saved_; }

} // namespace hsnn
