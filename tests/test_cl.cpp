// Kernels lowered for a GPU, rendered as OpenCL and run on the CL device (PoCL on a machine without a
// GPU), each compared with the CPU device running the same graph. They skip, saying why, where there
// is no OpenCL library or device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "compiler/lower.h"
#include "compiler/render_gpu.h"
#include "runtime/device.h"
#include "runtime/lazy_buffer.h"
#include "runtime/realize.h"

using namespace tiny;
using namespace tiny::runtime;

namespace {

using Bytes = std::vector<char>;

struct Input {
  DType dtype;
  Bytes bytes;
};

template <class T> Input input(DType dt, const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return {dt, b};
}

std::vector<float> random_floats(size_t n, unsigned seed, float lo = -2, float hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v)
    x = d(rng);
  return v;
}

BufferRef upload(Device& dev, const Input& in) {
  auto b = std::make_shared<Buffer>(dev, in.dtype, static_cast<int64_t>(in.bytes.size() / itemsize(in.dtype)));
  dev.allocator().copy_in(b->ptr(), in.bytes.data(), in.bytes.size());
  return b;
}

Bytes download(const BufferRef& ref) {
  auto& b = static_cast<Buffer&>(*ref);
  Bytes out(b.nbytes());
  b.device().allocator().copy_out(out.data(), b.ptr(), 0, out.size());
  return out;
}

template <class T> std::vector<T> as(const Bytes& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

using Graph = std::function<UOpPtr(const std::vector<UOpPtr>&)>;

class ClDevice : public ::testing::Test {
protected:
  Device* cl = nullptr;
  void SetUp() override {
    try {
      cl = &cl_device();
    } catch (const std::runtime_error& e) {
      GTEST_SKIP() << e.what();
    }
  }
  // The graph over the inputs, realized on `dev`.
  Bytes run_on(Device& dev, const std::vector<Input>& inputs, const Graph& graph) {
    std::vector<UOpPtr> leaves;
    for (const Input& in : inputs)
      leaves.push_back(buffer(upload(dev, in)));
    return download(realize_value(graph(leaves)));
  }
  // {CL result, CPU result}
  std::pair<Bytes, Bytes> run_both(const std::vector<Input>& inputs, const Graph& graph) {
    return {run_on(*cl, inputs, graph), run_on(cpu_device(), inputs, graph)};
  }
};

// Floats equal within `ulps` units in the last place (NaN equals NaN).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rtol = 0) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
      continue;
    }
    if (rtol == 0)
      EXPECT_EQ(got[i], want[i]) << "at " << i;
    else
      EXPECT_NEAR(got[i], want[i], rtol * std::max(1.0f, std::fabs(want[i]))) << "at " << i;
  }
}


} // namespace

TEST_F(ClDevice, AFusedElementwiseChainMatchesTheCpu) {
  auto [got, want] = run_both({input(DType::Float32, random_floats(1000, 1)), input(DType::Float32, random_floats(1000, 2))},
                              [](const std::vector<UOpPtr>& in) {
                                auto two = expand(reshape(const_float(DType::Float32, 2.0), {1}), {1000});
                                auto s = alu(Ops::MUL, alu(Ops::ADD, in[0], in[1]), two);
                                auto e = alu(Ops::MAX, s, alu(Ops::EXP, in[0]));
                                return alu(Ops::ADD, alu(Ops::TANH, e), alu(Ops::LOG, alu(Ops::ABS, in[1])));
                              });
  expect_close(as<float>(got), as<float>(want), 1e-6f);
}
