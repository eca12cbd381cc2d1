// Bench W1's forward, batch-major, written by hand (W1Kernel.cpp).
#pragma once

/// Nodes per row: node j runs formula j % 8 of relu, sigmoid, tanh, gelu,
/// silu, softplus, sin(num), 0.5*num+0.1.
inline constexpr int kW1Nodes = 256;

/// a = f(z) over batch rows of kW1Nodes, on OpenMP's threads.
void w1ForwardBatchMajor(const float *z, float *a, long batch);
