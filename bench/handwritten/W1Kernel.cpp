// Bench W1 written by hand in the batch-major layout, as a C++ programmer
// would without hsnn: each row's 256 nodes deinterleaved into the 8
// formulas' 32-element columns, each column computed by a loop GCC
// vectorizes with libmvec (-O3 -march=native -ffast-math), interleaved
// back; OpenMP over rows. Built with those flags (CMakeLists.txt); the
// yardstick hsnn's batch-major forward is compared against.
#include "W1Kernel.h"

#include <cmath>

namespace {

constexpr int kPeriod = 8, kPeriods = kW1Nodes / kPeriod;

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void column(int formula, const float *__restrict in, float *__restrict out) {
  switch (formula) {
  case 0:
    for (int q = 0; q < kPeriods; ++q)
      out[q] = in[q] > 0 ? in[q] : 0.0f;
    break;
  case 1:
    for (int q = 0; q < kPeriods; ++q)
      out[q] = sigmoid(in[q]);
    break;
  case 2:
    for (int q = 0; q < kPeriods; ++q)
      out[q] = std::tanh(in[q]);
    break;
  case 3:
    for (int q = 0; q < kPeriods; ++q)
      out[q] = 0.5f * in[q] * (1.0f + std::erf(in[q] * 0.70710678f));
    break;
  case 4:
    for (int q = 0; q < kPeriods; ++q)
      out[q] = in[q] * sigmoid(in[q]);
    break;
  case 5:
    for (int q = 0; q < kPeriods; ++q)
      out[q] = std::log1p(std::exp(-std::fabs(in[q]))) + (in[q] > 0 ? in[q] : 0.0f);
    break;
  case 6:
    for (int q = 0; q < kPeriods; ++q)
      out[q] = std::sin(in[q]);
    break;
  default:
    for (int q = 0; q < kPeriods; ++q)
      out[q] = 0.5f * in[q] + 0.1f;
  }
}

} // namespace

void w1ForwardBatchMajor(const float *z, float *a, long batch) {
#pragma omp parallel for schedule(static)
  for (long r = 0; r < batch; ++r) {
    alignas(64) float in[kPeriod][kPeriods], out[kPeriod][kPeriods];
    const float *row = z + r * kW1Nodes;
    for (int q = 0; q < kPeriods; ++q)
      for (int k = 0; k < kPeriod; ++k)
        in[k][q] = row[q * kPeriod + k];
    for (int k = 0; k < kPeriod; ++k)
      column(k, in[k], out[k]);
    float *dst = a + r * kW1Nodes;
    for (int q = 0; q < kPeriods; ++q)
      for (int k = 0; k < kPeriod; ++k)
        dst[q * kPeriod + k] = out[k][q];
  }
}
