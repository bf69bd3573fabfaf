// tiny's side of bench/gpu_check.sh: on one backend's device (CUDA on a lent GPU; CL runs it here), a chain
// of 10 elementwise ops and a sum over n float32, and an m^3 matmul in float32 and in bfloat16 (float32
// accumulation, as torch's). Each graph runs once (compiling), then `reps` times per round from the
// schedule cache with one sync at the end; best of `rounds`. One line per case:
//   tiny <case> <best ms per run> <rate> <unit>
// Built by CMake as bench_gpu: build/cmake/bench_gpu BACKEND [n] [m] [rounds] [reps].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/random_buffer.h"
#include "runtime/device.h"
#include "runtime/realize.h"

using namespace tiny;
using namespace tiny::runtime;
using tiny::bench::random_buffer;

namespace {

UOpPtr full(const Shape& shape, float v) {
  return expand(reshape(const_float(DType::Float32, v), Shape(shape.size(), 1)), shape);
}

UOpPtr matmul(const UOpPtr& a, const UOpPtr& b, int64_t m) {
  UOpPtr prod = alu(Ops::MUL, expand(reshape(a, {m, m, 1}), {m, m, m}), expand(reshape(b, {1, m, m}), {m, m, m}));
  return reshape(reduce(prod, Ops::ADD, {1}), {m, m});
}

struct Case {
  std::string name;
  double work;      // bytes moved or flops per run
  const char* unit; // of work per second
  UOpPtr graph;
};

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s BACKEND [n] [m] [rounds] [reps]\n", argv[0]);
    return 2;
  }
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : int64_t{256} << 20;
  const int64_t m = argc > 3 ? std::atoll(argv[3]) : 4096;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 5;
  const int reps = argc > 5 ? std::atoi(argv[5]) : 10;
  Device* dev = nullptr;
  try {
    dev = &backend_device(argv[1]);
  } catch (const std::runtime_error& e) {
    std::printf("no %s device: %s\n", argv[1], e.what());
    return 1;
  }
  std::printf("device %s\n", dev->name().c_str());
  UOpPtr x = buffer(random_buffer(*dev, n, 1)), y = x;
  for (int i = 0; i < 5; i++)
    y = alu(Ops::ADD, alu(Ops::MUL, y, full({n}, 0.999f)), full({n}, 0.001f));
  UOpPtr a = buffer(random_buffer(*dev, m * m, 3)), b = buffer(random_buffer(*dev, m * m, 4));
  UOpPtr a16 = buffer(realize_value(cast(a, DType::BFloat16), dev));
  UOpPtr b16 = buffer(realize_value(cast(b, DType::BFloat16), dev));
  std::vector<Case> cases = {
      {"elementwise_chain", 2.0 * n * 4, "GB/s", y},
      {"sum", 1.0 * n * 4, "GB/s", reduce(x, Ops::ADD, {0})},
      {"matmul_f32", 2.0 * m * m * m, "TFLOP/s", matmul(a, b, m)},
      {"matmul_bf16", 2.0 * m * m * m, "TFLOP/s",
       cast(matmul(cast(a16, DType::Float32), cast(b16, DType::Float32), m), DType::BFloat16)},
  };
  for (const Case& c : cases) {
    try {
      UOpPtr root = reshape(c.graph, {prod(c.graph->shape)}); // as a storage holds its content: flat
      realize_all({root}, dev);                               // compiles; later runs replay the cached schedule
      dev->synchronize();
      double best = 1e30;
      for (int r = 0; r < rounds; r++) {
        auto t = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; i++)
          realize_all({root}, dev);
        dev->synchronize();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count() / reps);
      }
      double scale = std::string(c.unit) == "TFLOP/s" ? 1e12 : 1e9;
      std::printf("tiny %s %.4f %.3f %s\n", c.name.c_str(), best * 1e3, c.work / best / scale, c.unit);
    } catch (const std::runtime_error& e) {
      std::printf("tiny %s failed: %s\n", c.name.c_str(), e.what());
    }
    std::fflush(stdout);
  }
  return 0;
}
