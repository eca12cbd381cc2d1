//===- test/Runtime/ApiSafetyTest.cpp - Misuse is an error, never memory corruption ===//
#include "TestUtil.h"

#include "Runtime/Warn.h"

#include "hsnn/Backend.h"
#include "hsnn/Runtime.h"

#include <cstring>
#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace hsnn;

namespace {

// Runs `f` in a child process and returns (killed by SIGABRT, its stderr).
template <class F> std::pair<bool, std::string> inChild(F &&f) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    f();
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    out.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, out};
}

// Collects warnings for the scope of a test.
struct Warnings {
  std::vector<std::string> seen;
  WarningHandler old;
  Warnings() { old = setWarningHandler([this](std::string_view m) { seen.emplace_back(m); }); }
  ~Warnings() { setWarningHandler(old); }
};

} // namespace

TEST_CASE("the value of an error is never taken silently: the message is printed, then abort") {
  auto [aborted, err] = inChild([] {
    auto loss = Loss::compile("hubr", {}, {.method = Method::CpuInterp});
    std::vector<float> y(4), t(4), g(4);
    double l = *loss->fused(y, t, g); // a bug in the caller: loss holds an error
    std::printf("%f\n", l);
  });
  CHECK(aborted);
  CHECK(err.find("the value of an Expected was taken, but it holds an error") != std::string::npos);
  CHECK(err.find("error: 'hubr' is not a built-in loss; did you mean 'huber'?") != std::string::npos);
  CHECK(err.find("bad_variant_access") == std::string::npos);
  // error() of a value is a success, and takeError() too.
  Expected<int> v(3);
  CHECK_FALSE(v.error());
  CHECK_FALSE(v.takeError());
  // An Expected made from a success Error is an error that says so.
  Expected<int> bad{Error()};
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message() == "an Expected was made from a success Error");
}

TEST_CASE("sizes are checked against nodes x batch: a wrong batch is an error, not a write past the end") {
  auto layer = ActivationLayer::compile({{"relu", {}}, {"tanh", {}}}, {.method = Method::CpuInterp});
  REQUIRE(layer);
  std::vector<float> z(16, 1.0f), a(16 + 8, -7.0f);
  // The element count passed as the batch (16 for a 2-node layer of 8).
  CHECK(layer->forward(z, std::span<float>(a).first(16), 16).message() ==
        "'z' holds 16 elements; 2 nodes x batch 16 needs exactly 32");
  for (size_t i = 0; i < a.size(); ++i)
    CHECK(a[i] == -7.0f); // untouched
  REQUIRE_OK(layer->forward(z, std::span<float>(a).first(16), 8));
  CHECK(a[16] == -7.0f);
  CHECK(layer->forward(z, std::span<float>(a).first(15), 8).message() ==
        "'a' holds 15 elements; 2 nodes x batch 8 needs exactly 16");
  // A batch whose element count overflows.
  size_t huge = std::numeric_limits<size_t>::max() / 2;
  CHECK(layer->forward(z, std::span<float>(a).first(16), huge).message() ==
        fmt::format("2 nodes x batch {} overflows the address space", huge));
  // Losses: every view as long as y_pred.
  auto loss = Loss::compile("mse", {}, {.method = Method::CpuInterp});
  REQUIRE(loss);
  std::vector<float> t(15), g(16);
  CHECK(loss->forward(z, t).error().message() == "'y_true' holds 15 elements; y_pred of 16 elements needs exactly 16");
  CHECK(loss->gradient(z, z, std::span<float>(g).first(3)).message() ==
        "'grad' holds 3 elements; y_pred of 16 elements needs exactly 16");
}

