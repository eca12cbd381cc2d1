//===- python/src/OutputPool.h - Recycled memory for result arrays -*- C++ -*-===//
//
// A new NumPy result of a few MiB is a fresh mmap from glibc (until a large
// free has raised its threshold), and every page of it faults in on first
// write: at 4096 x 256 f32 that was most of a HeteroActivation call, far
// longer than its kernels. Results are taken from here instead: blocks
// freed by their arrays (and the tensors that share them) wait, pages
// resident, for the next result of the same size, as PyTorch's CUDA caching
// allocator does for device memory. Bounded: what would exceed the bound is
// given back to the system.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <pybind11/numpy.h>

#include <vector>

namespace hsnn::python {

/// Below this many bytes results are plain NumPy arrays: glibc serves such
/// blocks from its heap, already resident.
inline constexpr size_t kMinPooledBytes = size_t(1) << 17;

/// An uninitialised C-contiguous float32 (`f32`) or float64 array of `shape`,
/// in pooled memory when it is large enough to be worth it.
pybind11::array pooledArray(bool f32, const std::vector<pybind11::ssize_t> &shape);

/// a * b elementwise into a new (pooled) array, on TBB's threads when large:
/// the first-order backward's grad * f'(z), without PyTorch's OpenMP threads
/// (which spin after each operation, where hsnn's next kernel would compete
/// with them) and without NumPy's one thread.
pybind11::array multiply(const pybind11::array &a, const pybind11::array &b);

/// The pool's memory without an array, for hsnn._torch (RawRun.h): `bytes`
/// 64-byte aligned, given back with giveData from any thread.
void *takeData(size_t bytes);
void giveData(void *data);

/// Bytes waiting in the pool (tests).
size_t pooledBytes();

} // namespace hsnn::python
