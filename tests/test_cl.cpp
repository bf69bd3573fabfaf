// Kernels lowered for a GPU, rendered as OpenCL and run on the CL device (PoCL on a machine without a
// GPU), each compared with the CPU device running the same graph. They skip, saying why, where there
// is no OpenCL library or device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include <unistd.h>

#include "compiler/lower.h"
#include "compiler/render_gpu.h"
#include "compiler/schedule.h"
#include "runtime/device.h"
#include "runtime/lazy_buffer.h"
#include "runtime/realize.h"
#include "tests/gpu_kernels.h"

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

// TINY_GPU_TEST_BACKEND=CUDA (bench/gpu_check.sh, on a lent GPU) runs these on that backend's device.
class ClDevice : public ::testing::Test {
protected:
  Device* cl = nullptr;
  void SetUp() override {
    try {
      const char* backend = std::getenv("TINY_GPU_TEST_BACKEND");
      cl = backend ? &backend_device(backend) : &cl_device();
    } catch (const std::runtime_error& e) {
      GTEST_SKIP() << e.what();
    }
  }
  // How the device's dialect declares a float in local (shared) memory, and its barrier.
  std::string local_float() const {
    return cl->target().dialect == Dialect::OpenCL ? "__local float" : "__shared__ float";
  }
  std::string barrier() const {
    return cl->target().dialect == Dialect::OpenCL ? "barrier(CLK_LOCAL_MEM_FENCE)" : "__syncthreads()";
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
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i << ": " << got[i];
      continue;
    }
    if (rtol == 0 || std::isinf(want[i]))
      EXPECT_EQ(got[i], want[i]) << "at " << i;
    else
      EXPECT_NEAR(got[i], want[i], rtol * std::max(1.0f, std::fabs(want[i]))) << "at " << i;
  }
}

} // namespace

TEST_F(ClDevice, AFusedElementwiseChainMatchesTheCpu) {
  auto [got, want] =
      run_both({input(DType::Float32, random_floats(1000, 1)), input(DType::Float32, random_floats(1000, 2))},
               [](const std::vector<UOpPtr>& in) {
                 auto two = expand(reshape(const_float(DType::Float32, 2.0), {1}), {1000});
                 auto s = alu(Ops::MUL, alu(Ops::ADD, in[0], in[1]), two);
                 auto e = alu(Ops::MAX, s, alu(Ops::EXP, in[0]));
                 return alu(Ops::ADD, alu(Ops::TANH, e), alu(Ops::LOG, alu(Ops::ABS, in[1])));
               });
  expect_close(as<float>(got), as<float>(want), 1e-6f);
}

namespace {

void expect_close_f64(const std::vector<double>& got, const std::vector<double>& want, double rtol = 4e-16) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) {
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i << ": " << got[i];
    else if (std::isinf(want[i]))
      EXPECT_EQ(got[i], want[i]) << "at " << i;
    else
      EXPECT_NEAR(got[i], want[i], rtol * std::max(1.0, std::fabs(want[i]))) << "at " << i;
  }
}

UOpPtr scalar(DType dt, double v, const Shape& shape) {
  Shape ones(shape.size(), 1);
  return expand(reshape(is_float(dt) ? const_float(dt, v) : const_int(dt, static_cast<int64_t>(v)), ones), shape);
}

// The kernel the CL device would run for `value` (lowered and rendered, not run).
double magnitude(const std::vector<float>& x) {
  double mag = 0;
  for (float v : x)
    mag += std::fabs(v);
  return mag;
}

// A float sum of x is within 1e-6 of its magnitude from the sum in double.
void expect_exact_sum(float got, const std::vector<float>& x) {
  double exact = 0;
  for (float v : x)
    exact += v;
  EXPECT_NEAR(got, exact, 1e-6 * magnitude(x));
}

std::pair<Kernel, std::string> cl_kernel_of(Device& cl, const UOpPtr& value) {
  auto out = std::make_shared<Buffer>(cl, value->dtype, prod(value->shape));
  Kernel k = lower_kernel(out, View::contiguous(value->shape), value, cl.target());
  return {k, render_gpu(k, k.name, cl.target())};
}

} // namespace

// The CPU device's clang fuses a product read once by an add or subtract into one fma (so do torch's
// CPU kernels); OpenCL contracts only within an expression, so the renderer fuses: the same bits.
TEST_F(ClDevice, AProductReadOnceByAnAddOrSubtractRoundsOnceAsOnTheCpu) {
  const int64_t n = 4096;
  auto graph = [](const std::vector<UOpPtr>& in) {
    auto twice = alu(Ops::MUL, in[0], in[2]); // read twice: not fused on either device
    auto fused = alu(Ops::SUB, in[2], alu(Ops::MUL, in[0], in[1]));
    return alu(Ops::ADD, alu(Ops::ADD, alu(Ops::MUL, in[1], in[2]), fused), alu(Ops::SUB, twice, twice));
  };
  std::vector<Input> inputs{input(DType::Float32, random_floats(n, 61)), input(DType::Float32, random_floats(n, 62)),
                            input(DType::Float32, random_floats(n, 63))};
  auto [got, want] = run_both(inputs, graph);
  EXPECT_EQ(as<float>(got), as<float>(want));
  std::vector<UOpPtr> bufs;
  for (const Input& i : inputs)
    bufs.push_back(buffer(upload(*cl, i)));
  auto [k, src] = cl_kernel_of(*cl, graph(bufs));
  EXPECT_NE(src.find("fma(-("), std::string::npos) << src;
  // a sum of products accumulates with fma too
  auto row = reshape(bufs[0], {64, 64}), col = reshape(bufs[1], {64, 64});
  auto [kd, dot] = cl_kernel_of(*cl, reduce(alu(Ops::MUL, row, col), Ops::ADD, {1}));
  EXPECT_NE(dot.find("= (float)(fma("), std::string::npos) << dot;
}