TEST_CASE("arrays: the same array is in place, a partial overlap is refused") {
  auto layer = ActivationLayer::compile({{"x*x", {}}}, {.method = Method::CpuInterp, .dtype = DType::F64});
  REQUIRE(layer);
  std::vector<double> buf(9, 2.0);
  std::span<double> all(buf);
  CHECK(layer->forward(all.first(8), all.last(8), 8).message() ==
        "'z' and 'a' partially overlap; pass the same array (in place) or separate ones");
  std::vector<double> d(8);
  CHECK(layer->fused(all.first(8), all.first(8), all.first(8), 8).message() == "'a' and 'dfdz' are both outputs and share memory");
  REQUIRE_OK(layer->forward(all.first(8), all.first(8), 8)); // in place
  CHECK(buf[0] == 4.0);
  auto loss = Loss::compile("mse", {}, {.method = Method::CpuInterp, .dtype = DType::F64});
  REQUIRE(loss);
  CHECK(loss->gradient(all.first(8), all.first(8), all.last(8)).message() ==
        "'y_pred' and 'grad' partially overlap; pass the same array (in place) or separate ones");
}

TEST_CASE("backward in place (delta is err) gives the same values, on every engine and layout") {
  for (Method m : {Method::CpuInterp, Method::CpuJit})
    for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
      CAPTURE(to_string(m));
      CAPTURE(to_string(layout));
      auto layer = ActivationLayer::compile({{"sin(num)*alpha", {{"alpha", 3}}}, {"x**2/2", {}}},
                                            {.method = m, .dtype = DType::F64, .layout = layout});
      REQUIRE(layer);
      const size_t batch = 1000;
      std::vector<double> z(2 * batch), err(z.size()), want(z.size());
      for (size_t i = 0; i < z.size(); ++i) {
        z[i] = double(i % 37) * 0.1 - 1.5;
        err[i] = double(i % 5) - 2;
      }
      REQUIRE_OK(layer->backward(z, err, want, batch));
      REQUIRE_OK(layer->backward(z, err, err, batch));
      CHECK(err == want);
      // fused with a = z: f' = num for x**2/2 must not read the overwritten z.
      std::vector<double> zz = z, a2(z.size()), d1(z.size()), d2(z.size());
      REQUIRE_OK(layer->fused(z, a2, d1, batch));
      REQUIRE_OK(layer->fused(zz, zz, d2, batch));
      CHECK(zz == a2);
      CHECK(d2 == d1);
    }
}

TEST_CASE("buffers know their dtype, element count and backend") {
  auto cpu = getBackend("cpu");
  REQUIRE(cpu);
  auto layer = ActivationLayer::compile({{"relu", {}}}, {.method = Method::CpuInterp, .dtype = DType::F32});
  REQUIRE(layer);
  auto f64 = (*cpu)->allocate(4, DType::F64), f32 = (*cpu)->allocate(4, DType::F32);
  REQUIRE(f64);
  REQUIRE(f32);
  CHECK(f64->count() == 4);
  CHECK(f64->bytes() == 32);
  CHECK(layer->forward(*f64, *f32, 4).message() == "buffer 'z' holds f64 elements; the layer runs on f32");
  // A batch whose byte size wraps to 0 is an overflow, not a zero-length run.
  CHECK(layer->forward(*f32, *f32, size_t(1) << 62).message() ==
        fmt::format("1 nodes x batch {} overflows the address space", size_t(1) << 62));
}

