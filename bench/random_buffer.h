#pragma once
// A device buffer of n uniform floats in [-1, 1), seeded: the inputs of the C++ benchmarks.

#include <cstdint>
#include <random>
#include <vector>

#include "runtime/device.h"

namespace tiny::bench {

inline BufferRef random_buffer(runtime::Device& dev, int64_t n, unsigned seed) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  for (float& x : v)
    x = d(rng);
  auto b = std::make_shared<runtime::Buffer>(dev, DType::Float32, n);
  dev.allocator().copy_in(b->ptr(), v.data(), v.size() * sizeof(float));
  return b;
}

} // namespace tiny::bench