TEST_F(ClDevice, EveryDtypeComputesAndRoundsAsOnTheCpu) {
  const int64_t n = 777;
  auto x = random_floats(n, 3, -40, 40), y = random_floats(n, 4, -40, 40);
  for (DType dt : {DType::Bool, DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::UInt8, DType::Float16,
                   DType::BFloat16, DType::Float32, DType::Float64, DType::UInt16, DType::UInt32, DType::UInt64}) {
    auto [got, want] =
        run_both({input(DType::Float32, x), input(DType::Float32, y)}, [&](const std::vector<UOpPtr>& in) {
          UOpPtr a = cast(in[0], dt), b = cast(in[1], dt);
          if (dt == DType::Bool) return alu(Ops::XOR, alu(Ops::OR, a, b), alu(Ops::CMPLT, in[0], in[1]));
          UOpPtr v = alu(Ops::ADD, alu(Ops::MUL, a, b), alu(Ops::MAX, a, b));
          v = alu(Ops::SUB, v, is_float(dt) ? alu(Ops::FDIV, a, b) : alu(Ops::IDIV, a, b));
          return where(alu(Ops::CMPLT, a, b), v, alu(Ops::MIN, a, alu(Ops::NEG, b)));
        });
    // a product and a sum may fuse into one rounding on either device (the CPU compiles with
    // -ffp-contract=fast): float32 and float64 agree to the last bit but one
    if (dt == DType::Float32)
      expect_close(as<float>(got), as<float>(want), 2e-7f);
    else if (dt == DType::Float64)
      expect_close_f64(as<double>(got), as<double>(want));
    else
      EXPECT_EQ(got, want) << name(dt);
  }
}

// Inputs for every op: a spread of values, and zeros, ones, infinities and NaN.
std::vector<float> op_inputs(unsigned seed) {
  auto v = random_floats(200, seed, -3, 3);
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, INFINITY, -INFINITY, NAN, 1e-30f, 100.0f, -100.0f})
    v.push_back(x);
  return v;
}

// One kernel computing f(op, inputs...) for each op, the results concatenated (one compile per dtype).
UOpPtr each_op(const std::vector<Ops>& ops, const std::function<UOpPtr(Ops)>& f) {
  UOpPtr all;
  for (size_t k = 0; k < ops.size(); k++) {
    UOpPtr r = f(ops[k]);
    int64_t n = r->shape[0];
    UOpPtr placed = pad(r, {{static_cast<int64_t>(k) * n, static_cast<int64_t>(ops.size() - 1 - k) * n}});
    all = all ? alu(Ops::ADD, all, placed) : placed;
  }
  return all;
}

// Elementwise kernels: each thread computes 16 bytes of adjacent outputs (4 float32, 8 float16, 16
// bytes, 2 float64), read and written as vectors; every dtype as on the CPU.
TEST_F(ClDevice, ElementwiseLanesOfEveryDtypeComputeAsOnTheCpu) {
  const int64_t n = 1040; // a multiple of 16: every dtype takes its full vector
  auto x = random_floats(n, 5, -40, 40), y = random_floats(n, 6, -40, 40);
  for (DType dt : {DType::Bool, DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::UInt8, DType::Float16,
                   DType::BFloat16, DType::Float32, DType::Float64, DType::UInt16, DType::UInt32, DType::UInt64}) {
    // the inputs stored in dt: the kernel's vector loads read dt
    auto xs = run_on(cpu_device(), {input(DType::Float32, x)}, [&](const auto& in) { return cast(in[0], dt); });
    auto ys = run_on(cpu_device(), {input(DType::Float32, y)}, [&](const auto& in) { return cast(in[0], dt); });
    auto graph = [&](const std::vector<UOpPtr>& in) {
      const UOpPtr &a = in[0], &b = in[1];
      if (dt == DType::Bool) return alu(Ops::XOR, alu(Ops::OR, a, b), alu(Ops::AND, a, alu(Ops::NOT, b)));
      UOpPtr v = alu(Ops::ADD, alu(Ops::MUL, a, b), alu(Ops::MAX, a, b));
      v = alu(Ops::SUB, v, is_float(dt) ? alu(Ops::FDIV, a, b) : alu(Ops::IDIV, a, b));
      return where(alu(Ops::CMPLT, a, b), v, alu(Ops::MIN, a, alu(Ops::NEG, b)));
    };
    auto [got, want] = run_both({{dt, xs}, {dt, ys}}, graph);
    // a product and a sum may fuse into one rounding on either device (the CPU compiles with
    // -ffp-contract=fast, OpenCL contracts by default): float32 agrees to a rounding of the product
    // (up to 1600 here); a lane read or written at a wrong place would differ entirely
    if (dt == DType::Float32)
      expect_close(as<float>(got), as<float>(want), 1e-4f);
    else if (dt == DType::Float64)
      expect_close_f64(as<double>(got), as<double>(want));
    else
      EXPECT_EQ(got, want) << name(dt);
    auto [k, src] = cl_kernel_of(*cl, graph({buffer(upload(*cl, {dt, xs})), buffer(upload(*cl, {dt, ys}))}));
    EXPECT_EQ(k.lanes, 16 / static_cast<int64_t>(itemsize(dt))) << name(dt) << "\n" << src;
    if (cl->target().dialect == Dialect::OpenCL) {
      std::string lanes = std::to_string(k.lanes);
      EXPECT_NE(src.find((dt == DType::Float16 ? "vload_half" : "vload") + lanes + "(0, b1"), std::string::npos) << src;
      EXPECT_NE(src.find("vstore" + lanes + "("), std::string::npos) << src;
    }
  }
}

