//===- test/CPU/RequireJit.h - Skip a test where there is no JIT -*- C++ -*-===//
#pragma once

#include "hsnn/Runtime.h"

#include <doctest/doctest.h>
#include <string>

// Reports the test skipped, and why, when this build or machine has no cpu_jit.
#define REQUIRE_JIT()                                                                                        \
  if (std::string why = hsnn::runtimeInfo().cpuJitUnavailableReason; !hsnn::runtimeInfo().cpuJitEnabled) {  \
    MESSAGE("skipped: cpu_jit unavailable (" << why << ")");                                                 \
    return;                                                                                                  \
  }