TEST_CASE("a buffer with no memory, or whose byte size wraps, is refused before any kernel runs") {
  auto layer = ActivationLayer::compile({{"relu", {}}}, {.method = Method::CpuInterp, .dtype = DType::F32});
  auto loss = Loss::compile("mse", {}, {.method = Method::CpuInterp, .dtype = DType::F32});
  REQUIRE(layer);
  REQUIRE(loss);
  auto cpu = getBackend("cpu");
  REQUIRE(cpu);
  auto good = (*cpu)->allocate(4, DType::F32);
  REQUIRE(good);
  // DeviceBuffer's constructor is public: a caller can give it anything.
  DeviceBuffer null(nullptr, 4, DType::F32, "cpu");
  CHECK(layer->forward(null, *good, 4).message() ==
        "buffer 'z' has no memory (its data is null) but says it holds 4 elements");
  CHECK(layer->forward(*good, null, 4).message() ==
        "buffer 'a' has no memory (its data is null) but says it holds 4 elements");
  CHECK(loss->forward(null, *good).error().message() ==
        "buffer 'y_pred' has no memory (its data is null) but says it holds 4 elements");
  CHECK(loss->gradient(*good, *good, null).message() ==
        "buffer 'grad' has no memory (its data is null) but says it holds 4 elements");
  // 2^62 f32 elements are 2^64 bytes: the byte size must not wrap to 0.
  const size_t huge = size_t(1) << 62;
  std::shared_ptr<void> some(good->data(), [](void *) {});
  DeviceBuffer wraps(some, huge, DType::F32, "cpu");
  CHECK(wraps.bytes() == SIZE_MAX);
  CHECK(loss->forward(wraps, wraps).error().message() ==
        fmt::format("buffer 'y_pred' holds {} elements, more bytes than the address space has", huge));
  CHECK(loss->fused(wraps, wraps, wraps).error().message() ==
        fmt::format("buffer 'y_pred' holds {} elements, more bytes than the address space has", huge));
  // Copies check them too.
  float host[4] = {};
  CHECK((*cpu)->toDevice(null, host, sizeof host).message() == "the buffer has no memory (its data is null)");
  CHECK((*cpu)->toHost(host, null, sizeof host).message() == "the buffer has no memory (its data is null)");
}

TEST_CASE("a copy owns its constants") {
  auto layer = ActivationLayer::compile({{"sin(num)*alpha", {{"alpha", 2}}}}, {.method = Method::CpuInterp});
  REQUIRE(layer);
  ActivationLayer copy = *layer;
  REQUIRE_OK(copy.setConstant(0, "alpha", 5));
  CHECK(*layer->constant(0, "alpha") == 2);
  CHECK(*copy.constant(0, "alpha") == 5);
  std::vector<float> z(1, 1.0f), a(1), b(1);
  REQUIRE_OK(layer->forward(z, a, 1));
  REQUIRE_OK(copy.forward(z, b, 1));
  CHECK(a[0] == doctest::Approx(2 * std::sin(1.0)));
  CHECK(b[0] == doctest::Approx(5 * std::sin(1.0)));
  // Assignment copies too; a moved-from object says so.
  copy = *layer;
  CHECK(*copy.constant(0, "alpha") == 2);
  ActivationLayer moved = std::move(copy);
  CHECK(copy.forward(z, a, 1).message() == "this layer was moved from; use the object it was moved to");
  auto loss = Loss::compile("huber", {{"delta", 0.5}}, {.method = Method::CpuInterp});
  REQUIRE(loss);
  Loss lossCopy = *loss;
  REQUIRE_OK(lossCopy.setConstant("delta", 2));
  CHECK(*loss->constant("delta") == 0.5);
}

TEST_CASE("setConstant while other threads run the layer: each call sees one set of constants") {
  for (Method m : {Method::CpuInterp, Method::CpuJit}) {
    CAPTURE(to_string(m));
    auto layer = ActivationLayer::compile({{"num*alpha", {{"alpha", 1}}}}, {.method = m});
    REQUIRE(layer);
    const size_t batch = 1 << 18;
    std::atomic<bool> done{false};
    std::thread writer([&] {
      for (int i = 0; !done; ++i)
        if (layer->setConstant(0, "alpha", i % 2 ? 2.0 : 1.0))
          break;
    });
    std::vector<float> z(batch, 1.0f), a(batch);
    int mixed = 0;
    for (int run = 0; run < 40; ++run) {
      REQUIRE_OK(layer->forward(z, a, batch));
      float first = a[0];
      for (float v : a)
        mixed += v != first;
      CHECK((first == 1.0f || first == 2.0f));
    }
    done = true;
    writer.join();
    CHECK(mixed == 0);
  }
}