// Lanes read what each load's layout allows: adjacent elements as one vector (at any offset on
// OpenCL, whose vload needs only the element's alignment), a broadcast element once for every lane,
// strided or masked elements one by one. A length no lane count divides, or an output at an offset
// that is not a multiple of the lanes, computes one output per thread.
TEST_F(ClDevice, ElementwiseLanesReadVectorsBroadcastsAndGathersLikeTheCpu) {
  const int64_t R = 6, C = 36;
  auto x = random_floats(R * C + 1, 7), row = random_floats(C, 8), col = random_floats(R, 9);
  auto graph = [&](const std::vector<UOpPtr>& in) {
    auto a = reshape(shrink(in[0], {{1, R * C + 1}}), {R, C});                               // offset by one element
    auto r = expand(reshape(in[1], {1, C}), {R, C});                                         // adjacent, aligned
    auto c = expand(reshape(in[2], {R, 1}), {R, C});                                         // the same for every lane
    auto t = reshape(permute(reshape(shrink(in[0], {{0, R * C}}), {C, R}), {1, 0}), {R, C}); // strided
    auto p = pad(shrink(reshape(shrink(in[0], {{0, R * C}}), {R, C}), {{0, R}, {1, C}}), {{0, 0}, {0, 1}}); // masked
    return alu(Ops::ADD, alu(Ops::ADD, alu(Ops::MUL, a, r), alu(Ops::MUL, c, t)), p);
  };
  std::vector<Input> inputs{input(DType::Float32, x), input(DType::Float32, row), input(DType::Float32, col)};
  auto [got, want] = run_both(inputs, graph);
  expect_close(as<float>(got), as<float>(want), 1e-6f); // products and sums may fuse (see above)
  std::vector<UOpPtr> leaves;
  for (const Input& in : inputs)
    leaves.push_back(buffer(upload(*cl, in)));
  auto [k, src] = cl_kernel_of(*cl, graph(leaves));
  EXPECT_EQ(k.lanes, 4) << src;
  if (cl->target().dialect == Dialect::OpenCL) {
    EXPECT_NE(src.find("vload4(0, b2"), std::string::npos) << src; // the row
    EXPECT_NE(src.find("vstore4("), std::string::npos) << src;
    EXPECT_EQ(src.find("vload4(0, b3"), std::string::npos) << src; // the column: one scalar load
  }

  // odd lengths and misaligned outputs: one output per thread, as before
  auto odd = [&](const std::vector<UOpPtr>& in) { return alu(Ops::EXP, shrink(in[0], {{0, 35}})); };
  auto [got_odd, want_odd] = run_both({input(DType::Float32, x)}, odd);
  expect_close(as<float>(got_odd), as<float>(want_odd));
  EXPECT_EQ(cl_kernel_of(*cl, odd({buffer(upload(*cl, input(DType::Float32, x)))})).first.lanes, 1);
  auto out = std::make_shared<Buffer>(*cl, DType::Float32, 41);
  View at_one = View::contiguous({40});
  at_one.offset = 1;
  Kernel k_at_one = lower_kernel(
      out, at_one, alu(Ops::NEG, shrink(buffer(upload(*cl, input(DType::Float32, x))), {{0, 40}})), cl->target());
  EXPECT_EQ(k_at_one.lanes, 1) << render_gpu(k_at_one, k_at_one.name, cl->target());
}

TEST_F(ClDevice, EveryUnaryOpMatchesTheCpu) {
  auto x = op_inputs(40);
  size_t n = x.size();
  std::vector<double> xd(x.begin(), x.end());
  std::vector<Ops> ops;
  for (int o = static_cast<int>(Ops::NEG); o <= static_cast<int>(Ops::LGAMMA); o++)
    if (static_cast<Ops>(o) != Ops::NOT && static_cast<Ops>(o) != Ops::BITNOT) // bool and integer ops
      ops.push_back(static_cast<Ops>(o));
  // the prelude's exp, tanh and log are the CPU's; libm functions are the OpenCL library's
  auto [f, f_cpu] = run_both({input(DType::Float32, x)}, [&](const std::vector<UOpPtr>& in) {
    return each_op(ops, [&](Ops op) { return alu(op, in[0]); });
  });
  auto [h, h_cpu] = run_both({input(DType::Float32, x)}, [&](const std::vector<UOpPtr>& in) {
    return each_op(ops, [&](Ops op) { return cast(alu(op, cast(in[0], DType::Float16)), DType::Float32); });
  });
  auto [d, d_cpu] = run_both({input(DType::Float64, xd)}, [&](const std::vector<UOpPtr>& in) {
    return each_op(ops, [&](Ops op) { return alu(op, in[0]); });
  });
  auto part = [&](const auto& v, size_t k) { return std::vector(v.begin() + k * n, v.begin() + (k + 1) * n); };
  for (size_t k = 0; k < ops.size(); k++) {
    SCOPED_TRACE(op_name(ops[k]));
    expect_close(part(as<float>(f), k), part(as<float>(f_cpu), k), 4e-6f);
    expect_close(part(as<float>(h), k), part(as<float>(h_cpu), k), 1e-3f);
    expect_close_f64(part(as<double>(d), k), part(as<double>(d_cpu), k), 1e-14);
  }
}

