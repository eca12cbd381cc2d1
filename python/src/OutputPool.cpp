//===- python/src/OutputPool.cpp - Recycled memory for result arrays ------===//
#include "OutputPool.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <unordered_map>

namespace hsnn::python {
namespace py = pybind11;
namespace {

// At most this many bytes wait for reuse (a few layers' results of a
// training step); a block beyond it is freed.
constexpr size_t kMaxWaiting = size_t(512) << 20;
// The block's size is kept in front of the data; 64 keeps the data aligned
// for the kernels' vectors.
constexpr size_t kHeader = 64;

struct Pool {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void *>> free; // by size
  size_t waiting = 0;
};

Pool &pool() {
  static Pool *p = new Pool(); // never destroyed: arrays may outlive static destruction
  return *p;
}

void *take(size_t bytes) {
  {
    Pool &p = pool();
    std::lock_guard lock(p.mutex);
    auto it = p.free.find(bytes);
    if (it != p.free.end() && !it->second.empty()) {
      void *block = it->second.back();
      it->second.pop_back();
      p.waiting -= bytes;
      return block;
    }
  }
  void *block = std::aligned_alloc(kHeader, kHeader + bytes);
  if (!block)
    throw std::bad_alloc();
  *static_cast<size_t *>(block) = bytes;
  return block;
}

void give(void *block) {
  size_t bytes = *static_cast<size_t *>(block);
  {
    Pool &p = pool();
    std::lock_guard lock(p.mutex);
    if (p.waiting + bytes <= kMaxWaiting) {
      p.free[bytes].push_back(block);
      p.waiting += bytes;
      return;
    }
  }
  std::free(block);
}

} // namespace

void *takeData(size_t bytes) { return static_cast<char *>(take(bytes)) + kHeader; }
void giveData(void *data) { give(static_cast<char *>(data) - kHeader); }

py::array pooledArray(bool f32, const std::vector<py::ssize_t> &shape) {
  size_t count = 1;
  for (py::ssize_t d : shape)
    count *= size_t(d);
  size_t bytes = count * (f32 ? 4 : 8);
  if (bytes < kMinPooledBytes)
    return f32 ? py::array(py::array_t<float>(shape)) : py::array(py::array_t<double>(shape));
  void *block = take(bytes);
  py::capsule owner(block, [](void *b) { give(b); });
  void *data = static_cast<char *>(block) + kHeader;
  if (f32)
    return py::array_t<float>(shape, static_cast<float *>(data), owner);
  return py::array_t<double>(shape, static_cast<double *>(data), owner);
}

template <class T> void multiplyInto(const T *a, const T *b, T *out, size_t n) {
  constexpr size_t kGrain = size_t(1) << 15; // the engine's serial bound (Launch.h)
  if (n <= kGrain) {
    for (size_t i = 0; i < n; ++i)
      out[i] = a[i] * b[i];
    return;
  }
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n, kGrain), [&](const tbb::blocked_range<size_t> &r) {
    for (size_t i = r.begin(); i != r.end(); ++i)
      out[i] = a[i] * b[i];
  });
}

py::array multiply(const py::array &a, const py::array &b) {
  bool f32 = a.dtype().is(py::dtype::of<float>());
  if (!(f32 || a.dtype().is(py::dtype::of<double>())) || !a.dtype().is(b.dtype()))
    throw py::type_error("multiply takes two float32 or two float64 arrays");
  if (!(a.flags() & py::array::c_style) || !(b.flags() & py::array::c_style))
    throw py::value_error("multiply takes C-contiguous arrays");
  std::vector<py::ssize_t> shape(a.shape(), a.shape() + a.ndim());
  if (a.ndim() != b.ndim() || !std::equal(shape.begin(), shape.end(), b.shape()))
    throw py::value_error("multiply takes two arrays of one shape");
  py::array out = pooledArray(f32, shape);
  size_t n = size_t(a.size());
  py::gil_scoped_release unlocked;
  if (f32)
    multiplyInto(static_cast<const float *>(a.data()), static_cast<const float *>(b.data()),
                 static_cast<float *>(out.mutable_data()), n);
  else
    multiplyInto(static_cast<const double *>(a.data()), static_cast<const double *>(b.data()),
                 static_cast<double *>(out.mutable_data()), n);
  return out;
}

size_t pooledBytes() {
  Pool &p = pool();
  std::lock_guard lock(p.mutex);
  return p.waiting;
}

} // namespace hsnn::python