TEST_CASE("a scoped override changes only the flags it names") {
  RuntimeFlags before = runtimeFlags();
  {
    ScopedRuntimeFlags scope({.strict = true});
    RuntimeFlags now = runtimeFlags();
    CHECK(now.strict);
    CHECK(now.cacheDir == before.cacheDir);
    CHECK(now.threads == before.threads);
    CHECK(now.useKernelCache == before.useKernelCache);
  }
  RuntimeFlags after = runtimeFlags();
  CHECK(after.strict == before.strict);
  CHECK(after.cacheDir == before.cacheDir);
}

TEST_CASE("formula rules: unused constants warn, near-built-in names are errors, an ignored input warns") {
  Warnings w;
  auto layer = ActivationLayer::compile({{"sin(num)*alpha", {{"alpha", 2}, {"beta", 3}}}}, {.method = Method::CpuInterp});
  REQUIRE(layer);
  REQUIRE(w.seen.size() == 1);
  CHECK(w.seen[0] == "node 0: warning: constant 'beta' is not used by the formula (ignored)");
  {
    ScopedRuntimeFlags strict({.strict = true});
    auto s = ActivationLayer::compile({{"sin(num)*alpha", {{"alpha", 2}, {"beta", 3}}}}, {.method = Method::CpuInterp});
    REQUIRE_FALSE(s);
    CHECK(s.error().message() == "node 0: error: constant 'beta' is not used by the formula\n  sin(num)*alpha");
  }
  for (auto [name, near] : {std::pair{"relu6", "relu"}, {"prelu", "relu"}, {"logsigmoid", "log_sigmoid"}}) {
    auto l = ActivationLayer::compile({{name, {}}});
    REQUIRE_FALSE(l);
    CHECK(l.error().message() == fmt::format("node 0: error: '{}' is not a built-in activation; did you mean '{}'?\n  {}\n  ^{}",
                                             name, near, name, std::string(std::strlen(name) - 1, '~')));
  }
  auto call = ActivationLayer::compile({{"relu6(num)", {}}});
  REQUIRE_FALSE(call);
  CHECK(call.error().message() == "node 0: error: unknown function 'relu6'; did you mean 'relu'?\n  relu6(num)\n  ^~~~~");
  w.seen.clear();
  auto constant = ActivationLayer::compile({{"relu", {}}, {"alpha*2", {{"alpha", 1}}}}, {.method = Method::CpuInterp});
  REQUIRE(constant);
  REQUIRE(w.seen.size() == 1);
  CHECK(w.seen[0] == "node 1: warning: formula 'alpha*2' does not use its input (num, x or z); its output is the same "
                     "for every input and its derivative is 0");
  // A bare unknown name is still a constant that must be given.
  auto bare = ActivationLayer::compile({{"gain", {}}});
  REQUIRE_FALSE(bare);
  CHECK(bare.error().message().find("missing constant 'gain'") != std::string::npos);
}

TEST_CASE("a 6 MiB batch-major call of a wide layer needs little scratch") {
  // Run alone (ctest entry batch_major_scratch) so the peak RSS is this test's.
  const size_t nodes = 65536, batch = 24; // 6 MiB of f32
  std::vector<NodeSpec> specs(nodes, NodeSpec{"relu", {}});
  for (Method m : {Method::CpuInterp, Method::CpuJit}) {
    auto layer = ActivationLayer::compile(specs, {.method = m, .layout = Layout::BatchMajor});
    REQUIRE(layer);
    std::vector<float> z(nodes * batch, -1.0f), a(z.size(), 5.0f);
    struct rusage before, after;
    ::getrusage(RUSAGE_SELF, &before);
    REQUIRE_OK(layer->forward(z, a, batch));
    ::getrusage(RUSAGE_SELF, &after);
    CHECK(a.back() == 0.0f);
    long grownMiB = (after.ru_maxrss - before.ru_maxrss) / 1024;
    CAPTURE(grownMiB);
    CHECK(grownMiB < 64);
  }
}