TEST_F(ClDevice, EveryBinaryOpMatchesTheCpu) {
  auto x = op_inputs(41), y = op_inputs(42);
  size_t n = x.size();
  std::reverse(y.begin(), y.end());
  std::vector<int64_t> i(n), j(n);
  for (size_t k = 0; k < n; k++) {
    i[k] = static_cast<int64_t>(k * 2654435761u % 1000) - 500;
    j[k] = static_cast<int64_t>(k % 13) - 3; // zero, -1 and shifts past the width
  }
  std::vector<Ops> float_ops, int_ops;
  for (int o = static_cast<int>(Ops::ADD); o <= static_cast<int>(Ops::SHR); o++) {
    Ops op = static_cast<Ops>(o);
    bool bitwise = op == Ops::AND || op == Ops::OR || op == Ops::XOR || op == Ops::SHL || op == Ops::SHR;
    if (!bitwise && op != Ops::IDIV && !is_comparison(op)) float_ops.push_back(op);
    if (op != Ops::FDIV && op != Ops::ATAN2) int_ops.push_back(op);
  }
  auto [f, f_cpu] = run_both({input(DType::Float32, x), input(DType::Float32, y)}, [&](const std::vector<UOpPtr>& in) {
    return each_op(float_ops, [&](Ops op) { return alu(op, in[0], in[1]); });
  });
  auto part = [&](const auto& v, size_t k) { return std::vector(v.begin() + k * n, v.begin() + (k + 1) * n); };
  for (size_t k = 0; k < float_ops.size(); k++) {
    SCOPED_TRACE(op_name(float_ops[k]));
    expect_close(part(as<float>(f), k), part(as<float>(f_cpu), k), 4e-6f);
  }
  for (DType dt : {DType::Int8, DType::UInt8, DType::Int32, DType::Int64}) {
    auto [got, want] = run_both({input(DType::Int64, i), input(DType::Int64, j)}, [&](const std::vector<UOpPtr>& in) {
      return each_op(int_ops, [&](Ops op) {
        UOpPtr r = alu(op, cast(in[0], dt), cast(in[1], dt));
        return cast(r, DType::Int64);
      });
    });
    EXPECT_EQ(got, want) << name(dt);
  }
  // comparisons of floats, NaN and infinities included
  for (Ops op : {Ops::CMPLT, Ops::CMPLE, Ops::CMPEQ, Ops::CMPNE}) {
    auto [got, want] = run_both({input(DType::Float32, x), input(DType::Float32, y)},
                                [&](const std::vector<UOpPtr>& in) { return alu(op, in[0], in[1]); });
    EXPECT_EQ(got, want) << op_name(op);
  }
}

TEST_F(ClDevice, BitcastsReinterpretBitsLikeTheCpu) {
  auto x = random_floats(300, 43, -1e4f, 1e4f);
  auto [got, want] = run_both({input(DType::Float32, x)}, [](const std::vector<UOpPtr>& in) {
    auto i32 = bitcast(in[0], DType::Int32);
    auto h = bitcast(cast(in[0], DType::Float16), DType::Int16);
    auto bf = bitcast(cast(in[0], DType::BFloat16), DType::Int16);
    auto b = bitcast(alu(Ops::CMPLT, in[0], scalar(DType::Float32, 0, {300})), DType::UInt8);
    auto back =
        bitcast(alu(Ops::ADD, bitcast(alu(Ops::ADD, h, bf), DType::Float16), cast(b, DType::Float16)), DType::Int16);
    auto flag = cast(bitcast(b, DType::Bool), DType::Int32);
    // an int64 constant reinterpreted as a double: the smallest subnormal, above 0
    auto tiny_double = bitcast(scalar(DType::Int64, 1, {300}), DType::Float64);
    auto positive = cast(alu(Ops::CMPLT, scalar(DType::Float64, 0, {300}), tiny_double), DType::Int32);
    return alu(Ops::ADD, alu(Ops::ADD, alu(Ops::XOR, i32, cast(back, DType::Int32)), flag), positive);
  });
  EXPECT_EQ(got, want);
}

TEST_F(ClDevice, EveryFloat16AndBfloat16BitPatternReadsAsOnTheCpu) {
  std::vector<int32_t> bits(65536);
  for (int32_t i = 0; i < 65536; i++)
    bits[i] = i;
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    auto [got, want] = run_both({input(DType::Int32, bits)}, [&](const std::vector<UOpPtr>& in) {
      return cast(bitcast(cast(in[0], DType::Int16), dt), DType::Float32);
    });
    EXPECT_EQ(got, want) << name(dt); // NaN payloads too
    // read from memory (OpenCL float16: vload_half, which sets a signaling NaN's quiet bit, as CUDA's
    // conversion does too; torch's CPU keeps the bits)
    std::vector<uint16_t> halves(bits.begin(), bits.end());
    auto [loaded, loaded_cpu] =
        run_both({input(dt, halves)}, [](const std::vector<UOpPtr>& in) { return cast(in[0], DType::Float32); });
    auto a = as<uint32_t>(loaded), b = as<uint32_t>(loaded_cpu);
    for (size_t k = 0; k < a.size(); k++) {
      bool nan = (b[k] & 0x7f800000u) == 0x7f800000u && (b[k] & 0x7fffffu);
      if (a[k] != b[k] && !(nan && a[k] == (b[k] | 0x400000u))) {
        ADD_FAILURE() << name(dt) << " " << std::hex << k << " reads as " << a[k] << ", not " << b[k];
        break;
      }
    }
  }
}

TEST_F(ClDevice, HalfAndBfloat16RoundToNearestEvenAsOnTheCpu) {
  // overflow to inf, the largest half, subnormals, ties, NaN, -0, bfloat16 ties
  std::vector<float> x = {65520.0f,
                          65504.0f,
                          65519.99f,
                          1e-7f,
                          3e-8f,
                          2.98e-8f,
                          1.0f / 3.0f,
                          -0.0f,
                          NAN,
                          INFINITY,
                          -INFINITY,
                          1.00048828125f,
                          1.00146484375f,
                          1.0f + 1.0f / 256.0f,
                          1.0f + 3.0f / 256.0f,
                          3.3895314e38f,
                          -1e-40f,
                          6.1035156e-05f};
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    auto [got, want] =
        run_both({input(DType::Float32, x)}, [&](const std::vector<UOpPtr>& in) { return cast(in[0], dt); });
    EXPECT_EQ(got, want) << name(dt);
    auto [sum, sum_cpu] = run_both({input(DType::Float32, x)}, [&](const std::vector<UOpPtr>& in) {
      UOpPtr h = cast(in[0], dt);
      return cast(alu(Ops::ADD, alu(Ops::MUL, h, h), h), DType::Float32);
    });
    expect_close(as<float>(sum), as<float>(sum_cpu));
  }
  auto bits = as<uint16_t>(run_on(*cl, {input(DType::Float32, x)},
                                  [](const std::vector<UOpPtr>& in) { return cast(in[0], DType::Float16); }));
  EXPECT_EQ(bits[0], 0x7c00);  // 65520 rounds up to inf
  EXPECT_EQ(bits[1], 0x7bff);  // 65504
  EXPECT_EQ(bits[3], 0x0002);  // 1e-7: two units of 2^-24
  EXPECT_EQ(bits[8], 0x7e00);  // NaN as torch writes it
  EXPECT_EQ(bits[11], 0x3c00); // 1 + 2^-11: a tie, to even (down)
  EXPECT_EQ(bits[12], 0x3c02); // 1 + 3 * 2^-11: a tie, to even (up)
}

