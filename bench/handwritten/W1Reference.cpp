// hsnn's W1 forward against the same layer written by hand (W1Kernel.cpp),
// in one run: batch-major hand-written, batch-major hsnn and nodes-major
// hsnn, calls alternating, each beside a copy of the same bytes.
//   hsnn-w1-reference [--batch N] [--reps N]   (default 65536 rows: 2^24 elements)
//   hsnn-w1-reference --check                  agreement only, small batch
#include "W1Kernel.h"
#include "hsnn/Layer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include <unistd.h>

using namespace hsnn;

namespace {

const char *const kFormulas[] = {"relu", "sigmoid", "tanh", "gelu", "silu", "softplus", "sin(num)", "0.5*num+0.1"};

template <class F> double ms(F &&f) {
  auto t = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<float> transposed(const std::vector<float> &x, size_t rows, size_t cols) {
  std::vector<float> t(x.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c)
      t[c * rows + r] = x[r * cols + c];
  return t;
}

int fail(const std::string &what) {
  std::fprintf(stderr, "hsnn-w1-reference: %s\n", what.c_str());
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  // libgomp's threads spin for a while after each parallel loop, on the
  // cores hsnn's TBB threads then need (hsnn measured 1.4x slower beside
  // them): they wait passively unless told otherwise, read at start-up.
  if (!std::getenv("OMP_WAIT_POLICY")) {
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    ::execv("/proc/self/exe", argv);
  }
  size_t batch = 65536;
  int reps = 11;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--check"))
      check = true, batch = 333;
    else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = std::strtoul(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else
      return fail(std::string("usage: hsnn-w1-reference [--batch N] [--reps N] [--check]; unexpected '") + argv[i] +
                  "'");
  }
  std::vector<NodeSpec> nodes;
  for (int j = 0; j < kW1Nodes; ++j)
    nodes.push_back({kFormulas[j % 8], {}});
  auto bm = ActivationLayer::compile(nodes, {.method = Method::CpuJit, .layout = Layout::BatchMajor});
  auto nm = ActivationLayer::compile(nodes, {.method = Method::CpuJit});
  if (!bm || !nm)
    return fail("cannot compile the W1 layer: " + (bm ? nm.error() : bm.error()).message());

  const size_t n = batch * kW1Nodes;
  std::vector<float> z(n), hand(n), ours(n), zn, oursN(n), copy(n);
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<float> pick(-6, 6);
  for (float &x : z)
    x = pick(rng);
  zn = transposed(z, batch, kW1Nodes);

  w1ForwardBatchMajor(z.data(), hand.data(), long(batch));
  if (Error e = bm->forward(z, ours, batch))
    return fail(e.message());
  // -ffast-math's approximations differ from hsnn's IEEE results in the
  // last bits: agreement to 1e-5 relative (plus 1e-6 near zero).
  double worst = 0;
  for (size_t i = 0; i < n; ++i)
    worst = std::max(worst, double(std::fabs(hand[i] - ours[i])) / (1e-6 / 1e-5 + std::fabs(double(ours[i]))));
  std::printf("hand-written vs hsnn, batch-major W1 forward: worst difference %.2e relative (allowed 1e-5)\n", worst);
  if (!(worst <= 1e-5))
    return fail("the hand-written kernel disagrees with hsnn");
  if (check) {
    std::printf("1 passed, 0 failed\n");
    return 0;
  }

  std::vector<double> tHand, tOurs, tNodes, tCopy;
  for (int r = 0; r <= reps; ++r) {
    double h = ms([&] { w1ForwardBatchMajor(z.data(), hand.data(), long(batch)); });
    double o = ms([&] { (void)bm->forward(z, ours, batch); });
    double m = ms([&] { (void)nm->forward(zn, oursN, batch); });
    double c = ms([&] { std::memcpy(copy.data(), z.data(), n * sizeof(float)); });
    if (r == 0)
      continue; // warm-up
    tHand.push_back(h), tOurs.push_back(o), tNodes.push_back(m), tCopy.push_back(c);
  }
  std::vector<double> ratio;
  for (size_t i = 0; i < tHand.size(); ++i)
    ratio.push_back(tOurs[i] / tHand[i]);
  std::printf("W1 forward f32, %zu x %d, median of %d (ms): hand-written batch-major %.2f, hsnn batch-major %.2f, "
              "hsnn nodes-major %.2f, memcpy of z (one thread) %.2f; hsnn / hand-written %.3f (median of per-round "
              "ratios; OMP_WAIT_POLICY=%s)\n",
              batch, kW1Nodes, reps, median(tHand), median(tOurs), median(tNodes), median(tCopy), median(ratio),
              std::getenv("OMP_WAIT_POLICY"));
  return 0;
}