TEST_CASE("environment values that cannot be read are named with the accepted values") {
  // ctest runs this with HSNN_NUM_THREADS and HSNN_STRICT set to bad values
  // (entry bad_environment); elsewhere it checks what the environment says.
  const char *threads = std::getenv("HSNN_NUM_THREADS");
  if (!threads || std::string(threads) != "abc") {
    MESSAGE("skipped: run by the ctest entry bad_environment, which sets HSNN_NUM_THREADS=abc HSNN_STRICT=2");
    return;
  }
  auto warnings = detail::environmentWarnings();
  REQUIRE(warnings.size() == 2);
  CHECK(warnings[0] == "HSNN_STRICT='2' is not a valid value: use 0 or 1 (also true/false, on/off, yes/no); using 0");
  CHECK(warnings[1] ==
        "HSNN_NUM_THREADS='abc' is not a valid value: use a whole number from 0 (all cores) to 1024; using all cores");
  CHECK(runtimeFlags().threads == 0);
  CHECK_FALSE(runtimeFlags().strict);
}

TEST_CASE("a very large HSNN_NUM_THREADS is refused, and compile still works") {
  const char *threads = std::getenv("HSNN_NUM_THREADS");
  if (!threads || std::string(threads) != "1000000") {
    MESSAGE("skipped: run by the ctest entry huge_thread_count, which sets HSNN_NUM_THREADS=1000000");
    return;
  }
  auto warnings = detail::environmentWarnings();
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "HSNN_NUM_THREADS='1000000' is not a valid value: use a whole number from 0 (all cores) to "
                       "1024; using all cores");
  auto layer = ActivationLayer::compile({{"gelu", {}}});
  REQUIRE_OK_EXPECTED(layer);
}

namespace {
// An application's pool: two std::threads over halves of the tasks, counting
// its calls and the tasks it ran.
struct CountingPool {
  std::atomic<size_t> calls{0}, tasks{0};
  static void run(void *pool, size_t tasks, size_t grain, void (*body)(void *, size_t, size_t), void *ctx) {
    auto &self = *static_cast<CountingPool *>(pool);
    self.calls++;
    self.tasks += tasks;
    CHECK(grain >= 1);
    std::thread other([&] { body(ctx, tasks / 2, tasks); });
    body(ctx, 0, tasks / 2);
    other.join();
  }
};
} // namespace

TEST_CASE("a scoped ParallelFor runs this thread's kernels on the application's pool, with the same results") {
  std::vector<NodeSpec> specs;
  for (const char *f : {"relu", "tanh", "gelu", "sin(num)*alpha"})
    specs.push_back({f, {{"alpha", 1.5}}});
  const size_t nodes = specs.size(), batch = 1 << 15; // past the serial bound: the work is spread
  std::vector<float> z(nodes * batch);
  for (size_t i = 0; i < z.size(); ++i)
    z[i] = float(i % 1000) / 125.0f - 4.0f;
  for (Method m : {Method::CpuInterp, Method::CpuJit})
    for (Layout layout : {Layout::NodesMajor, Layout::BatchMajor}) {
      CAPTURE(int(m));
      CAPTURE(int(layout));
      auto layer = ActivationLayer::compile(specs, {.method = m, .layout = layout});
      REQUIRE(layer);
      std::vector<float> expected(z.size()), got(z.size()), other(z.size());
      REQUIRE_OK(layer->forward(z, expected, batch));
      CountingPool pool;
      {
        ScopedParallelFor scope({&CountingPool::run, &pool});
        REQUIRE_OK(layer->forward(z, got, batch));
        {
          ScopedParallelFor inner({}); // hsnn's own threads again, then the pool once more
          REQUIRE_OK(layer->forward(z, other, batch));
        }
        CHECK(pool.calls == 1);
        REQUIRE_OK(layer->forward(z, other, batch));
      }
      CHECK(pool.calls == 2);
      CHECK(pool.tasks > 2);
      CHECK(std::memcmp(expected.data(), got.data(), z.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(expected.data(), other.data(), z.size() * sizeof(float)) == 0);
      REQUIRE_OK(layer->forward(z, other, batch)); // out of scope: the pool is not called
      CHECK(pool.calls == 2);
    }
}