TEST_F(ClDevice, AFullSumOfAMillionFloatsIsOneGroupedReduce) {
  const int64_t n = (1 << 20) + 3;
  auto x = random_floats(n, 5);
  auto graph = [&](const std::vector<UOpPtr>& in) { return reduce(in[0], Ops::ADD, {0}); };
  auto [got, want] = run_both({input(DType::Float32, x)}, graph);
  expect_exact_sum(as<float>(got)[0], x);
  EXPECT_NEAR(as<float>(got)[0], as<float>(want)[0], 1e-6 * magnitude(x));
  auto [k, src] = cl_kernel_of(*cl, graph({buffer(upload(*cl, input(DType::Float32, x)))}));
  EXPECT_EQ(k.name[0], 'G') << src;
  EXPECT_NE(src.find(local_float()), std::string::npos) << src;
  EXPECT_NE(src.find(barrier()), std::string::npos) << src;
}

TEST_F(ClDevice, ALongFullReductionRunsInManyWorkGroupsThenOne) {
  // 4M elements into one output: 256 partial results, each a grouped reduce in its own work-group,
  // then their sum (compiler/schedule.h); a max too, with a NaN in one part
  const int64_t n = int64_t{1} << 22;
  auto x = random_floats(n, 7);
  x[3 * n / 4] = std::nanf("");
  for (Ops op : {Ops::ADD, Ops::MAX}) {
    auto graph = [&](const std::vector<UOpPtr>& in) { return reduce(in[0], op, {0}); };
    UOpPtr value = graph({buffer(upload(*cl, input(DType::Float32, x)))});
    Schedule s = schedule_value(value, cl->target(),
                                [&](DType dt, int64_t numel) { return std::make_shared<Buffer>(*cl, dt, numel); });
    ASSERT_EQ(s.kernels.size(), 2u);
    EXPECT_EQ(s.kernels[0].launch.global[0] * s.kernels[0].launch.global[1] * s.kernels[0].launch.global[2], 256);
    auto [got, want] = run_both({input(DType::Float32, x)}, graph);
    EXPECT_TRUE(std::isnan(as<float>(got)[0]));
    EXPECT_TRUE(std::isnan(as<float>(want)[0]));
  }
  x[3 * n / 4] = 0;
  auto graph = [&](const std::vector<UOpPtr>& in) { return reduce(in[0], Ops::ADD, {0}); };
  auto [got, want] = run_both({input(DType::Float32, x)}, graph);
  expect_exact_sum(as<float>(got)[0], x);
}

TEST_F(ClDevice, RowSumsAreGroupedWhenLongAndPerThreadWhenMany) {
  for (auto [rows, cols, kind] :
       {std::tuple<int64_t, int64_t, char>{300, 1000, 'G'}, {20000, 20, 'R'}, {7, 3000, 'G'}}) {
    auto x = random_floats(rows * cols, 6);
    auto graph = [&](const std::vector<UOpPtr>& in) { return reduce(reshape(in[0], {rows, cols}), Ops::ADD, {1}); };
    auto [got, want] = run_both({input(DType::Float32, x)}, graph);
    expect_close(as<float>(got), as<float>(want), 1e-5f * static_cast<float>(cols));
    EXPECT_EQ(cl_kernel_of(*cl, graph({buffer(upload(*cl, input(DType::Float32, x)))})).first.name[0], kind);
  }
}

TEST_F(ClDevice, MaxAndMinPropagateNaNLikeTheCpu) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{64, 500}, {5000, 9}}) {
    auto x = random_floats(rows * cols, 7);
    for (int64_t r = 0; r < rows; r += 5)
      x[r * cols + (r * 7) % cols] = NAN;
    for (Ops op : {Ops::MAX, Ops::MIN}) {
      auto [got, want] = run_both({input(DType::Float32, x)}, [&](const std::vector<UOpPtr>& in) {
        return reduce(reshape(in[0], {rows, cols}), op, {1});
      });
      expect_close(as<float>(got), as<float>(want));
      EXPECT_TRUE(std::isnan(as<float>(got)[0]));
    }
  }
  std::vector<int32_t> ints(3 * 1000);
  for (size_t i = 0; i < ints.size(); i++)
    ints[i] = static_cast<int32_t>((i * 2654435761u) % 100000) - 50000;
  auto [got, want] = run_both({input(DType::Int32, ints)}, [](const std::vector<UOpPtr>& in) {
    return reduce(reshape(in[0], {3, 1000}), Ops::MAX, {1});
  });
  EXPECT_EQ(got, want);
}

TEST_F(ClDevice, ASoftmaxMatchesTheCpu) {
  const int64_t R = 8, C = 2000;
  auto graph = [&](const std::vector<UOpPtr>& in) {
    auto a = reshape(in[0], {R, C});
    auto e = alu(Ops::EXP, alu(Ops::SUB, a, expand(reduce(a, Ops::MAX, {1}), {R, C})));
    return alu(Ops::FDIV, e, expand(reduce(e, Ops::ADD, {1}), {R, C}));
  };
  auto [got, want] = run_both({input(DType::Float32, random_floats(R * C, 8, -10, 10))}, graph);
  expect_close(as<float>(got), as<float>(want), 1e-6f);
}

