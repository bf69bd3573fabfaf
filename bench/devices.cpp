// The CL device (PoCL here) against the CPU device in one process, on the same graphs, interleaved round
// by round: a chain of 10 elementwise ops over 16M float32, a sum of 16M, a 1024^3 matmul. Prints best
// and median per device. Built by CMake as bench_devices (build/cmake/bench_devices [rounds]); it says
// so and exits where there is no OpenCL.
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

UOpPtr full_like(const Shape& shape, float v) {
  return expand(reshape(const_float(DType::Float32, v), Shape(shape.size(), 1)), shape);
}

struct Case {
  std::string name;
  double work;      // bytes moved or flops
  const char* unit; // of work per second
  std::function<UOpPtr(Device&)> graph;
};

double seconds(const std::function<void()>& f) {
  auto t = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

} // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  Device* cl = nullptr;
  try {
    cl = &cl_device();
  } catch (const std::runtime_error& e) {
    std::printf("no CL device: %s\n", e.what());
    return 0;
  }
  Device& cpu = cpu_device();
  const int64_t n = int64_t{16} << 20, m = 1024;
  std::vector<Case> cases = {
      {"elementwise chain of 10 ops, 16M", 2.0 * n * 4, "GB/s",
       [&](Device& d) {
         UOpPtr x = buffer(random_buffer(d, n, 1)), y = x;
         for (int i = 0; i < 5; i++)
           y = alu(Ops::ADD, alu(Ops::MUL, y, full_like({n}, 0.999f)), full_like({n}, 0.001f));
         return y;
       }},
      {"sum of 16M", 1.0 * n * 4, "GB/s",
       [&](Device& d) { return reduce(buffer(random_buffer(d, n, 2)), Ops::ADD, {0}); }},
      {"matmul 1024^3", 2.0 * m * m * m, "GFLOP/s",
       [&](Device& d) {
         UOpPtr a = reshape(buffer(random_buffer(d, m * m, 3)), {m, m, 1});
         UOpPtr b = reshape(buffer(random_buffer(d, m * m, 4)), {1, m, m});
         UOpPtr prod = alu(Ops::MUL, expand(a, {m, m, m}), expand(b, {m, m, m}));
         return reshape(reduce(prod, Ops::ADD, {1}), {m, m});
       }},
  };
  std::printf("CL: %s\n", cl->name().c_str());
  for (const Case& c : cases) {
    std::vector<double> t_cpu, t_cl;
    UOpPtr g_cpu = c.graph(cpu), g_cl = c.graph(*cl);
    auto run = [](Device& d, const UOpPtr& g) {
      BufferRef out = realize_value(g);
      d.synchronize();
    };
    run(cpu, g_cpu); // compiles, warms caches
    run(*cl, g_cl);
    for (int r = 0; r < rounds; r++) {
      t_cpu.push_back(seconds([&] { run(cpu, g_cpu); }));
      t_cl.push_back(seconds([&] { run(*cl, g_cl); }));
    }
    for (auto [dev, ts] : {std::pair{"CPU", &t_cpu}, std::pair{"CL ", &t_cl}}) {
      std::sort(ts->begin(), ts->end());
      double best = ts->front(), med = (*ts)[ts->size() / 2];
      double rate = c.work / best / 1e9;
      std::printf("%-34s %s  best %9.3f ms  median %9.3f ms  %7.2f %s\n", c.name.c_str(), dev, best * 1e3, med * 1e3,
                  rate, c.unit);
    }
  }
  return 0;
}