TEST_F(ClDevice, AGroupedReductionReadsAnotherThatEveryThreadHolds) {
  // log-sum-exp: the row's max, then the sum of exp(x - max) in the same kernel
  const int64_t R = 8, C = 2000;
  auto graph = [&](const std::vector<UOpPtr>& in) {
    auto a = reshape(in[0], {R, C});
    auto m = reduce(a, Ops::MAX, {1});
    return alu(Ops::ADD, alu(Ops::LOG, reduce(alu(Ops::EXP, alu(Ops::SUB, a, expand(m, {R, C}))), Ops::ADD, {1})), m);
  };
  auto x = random_floats(R * C, 8, -10, 10);
  auto [got, want] = run_both({input(DType::Float32, x)}, graph);
  expect_close(as<float>(got), as<float>(want), 1e-6f);
  auto [k, src] = cl_kernel_of(*cl, graph({buffer(upload(*cl, input(DType::Float32, x)))}));
  EXPECT_EQ(k.name[0], 'G') << src;
  size_t trees = 0;
  for (size_t at = src.find(local_float()); at != std::string::npos; at = src.find(local_float(), at + 1))
    trees++;
  EXPECT_EQ(trees, 2u) << src;
}

TEST_F(ClDevice, AReductionEveryThreadWouldRepeatIsRealizedFirst) {
  const int64_t R = 4, C = 1000;
  auto [got, want] = run_both({input(DType::Float32, random_floats(R * C, 9))}, [&](const std::vector<UOpPtr>& in) {
    auto a = reshape(in[0], {R, C});
    return alu(Ops::SUB, a, expand(reduce(a, Ops::ADD, {1}), {R, C}));
  });
  expect_close(as<float>(got), as<float>(want), 1e-5f);
}

TEST_F(ClDevice, PaddedFlippedAndConcatenatedViewsMaskLikeTheCpu) {
  const int64_t R = 30, C = 40;
  auto x = random_floats(R * C, 10), y = random_floats(R * C, 11);
  auto [got, want] = run_both({input(DType::Float32, x), input(DType::Float32, y)}, [&](const std::vector<UOpPtr>& in) {
    auto a = reshape(in[0], {R, C}), b = reshape(in[1], {R, C});
    auto padded = pad(flip(a, {true, false}), {{1, 2}, {3, 0}});                  // (33, 43)
    auto cat = alu(Ops::ADD, pad(a, {{0, R}, {0, 0}}), pad(b, {{R, 0}, {0, 0}})); // (60, 40)
    auto window = shrink(cat, {{R - 3, R + 30}, {0, C}});                         // (33, 40)
    return alu(Ops::MUL, shrink(padded, {{0, 33}, {3, 43}}),
               alu(Ops::ADD, window, scalar(DType::Float32, 1, {33, 40})));
  });
  expect_close(as<float>(got), as<float>(want));
}

TEST_F(ClDevice, APaddedComputedValueReadsNothingOutsideItsBuffer) {
  // 8 computed values padded to 2 rows of 2^23 + 4: row 1, read at the unmasked index, would be 32 MiB
  // past the buffer (Oclgrind reports it; here it may fault)
  const int64_t half = (int64_t{1} << 23) + 4;
  auto x = random_floats(8, 45);
  auto got = as<float>(run_on(*cl, {input(DType::Float32, x)}, [&](const std::vector<UOpPtr>& in) {
    auto rows = reshape(pad(alu(Ops::EXP, in[0]), {{0, 2 * half - 8}}), {2, half});
    return shrink(rows, {{0, 2}, {0, 16}});
  }));
  for (int64_t i = 0; i < 32; i++)
    EXPECT_FLOAT_EQ(got[i], i < 8 ? std::exp(x[i]) : 0.0f) << i;
}

TEST_F(ClDevice, AMatmulAsAReduceOfABroadcastProductMatchesTheCpu) {
  for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{64, 300, 48}, {200, 64, 96}, {33, 17, 5}}) {
    auto graph = [&](const std::vector<UOpPtr>& in) {
      auto a = expand(reshape(in[0], {M, K, 1}), {M, K, N});
      auto b = expand(reshape(in[1], {1, K, N}), {M, K, N});
      return reshape(reduce(alu(Ops::MUL, a, b), Ops::ADD, {1}), {M, N});
    };
    auto [got, want] = run_both(
        {input(DType::Float32, random_floats(M * K, 12)), input(DType::Float32, random_floats(K * N, 13))}, graph);
    expect_close(as<float>(got), as<float>(want), 1e-5f * static_cast<float>(K));
  }
  // many outputs: each thread computes 8 rows of one column, sharing each loaded element of w
  const int64_t M = 200, K = 64, N = 96;
  auto a = expand(reshape(buffer(upload(*cl, input(DType::Float32, random_floats(M * K, 1)))), {M, K, 1}), {M, K, N});
  auto b = expand(reshape(buffer(upload(*cl, input(DType::Float32, random_floats(K * N, 2)))), {1, K, N}), {M, K, N});
  auto [k, src] = cl_kernel_of(*cl, reshape(reduce(alu(Ops::MUL, a, b), Ops::ADD, {1}), {M, N}));
  EXPECT_EQ(k.name, "R_25_96_r8") << src;
  EXPECT_EQ(k.ast->src.size(), 8u) << src;
}

// A work-group's threads read a row of x (all columns) or a column of w (all row blocks) alike: each
// is copied into local memory once per group, 16 reduce steps at a time, between barriers.
TEST_F(ClDevice, AMatmulStagesTilesOfBothOperandsInLocalMemory) {
  const int64_t M = 128, K = 96, N = 64;
  auto graph = [&](const std::vector<UOpPtr>& in) {
    auto a = expand(reshape(in[0], {M, K, 1}), {M, K, N});
    auto b = expand(reshape(in[1], {1, K, N}), {M, K, N});
    return reshape(reduce(alu(Ops::MUL, a, b), Ops::ADD, {1}), {M, N});
  };
  Input x = input(DType::Float32, random_floats(M * K, 3)), w = input(DType::Float32, random_floats(K * N, 4));
  auto [got, want] = run_both({x, w}, graph);
  expect_close(as<float>(got), as<float>(want), 1e-5f * static_cast<float>(K));
  auto [k, src] = cl_kernel_of(*cl, graph({buffer(upload(*cl, x)), buffer(upload(*cl, w))}));
  EXPECT_NE(src.find(local_float() + " tile"), std::string::npos) << src;
  EXPECT_NE(src.find(barrier()), std::string::npos) << src;
}

TEST_F(ClDevice, AScatterCombinesRepeatedIndicesInOrderLikeTheCpu) {
  std::vector<float> base(50, 1.0f), vals = random_floats(40, 14);
  std::vector<int64_t> idx(40);
  for (size_t i = 0; i < idx.size(); i++)
    idx[i] = static_cast<int64_t>((i * 7) % 53) - 1; // repeats, -1 and 50..51 out of range
  for (std::optional<Ops> combine :
       {std::optional<Ops>{Ops::ADD}, std::optional<Ops>{Ops::MAX}, std::optional<Ops>{}}) {
    auto run = [&](Device& dev) {
      auto b = buffer(upload(dev, input(DType::Float32, base)));
      auto i = buffer(upload(dev, input(DType::Int64, idx)));
      auto v = buffer(upload(dev, input(DType::Float32, vals)));
      return download(realize_all({scatter(b, i, v, combine)})[0]->buffer());
    };
    EXPECT_EQ(run(*cl), run(cpu_device()));
  }
}

TEST_F(ClDevice, AScatterToOnePlaceAccumulatesEveryValue) {
  // the index is the same for every element (loop-invariant): each step reads what the last wrote
  auto vals = random_floats(24, 15);
  auto b = buffer(upload(*cl, input(DType::Float32, std::vector<float>(4, 1.0f))));
  auto at = expand(reshape(buffer(upload(*cl, input(DType::Int64, std::vector<int64_t>{2}))), {1, 1}), {4, 6});
  auto v = reshape(buffer(upload(*cl, input(DType::Float32, vals))), {4, 6});
  auto got = as<float>(download(realize_all({scatter(b, at, v, Ops::ADD)})[0]->buffer()));
  float want = 1.0f;
  for (float x : vals)
    want += x;
  EXPECT_EQ(got, std::vector<float>({1, 1, want, 1}));
}

TEST_F(ClDevice, AWriteIntoAStridedRegionLeavesTheRestLikeTheCpu) {
  // base (6, 8); the region rows 1..4, every second column from 1: 4 x 4 elements
  auto base = random_floats(48, 46), vals = random_floats(16, 47);
  View region{{4, 4}, {8, 2}, 9, std::nullopt};
  auto run = [&](Device& dev) {
    auto b = buffer(upload(dev, input(DType::Float32, base)));
    auto v = reshape(buffer(upload(dev, input(DType::Float32, vals))), {4, 4});
    auto iota_rows = cast(expand(reshape(iota(4, DType::Int64), {4, 1}), {4, 4}), DType::Float32);
    return download(realize_all({assign(b, alu(Ops::MUL, v, iota_rows), region)})[0]->buffer());
  };
  auto got = run(*cl);
  EXPECT_EQ(got, run(cpu_device()));
  EXPECT_EQ(as<float>(got)[9], 0.0f);                           // the region's first row, times 0
  EXPECT_EQ(as<float>(got)[3 * 8 + 5], 2.0f * vals[2 * 4 + 2]); // its row 2, column 2
  EXPECT_EQ(as<float>(got)[10], base[10]);                      // between its columns
}

TEST_F(ClDevice, AGatherReadsAtLoadedIndicesLikeTheCpu) {
  std::vector<int64_t> idx = {4, 0, 0, 2, 7, -1, 3, 3};
  auto [got, want] = run_both({input(DType::Float32, random_floats(5, 15)), input(DType::Int64, idx)},
                              [](const std::vector<UOpPtr>& in) {
                                return gather(in[0], reshape(in[1], {2, 4}));
                              });
  EXPECT_EQ(got, want);
}

TEST_F(ClDevice, RuntimeScalarsAndFloat64MatchTheCpu) {
  auto x = random_floats(300, 16);
  std::vector<double> xd(x.begin(), x.end());
  auto [got, want] = run_both({input(DType::Float64, xd)}, [](const std::vector<UOpPtr>& in) {
    auto alpha = expand(reshape(var_float(DType::Float64, 0.1), {1}), {300});
    auto k = cast(expand(reshape(var_int(DType::Int64, 3), {1}), {300}), DType::Float64);
    return alu(Ops::ADD, alu(Ops::MUL, in[0], alpha), alu(Ops::SQRT, alu(Ops::MUL, k, alu(Ops::ABS, in[0]))));
  });
  expect_close_f64(as<double>(got), as<double>(want));
}

TEST_F(ClDevice, AReplayedScheduleRunsOnNewBuffersAndScalars) {
  const int64_t R = 16, C = 600;
  auto step = [&](Device& dev, unsigned seed, double lr) {
    auto w = reshape(buffer(upload(dev, input(DType::Float32, random_floats(R * C, seed)))), {R, C});
    auto g = reshape(buffer(upload(dev, input(DType::Float32, random_floats(R * C, seed + 1)))), {R, C});
    auto upd = alu(Ops::SUB, w, alu(Ops::MUL, g, expand(reshape(var_float(DType::Float32, lr), {1, 1}), {R, C})));
    auto norm = reduce(alu(Ops::MUL, upd, upd), Ops::ADD, {1});
    auto roots = realize_all({reshape(upd, {R * C}), reshape(norm, {R})}); // storages' contents are flat
    return std::pair{download(roots[0]->buffer()), download(roots[1]->buffer())};
  };
  step(*cl, 1, 0.5); // records the schedule
  int64_t hits = stats().schedule_hits;
  for (auto [seed, lr] : {std::pair<unsigned, double>{20, 0.1}, {30, 0.01}}) {
    auto [upd, norm] = step(*cl, seed, lr);
    auto [upd_cpu, norm_cpu] = step(cpu_device(), seed, lr);
    expect_close(as<float>(upd), as<float>(upd_cpu), 2e-7f); // w - g * lr may fuse on the CPU
    expect_close(as<float>(norm), as<float>(norm_cpu), 1e-5f);
  }
  // two replays on CL; the CPU records its schedule on the first step, replays on the second
  EXPECT_EQ(stats().schedule_hits - hits, 3);
}

TEST(Devices, AnUnknownBackendNamesTheOnesThereAre) {
  try {
    backend_device("TPU");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("CPU, CL"), std::string::npos) << e.what();
  }
}

TEST(Devices, AFloat64KernelForADeviceWithoutItSaysSo) {
  Target t;
  t.dialect = Dialect::OpenCL;
  t.fp64 = false;
  auto in = std::make_shared<Buffer>(cpu_device(), DType::Float64, 10);
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float64, 10);
  Kernel k = lower_kernel(out, View::contiguous({10}), alu(Ops::SQRT, buffer(in)), t);
  EXPECT_THROW(render_gpu(k, k.name, t), std::runtime_error);
}

namespace {

// Compiles each sample kernel for `dialect` with `command` (source file appended), the first with
// `libm_command`, when `tool` is installed; the failure names the kernel and its source.
void compiles_with(Dialect dialect, const std::string& tool, const std::string& command,
                   const std::string& libm_command) {
  if (std::system(("command -v " + tool + " >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << tool << " is not installed";
  Target t;
  t.dialect = dialect;
  auto dir = std::filesystem::temp_directory_path() / ("tiny_dialect_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto kernels = sample_gpu_kernels(t);
  for (const auto& [what, k] : kernels) {
    auto src = dir / (k.name + (dialect == Dialect::CUDA ? ".cu" : ".hip"));
    std::ofstream(src) << render_gpu(k, k.name, t);
    std::string cmd = (&k == &kernels[0].kernel ? libm_command : command) + " -o " + (dir / (k.name + ".o")).string() +
                      " " + src.string() + " 2>" + (dir / "log").string();
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream log(dir / "log");
      std::stringstream msg;
      msg << log.rdbuf();
      ADD_FAILURE() << what << ": " << k.name << " does not compile (source at " << src << "):\n" << msg.str();
      return;
    }
  }
  std::filesystem::remove_all(dir);
}

} // namespace

TEST(GpuDialects, TheCudaDialectCompilesWithNvcc) {
  compiles_with(Dialect::CUDA, "nvcc", "nvcc -cubin -arch=sm_90", "nvcc -cubin -arch=sm_90");
}

TEST_F(ClDevice, AGraphOverBuffersOnTwoDevicesIsRefused) {
  auto a = buffer(upload(*cl, input(DType::Float32, random_floats(8, 1))));
  auto b = buffer(upload(cpu_device(), input(DType::Float32, random_floats(8, 2))));
  EXPECT_THROW(realize_value(alu(Ops::ADD, a, b)), std::runtime_error);
  EXPECT_THROW(realize_all({alu(Ops::ADD, a, b)}), std::runtime_error);
}

TEST(GpuDialects, IndexMathIsThirtyTwoBitWhereItsBoundsFit) {
  Target t;
  t.dialect = Dialect::OpenCL;
  auto src_of = [&](int64_t n) {
    // buffers that are identities only: nothing is allocated
    auto in = std::make_shared<Buffer>(cpu_device(), DType::Float32, n);
    auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, n);
    Kernel k = lower_kernel(out, View::contiguous({n}), alu(Ops::SQRT, buffer(in)), t);
    return render_gpu(k, k.name, t);
  };
  std::string small = src_of(1 << 20), big = src_of(int64_t{3} << 30);
  EXPECT_EQ(small.find("const long"), std::string::npos) << small;
  EXPECT_NE(big.find("const long"), std::string::npos) << big;
}

TEST_F(ClDevice, OuterLoopsMergeIntoOneGridAxis) {
  // a permuted 4-d read does not coalesce: x and y are the two inner loops, z holds the other two
  auto x = random_floats(3 * 4 * 5 * 6, 44);
  auto graph = [](const std::vector<UOpPtr>& in) {
    return alu(Ops::NEG, permute(reshape(in[0], {3, 4, 5, 6}), {3, 1, 0, 2}));
  };
  auto [got, want] = run_both({input(DType::Float32, x)}, graph);
  EXPECT_EQ(got, want);
  auto [k, src] = cl_kernel_of(*cl, graph({buffer(upload(*cl, input(DType::Float32, x)))}));
  EXPECT_EQ(k.launch.global[2] * k.launch.local[2], 6 * 4) << src;
}

TEST(GpuDialects, AGridAxisPastTheDeviceLimitMergesIntoX) {
  Target t;
  t.dialect = Dialect::CUDA; // y and z take 65535 work-groups at most
  const int64_t n = 5000000; // z: 16 threads per work-group, 312,500 work-groups (x: 5, odd: no lanes)
  auto in = std::make_shared<Buffer>(cpu_device(), DType::Float32, n * 3 * 5); // identities: nothing allocated
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, n * 3 * 5);
  auto v = alu(Ops::NEG, permute(reshape(buffer(in), {3, n, 5}), {1, 0, 2}));
  Kernel k = lower_kernel(out, View::contiguous(v->shape), v, t);
  EXPECT_EQ(k.launch.global[1], 1);
  EXPECT_EQ(k.launch.global[2], 1);
  EXPECT_EQ(k.launch.global[0] * k.launch.local[0], n * 3 * 5);
}
