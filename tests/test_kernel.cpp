// Kernels rendered, compiled and run on the CPU device (whatever TINY_DEVICE says), no torch involved,
// checked against plain loops.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <regex>
#include <tuple>

#include "compiler/lower.h"
#include "compiler/render_c.h"
#include "compiler/render_gpu.h"
#include "compiler/schedule.h"
#include "compiler/winograd.h"
#include "runtime/device.h"
#include "runtime/lazy_buffer.h"
#include "runtime/realize.h"

#include <unistd.h>

using namespace tiny;
using namespace tiny::runtime;

namespace {

std::shared_ptr<Buffer> filled(const std::vector<float>& v) {
  auto b = std::make_shared<Buffer>(cpu_device(), DType::Float32, static_cast<int64_t>(v.size()));
  std::copy(v.begin(), v.end(), static_cast<float*>(b->ptr()));
  return b;
}

std::vector<float> values(const BufferRef& b) {
  auto* p = static_cast<float*>(std::static_pointer_cast<Buffer>(b)->ptr());
  return std::vector<float>(p, p + b->numel);
}

// Runs kernel k, rendered as src (its function named `name`), on the CPU device, over the buffers it names.
void launch_on_cpu(const Kernel& k, const std::string& src, const std::string& name) {
  std::vector<void*> ptrs;
  for (const BufferRef& b : k.buffers)
    ptrs.push_back(std::static_pointer_cast<Buffer>(b)->ptr());
  cpu_device().program(src, name)->launch(ptrs, {}, {}, k.launch);
}

// a (M x K) @ b (K x N) in double by plain loops, and the sum of the products' magnitudes (a tolerance's
// scale), each row-major M x N.
std::pair<std::vector<double>, std::vector<double>>
plain_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t M, int64_t K, int64_t N) {
  std::vector<double> sum(M * N), mag(M * N);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++)
      for (int64_t q = 0; q < K; q++) {
        double p = static_cast<double>(a[i * K + q]) * b[q * N + j];
        sum[i * N + j] += p;
        mag[i * N + j] += std::abs(p);
      }
  return {sum, mag};
}

// Expects the (M, N) sums `got` to match plain loops over a (M, K) and b (K, N) at float32 accumulation's tolerance.
void expect_matmul(const std::vector<float>& got, const std::vector<float>& a, const std::vector<float>& b, int64_t M,
                   int64_t K, int64_t N) {
  auto [want, mag] = plain_matmul(a, b, M, K, N);
  for (int64_t i = 0; i < M * N; i++)
    EXPECT_NEAR(got[i], want[i], 1e-5 * mag[i] + 1e-6) << i / N << " " << i % N;
}

// x (M, K) @ w (K, N) as tiny's matmul records it: the reduction over K of the broadcast product, w read transposed.
UOpPtr matmul_of(const UOpPtr& x, const UOpPtr& w) {
  const int64_t M = x->shape[0], K = x->shape[1], N = w->shape[1];
  return reduce(alu(Ops::MUL, expand(reshape(x, {M, 1, K}), {M, N, K}),
                    expand(reshape(permute(w, {1, 0}), {1, N, K}), {M, N, K})),
                Ops::ADD, {2});
}

std::vector<float> random_vec(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2, 2);
  std::vector<float> v(n);
  for (float& x : v)
    x = d(rng);
  return v;
}

} // namespace

TEST(Kernel, AFusedElementwiseKernelMatchesPlainLoops) {
  auto av = random_vec(1000, 1), bv = random_vec(1000, 2);
  auto a = buffer(filled(av)), b = buffer(filled(bv));
  auto two = expand(reshape(const_float(DType::Float32, 2.0), {1}), {1000});
  auto e = alu(Ops::MAX, alu(Ops::MUL, alu(Ops::ADD, a, b), two), alu(Ops::EXP, a));
  auto out = realize_value(e);
  auto got = values(out);
  for (size_t i = 0; i < av.size(); i++)
    EXPECT_FLOAT_EQ(got[i], std::max((av[i] + bv[i]) * 2.0f, std::exp(av[i])));
}

TEST(Kernel, ATransposedReadMatchesPlainLoops) {
  const int64_t R = 37, C = 53;
  auto av = random_vec(R * C, 3);
  auto a = reshape(buffer(filled(av)), {R, C});
  auto t = view(a, ShapeTracker::from_shape({R, C}).permute({1, 0}));
  auto got = values(realize_value(alu(Ops::NEG, t)));
  for (int64_t i = 0; i < C; i++)
    for (int64_t j = 0; j < R; j++)
      EXPECT_EQ(got[i * R + j], -av[j * C + i]);
}

// A contiguous last view of fewer elements than the view below it takes the first ones (a shrink, not a reshape):
// the kernel loops over those alone (lowered at the shape below, it wrote all 24 into the buffer of 12, past its
// end: `t[0].clone()` of a permuted tensor, fuzzer seed 44392; ASan sees the overflow in the sanitized run).
TEST(Kernel, AContiguousViewOfTheFirstElementsOfAPermutedViewWritesThemAlone) {
  auto av = random_vec(24, 5);
  auto a = buffer(filled(av));
  ShapeTracker st = ShapeTracker::of(View{{2, 2, 2, 3}, {12, 3, 6, 1}, 0, std::nullopt});
  st.views.push_back(View::contiguous({12}));
  auto first = view(a, st); // the first 12 of the permuted (2, 2, 2, 3) view, flattened
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, 12);
  Kernel k = lower_kernel(out, View::contiguous({12}), first);
  EXPECT_EQ(prod(k.loops), 12);
  auto got = values(realize_value(first));
  ASSERT_EQ(got.size(), 12u);
  for (int64_t i = 0; i < 2; i++)
    for (int64_t j = 0; j < 2; j++)
      for (int64_t l = 0; l < 3; l++)
        EXPECT_EQ(got[i * 6 + j * 3 + l], av[i * 3 + j * 6 + l]);
}

TEST(Kernel, AContiguousReadHasNoDivisionInItsIndex) {
  auto a = reshape(buffer(filled(random_vec(64 * 32, 4))), {64, 32});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, 64 * 32);
  Kernel k = lower_kernel(out, View::contiguous({64 * 32}), reshape(alu(Ops::SQRT, a), {64 * 32}));
  std::string full = render_c(k, "k");
  std::string src = full.substr(full.find("void k("));
  EXPECT_EQ(k.loops, Shape({64 * 32}));
  EXPECT_EQ(src.find(" / "), std::string::npos) << src;
  EXPECT_EQ(src.find("%"), std::string::npos) << src;
}

TEST(Kernel, HalfValuesRoundTripThroughFloatRegisters) {
  auto b = std::make_shared<Buffer>(cpu_device(), DType::Float32, 4);
  float in[4] = {1.0f / 3.0f, 65504.0f, 1e-7f, -2.5f};
  std::copy(in, in + 4, static_cast<float*>(b->ptr()));
  auto h = cast(buffer(b), DType::Float16);
  auto back = values(realize_value(cast(h, DType::Float32)));
  EXPECT_FLOAT_EQ(back[0], 0.333251953125f);
  EXPECT_FLOAT_EQ(back[1], 65504.0f);
  EXPECT_FLOAT_EQ(back[2], 1.1920928955078125e-07f);
  EXPECT_FLOAT_EQ(back[3], -2.5f);
}

// A float16/bfloat16 layout copy stores each element's bits as loaded (a NaN keeps its payload, as torch's
// copy does), in a function whose buffers are restrict parameters (clang vectorizes the copy only then).
TEST(Kernel, AHalfLayoutCopyMovesBitsThroughRestrictParameters) {
  const int64_t R = 37, C = 53;
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    auto b = std::make_shared<Buffer>(cpu_device(), dt, R * C);
    auto* in = static_cast<uint16_t*>(b->ptr());
    const uint16_t special[] = {0x7f81, 0xff81, 0x7c01, 0x0001, 0x8000}; // signaling NaNs, a denormal, -0
    for (int64_t i = 0; i < R * C; i++)
      in[i] = i < 5 ? special[i] : static_cast<uint16_t>(i * 2654435761u >> 16);
    auto t = view(reshape(buffer(b), {R, C}), ShapeTracker::from_shape({R, C}).permute({1, 0}));
    auto out = std::make_shared<Buffer>(cpu_device(), dt, R * C);
    Kernel k = lower_kernel(out, View::contiguous({C, R}), t);
    std::string src = render_c(k, "k");
    EXPECT_NE(src.find("void tiny_copy(uint16_t* restrict b0, const uint16_t* restrict b1,"), std::string::npos) << src;
    std::string body = src.substr(src.find("void tiny_copy("));
    for (const char* conversion : {"tiny_f2bf(", "tiny_bf2f(", "tiny_f2h(", "tiny_h2f("})
      EXPECT_EQ(body.find(conversion), std::string::npos) << body;
    auto got = std::static_pointer_cast<Buffer>(realize_value(t));
    auto* g = static_cast<uint16_t*>(got->ptr());
    for (int64_t i = 0; i < C; i++)
      for (int64_t j = 0; j < R; j++)
        ASSERT_EQ(g[i * R + j], in[j * C + i]) << i << " " << j;
  }
}

// A padded (masked) bfloat16 copy, a convolution's channels-last input, moves bits too: the padding is +0.
TEST(Kernel, APaddedHalfCopyMovesBitsAndZeroesThePadding) {
  const int64_t C = 3, H = 5;
  auto b = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, C * H);
  auto* in = static_cast<uint16_t*>(b->ptr());
  for (int64_t i = 0; i < C * H; i++)
    in[i] = static_cast<uint16_t>(0x7f81 + 977 * i);                                // a signaling NaN first
  auto padded = permute(pad(reshape(buffer(b), {C, H}), {{0, 0}, {1, 2}}), {1, 0}); // (H + 3, C)
  auto out = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, (H + 3) * C);
  std::string src = render_c(lower_kernel(out, View::contiguous({H + 3, C}), padded), "k");
  EXPECT_NE(src.find("void tiny_copy("), std::string::npos) << src;
  auto got = std::static_pointer_cast<Buffer>(realize_value(padded));
  auto* g = static_cast<uint16_t*>(got->ptr());
  for (int64_t h = 0; h < H + 3; h++)
    for (int64_t c = 0; c < C; c++)
      ASSERT_EQ(g[h * C + c], h >= 1 && h <= H ? in[c * H + h - 1] : 0) << h << " " << c;
}

// With AVX-512 (where the transposed copies are chosen), k's C source holds each of `markers`.
void expect_wide_source(const Kernel& k, std::initializer_list<std::string> markers) {
  if (!wide_vectors()) return;
  std::string src = render_c(k, "k");
  for (const std::string& m : markers)
    EXPECT_NE(src.find(m), std::string::npos) << m << " in " << src;
}

// g holds bfloat16 panels [N / 32][K / 2][32][2]: element (p, r, j, e) is in[source(p, r, j, e)].
void expect_pair_panels(const uint16_t* g, const uint16_t* in, int64_t N, int64_t K,
                        const std::function<int64_t(int64_t, int64_t, int64_t, int64_t)>& source) {
  for (int64_t p = 0; p < N / 32; p++)
    for (int64_t r = 0; r < K / 2; r++)
      for (int64_t j = 0; j < 32; j++)
        for (int64_t e = 0; e < 2; e++)
          ASSERT_EQ(g[((p * (K / 2) + r) * 32 + j) * 2 + e], in[source(p, r, j, e)]) << p << " " << r << " " << j;
}

// The pair-interleaved panels of a row-major bfloat16 operand (32 columns of every pair of rows each) are
// copied rows outermost: each step reads whole rows and writes a row of every panel (the panels outermost
// read 64 bytes of each row, 1.8x slower at 1024²).
TEST(Kernel, APanelCopyOfARowMajorOperandWalksItsRowsOutermost) {
  const int64_t K = 64, N = 256;
  auto b = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, K * N);
  auto* in = static_cast<uint16_t*>(b->ptr());
  for (int64_t i = 0; i < K * N; i++)
    in[i] = static_cast<uint16_t>(i);
  auto panels = permute(reshape(buffer(b), {K / 2, 2, N / 32, 32}), {2, 0, 3, 1});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, K * N);
  Kernel k = lower_kernel(out, View::contiguous({N / 32, K / 2, 32, 2}), panels);
  EXPECT_EQ(k.loops, Shape({K / 2, N / 32, 32, 2}));
  auto got = std::static_pointer_cast<Buffer>(realize_value(panels));
  expect_pair_panels(static_cast<const uint16_t*>(got->ptr()), in, N, K,
                     [&](int64_t p, int64_t r, int64_t j, int64_t e) { return (2 * r + e) * N + 32 * p + j; });
}

// The panels of a bfloat16 x @ w.t()'s w ([panel][pair of columns][row of 32][pair], w row-major) read each lane's
// pair 4 bytes after the last: lanes along the pairs, each half of the pairs one masked load of the even 2-byte
// elements (the 1024² panel copy 0.35 -> 0.07 ms), stored as rows.
TEST(Kernel, APanelOfPairsCopiesBitsWithMaskedLoadsOfEvenElements) {
  const int64_t N = 64, K = 48;
  auto b = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, N * K);
  auto* in = static_cast<uint16_t*>(b->ptr());
  for (int64_t i = 0; i < N * K; i++)
    in[i] = static_cast<uint16_t>(0x7f81 + 977 * i);
  auto panels = permute(reshape(buffer(b), {N / 32, 32, K / 2, 2}), {0, 2, 1, 3});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, N * K);
  Kernel k = lower_kernel(out, View::contiguous({N / 32, K / 2, 32, 2}), panels);
  expect_wide_source(k, {"_mm512_maskz_loadu_epi16(0x55555555u, b1 + ", "  tiny_store_rows_bf16(b0 + "});
  auto got = std::static_pointer_cast<Buffer>(realize_value(panels));
  expect_pair_panels(static_cast<const uint16_t*>(got->ptr()), in, N, K,
                     [&](int64_t p, int64_t r, int64_t j, int64_t e) { return (32 * p + j) * K + 2 * r + e; });
}

// A bfloat16 weight gradient's paired grad_output panel ([chunk][channel block][position][image pair][channel][pair]
// of an (N, O, P) grad_output): with AVX-512 a transposed copy, lanes along the positions (20: the last vector
// overlaps the one before), blocks of 4 channels x an image pair; else it runs its loops outside the innermost two
// (a cache line of output) in the read's order, the image pairs outside the positions, so that the rows it reads
// stay in L1 (1.7x faster at the demo's).
TEST(Kernel, APairedPanelCopyWalksThePositionsInsideTheImagePairs) {
  const int64_t N = 8, O = 64, P = 20;
  auto b = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, N * O * P);
  auto* in = static_cast<uint16_t*>(b->ptr());
  for (int64_t i = 0; i < N * O * P; i++)
    in[i] = static_cast<uint16_t>(i * 7);
  // (chunk 2, pairs 2, pair 2, block 2, channel 32, position) -> (chunk, block, position, pairs, channel, pair)
  auto panels = permute(reshape(buffer(b), {2, 2, 2, 2, 32, P}), {0, 3, 5, 1, 4, 2});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, N * O * P);
  Kernel k = lower_kernel(out, View::contiguous({2, 2, P, 2, 32, 2}), panels);
  if (wide_vectors()) {
    EXPECT_EQ(k.loops, Shape({2, 2, 2, 2, 8, 1})) << k.name;
    EXPECT_NE(render_c(k, "k").find("  tiny_store_rows_bf16(b0 + "), std::string::npos);
  } else {
    EXPECT_EQ(k.loops, Shape({2, 2, 2, P, 32, 2}));
  }
  auto got = std::static_pointer_cast<Buffer>(realize_value(panels));
  auto* g = static_cast<uint16_t*>(got->ptr());
  for (int64_t c = 0; c < 2; c++)
    for (int64_t o = 0; o < 2; o++)
      for (int64_t p = 0; p < P; p++)
        for (int64_t q = 0; q < 2; q++)
          for (int64_t j = 0; j < 32; j++)
            for (int64_t e = 0; e < 2; e++)
              ASSERT_EQ(g[((((c * 2 + o) * P + p) * 2 + q) * 32 + j) * 2 + e],
                        in[((c * 4 + q * 2 + e) * O + o * 32 + j) * P + p]);
}

TEST(Kernel, ASumOverAnAxisMatchesPlainLoops) {
  const int64_t R = 37, C = 53;
  auto av = random_vec(R * C, 5);
  auto a = reshape(buffer(filled(av)), {R, C});
  auto got0 = values(realize_value(reduce(a, Ops::ADD, {0})));
  auto got1 = values(realize_value(reduce(a, Ops::MAX, {1})));
  ASSERT_EQ(got0.size(), size_t(C));
  ASSERT_EQ(got1.size(), size_t(R));
  for (int64_t j = 0; j < C; j++) {
    float s = 0;
    for (int64_t i = 0; i < R; i++)
      s += av[i * C + j];
    EXPECT_NEAR(got0[j], s, 1e-4);
  }
  for (int64_t i = 0; i < R; i++) {
    float m = -INFINITY;
    for (int64_t j = 0; j < C; j++)
      m = std::max(m, av[i * C + j]);
    EXPECT_EQ(got1[i], m);
  }
}

// A row's sum or max into one vector accumulator runs as two, the even and the odd steps of its loop (one is
// a chain of dependent adds), combined after it: the same sums, a NaN anywhere in a row still its max.
TEST(Kernel, ARowReductionIntoOneVectorRunsTwoAccumulators) {
  const int64_t R = 5, C = 1024;
  auto av = random_vec(R * C, 21);
  av[2 * C + 17] = NAN;   // row 2: an even step of its loop
  av[3 * C + 1000] = NAN; // row 3: an odd one
  auto a = reshape(buffer(filled(av)), {R, C});
  for (Ops op : {Ops::ADD, Ops::MAX}) {
    auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, R);
    std::string src = render_c(lower_kernel(out, View::contiguous({R, 1}), reduce(a, op, {1})), "k");
    EXPECT_NE(src.find("_ += 2) {"), std::string::npos) << src;
    auto got = values(realize_value(reduce(a, op, {1})));
    for (int64_t i = 0; i < R; i++) {
      double want = op == Ops::ADD ? 0.0 : -INFINITY;
      for (int64_t j = 0; j < C; j++) {
        float x = av[i * C + j];
        want = op == Ops::ADD ? want + x : (std::isnan(x) || std::isnan(want) ? NAN : std::max<double>(want, x));
      }
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(got[i])) << i;
      else
        EXPECT_NEAR(got[i], want, 1e-3) << i;
    }
  }
}

// A reduction's lanes combine after its loop as whole vectors, each step the vector and its halves swapped (not a
// tree of 15 scalar steps): sums, products, max and min of float32, float64, int32 and bool rows, NaN in one lane of
// the loop (the lanes' combine), in its scalar tail, or nowhere.
TEST(Kernel, TheLanesOfARowReductionCombineAsWholeVectors) {
  const int64_t R = 5, C = 67; // 4 vector steps and a tail of 3
  auto av = random_vec(R * C, 31);
  av[1 * C + 9] = NAN;  // row 1: lane 9 of the first vector
  av[2 * C + 63] = NAN; // row 2: lane 15 of the last
  av[3 * C + 65] = NAN; // row 3: the tail
  auto a = reshape(buffer(filled(av)), {R, C});
  for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::Bool})
    for (Ops op : {Ops::ADD, Ops::MUL, Ops::MAX, Ops::MIN}) {
      if (dt == DType::Bool && (op == Ops::MAX || op == Ops::MIN)) continue;
      // bool rows: whether each value is below 1.5 (any, all); ints: the values rounded toward zero
      auto x = dt == DType::Bool ? alu(Ops::CMPLT, a, expand(reshape(const_float(DType::Float32, 1.5), {1, 1}), {R, C}))
                                 : cast(a, dt);
      // (a product of 67 values in [-2, 2] overflows no float; their ints are mostly -1, 0 and 1)
      auto r = reduce(x, op, {1});
      auto out = std::make_shared<Buffer>(cpu_device(), dt, R);
      std::string src = render_c(lower_kernel(out, View::contiguous({R, 1}), r), "k");
      EXPECT_NE(src.find("__builtin_shufflevector("), std::string::npos) << info(dt).c_name << src;
      const std::string body = src.substr(src.find("void k("));
      EXPECT_FALSE(std::regex_search(body, std::regex("acc[0-9]+\\[15\\]"))) << body; // no scalar step reads a lane
      auto got = std::static_pointer_cast<Buffer>(realize_value(r));
      for (int64_t i = 0; i < R; i++) {
        double want = op == Ops::ADD ? 0 : op == Ops::MUL ? 1 : op == Ops::MAX ? -INFINITY : INFINITY;
        bool nan = false;
        for (int64_t j = 0; j < C; j++) {
          float f = av[i * C + j];
          double v = dt == DType::Bool ? (f < 1.5f ? 1 : 0) : dt == DType::Int32 ? std::trunc(f) : f;
          nan = nan || std::isnan(f);
          want = op == Ops::ADD   ? want + v
                 : op == Ops::MUL ? want * v
                 : op == Ops::MAX ? std::max(want, v)
                                  : std::min(want, v);
        }
        if (dt == DType::Bool) want = op == Ops::ADD ? want > 0 : want != 0;
        double have = dt == DType::Float32   ? static_cast<const float*>(got->ptr())[i]
                      : dt == DType::Float64 ? static_cast<const double*>(got->ptr())[i]
                      : dt == DType::Int32   ? static_cast<const int32_t*>(got->ptr())[i]
                                             : static_cast<const uint8_t*>(got->ptr())[i];
        if (dt == DType::Int32 && nan) continue; // a NaN cast to an int is no particular value
        if (is_float(dt) && nan)
          EXPECT_TRUE(std::isnan(have)) << info(dt).c_name << " row " << i;
        else
          EXPECT_NEAR(have, want, 1e-4 * std::max(1.0, std::abs(want))) << info(dt).c_name << " row " << i;
      }
    }
}

// A scalar argument (a value from Python) is read once before the kernel's loops: read where a select uses it, under
// the select's condition, it kept clang from vectorizing the loop (softmax's value for rows that are all -inf).
TEST(Kernel, AScalarArgumentIsReadOnceBeforeTheLoops) {
  const int64_t R = 3, C = 65;
  auto av = random_vec(R * C, 32);
  for (int64_t j = 0; j < C; j++)
    av[C + j] = -INFINITY; // row 1 is all -inf
  auto a = reshape(buffer(filled(av)), {R, C});
  auto fill = expand(reshape(var_float(DType::Float32, 0.25), {1, 1}), {R, C});
  auto minus_inf = expand(reshape(const_float(DType::Float32, -INFINITY), {1, 1}), {R, C});
  auto all_inf = expand(reshape(reduce(alu(Ops::CMPEQ, a, minus_inf), Ops::MUL, {1}), {R, 1}), {R, C});
  auto two = expand(reshape(const_float(DType::Float32, 2.0), {1, 1}), {R, C});
  auto v = where(all_inf, fill, alu(Ops::MUL, a, two));
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, R * C);
  std::string src = render_c(lower_kernel(out, View::contiguous({R, C}), v), "k");
  std::string body = src.substr(src.find("void k("));
  EXPECT_NE(body.find("const double tiny_f0 = fvars[0];"), std::string::npos) << body;
  EXPECT_LT(body.find("tiny_f0"), body.find("for (")) << body;
  EXPECT_EQ(body.find("fvars[0]", body.find("for (")), std::string::npos) << body;
  auto got = values(realize_value(v));
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < C; j++)
      EXPECT_EQ(got[i * C + j], i == 1 ? 0.25f : av[i * C + j] * 2) << i << " " << j;
}

// where(c, x, 0) of floats (a max pool's gradient) keeps x's bits masked by c, without a branch: x exactly
// (NaN, infinity, -0.0) where c holds, +0.0 where it does not; a -0.0 arm stays a select.
TEST(Kernel, AWhereWithAZeroArmMasksBitsExactly) {
  const int64_t N = 7;
  std::vector<float> xv = {NAN, INFINITY, -0.0f, -3.5f, 1e-40f, 2.0f, -INFINITY};
  std::vector<float> cv = {1, 1, 1, 0, 1, 0, 1};
  auto x = buffer(filled(xv)), cb = buffer(filled(cv));
  auto fill = [&](double z) { return expand(reshape(const_float(DType::Float32, z), {1}), {N}); };
  auto c = alu(Ops::CMPLT, fill(0.5), cb), not_c = alu(Ops::CMPLT, cb, fill(0.5));
  for (bool x_first : {true, false}) {
    auto w = x_first ? where(c, x, fill(0.0)) : where(not_c, fill(0.0), x);
    auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, N);
    EXPECT_NE(render_c(lower_kernel(out, View::contiguous({N}), w), "k").find("memcpy(&u_"), std::string::npos);
    auto got = values(realize_value(w));
    for (int64_t i = 0; i < N; i++) {
      float want = cv[i] > 0.5f ? xv[i] : 0.0f;
      EXPECT_EQ(std::memcmp(&got[i], &want, 4), 0) << i << ": " << got[i] << " vs " << want;
    }
  }
  auto negative = where(c, x, fill(-0.0));
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, N);
  EXPECT_EQ(render_c(lower_kernel(out, View::contiguous({N}), negative), "k").find("memcpy(&u_"), std::string::npos);
  EXPECT_TRUE(std::signbit(values(realize_value(negative))[3]));
}

// hash_tensor's fold: the bits of 64-bit values xor-ed, per row (lanes) and over a long vector (split
// across threads, the partial results xor-ed again).
TEST(Kernel, AnXorFoldOfUint64BitsMatchesPlainLoops) {
  const int64_t R = 37, C = 53, N = int64_t{1} << 20;
  auto b = std::make_shared<Buffer>(cpu_device(), DType::UInt64, N);
  auto* bits = static_cast<uint64_t*>(b->ptr());
  uint64_t state = 0x9e3779b97f4a7c15u;
  for (int64_t i = 0; i < N; i++)
    bits[i] = state = state * 6364136223846793005u + 1442695040888963407u;
  auto words = [](const BufferRef& r) {
    auto* p = static_cast<const uint64_t*>(std::static_pointer_cast<Buffer>(r)->ptr());
    return std::vector<uint64_t>(p, p + r->numel);
  };
  auto rows = words(realize_value(reduce(reshape(shrink(buffer(b), {{0, R * C}}), {R, C}), Ops::XOR, {1})));
  auto full = words(realize_value(reduce(buffer(b), Ops::XOR, {0})));
  for (int64_t i = 0; i < R; i++) {
    uint64_t want = 0;
    for (int64_t j = 0; j < C; j++)
      want ^= bits[i * C + j];
    EXPECT_EQ(rows[i], want) << "row " << i;
  }
  uint64_t want = 0;
  for (int64_t i = 0; i < N; i++)
    want ^= bits[i];
  EXPECT_EQ(full[0], want);
  // the bits of doubles (hash_tensor's floats): a bitcast in the vector lanes of the fold
  auto d = std::make_shared<Buffer>(cpu_device(), DType::Float64, N);
  auto* doubles = static_cast<double*>(d->ptr());
  uint64_t want_bits = 0;
  for (int64_t i = 0; i < N; i++) {
    doubles[i] = static_cast<double>(bits[i] >> 11) - 0x1p52;
    uint64_t u;
    std::memcpy(&u, &doubles[i], sizeof u);
    want_bits ^= u;
  }
  EXPECT_EQ(words(realize_value(reduce(bitcast(buffer(d), DType::UInt64), Ops::XOR, {0})))[0], want_bits);
  EXPECT_THROW(reduce(buffer(filled({1.0f})), Ops::XOR, {0}), std::invalid_argument);
}

TEST(Kernel, ASoftmaxIsOneKernelWithTheRowReductionsHoisted) {
  const int64_t R = 9, C = 31;
  auto av = random_vec(R * C, 6);
  auto a = reshape(buffer(filled(av)), {R, C});
  auto mx = expand(reduce(a, Ops::MAX, {1}), {R, C});
  auto e = alu(Ops::EXP, alu(Ops::SUB, a, mx));
  auto sm = alu(Ops::FDIV, e, expand(reduce(e, Ops::ADD, {1}), {R, C}));
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, R * C);
  Kernel k = lower_kernel(out, View::contiguous({R, C}), sm);
  std::string full = render_c(k, "k");
  // the max and the sum are loops over a row, computed before the loop that writes it
  std::string body = full.substr(full.find("void k("));
  EXPECT_EQ(k.loops, Shape({R, C}));
  EXPECT_LT(body.find("acc"), body.find("for (int64_t r1 = 0")) << body;
  auto got = values(realize_value(sm));
  for (int64_t i = 0; i < R; i++) {
    float m = -INFINITY, s = 0;
    for (int64_t j = 0; j < C; j++)
      m = std::max(m, av[i * C + j]);
    for (int64_t j = 0; j < C; j++)
      s += std::exp(av[i * C + j] - m);
    for (int64_t j = 0; j < C; j++)
      EXPECT_NEAR(got[i * C + j], std::exp(av[i * C + j] - m) / s, 1e-6);
  }
}

TEST(Kernel, AMatmulIsAReduceOfABroadcastProduct) {
  const int64_t M = 7, K = 13, N = 5;
  auto av = random_vec(M * K, 7), bv = random_vec(K * N, 8);
  auto a = reshape(buffer(filled(av)), {M, 1, K});
  auto b = permute(reshape(buffer(filled(bv)), {1, K, N}), {0, 2, 1}); // (1, N, K)
  auto prod = alu(Ops::MUL, expand(a, {M, N, K}), expand(b, {M, N, K}));
  auto got = values(realize_value(reduce(prod, Ops::ADD, {2})));
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      float s = 0;
      for (int64_t k = 0; k < K; k++)
        s += av[i * K + k] * bv[k * N + j];
      EXPECT_NEAR(got[i * N + j], s, 1e-5);
    }
}

TEST(Kernel, PaddedAndFlippedReadsMaskToZero) {
  auto av = random_vec(6, 9);
  auto a = buffer(filled(av));
  auto p = flip(pad(a, {{2, 3}}), {true}); // 11 elements: 3 zeros, a reversed, 2 zeros
  auto got = values(realize_value(alu(Ops::ADD, p, expand(reshape(const_float(DType::Float32, 1), {1}), {11}))));
  for (int64_t i = 0; i < 11; i++) {
    int64_t src = 10 - i - 2;
    float want = (src >= 0 && src < 6 ? av[src] : 0.0f) + 1.0f;
    EXPECT_EQ(got[i], want) << i;
  }
}

namespace {
std::shared_ptr<Buffer> indices(const std::vector<int64_t>& v) {
  auto b = std::make_shared<Buffer>(cpu_device(), DType::Int64, static_cast<int64_t>(v.size()));
  std::copy(v.begin(), v.end(), static_cast<int64_t*>(b->ptr()));
  return b;
}
} // namespace

TEST(Kernel, AGatherReadsAtLoadedIndicesAndZeroOutOfRange) {
  auto data = buffer(filled({10, 11, 12, 13, 14}));
  auto idx = reshape(buffer(indices({4, 0, 0, 2, 7, -1})), {2, 3});
  auto got = values(realize_value(gather(data, idx)));
  EXPECT_EQ(got, std::vector<float>({14, 10, 10, 12, 0, 0}));
}

// nll_loss's pick of each row's target class: sum over the classes of where((class == target[row]) &
// (target[row] != -1), -x, 0) reads the one element, with no loop over the classes; a target outside the
// classes or ignored gives 0.
TEST(Kernel, AOneHotSumReadsTheElementItPicksWithoutALoop) {
  const int64_t R = 6, C = 37;
  auto xv = random_vec(R * C, 12);
  auto x = reshape(buffer(filled(xv)), {R, C});
  std::vector<int64_t> tv = {3, 0, 36, -1, 40, 17};
  auto t = expand(reshape(buffer(indices(tv)), {R, 1}), {R, C});
  auto cls = expand(reshape(iota(C, DType::Int64), {1, C}), {R, C});
  auto kept = alu(Ops::CMPNE, t, expand(reshape(const_int(DType::Int64, -1), {1, 1}), {R, C}));
  auto hit = alu(Ops::AND, alu(Ops::CMPEQ, cls, t), kept);
  auto zero = expand(reshape(const_float(DType::Float32, 0), {1, 1}), {R, C});
  auto picked = reduce(where(hit, alu(Ops::NEG, x), zero), Ops::ADD, {1});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, R);
  std::string body = render_c(lower_kernel(out, View::contiguous({R, 1}), picked), "k");
  body = body.substr(body.find("void k("));
  EXPECT_EQ(body.find("< 37"), std::string::npos) << "a loop over the classes:\n" << body;
  auto got = values(realize_value(picked));
  for (int64_t i = 0; i < R; i++) {
    float want = tv[i] >= 0 && tv[i] < C ? -xv[i * C + tv[i]] : 0.0f;
    EXPECT_EQ(got[i], want) << i;
  }
}

// out[n, k, x] = sum_c w[k, c] * in[n, c, x] with lanes along k (w read from a (C, K) buffer: contiguous
// along the lanes, as a convolution's filter copy): its C source must contain `needle`, its values the sums'.
static void expect_channel_mix(int64_t N, int64_t K, int64_t X, int64_t C, unsigned seed, const std::string& needle) {
  auto wv = random_vec(K * C, seed), iv = random_vec(N * C * X, seed + 1);
  auto w = expand(reshape(permute(reshape(buffer(filled(wv)), {C, K}), {1, 0}), {1, K, 1, C}), {N, K, X, C});
  auto in = expand(reshape(permute(reshape(buffer(filled(iv)), {N, C, X}), {0, 2, 1}), {N, 1, X, C}), {N, K, X, C});
  auto v = reduce(alu(Ops::MUL, w, in), Ops::ADD, {3});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, N * K * X);
  std::string src = render_c(lower_kernel(out, View::contiguous({N, K, X, 1}), v), "k");
  EXPECT_NE(src.find(needle), std::string::npos) << src;
  auto got = values(realize_value(v));
  for (int64_t n = 0; n < N; n++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t x = 0; x < X; x++) {
        double want = 0;
        for (int64_t c = 0; c < C; c++)
          want += static_cast<double>(wv[c * K + k]) * iv[(n * C + c) * X + x];
        EXPECT_NEAR(got[(n * K + k) * X + x], want, 1e-4) << n << ", " << k << ", " << x;
      }
}

// A reduction whose lanes stride through its output (28 positions do not fill 16 lanes) and whose register
// block holds consecutive positions stores each block as 16 rows of contiguous floats (tiny_store_rows), not
// a scalar per lane.
TEST(Kernel, LanesThatStrideThroughTheOutputStoreTheirBlockAsRows) {
  expect_channel_mix(4, 32, 28, 20, 21, "  tiny_store_rows(");
}

// got holds the (N, H + 2, H + 2, C) channels-last copy of the (N, C, H, H) `in` padded by 1 with zeros.
template <class T> void expect_padded_channels_last(const T* got, const T* in, int64_t N, int64_t C, int64_t H) {
  const int64_t P = H + 2;
  for (int64_t n = 0; n < N; n++)
    for (int64_t y = 0; y < P; y++)
      for (int64_t x = 0; x < P; x++)
        for (int64_t c = 0; c < C; c++) {
          bool inside = y >= 1 && y <= H && x >= 1 && x <= H;
          T want = inside ? in[((n * C + c) * H + y - 1) * H + x - 1] : T{0};
          ASSERT_EQ(got[((n * P + y) * P + x) * C + c], want) << n << ", " << y << ", " << x << ", " << c;
        }
}

// A padded channels-last copy as a storage holds it (flat: the reshape of a padded, permuted view) is lowered at
// the view's rank, not as one flat loop that divides its index by every dim; on AVX-512 it loads 8 channels' rows
// of 16 positions, masked where a lane falls on the padding, and stores their transpose as 16 rows of 8 channels
// (lower_transposed_copy).
TEST(Kernel, APaddedChannelsLastCopyTransposesBlocksInRegisters) {
  const int64_t N = 2, C = 16, H = 14, P = H + 2;
  auto xv = random_vec(N * C * H * H, 31);
  // the movements on one tracker, as the torch ops record them
  ShapeTracker st = ShapeTracker::from_shape({N, C, H, H}).pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}}).permute({0, 2, 3, 1});
  auto v = view(buffer(filled(xv)), st.reshape({N * P * P * C}));
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, N * P * P * C);
  Kernel k = lower_kernel(out, View::contiguous({N * P * P * C}), v);
  EXPECT_GE(k.loops.size(), 2u) << k.name;
  expect_wide_source(k, {"_mm512_maskz_loadu_ps(", "  tiny_store_rows(b0 + "});
  expect_padded_channels_last(values(realize_value(v)).data(), xv.data(), N, C, H);
}

// NCHW -> channels-last of 14 x 14 images: 196 positions do not fill whole vectors of 16, so the lanes' last vector
// starts at 180, overlapping the one before (its 12 common outputs stored twice, the same values).
TEST(Kernel, AChannelsLastCopyOfPositionsThatDoNotFillVectorsEndsOnAnOverlappingVector) {
  const int64_t N = 2, C = 16, H = 14, P = H * H;
  auto xv = random_vec(N * C * P, 32);
  auto v = permute(reshape(buffer(filled(xv)), {N, C, P}), {0, 2, 1});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, N * P * C);
  Kernel k = lower_kernel(out, View::contiguous({N, P, C}), v);
  if (wide_vectors()) {
    EXPECT_EQ(k.loops, Shape({N, (P + 15) / 16, C / 8})) << k.name;
  }
  expect_wide_source(k, {" < ((int64_t)180LL) ? ", "  tiny_store_rows(b0 + "});
  auto got = values(realize_value(v));
  for (int64_t n = 0; n < N; n++)
    for (int64_t p = 0; p < P; p++)
      for (int64_t c = 0; c < C; c++)
        ASSERT_EQ(got[(n * P + p) * C + c], xv[(n * C + c) * P + p]) << n << ", " << p << ", " << c;
}

// A transposed copy whose innermost loop does not divide into blocks of 8 rows, read from rows 4 KiB or more apart (a
// ViT's keys, 65 of them, copied keys-innermost from its packed projection), ends on a block overlapping the one
// before, as the lanes do; it was a scalar copy element by element, as one from rows close together stays.
TEST(Kernel, ATransposedCopyOfFarRowsThatDoNotFillBlocksEndsOnAnOverlappingBlock) {
  const int64_t T = 65, F = 128, W = 1024; // (the threads' loop, the features' vectors, keeps 8 iterations)
  auto xv = random_vec(T * W, 33);
  auto rows = reshape(buffer(filled(xv)), {T, W});
  auto v = permute(shrink(rows, {{0, T}, {0, F}}), {1, 0});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, F * T);
  Kernel k = lower_kernel(out, View::contiguous({F, T}), v);
  if (wide_vectors()) {
    EXPECT_EQ(k.loops, Shape({F / 16, (T + 7) / 8})) << k.name;
    EXPECT_TRUE(k.stores_twice);
  }
  expect_wide_source(k, {" < ((int64_t)57LL) ? ", "  tiny_store_rows(b0 + "});
  auto got = values(realize_value(v));
  for (int64_t f = 0; f < F; f++)
    for (int64_t t = 0; t < T; t++)
      ASSERT_EQ(got[f * T + t], xv[t * W + f]) << f << ", " << t;
  // rows 512 bytes apart: element by element
  auto near = permute(reshape(buffer(filled(random_vec(T * F, 34))), {T, F}), {1, 0});
  EXPECT_LT(lower_kernel(out, View::contiguous({F, T}), near).lane_range, 0);
}

// The same copy in bfloat16 from rows close together (sdpa's keys, (B, 65, 32) copied keys-innermost, rows 64 bytes
// apart) blocks too: clang gathers a float32 copy element by element, but not 2-byte elements (66-75 -> 26-36 us on
// two threads). Every bit pattern is stored as it was loaded.
TEST(Kernel, ABFloat16TransposedCopyOfNearRowsThatDoNotFillBlocksEndsOnAnOverlappingBlock) {
  const int64_t B = 16, T = 65, F = 32;
  auto b = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, B * T * F);
  auto* in = static_cast<uint16_t*>(b->ptr());
  for (int64_t i = 0; i < B * T * F; i++)
    in[i] = static_cast<uint16_t>(0x7f81 + 977 * i); // NaNs, infinities, -0, denormals
  auto v = permute(reshape(buffer(b), {B, T, F}), {0, 2, 1});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, B * F * T);
  Kernel k = lower_kernel(out, View::contiguous({B, F, T}), v);
  if (wide_vectors()) {
    EXPECT_GE(k.lane_range, 0) << k.name;
    EXPECT_TRUE(k.stores_twice) << k.name;
    EXPECT_NE(render_c(k, "k").find("  tiny_store_rows_bf16(b0 + "), std::string::npos);
  }
  auto got = std::static_pointer_cast<Buffer>(realize_value(v));
  const auto* g = static_cast<const uint16_t*>(got->ptr());
  for (int64_t i = 0; i < B; i++)
    for (int64_t f = 0; f < F; f++)
      for (int64_t t = 0; t < T; t++)
        ASSERT_EQ(g[(i * F + f) * T + t], in[(i * T + t) * F + f]) << i << ", " << f << ", " << t;
}

// Lowers a 3 x 3 convolution weight's panel `panel` (contiguous, of `shape`: [block of 32][tap][channel][32]); with
// AVX-512 its source has masked lanes (its 9 taps do not fill 16) and `marker`; element i is wv[source(i)].
void expect_weight_panel(const UOpPtr& panel, const Shape& shape, const std::string& marker,
                         const std::vector<float>& wv,
                         const std::function<int64_t(int64_t, int64_t, int64_t, int64_t)>& source) {
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, prod(shape));
  Kernel k = lower_kernel(out, View::contiguous(shape), panel);
  expect_wide_source(k, {"[l] != 0) << l;\n" /* the rows' mask */, "  tiny_store_rows(b0 + ", marker});
  auto got = values(realize_value(panel));
  for (int64_t b = 0; b < shape[0]; b++)
    for (int64_t t = 0; t < 9; t++)
      for (int64_t c = 0; c < shape[2]; c++)
        for (int64_t j = 0; j < 32; j++)
          ASSERT_EQ(got[((b * 9 + t) * shape[2] + c) * 32 + j], wv[source(b, t, c, j)]) << b << " " << t << " " << c;
}

// A 3 x 3 convolution weight's panel ([block of 32 outputs][tap][input channel][output], from (O, I, 3, 3)) reads
// its 9 taps contiguously: lanes along them, the value and the output region padded to 16 lanes, the 7 lanes past
// the taps masked off in the loads and the rows they would store (ResNet-18's layer4 panel, one thread: 2.7 ->
// 0.9 ms).
TEST(Kernel, AConvolutionWeightPanelTakesMaskedLanesAlongItsNineTaps) {
  const int64_t O = 64, I = 24;
  auto wv = random_vec(O * I * 9, 33);
  auto panel = permute(reshape(buffer(filled(wv)), {O / 32, 32, I, 3, 3}), {0, 3, 4, 2, 1});
  expect_weight_panel(reshape(panel, {O / 32, 9, I, 32}), {O / 32, 9, I, 32}, "_mm512_maskz_loadu_ps(", wv,
                      [&](int64_t b, int64_t t, int64_t i, int64_t j) { return ((b * 32 + j) * I + i) * 9 + t; });
}

// The panel of a convolution's input gradient reads the weight's taps flipped: lanes walking memory backwards, each
// one vector load (masked past the 9 taps) with its lanes reversed (ResNet-18's layer4, one thread: 1.8 -> 1.1 ms).
TEST(Kernel, AFlippedWeightPanelLoadsItsTapsBackwardsAsOneVector) {
  const int64_t O = 48, I = 64;
  auto wv = random_vec(O * I * 9, 34);
  auto w = reshape(buffer(filled(wv)), {O, I / 32, 32, 3, 3});
  auto panel = permute(flip(w, {false, false, false, true, true}), {1, 3, 4, 0, 2}); // [block][kh][kw][o][i]
  expect_weight_panel(reshape(panel, {I / 32, 9, O, 32}), {I / 32, 9, O, 32},
                      "15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)", wv,
                      [&](int64_t b, int64_t t, int64_t o, int64_t j) { return (o * I + b * 32 + j) * 9 + 8 - t; });
}

// The same copy of bfloat16 values stores the bits it loaded (not widened to float and rounded back: the same
// bits, a signaling NaN's too), and each load prefetches what it loads for the next image (the copy's outermost
// loop): its reads, 64 rows 392 bytes apart, defeat the hardware prefetchers when cold (0.68 -> 0.19 ms, below).
TEST(Kernel, ABFloat16TransposedCopyStoresTheBitsItLoadedAndPrefetchesTheNextImage) {
  const int64_t N = 2, C = 16, H = 14, P = H + 2;
  auto b = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, N * C * H * H);
  auto* in = static_cast<uint16_t*>(b->ptr());
  for (int64_t i = 0; i < N * C * H * H; i++)
    in[i] = static_cast<uint16_t>(0x7f81 + 977 * i); // every bit pattern's kind: NaNs, infinities, -0, denormals
  ShapeTracker st = ShapeTracker::from_shape({N, C, H, H}).pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}}).permute({0, 2, 3, 1});
  auto v = view(buffer(b), st.reshape({N * P * P * C}));
  auto out = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, N * P * P * C);
  Kernel k = lower_kernel(out, View::contiguous({N * P * P * C}), v);
  if (wide_vectors()) {
    std::string src = render_c(k, "k");
    EXPECT_NE(src.find("  tiny_store_rows_bf16(b0 + "), std::string::npos) << src;
    EXPECT_EQ(src.find("tiny_f2bf_v(v"), std::string::npos) << src; // no rounding back
    // one image on: C * H * H elements of 2 bytes
    EXPECT_NE(src.find(") + " + std::to_string(C * H * H * 2) + "), 0, 2);"), std::string::npos) << src;
  }
  auto got = std::static_pointer_cast<Buffer>(realize_value(v));
  expect_padded_channels_last(static_cast<const uint16_t*>(got->ptr()), in, N, C, H);
}

// A register block of products of a broadcast value over a short reduce loop (14 or 28 steps: a weight
// gradient's positions in a row) unrolls that loop in full on AVX-512.
TEST(Kernel, AShortReduceLoopOfBroadcastProductsUnrollsInFull) {
  if (!wide_vectors()) GTEST_SKIP() << "this CPU has no AVX-512 (the unrolling is chosen there only)";
  expect_channel_mix(2, 32, 16, 14, 26, "#pragma clang loop unroll(full)\n");
  expect_channel_mix(2, 32, 16, 28, 27, "#pragma clang loop unroll(full)\n");
}

// A reduction masked by a comparison over its lanes (a convolution's input gradient through a ReLU:
// where(y <= 0, 0, sum)) compares and selects whole vectors, not lane by lane; NaN compares false and 0
// compares true, as the scalar comparison does.
TEST(Kernel, AComparisonAndSelectOverLanesAreWholeVectorOps) {
  const int64_t N = 3, K = 32, X = 7, C = 12;
  auto wv = random_vec(K * C, 23), iv = random_vec(N * C * X, 24), yv = random_vec(N * K * X, 25);
  yv[5] = NAN;
  yv[40] = 0.0f;
  yv[41] = -0.0f;
  auto w = expand(reshape(permute(reshape(buffer(filled(wv)), {C, K}), {1, 0}), {1, K, 1, C}), {N, K, X, C});
  auto in = expand(reshape(permute(reshape(buffer(filled(iv)), {N, C, X}), {0, 2, 1}), {N, 1, X, C}), {N, K, X, C});
  auto sum = reduce(alu(Ops::MUL, w, in), Ops::ADD, {3});
  auto y = reshape(buffer(filled(yv)), {N, K, X, 1});
  auto zero = expand(reshape(const_float(DType::Float32, 0.0), {1, 1, 1, 1}), {N, K, X, 1});
  auto v = where(alu(Ops::CMPLE, y, zero), zero, sum);
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, N * K * X);
  Kernel k = lower_kernel(out, View::contiguous({N, K, X, 1}), v);
  if (k.lane_range < 0) GTEST_SKIP() << "no vector lanes on this target";
  std::string src = render_c(k, "k");
  EXPECT_NE(src.find("<= (float)(0.000000000e+00f), tv_uint8_t) & 1;"), std::string::npos) << src;
  EXPECT_NE(src.find(", tv_int32_t) != 0 ? "), std::string::npos) << src;
  EXPECT_EQ(src.find("(tv_uint8_t){"), std::string::npos) << src;
  auto got = values(realize_value(v));
  for (int64_t n = 0; n < N; n++)
    for (int64_t q = 0; q < K; q++)
      for (int64_t x = 0; x < X; x++) {
        int64_t at = (n * K + q) * X + x;
        double want = 0;
        for (int64_t c = 0; c < C; c++)
          want += static_cast<double>(wv[c * K + q]) * iv[(n * C + c) * X + x];
        if (yv[at] <= 0.0f) want = 0;
        EXPECT_NEAR(got[at], want, 1e-4) << n << ", " << q << ", " << x;
      }
}

// An elementwise kernel's contiguous innermost loop is vectorized a full register of floats at a time, 16 with
// AVX-512 and 8 without (clang's cost model picks half for a long body); a loop with a data-dependent read is
// left to clang.
TEST(Kernel, AnElementwiseLoopOfContiguousReadsStepsByAFullVectorRegister) {
  const int64_t N = 1000;
  auto av = random_vec(N, 13), bv = random_vec(N, 14);
  auto a = buffer(filled(av)), b = buffer(filled(bv));
  auto v = alu(Ops::TANH, alu(Ops::SQRT, alu(Ops::ABS, alu(Ops::FDIV, a, b))));
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, N);
  EXPECT_NE(render_c(lower_kernel(out, View::contiguous({N}), v), "k")
                .find(wide_vectors() ? "vectorize_width(16)" : "vectorize_width(8)"),
            std::string::npos);
  auto got = values(realize_value(v));
  for (int64_t i = 0; i < N; i++)
    EXPECT_NEAR(got[i], std::tanh(std::sqrt(std::abs(av[i] / bv[i]))), 1e-6) << i;
  auto picked = gather(a, buffer(indices({5, 3, 999, 0, 7, 1, 2, 4, 6, 8, 9, 10, 11, 12, 13, 14, 15})));
  auto out2 = std::make_shared<Buffer>(cpu_device(), DType::Float32, 17);
  EXPECT_EQ(render_c(lower_kernel(out2, View::contiguous({17}), picked), "k").find("vectorize_width"),
            std::string::npos);
}

// A long loop whose body computes a polynomial of the prelude (exp, tanh, expm1, log1p, ...) interleaves four vectors
// (each a chain of dependent operations the core would wait on); a short one, or one without such a function,
// leaves clang's choice.
TEST(Kernel, ALongLoopOfAPreludePolynomialInterleavesFourVectors) {
  auto render = [](int64_t n, Ops op) {
    auto a = buffer(filled(random_vec(n, 16)));
    auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, n);
    return render_c(lower_kernel(out, View::contiguous({n}), alu(op, alu(Ops::ABS, a))), "k");
  };
  for (Ops op : {Ops::EXP, Ops::TANH, Ops::EXPM1, Ops::LOG1P, Ops::LOG, Ops::ERF})
    EXPECT_NE(render(1024, op).find("interleave_count(4)"), std::string::npos) << op_name(op);
  EXPECT_EQ(render(1024, Ops::SQRT).find("interleave_count"), std::string::npos);
  EXPECT_EQ(render(200, Ops::TANH).find("interleave_count"), std::string::npos);
}

// Such a loop (one loop, a polynomial of the prelude) runs in strips of 64 elements, each first prefetching what its
// contiguous loads read 256 elements on, one prefetch a cache line (a slice's offset included); the values are those
// of the plain loop, the strips' ends included (a length that is no multiple of 64, split across threads).
TEST(Kernel, APolynomialLoopRunsInStripsThatPrefetchAhead) {
  const int64_t N = 100003;
  auto av = random_vec(N + 7, 30), bv = random_vec(N, 31);
  auto a = shrink(buffer(filled(av)), {{7, N + 7}}); // read at an offset of 7 elements
  auto b = buffer(filled(bv));
  auto v = alu(Ops::MUL, alu(Ops::EXP, a), b);
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, N);
  std::string src = render_c(lower_kernel(out, View::contiguous({N}), v), "k");
  EXPECT_NE(src.find("r0_strip += 64"), std::string::npos) << src;
  EXPECT_NE(src.find("(uintptr_t)(b1 + r0_strip) + 1052)"), std::string::npos) << src; // (7 + 256) * 4
  EXPECT_NE(src.find("(uintptr_t)(b1 + r0_strip) + 1244)"), std::string::npos) << src; // its fourth line
  EXPECT_NE(src.find("(uintptr_t)(b2 + r0_strip) + 1024)"), std::string::npos) << src;
  auto got = values(realize_value(v));
  for (int64_t i = 0; i < N; i++)
    EXPECT_NEAR(got[i], std::exp(av[i + 7]) * bv[i], 2e-6 * std::abs(std::exp(av[i + 7]) * bv[i])) << i;
  // a body without such a function keeps one loop
  auto out2 = std::make_shared<Buffer>(cpu_device(), DType::Float32, N);
  EXPECT_EQ(render_c(lower_kernel(out2, View::contiguous({N}), alu(Ops::MUL, a, b)), "k").find("r0_strip"),
            std::string::npos);
}

// A strip of such a loop that computes sin, cos or tan runs their fast forms into a strip of its own, copied out where
// no argument needs the general form (from 2^18; 2^27 for tan), and runs again with the general forms where one does:
// the values of the general forms everywhere (the fast forms within 1.2 ulp), at an output offset, in strips with a
// huge argument, signed zeros, NaN and inf, and for a kernel that writes the buffer it reads (the second run reads the
// inputs, not the first run's results); a kernel without strips gives the same bits.
TEST(Kernel, TrigStripsRunTheGeneralFormOnlyWhereAnArgumentNeedsIt) {
  const int64_t N = 10003;
  auto xv = random_vec(N, 32);
  for (float& x : xv)
    x *= 40.0f;
  const std::vector<std::pair<int64_t, float>> special{
      {100, 3e5f},       {101, -0.0f}, {102, 0.0f},      {700, 1e9f},       {701, -2.6e5f},   {5000, 1e30f},
      {5001, -1.5e-30f}, {6000, NAN},  {6001, INFINITY}, {6002, -INFINITY}, {9999, 262143.9f}};
  for (auto [i, x] : special)
    xv[static_cast<size_t>(i)] = x;
  auto ulps = [](float got, double want) {
    const float w = static_cast<float>(want);
    return std::abs(static_cast<double>(got) - want) / (std::nextafter(std::abs(w), INFINITY) - std::abs(w));
  };
  for (Ops op : {Ops::SIN, Ops::COS, Ops::TAN}) {
    auto ref = [op](double x) { return op == Ops::SIN ? std::sin(x) : op == Ops::COS ? std::cos(x) : std::tan(x); };
    auto x = buffer(filled(xv));
    auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, N + 3);
    Kernel k = lower_kernel(out, View{{N}, {1}, 3, std::nullopt}, alu(op, x));
    std::string src = render_c(k, "k");
    EXPECT_NE(src.find("_fast(&tiny_big, "), std::string::npos) << src;
    EXPECT_NE(src.find("memcpy(b0 + r0_strip + (3), tiny_strip"), std::string::npos) << src;
    launch_on_cpu(k, src, "k");
    // in place, as the scheduler writes a dying input: the kernel's output slot is its input's buffer
    auto same = filled(xv);
    Kernel kp = lower_kernel(std::make_shared<Buffer>(cpu_device(), DType::Float32, N), View::contiguous({N}),
                             alu(op, buffer(same)));
    ASSERT_EQ(kp.buffers.size(), 2u);
    kp.buffers[0] = kp.buffers[1];
    launch_on_cpu(kp, render_c(kp, "kp"), "kp");
    // a loop too short for strips computes the general forms, which round as the fast ones (one value in every kernel)
    const int64_t S = 200;
    auto out_small = std::make_shared<Buffer>(cpu_device(), DType::Float32, S);
    Kernel ks = lower_kernel(out_small, View::contiguous({S}), alu(op, shrink(x, {{0, S}})));
    std::string small_src = render_c(ks, "ks");
    EXPECT_EQ(small_src.find("tiny_big"), std::string::npos) << small_src;
    launch_on_cpu(ks, small_src, "ks");
    auto got = values(out), in_place = values(same), small = values(out_small);
    for (int64_t i = 0; i < S; i++)
      EXPECT_EQ(std::bit_cast<uint32_t>(small[static_cast<size_t>(i)]),
                std::bit_cast<uint32_t>(got[static_cast<size_t>(i + 3)]))
          << op_name(op) << " " << xv[static_cast<size_t>(i)];
    for (int64_t i = 0; i < N; i++) {
      const float x = xv[static_cast<size_t>(i)], g = got[static_cast<size_t>(i + 3)];
      const double want = ref(static_cast<double>(x));
      EXPECT_EQ(std::bit_cast<uint32_t>(in_place[static_cast<size_t>(i)]), std::bit_cast<uint32_t>(g)) << i;
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(g)) << op_name(op) << " " << x;
      } else if (x == 0.0f) {
        EXPECT_EQ(std::bit_cast<uint32_t>(g), std::bit_cast<uint32_t>(op == Ops::COS ? 1.0f : x)) << op_name(op);
      } else {
        // (tan's float form: 1.24 ulp over every float below 2^18)
        EXPECT_LE(ulps(g, want), std::abs(x) >= 262144.0f ? 0.501
                                 : op == Ops::TAN         ? 1.25
                                                          : 1.2)
            << op_name(op) << " " << x;
      }
    }
  }
}

// float32 erf is two polynomials of the prelude (tiny_erff): x P(x^2) below 0.921875, Q(|x| - 2.2) with x's sign
// above, |x| clamped to 3.92. Over every 61st float of [0, 6] and their negations: within 2.63 ulp of erf in double
// (P's worst; Q's 1.53), exactly +-1 from 3.92, signed zeros, denormals, NaN and infinities.
TEST(Kernel, ErfOfFloatIsWithinThreeUlpOverItsWholeRange) {
  std::vector<float> xv;
  for (uint32_t b = 0; b <= std::bit_cast<uint32_t>(6.0f); b += 61)
    xv.push_back(std::bit_cast<float>(b));
  for (float x : {0.921875f, 0.92187494f, 3.9199998f, 3.92f, 3.93f, 4.0f, 10.0f, 1e30f, INFINITY, NAN})
    xv.push_back(x);
  const size_t half = xv.size();
  for (size_t i = 0; i < half; i++)
    xv.push_back(-xv[i]);
  const auto n = static_cast<int64_t>(xv.size());
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, n);
  Kernel k = lower_kernel(out, View::contiguous({n}), alu(Ops::ERF, buffer(filled(xv))));
  launch_on_cpu(k, render_c(k, "k"), "k");
  auto got = values(out);
  double worst = 0;
  for (size_t i = 0; i < xv.size(); i++) {
    const float x = xv[i], g = got[i];
    const double want = std::erf(static_cast<double>(x));
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(g));
    } else if (std::abs(x) >= 3.92f || x == 0.0f) {
      EXPECT_EQ(std::bit_cast<uint32_t>(g), std::bit_cast<uint32_t>(x == 0.0f ? x : std::copysign(1.0f, x))) << x;
    } else {
      const float w = static_cast<float>(want);
      const double ulp = std::abs(static_cast<double>(std::nextafter(w, 0.0f)) - w);
      const double err = std::abs(static_cast<double>(g) - want) / std::max(ulp, 1.4e-45);
      worst = std::max(worst, err);
      EXPECT_LE(err, std::abs(x) < 0.921875f ? 2.64 : 1.54) << x;
    }
  }
  EXPECT_GT(worst, 0.5); // the loop compared values
}

// A 2x2 max pool elementwise over its outputs (rows of 14 of a 28-wide input): the innermost loop reads
// pairs (step 2) and is shorter than 16 lanes, vectorized as 4 lanes and a scalar rest (a masked step of 8
// lanes reads the pairs by gathers, slow on a Zen 4; AVX2's masked stores cost more).
TEST(Kernel, AShortLoopOfPairReadsVectorizes) {
  const int64_t R = 6, W = 28, O = W / 2;
  auto xv = random_vec(R * 2 * W, 15);
  auto x = reshape(buffer(filled(xv)), {R, 2, O, 2}); // (output row, window row, output column, window column)
  UOpPtr m;
  for (int64_t i = 0; i < 2; i++)
    for (int64_t j = 0; j < 2; j++) {
      UOpPtr e = reshape(shrink(x, {{0, R}, {i, i + 1}, {0, O}, {j, j + 1}}), {R, O});
      m = m ? alu(Ops::MAX, m, e) : e;
    }
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, R * O);
  std::string src = render_c(lower_kernel(out, View::contiguous({R, O}), m), "k");
  EXPECT_NE(src.find("vectorize_width(4)\n"), std::string::npos) << src;
  auto got = values(realize_value(m));
  for (int64_t r = 0; r < R; r++)
    for (int64_t o = 0; o < O; o++) {
      const float* w = &xv[static_cast<size_t>(r * 2 * W + 2 * o)];
      EXPECT_EQ(got[static_cast<size_t>(r * O + o)], std::max(std::max(w[0], w[1]), std::max(w[W], w[W + 1])));
    }
}

// An elementwise loop whose reads divide it by 2 (a non-overlapping 2x2 max pool's gradient: its index and
// gradient read at column / 2, compared with column % 2) splits in two phases: a loop over the pairs, each
// iteration storing both columns from reads contiguous along it, no division left; without AVX-512 it
// vectorizes as 4 lanes where 8 or more pairs are left (rows of 28), and stays scalar with 7 (rows of 14).
TEST(Kernel, ALoopDividedByTwoSplitsInPhases) {
  for (int64_t W : {28, 14}) {
    const int64_t B = 3, R = 6, O = W / 2, P = B * R / 2 * O;
    auto gv = random_vec(P, 16);
    std::vector<int64_t> at(static_cast<size_t>(P));
    for (int64_t i = 0; i < P; i++)
      at[static_cast<size_t>(i)] = i * 7 % 4;
    // (B, R / 2, O) -> (B, R, W): each value read by the four places of its 2 x 2 window
    const Shape windows{B, R / 2, 2, O, 2};
    auto spread = [&](const UOpPtr& x) { return reshape(expand(reshape(x, {B, R / 2, 1, O, 1}), windows), {B, R, W}); };
    // 0, 1, 0, 1, ... along the rows (d = 1) or the columns (d = 2), as the pool's offsets read them
    auto phase = [&](size_t d) {
      const int64_t n = d == 1 ? R : W;
      Shape s{1, 1, 1};
      s[d] = n;
      return expand(reshape(reshape(expand(reshape(iota(2, DType::Int64), {1, 2}), {n / 2, 2}), {n}), s), {B, R, W});
    };
    auto place = alu(Ops::ADD, alu(Ops::ADD, phase(1), phase(1)), phase(2));
    auto zero = expand(reshape(const_float(DType::Float32, 0), {1, 1, 1}), {B, R, W});
    auto v = where(alu(Ops::CMPEQ, spread(buffer(indices(at))), place), spread(buffer(filled(gv))), zero);
    auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, B * R * W);
    Kernel k = lower_kernel(out, View::contiguous({B, R, W}), v);
    std::string src = render_c(k, "k");
    EXPECT_EQ(k.loops.back(), O) << src;
    for (const UOpPtr& n : toposort(k.ast)) // no division of the pairs' loop
      EXPECT_FALSE((n->op == Ops::IDIV || n->op == Ops::MOD) && n->src[0]->op == Ops::RANGE &&
                   std::get<int64_t>(n->src[0]->arg) == static_cast<int64_t>(k.loops.size()) - 1)
          << src;
    EXPECT_EQ(src.find("vectorize_width(4)") != std::string::npos, W == 28 && !wide_vectors()) << src;
    auto got = values(realize_value(v));
    for (int64_t b = 0; b < B; b++)
      for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < W; c++) {
          const size_t i = static_cast<size_t>((b * R / 2 + r / 2) * O + c / 2);
          EXPECT_EQ(got[static_cast<size_t>((b * R + r) * W + c)], at[i] == r % 2 * 2 + c % 2 ? gv[i] : 0.0f)
              << b << " " << r << " " << c;
        }
  }
}

// A padded channels-last copy of (C, H, W): every channel of a padded position is read or none is, so the
// loop over the channels runs unmasked where the position is inside and stores zeros where it is not, the
// choice made once per position.
TEST(Kernel, ALoopWhoseMaskDoesNotVaryInItRunsUnmaskedOrAsZeros) {
  const int64_t C = 24, H = 5, W = 5; // rows of 7: too short for masked lanes (see lower_transposed_copy)
  auto xv = random_vec(C * H * W, 17);
  auto v = permute(pad(reshape(buffer(filled(xv)), {C, H, W}), {{0, 0}, {1, 1}, {1, 1}}), {1, 2, 0});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, (H + 2) * (W + 2) * C);
  std::string src = render_c(lower_kernel(out, View::contiguous({H + 2, W + 2, C}), v), "k");
  EXPECT_NE(src.find("} else {"), std::string::npos) << src;
  EXPECT_EQ(src.find(" ? b1["), std::string::npos) << src;
  auto got = values(realize_value(v));
  for (int64_t h = 0; h < H + 2; h++)
    for (int64_t w = 0; w < W + 2; w++)
      for (int64_t c = 0; c < C; c++) {
        const bool inside = h >= 1 && h <= H && w >= 1 && w <= W;
        EXPECT_EQ(got[static_cast<size_t>((h * (W + 2) + w) * C + c)],
                  inside ? xv[static_cast<size_t>((c * H + h - 1) * W + w - 1)] : 0.0f)
            << h << " " << w << " " << c;
      }
}

TEST(Kernel, AScatterAddAccumulatesRepeatedIndicesInOrder) {
  auto base = buffer(filled({1, 1, 1, 1}));
  auto idx = buffer(indices({3, 0, 3, 3, 9}));
  auto val = buffer(filled({1, 2, 3, 4, 5}));
  auto got = values(realize_all({scatter(base, idx, val, Ops::ADD)})[0]->buffer());
  EXPECT_EQ(got, std::vector<float>({3, 1, 1, 9}));
  auto put = values(realize_all({scatter(base, idx, val, std::nullopt)})[0]->buffer());
  EXPECT_EQ(put, std::vector<float>({2, 1, 1, 4}));
  EXPECT_EQ(values(base->buffer()), std::vector<float>({1, 1, 1, 1})); // the input is untouched
}

TEST(Kernel, ARowMajorRightOperandIsReadThroughATransposedCopy) {
  const int64_t M = 20, K = 7, N = 3;
  auto av = random_vec(M * K, 10), bv = random_vec(K * N, 11);
  auto a = expand(reshape(cast(buffer(filled(av)), DType::Float16), {M, 1, K}), {M, N, K});
  auto b =
      expand(reshape(permute(reshape(cast(buffer(filled(bv)), DType::Float16), {K, N}), {1, 0}), {1, N, K}), {M, N, K});
  auto p = reduce(alu(Ops::MUL, cast(a, DType::Float32), cast(b, DType::Float32)), Ops::ADD, {2});
  auto got = values(realize_value(p));
  ASSERT_EQ(got.size(), size_t(M * N));
}

TEST(Kernel, LaneSplitFindsTheBaseAndStrideOfAnIndex) {
  auto lane = UOp::make(Ops::RANGE, kIndex, {idx_const(16)}, int64_t{9});
  auto r = UOp::make(Ops::RANGE, kIndex, {idx_const(4)}, int64_t{0});
  auto base = r * idx_const(64) + idx_const(3);
  auto contiguous = lane_split(base + lane, lane.get());
  ASSERT_TRUE(contiguous);
  EXPECT_EQ(contiguous->second, 1);
  auto strided = lane_split(base + lane * idx_const(5), lane.get());
  ASSERT_TRUE(strided);
  EXPECT_EQ(strided->second, 5);
  EXPECT_EQ(lane_split(base, lane.get())->second, 0);
  EXPECT_FALSE(lane_split(UOp::make(Ops::IDIV, kIndex, {lane, idx_const(2)}), lane.get()));
}

namespace {

// x (M, K) @ w (K, N), w row-major (read transposed), as a reduction: it computes 16 vector lanes and
// matches plain loops over the operands' values av and bv.
void expect_matmul_in_lanes(const UOpPtr& x, const UOpPtr& w, const std::vector<float>& av,
                            const std::vector<float>& bv, const std::string& label) {
  const int64_t M = x->shape[0], K = x->shape[1], N = w->shape[1];
  auto value = matmul_of(x, w);
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, M * N);
  Kernel k = lower_kernel(out, View::contiguous(value->shape), value);
  EXPECT_EQ(k.lanes, 16) << label;
  EXPECT_NE(render_c(k, k.name).find("ext_vector_type(16)"), std::string::npos) << label;
  auto got = values(realize_value(value));
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      float s = 0;
      for (int64_t q = 0; q < K; q++)
        s += av[i * K + q] * bv[q * N + j];
      EXPECT_NEAR(got[i * N + j], s, 1e-5) << label << " " << i << " " << j;
    }
}

} // namespace

TEST(Kernel, AMatmulWithARowMajorRightOperandComputesVectorLanes) {
  const int64_t M = 24, K = 9, N = 48;
  auto av = random_vec(M * K, 12), bv = random_vec(K * N, 13);
  expect_matmul_in_lanes(reshape(buffer(filled(av)), {M, K}), reshape(buffer(filled(bv)), {K, N}), av, bv, "float32");
}

// x (M, K) @ w (K, N) of random float32 values (seeds `seed` and seed + 1) as one kernel, and its values checked
// against plain loops.
struct RandomMatmul {
  int64_t M, K, N;
  std::vector<float> av, bv;
  UOpPtr value;
  Kernel kernel;

  static RandomMatmul make(int64_t M, int64_t K, int64_t N, unsigned seed) {
    auto av = random_vec(M * K, seed), bv = random_vec(K * N, seed + 1);
    auto value = matmul_of(reshape(buffer(filled(av)), {M, K}), reshape(buffer(filled(bv)), {K, N}));
    auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, M * N);
    Kernel k = lower_kernel(out, View::contiguous(value->shape), value);
    return {M, K, N, std::move(av), std::move(bv), value, std::move(k)};
  }

  void expect_values() const {
    auto got = values(realize_value(value));
    auto [want, mag] = plain_matmul(av, bv, M, K, N);
    for (int64_t i = 0; i < M * N; i++)
      EXPECT_NEAR(got[i], want[i], 1e-5 * mag[i] + 1e-6) << i;
  }
};

// A float32 matmul whose lanes' loop runs outermost (16 panels of 32 columns) computes a few panels per
// block of rows (the innermost output loop), keeping 8 outer iterations, two per thread of the target (one
// here: Target{}), for the threads; the values are the products'.
TEST(Kernel, AWideFloat32MatmulComputesAFewPanelsPerBlockOfRows) {
  if (!wide_vectors()) GTEST_SKIP() << "this CPU has no AVX-512 (two vectors of lanes there only)";
  RandomMatmul mm = RandomMatmul::make(64, 24, 512, 30);
  const Kernel& k = mm.kernel;
  ASSERT_EQ(k.loops.size(), 3u) << k.name;
  EXPECT_EQ(k.loops.front(), 8) << k.name;
  EXPECT_EQ(k.loops.back(), 2) << k.name;
  mm.expect_values();
}

// A register block's epilogue reads (here c of (a @ b) * c, a GELU's input in its gradient's matmul) are prefetched
// before the block's reduce loop, the first and last lane of each vector, so that they arrive while it runs; the
// values are the products' times c's.
TEST(Kernel, AMatmulsEpilogueReadsArePrefetchedBeforeItsSums) {
  const int64_t M = 40, K = 64, N = 96;
  auto av = random_vec(M * K, 41), bv = random_vec(K * N, 42), cv = random_vec(M * N, 43);
  auto c = reshape(buffer(filled(cv)), {M, N});
  auto value = alu(Ops::MUL, matmul_of(reshape(buffer(filled(av)), {M, K}), reshape(buffer(filled(bv)), {K, N})),
                   reshape(c, {M, N, 1}));
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, M * N);
  Kernel k = lower_kernel(out, View::contiguous(value->shape), value);
  ASSERT_GE(k.lane_range, 0) << k.name;
  std::string src = render_c(k, "k");
  const size_t loop = src.find("for (int64_t r", src.find("tv_float acc"));
  const size_t prefetch = src.find("__builtin_prefetch(b3 + ");
  ASSERT_NE(prefetch, std::string::npos) << src;
  EXPECT_LT(prefetch, loop) << src;
  auto got = values(realize_value(value));
  auto [want, mag] = plain_matmul(av, bv, M, K, N);
  for (int64_t i = 0; i < M * N; i++)
    EXPECT_NEAR(got[i], want[i] * cv[i], (1e-5 * mag[i] + 1e-6) * std::abs(cv[i]) + 1e-6) << i;
}

// a.t() @ b with a read in place (a linear layer's weight gradient, tokens-major): the register block broadcasts a's
// elements a block of rows side by side, 2 KiB apart on each step of the sum, which the hardware prefetchers do not
// follow: each step prefetches the line of a that the step 8 on reads, once for the elements that share it; the values
// are the product's.
TEST(Kernel, ATransposedLeftOperandReadInPlaceIsPrefetchedOnceALine) {
  const int64_t M = 512, K = 128, N = 64;
  auto av = random_vec(K * M, 44), bv = random_vec(K * N, 45);
  auto at = permute(reshape(buffer(filled(av)), {K, M}), {1, 0});
  auto value = matmul_of(at, reshape(buffer(filled(bv)), {K, N}));
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, M * N);
  Kernel k = lower_kernel(out, View::contiguous(value->shape), value);
  ASSERT_GE(k.lane_range, 0) << k.name;
  std::string src = render_c(k, "k");
  const std::regex prefetch(R"(__builtin_prefetch\(\(const void\*\)\(\(uintptr_t\)\(b1 \+ v\d+\) \+ 16384\))");
  const std::regex broadcast(R"(= \(float\)\(b1\[v\d+\]\);)");
  const auto count = [&](const std::regex& r) {
    return std::distance(std::sregex_iterator(src.begin(), src.end(), r), std::sregex_iterator());
  };
  EXPECT_GE(count(prefetch), 1) << src;
  EXPECT_GE(count(broadcast), 8 * count(prefetch)) << src;
  std::vector<float> a(static_cast<size_t>(M * K));
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < K; j++)
      a[static_cast<size_t>(i * K + j)] = av[static_cast<size_t>(j * M + i)];
  auto got = values(realize_value(value));
  auto [want, mag] = plain_matmul(a, bv, M, K, N);
  for (int64_t i = 0; i < M * N; i++)
    EXPECT_NEAR(got[i], want[i], 1e-5 * mag[i] + 1e-6) << i;
}

// float16 and bfloat16 operands read as vectors of their bits, widened to float in registers: the matmul
// keeps its 16 lanes (it ran lane by lane, 8x slower than float32) and its values.
TEST(Kernel, AHalfMatmulReadsItsOperandsAsVectors) {
  const int64_t M = 24, K = 9, N = 48;
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    auto ah = realize_value(cast(buffer(filled(random_vec(M * K, 15))), dt));
    auto bh = realize_value(cast(buffer(filled(random_vec(K * N, 16))), dt));
    auto av = values(realize_value(cast(buffer(ah), DType::Float32)));
    auto bv = values(realize_value(cast(buffer(bh), DType::Float32)));
    expect_matmul_in_lanes(reshape(cast(buffer(ah), DType::Float32), {M, K}),
                           reshape(cast(buffer(bh), DType::Float32), {K, N}), av, bv, std::string(name(dt)));
  }
}

// bfloat16 x @ w (w row-major, read in panels) on a CPU with AVX512_BF16, lowered for pair dot products (the CPU
// device asks for them where they pay: Target::bf16_pair_dots): the panel is interleaved by pairs of the reduced
// axis, and each step of the inner loop is one pair dot product per lane (vdpbf16ps) with the left operand's pair one
// 32-bit word, the plain path (two widened multiply-adds) where the C compiler does not target AVX512_BF16. Lowered
// without them, the same product widens each bfloat16 and multiply-adds. Both sums match plain loops over the
// operands' values at float32 accumulation's tolerance (the products of bfloat16 values are exact).
TEST(Kernel, ABFloat16MatmulStepsByPairDotProductsWhereTheTargetAsks) {
  if (!__builtin_cpu_supports("avx512bf16"))
    GTEST_SKIP() << "this CPU has no AVX512_BF16: bfloat16 matmuls take the plain path";
  const int64_t K = 96, N = 512;
  for (bool pair_dots : {true, false})
    for (int64_t M : {64, 16}) { // 16 rows: 16 reads of each element of the right operand pay for its pairs' panel
      auto ah = realize_value(cast(buffer(filled(random_vec(M * K, 19))), DType::BFloat16));
      auto bh = realize_value(cast(buffer(filled(random_vec(K * N, 20))), DType::BFloat16));
      auto av = values(realize_value(cast(buffer(ah), DType::Float32)));
      auto bv = values(realize_value(cast(buffer(bh), DType::Float32)));
      auto value = reshape(matmul_of(reshape(cast(buffer(ah), DType::Float32), {M, K}),
                                     reshape(cast(buffer(bh), DType::Float32), {K, N})),
                           {M, N});
      Target target;
      target.bf16_pair_dots = pair_dots;
      Schedule s = schedule_value(value, target,
                                  [](DType dt, int64_t n) { return std::make_shared<Buffer>(cpu_device(), dt, n); });
      std::string src;
      for (const Kernel& k : s.kernels) {
        std::string kernel_src = render_c(k, k.name);
        if (k.lanes == 16) src = kernel_src;
        launch_on_cpu(k, kernel_src, k.name);
      }
      EXPECT_EQ(src.find("_mm512_dpbf16_ps(") != std::string::npos, pair_dots) << src;
      EXPECT_EQ(src.find("#else") != std::string::npos, pair_dots) << src;
      auto got = values(s.kernels.back().buffers[0]);
      auto [want, mag] = plain_matmul(av, bv, M, K, N);
      for (int64_t i = 0; i < M * N; i++)
        EXPECT_NEAR(got[i], want[i], 1e-5 * mag[i] + 1e-6) << pair_dots << " " << M << ": " << i / N << " " << i % N;
    }
}

// bfloat16 a.t() @ b (a linear layer's weight gradient, tokens-major: a's reduced axis strides M elements) on a
// target whose bfloat16 products step by pairs (AMX or AVX512_BF16's pair dots): a is copied with the reduced axis
// innermost and b into a panel interleaved by pairs, whatever their rows' strides (128 B and 64 B here), so the
// product steps by pair dot products. Without the copies neither operand paired, and the product widened each
// bfloat16 of a and broadcast it element by element (1024^3 on an AMX host, two threads: 11.2 ms against 1.4).
// The kernel runs on any host: without AVX512_BF16 its pair dots take the widened path beside them (#else).
TEST(Kernel, ABFloat16TransposedLeftOperandIsCopiedForPairDotProducts) {
  const int64_t K = 96, M = 64, N = 32;
  auto ah = realize_value(cast(buffer(filled(random_vec(K * M, 26))), DType::BFloat16));
  auto bh = realize_value(cast(buffer(filled(random_vec(K * N, 27))), DType::BFloat16));
  auto av = values(realize_value(cast(buffer(ah), DType::Float32)));
  auto bv = values(realize_value(cast(buffer(bh), DType::Float32)));
  auto value = matmul_of(permute(reshape(cast(buffer(ah), DType::Float32), {K, M}), {1, 0}),
                         reshape(cast(buffer(bh), DType::Float32), {K, N}));
  Target target;
  target.bf16_pair_dots = true;
  Schedule s =
      schedule_value(value, target, [](DType dt, int64_t n) { return std::make_shared<Buffer>(cpu_device(), dt, n); });
  std::string src;
  for (const Kernel& k : s.kernels) {
    std::string kernel_src = render_c(k, k.name);
    if (k.name.rfind("R_", 0) == 0) src = kernel_src;
    launch_on_cpu(k, kernel_src, k.name);
  }
  EXPECT_NE(src.find("_mm512_dpbf16_ps("), std::string::npos) << src;
  std::vector<float> at(M * K); // a.t() row-major
  for (int64_t q = 0; q < K; q++)
    for (int64_t i = 0; i < M; i++)
      at[i * K + q] = av[q * M + i];
  expect_matmul(values(s.kernels.back().buffers[0]), at, bv, M, K, N);
}

// bfloat16 x @ w on an AMX host whose vdpbf16ps costs more than two multiply-adds (Target::bf16_pair_dots false):
// its products pair only where tiles may form, rows a multiple of 16. 24 rows form no tiles, and pair dot products
// (vdpbf16ps) ran slower than widened multiply-adds (two threads, 24 x 1024 x 1024: 320 us against 206), so they widen;
// 32 rows pair (the tiles' operands). The widened sums match plain loops over the operands' values.
TEST(Kernel, ABFloat16MatmulOnAnAmxHostPairsOnlyWhereTilesMayForm) {
  const int64_t K = 96, N = 64;
  for (int64_t M : {24, 32}) {
    auto ah = realize_value(cast(buffer(filled(random_vec(M * K, 28))), DType::BFloat16));
    auto bh = realize_value(cast(buffer(filled(random_vec(K * N, 29))), DType::BFloat16));
    auto value =
        matmul_of(reshape(cast(buffer(ah), DType::Float32), {M, K}), reshape(cast(buffer(bh), DType::Float32), {K, N}));
    Target target;
    target.amx_bf16 = true;
    Schedule s = schedule_value(value, target,
                                [](DType dt, int64_t n) { return std::make_shared<Buffer>(cpu_device(), dt, n); });
    bool paired = false;
    for (const Kernel& k : s.kernels) {
      const std::string src = render_c(k, k.name);
      paired = paired || src.find("_tile_dpbf16ps(") != std::string::npos ||
               src.find("_mm512_dpbf16_ps(") != std::string::npos;
    }
    EXPECT_EQ(paired, M % 16 == 0) << M;
    if (paired) continue; // tiles run only on an AMX host
    for (const Kernel& k : s.kernels)
      launch_on_cpu(k, render_c(k, k.name), k.name);
    auto av = values(realize_value(cast(buffer(ah), DType::Float32)));
    auto bv = values(realize_value(cast(buffer(bh), DType::Float32)));
    expect_matmul(values(s.kernels.back().buffers[0]), av, bv, M, K, N);
  }
}

// A matmul over an empty reduced axis (x (5, 0) @ w (0, 10), as upstream samples have) sums nothing: its
// reduce loop runs zero times, and every output is 0.
TEST(Kernel, AMatmulOverAnEmptyAxisIsZero) {
  const int64_t M = 5, N = 10;
  auto a = expand(reshape(buffer(filled({})), {M, 1, 0}), {M, N, 0});
  auto b = expand(reshape(buffer(filled({})), {1, N, 0}), {M, N, 0});
  auto got = values(realize_value(reshape(reduce(alu(Ops::MUL, a, b), Ops::ADD, {2}), {M, N})));
  EXPECT_EQ(got, std::vector<float>(M * N, 0.0f));
}

// bfloat16 x @ w on a host with AMX-BF16 tiles: the register block is 32 or 16 rows of two vectors whose
// accumulators are tiles (16 x 16 floats, the panel read as B tiles), the reduced axis 32 at a time and
// what is left of it (K / 2 = 50 pairs: 48 in tiles, 2 in vectors) by pair dot products. The sums,
// read back from the tiles into the epilogue (a product with a third operand), match plain loops over
// the operands' values at float32 accumulation's tolerance.
TEST(Kernel, ABFloat16MatmulAccumulatesInAmxTiles) {
  if (!cpu_device().target().amx_bf16)
    GTEST_SKIP() << "this CPU has no AMX-BF16 (or Linux refused its tile state, or TINY_AMX=0)";
  for (auto [M, K, N] : {std::array<int64_t, 3>{64, 100, 512}, {80, 64, 512}}) {
    auto ah = realize_value(cast(buffer(filled(random_vec(M * K, 21))), DType::BFloat16));
    auto bh = realize_value(cast(buffer(filled(random_vec(K * N, 22))), DType::BFloat16));
    auto sv = random_vec(M * N, 23);
    auto av = values(realize_value(cast(buffer(ah), DType::Float32)));
    auto bv = values(realize_value(cast(buffer(bh), DType::Float32)));
    auto a = expand(reshape(cast(buffer(ah), DType::Float32), {M, 1, K}), {M, N, K});
    auto b = expand(reshape(permute(reshape(cast(buffer(bh), DType::Float32), {K, N}), {1, 0}), {1, N, K}), {M, N, K});
    auto value =
        alu(Ops::MUL, reshape(reduce(alu(Ops::MUL, a, b), Ops::ADD, {2}), {M, N}), reshape(buffer(filled(sv)), {M, N}));
    Schedule s = schedule_value(value, cpu_device().target(),
                                [](DType dt, int64_t n) { return std::make_shared<Buffer>(cpu_device(), dt, n); });
    std::string src;
    for (const Kernel& k : s.kernels)
      if (k.tiles) src = render_c(k, k.name);
    EXPECT_NE(src.find("_tile_dpbf16ps("), std::string::npos) << M << " " << K << " " << N;
    EXPECT_NE(src.find("_tile_loadconfig("), std::string::npos) << src;
    auto got = values(realize_value(value));
    auto [want, mag] = plain_matmul(av, bv, M, K, N);
    for (int64_t i = 0; i < M * N; i++) {
      double w = sv[i];
      EXPECT_NEAR(got[i], want[i] * w, (1e-5 * mag[i] + 1e-6) * std::abs(w) + 1e-6) << i / N << " " << i % N;
    }
  }
}

// bfloat16 x @ w of 16, 32 or 64 rows (and 256 columns or more; 64 rows where w spans 2 MiB or less) on an AMX host
// reads w in place: one kernel, no panel copied by pairs first, each step's B tiles interleaved from w's rows (two
// tiles' 32 columns in 512-bit unpacks, one tile's 16 in 256-bit ones), their C tiles' columns put back in order when
// the accumulators are read; w a view whose rows lie further apart than its columns (a slice of a wider matrix, at an
// offset). 48 rows keep the panel. The sums, through an epilogue (a product with a third operand), match plain loops
// over the operands' values.
TEST(Kernel, ABFloat16MatmulOfFewRowsReadsItsRightOperandInPlace) {
  const int64_t K = 96, W = 528; // w: columns [8, 8 + N) of a K x W matrix, its rows W apart
  for (auto [M, N] : {std::pair<int64_t, int64_t>{32, 512}, {16, 256}, {32, 272}, {16, 400}, {64, 256}, {48, 256}}) {
    auto ah = realize_value(cast(buffer(filled(random_vec(M * K, 31))), DType::BFloat16));
    auto bh = realize_value(cast(buffer(filled(random_vec(K * W, 32))), DType::BFloat16));
    auto sv = random_vec(M * N, 33);
    auto a = expand(reshape(cast(buffer(ah), DType::Float32), {M, 1, K}), {M, N, K});
    auto wide = reshape(cast(buffer(bh), DType::Float32), {K, W});
    auto b = expand(reshape(permute(shrink(wide, {{0, K}, {8, 8 + N}}), {1, 0}), {1, N, K}), {M, N, K});
    auto value =
        alu(Ops::MUL, reshape(reduce(alu(Ops::MUL, a, b), Ops::ADD, {2}), {M, N}), reshape(buffer(filled(sv)), {M, N}));
    Target target;
    target.amx_bf16 = true;
    Schedule s = schedule_value(value, target,
                                [](DType dt, int64_t n) { return std::make_shared<Buffer>(cpu_device(), dt, n); });
    std::string src;
    for (const Kernel& k : s.kernels)
      if (k.tiles) src = render_c(k, k.name);
    const bool in_place = M != 48;
    EXPECT_EQ(s.kernels.size(), in_place ? 1u : 2u) << M << " " << N; // (48 rows: the panel's copy, the product)
    EXPECT_NE(src.find("_tile_dpbf16ps("), std::string::npos) << M << " " << N;
    EXPECT_EQ(src.find("_mm512_unpacklo_epi16(") != std::string::npos, in_place && N % 32 == 0) << src;
    EXPECT_EQ(src.find("_mm256_unpacklo_epi16(") != std::string::npos, in_place && N % 32 != 0) << src;
    auto av = values(realize_value(cast(buffer(ah), DType::Float32)));
    auto wv = values(realize_value(cast(buffer(bh), DType::Float32)));
    std::vector<float> bv(K * N);
    for (int64_t q = 0; q < K; q++)
      for (int64_t n = 0; n < N; n++)
        bv[q * N + n] = wv[q * W + 8 + n];
    auto [want, mag] = plain_matmul(av, bv, M, K, N);
    auto expect_sums = [&](const std::vector<float>& got, const char* how) {
      for (int64_t i = 0; i < M * N; i++) {
        double w = sv[i];
        EXPECT_NEAR(got[i], want[i] * w, (1e-5 * mag[i] + 1e-6) * std::abs(w) + 1e-6)
            << how << " " << M << " " << i / N << " " << i % N;
      }
    };
    // rendered without tiles (as where a kernel's blocks would need two tile configurations), pairs read in place
    // widen, their pair a loop: on any host
    if (in_place) {
      Kernel plain = s.kernels.back();
      plain.tiles = false;
      const std::string plain_src = render_c(plain, plain.name);
      EXPECT_EQ(plain_src.find("_tile_"), std::string::npos) << plain_src;
      launch_on_cpu(plain, plain_src, plain.name);
      expect_sums(values(plain.buffers[0]), "widened");
    }
    if (!cpu_device().target().amx_bf16) continue; // tiles run only on an AMX host
    expect_sums(values(realize_value(value)), "tiles");
  }
}

// x @ w.t() of 16 rows (a linear layer of a batch of 16): its lanes take x's rows, one vector, whose loop is the
// output's outermost. One iteration would leave the threads nothing to share: w's rows' loop takes the outermost
// place; so it does for 48 rows, 3 vectors, which two threads would share as 2 and 1. In bfloat16 on an AMX host the
// lanes' panel of x, one vector wide, pairs (its rows are not a multiple of the panel's 32), and w's rows accumulate
// in tiles. The sums match plain loops over the operands' values.
TEST(Kernel, ALinearLayerOfAFewRowsSharesWsRowsAmongThreads) {
  const std::tuple<int64_t, int64_t, int64_t, DType> cases[] = {{16, 64, 512, DType::Float32},
                                                                {16, 64, 512, DType::BFloat16},
                                                                {48, 1024, 1024, DType::Float32},
                                                                {48, 1024, 1024, DType::BFloat16}};
  for (const auto& [M, K, N, dt] : cases) {
    auto xh = realize_value(cast(buffer(filled(random_vec(M * K, 34))), dt));
    auto wh = realize_value(cast(buffer(filled(random_vec(N * K, 35))), dt));
    auto x = reshape(cast(buffer(xh), DType::Float32), {M, K});
    auto w = reshape(cast(buffer(wh), DType::Float32), {N, K});
    auto value = matmul_of(x, permute(w, {1, 0}));
    Target target = cpu_device().target();
    target.amx_bf16 = true;
    target.threads = 2;
    Schedule s = schedule_value(value, target,
                                [](DType dt, int64_t n) { return std::make_shared<Buffer>(cpu_device(), dt, n); });
    const Kernel& product = s.kernels.back();
    EXPECT_GE(product.launch.global[0], 2) << product.name;
    EXPECT_EQ(product.launch.global[0] % target.threads, 0) << product.name;
    const std::string src = render_c(product, product.name);
    EXPECT_EQ(src.find("_tile_dpbf16ps(") != std::string::npos, dt == DType::BFloat16) << src;
    if (dt == DType::BFloat16 && !cpu_device().target().amx_bf16) continue; // tiles run only on an AMX host
    for (const Kernel& k : s.kernels)
      launch_on_cpu(k, render_c(k, k.name), k.name);
    auto xv = values(realize_value(x));
    auto wv = values(realize_value(w));
    std::vector<float> wt(K * N);
    for (int64_t n = 0; n < N; n++)
      for (int64_t q = 0; q < K; q++)
        wt[q * N + n] = wv[n * K + q];
    expect_matmul(values(product.buffers[0]), xv, wt, M, K, N);
  }
}

// A bfloat16 product whose lanes are stored apart (a convolution's NCHW output, the lanes its channels):
// out[n, c, p] = sum_k x[n, p, k] w[c, k], rows the batch. With a short reduction (64 products an output)
// the stores cost more than the sums, and the tile block is 16 rows by one vector, so that its 256 cache
// lines of output stay in L1 for the next position; a long one (2048) keeps two vectors. The sums match
// plain loops over the operands' values.
TEST(Kernel, AmxTilesWithLanesStoredApartTakeOneVectorForAShortReduction) {
  if (!cpu_device().target().amx_bf16)
    GTEST_SKIP() << "this CPU has no AMX-BF16 (or Linux refused its tile state, or TINY_AMX=0)";
  const int64_t N = 64, P = 14, C = 32;
  for (int64_t K : {64, 2048}) {
    auto xh = realize_value(cast(buffer(filled(random_vec(N * P * K, 24))), DType::BFloat16));
    auto wh = realize_value(cast(buffer(filled(random_vec(C * K, 25))), DType::BFloat16));
    auto xv = values(realize_value(cast(buffer(xh), DType::Float32)));
    auto wv = values(realize_value(cast(buffer(wh), DType::Float32)));
    auto x = expand(reshape(cast(buffer(xh), DType::Float32), {N, 1, P, K}), {N, C, P, K});
    auto w = expand(reshape(cast(buffer(wh), DType::Float32), {1, C, 1, K}), {N, C, P, K});
    auto value = reshape(reduce(alu(Ops::MUL, x, w), Ops::ADD, {3}), {N, C, P});
    Schedule s = schedule_value(value, cpu_device().target(),
                                [](DType dt, int64_t n) { return std::make_shared<Buffer>(cpu_device(), dt, n); });
    std::string src;
    for (const Kernel& k : s.kernels)
      if (k.tiles) src = render_c(k, k.name);
    EXPECT_NE(src.find("_tile_dpbf16ps(0"), std::string::npos) << K << "\n" << src;
    EXPECT_EQ(src.find("_tile_dpbf16ps(1") != std::string::npos, K == 2048) << K << "\n" << src;
    std::vector<float> wt(K * C);
    for (int64_t c = 0; c < C; c++)
      for (int64_t q = 0; q < K; q++)
        wt[q * C + c] = wv[c * K + q];
    auto got = values(realize_value(value));
    auto [want, mag] = plain_matmul(xv, wt, N * P, K, C);
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < C; c++)
        for (int64_t p = 0; p < P; p++) {
          int64_t at = (n * P + p) * C + c;
          EXPECT_NEAR(got[(n * C + c) * P + p], want[at], 1e-5 * mag[at] + 1e-6) << K << " " << n << " " << c;
        }
  }
}

// A register block of x @ w keeps its accumulators in vector registers with room for the operands: on
// AVX-512 (32 registers of 16 floats) up to 16 vector accumulators; on AVX2 (16 registers of 8 floats, a
// 16-lane vector takes two) 4, since 8 (16 registers) spilled and ran at half the speed.
TEST(Kernel, AMatmulsRegisterBlockFitsTheVectorRegisters) {
  const int64_t M = 256, K = 64, N = 256;
  auto x = reshape(buffer(filled(random_vec(M * K, 17))), {M, K});
  auto w = reshape(buffer(filled(random_vec(K * N, 18))), {K, N});
  auto value = matmul_of(x, w);
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, M * N);
  Kernel k = lower_kernel(out, View::contiguous(value->shape), value);
  std::string src = render_c(k, k.name);
  int64_t accumulators = 0;
  for (size_t at = src.find("tv_float acc"); at != std::string::npos; at = src.find("tv_float acc", at + 1))
    accumulators++;
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f");
#else
  const bool avx512 = true;
#endif
  EXPECT_GE(accumulators, 4);
  EXPECT_LE(accumulators, avx512 ? 16 : 4);
}

// x @ w of 32 rows (a small batch): the rows' loop is too short to share among threads, so the lanes' loop (1024
// columns) takes the outermost place and the rows unroll into the register block, each row of w read once a block
// of rows; with one row a block, w was read once for every row of x (32 x 1024 by 1024 x 1024, one thread:
// 5.4 -> 0.6 ms).
TEST(Kernel, AMatmulOfFewRowsUnrollsThemWithTheLanesOutermost) {
  RandomMatmul mm = RandomMatmul::make(32, 40, 1024, 41);
  const Kernel& k = mm.kernel;
  EXPECT_GE(k.lane_range, 0) << k.name;
  // a store for each vector of the block: 4 rows or more by two vectors (by one on AVX2)
  EXPECT_GE(k.ast->src.size(), wide_vectors() ? 8u : 4u) << k.name;
  mm.expect_values();
}

TEST(Kernel, AReshapeOfAReductionIsOneViewOfIt) {
  auto a = reshape(buffer(filled(random_vec(64, 14))), {1, 8, 8, 1});
  auto r = reduce(alu(Ops::MUL, a, a), Ops::ADD, {3});
  auto flat = reshape(reshape(r, {8, 8}), {64});
  ASSERT_EQ(flat->op, Ops::VIEW);
  EXPECT_EQ(flat->src[0], r);
  EXPECT_EQ(flat->st().views.size(), 1u);
}

// A reduction over a gather reads its 1-D data through a view of another rank than the reduction's
// input: the layout choice must not index that view's strides by the reduction's axes (ASan found a read
// past them in `make sanitize`).
TEST(Kernel, ASumOverAGatherFromAFlippedVectorMatchesPlainLoops) {
  const int64_t A = 4, B = 8, C = 16, N = 7;
  auto dv = random_vec(N, 5);
  std::vector<int64_t> iv(A * B * C);
  for (size_t i = 0; i < iv.size(); i++)
    iv[i] = static_cast<int64_t>((i * 5 + 3) % N);
  auto data = flip(buffer(filled(dv)), {true});
  auto idx = reshape(buffer(indices(iv)), {A, B, C});
  auto got = values(realize_value(reduce(gather(data, idx), Ops::ADD, {2})));
  ASSERT_EQ(got.size(), static_cast<size_t>(A * B));
  for (int64_t r = 0; r < A * B; r++) {
    float want = 0;
    for (int64_t c = 0; c < C; c++)
      want += dv[N - 1 - iv[r * C + c]];
    EXPECT_NEAR(got[r], want, 1e-5f) << "row " << r;
  }
}

// A schedule's kernels compile at once (one compiler per core) before the first runs: program() then
// loads each without compiling it again, and a source compiled twice is compiled once.
TEST(Kernel, PrecompiledSourcesLoadWithoutCompilingAgain) {
  auto a = reshape(buffer(filled(random_vec(64, 5))), {64});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, 64);
  // constants no other test uses: sources not in the disk cache yet (unless an earlier run left them)
  double salt = static_cast<double>(std::random_device{}() % 1000000) + 0.5;
  std::vector<std::pair<std::string, std::string>> sources;
  for (int i = 0; i < 3; i++) {
    auto value = alu(Ops::ADD, a, expand(reshape(const_float(DType::Float32, salt + i), {1}), {64}));
    Kernel k = lower_kernel(out, View::contiguous({64}), value);
    sources.emplace_back(render_c(k, "k"), "k");
  }
  sources.push_back(sources[0]);
  int64_t before = stats().compiles;
  cpu_device().precompile(sources);
  EXPECT_EQ(stats().compiles - before, 3);
  for (const auto& [src, fn] : sources)
    EXPECT_NE(cpu_device().program(src, fn), nullptr);
  EXPECT_EQ(stats().compiles - before, 3);
}

// A schedule's new kernels compile as one library per core: kernels of one name stay apart (each
// runs its own code), each finds its own zero-division flag, and a second process loads them from the
// library through their entries without compiling.
TEST(Kernel, KernelsCompiledAsOneLibraryRunTheirOwnCode) {
  auto a = reshape(buffer(filled(random_vec(64, 6))), {64});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, 64);
  double salt = static_cast<double>(std::random_device{}() % 1000000) + 0.25; // sources new to the cache
  std::vector<std::pair<std::string, std::string>> sources;
  std::vector<Kernel> kernels;
  for (int i = 0; i < 5; i++) {
    auto value = alu(Ops::ADD, a, expand(reshape(const_float(DType::Float32, salt + i), {1}), {64}));
    kernels.push_back(lower_kernel(out, View::contiguous({64}), value));
    sources.emplace_back(render_c(kernels.back(), "k"), "k");
  }
  // an integer division by a zero read from a buffer, named "k" too
  auto num = std::make_shared<Buffer>(cpu_device(), DType::Int32, 8);
  auto den = std::make_shared<Buffer>(cpu_device(), DType::Int32, 8);
  auto quot = std::make_shared<Buffer>(cpu_device(), DType::Int32, 8);
  for (int i = 0; i < 8; i++) {
    static_cast<int32_t*>(num->ptr())[i] = 7 * i;
    static_cast<int32_t*>(den->ptr())[i] = i % 4;
  }
  auto offset = expand(reshape(const_int(DType::Int32, static_cast<int64_t>(salt)), {1}), {8});
  kernels.push_back(lower_kernel(
      quot, View::contiguous({8}),
      alu(Ops::ADD, checked_division(Ops::IDIV, reshape(buffer(num), {8}), reshape(buffer(den), {8})), offset)));
  sources.emplace_back(render_c(kernels.back(), "k"), "k");

  int64_t before = stats().compiles;
  cpu_device().precompile(sources);
  EXPECT_EQ(stats().compiles - before, 6);
  for (size_t i = 0; i < 5; i++) {
    launch_on_cpu(kernels[i], sources[i].first, "k");
    std::vector<float> in = values(std::static_pointer_cast<Buffer>(kernels[i].buffers[1])), got = values(out);
    for (size_t j = 0; j < 64; j++)
      ASSERT_FLOAT_EQ(got[j], in[j] + static_cast<float>(salt + static_cast<double>(i))) << "kernel " << i;
  }
  launch_on_cpu(kernels[5], sources[5].first, "k");
  EXPECT_THROW(raise_kernel_errors(), std::runtime_error);
  EXPECT_EQ(static_cast<int32_t*>(quot->ptr())[1], 7 + static_cast<int32_t>(salt)); // 7 / 1 + salt
  EXPECT_EQ(stats().compiles - before, 6);
}

// Two layout copies compiled as one library each keep their own tiny_copy.
TEST(Kernel, LayoutCopiesCompiledAsOneLibraryRunTheirOwnCode) {
  std::vector<std::pair<std::string, std::string>> sources;
  std::vector<Kernel> kernels;
  std::vector<std::shared_ptr<Buffer>> ins;
  const int64_t salt = static_cast<int64_t>(std::random_device{}() % 1000) + 3; // sources new to the cache
  for (int64_t i = 0; i < 2; i++) {
    const int64_t R = salt + i, C = 5;
    auto b = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, R * C);
    for (int64_t e = 0; e < R * C; e++)
      static_cast<uint16_t*>(b->ptr())[e] = static_cast<uint16_t>(1000 * i + e);
    ins.push_back(b);
    auto t = view(reshape(buffer(b), {R, C}), ShapeTracker::from_shape({R, C}).permute({1, 0}));
    auto out = std::make_shared<Buffer>(cpu_device(), DType::BFloat16, R * C);
    kernels.push_back(lower_kernel(out, View::contiguous({C, R}), t));
    sources.emplace_back(render_c(kernels.back(), "k"), "k");
  }
  cpu_device().precompile(sources);
  for (size_t i = 0; i < 2; i++) {
    launch_on_cpu(kernels[i], sources[i].first, "k");
    const int64_t R = salt + static_cast<int64_t>(i), C = 5;
    auto* g = static_cast<uint16_t*>(std::static_pointer_cast<Buffer>(kernels[i].buffers[0])->ptr());
    for (int64_t c = 0; c < C; c++)
      for (int64_t r = 0; r < R; r++)
        ASSERT_EQ(g[c * R + r], static_cast<uint16_t>(1000 * static_cast<int64_t>(i) + r * C + c)) << "kernel " << i;
  }
}

// A per-channel sum of an (N, C, H, W) tensor walks H and W as one contiguous loop whose steps are
// vector lanes, though the batch axis it also reduces strides by C * H * W (it ran one float at a time,
// 2.3x slower, in batch norm's statistics and gradients).
TEST(Kernel, APerChannelSumStepsItsContiguousInnerLoopByVectorLanes) {
  const int64_t N = 4, C = 3, H = 8, W = 12;
  auto xv = random_vec(N * C * H * W, 21);
  auto x = reshape(buffer(filled(xv)), {N, C, H, W});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, C);
  UOpPtr sum = reshape(reduce(x, Ops::ADD, {0, 2, 3}), {C});
  Kernel k = lower_kernel(out, View::contiguous({C}), sum);
  EXPECT_EQ(k.lanes, 16);
  EXPECT_NE(render_c(k, k.name).find("tv_float acc"), std::string::npos);
  auto got = values(realize_value(sum));
  for (int64_t c = 0; c < C; c++) {
    double want = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < H * W; i++)
        want += xv[(n * C + c) * H * W + i];
    EXPECT_NEAR(got[c], want, 1e-4) << c;
  }
}

namespace {
template <class T> std::shared_ptr<Buffer> filled_with(DType dt, const std::vector<T>& v) {
  auto b = std::make_shared<Buffer>(cpu_device(), dt, static_cast<int64_t>(v.size()));
  std::copy(v.begin(), v.end(), static_cast<T*>(b->ptr()));
  return b;
}
template <class T> std::vector<T> values_of(const BufferRef& b) {
  auto* p = static_cast<T*>(std::static_pointer_cast<Buffer>(b)->ptr());
  return std::vector<T>(p, p + b->numel);
}
UOpPtr full_like_shape(const UOpPtr& c, int64_t n) { return expand(reshape(c, {1}), {n}); }
} // namespace

// uint64 values above INT64_MAX (held as negative int64_t constants) compare, divide, shift, take their
// minimum and convert to double as unsigned values, in kernels with lanes and without.
TEST(Kernel, Uint64ValuesAboveTheSignedRangeComputeAsUnsigned) {
  for (int64_t n : {int64_t{5}, int64_t{64 * 5}}) {
    std::vector<uint64_t> xv;
    for (int64_t i = 0; i < n / 5; i++)
      for (uint64_t v : {uint64_t{0}, uint64_t{7}, (uint64_t{1} << 63) + 5, UINT64_MAX, uint64_t{1} << 62})
        xv.push_back(v + static_cast<uint64_t>(i));
    auto x = buffer(filled_with(DType::UInt64, xv));
    auto big = full_like_shape(const_int(DType::UInt64, static_cast<int64_t>((uint64_t{1} << 63) + 1)), n);
    auto three = full_like_shape(const_int(DType::UInt64, 3), n);
    auto one = full_like_shape(const_int(DType::UInt64, 1), n);
    auto below = values_of<uint8_t>(realize_value(alu(Ops::CMPLT, x, big)));
    auto quotient = values_of<uint64_t>(realize_value(checked_division(Ops::IDIV, x, three)));
    auto remainder = values_of<uint64_t>(realize_value(checked_division(Ops::MOD, x, three)));
    auto shifted = values_of<uint64_t>(realize_value(alu(Ops::SHR, x, one)));
    auto larger = values_of<uint64_t>(realize_value(alu(Ops::MAX, x, big)));
    auto as_double = values_of<double>(realize_value(cast(x, DType::Float64)));
    for (int64_t i = 0; i < n; i++) {
      uint64_t v = xv[i];
      EXPECT_EQ(below[i], v < (uint64_t{1} << 63) + 1) << v;
      EXPECT_EQ(quotient[i], v / 3) << v;
      EXPECT_EQ(remainder[i], v % 3) << v;
      EXPECT_EQ(shifted[i], v >> 1) << v;
      EXPECT_EQ(larger[i], std::max(v, (uint64_t{1} << 63) + 1)) << v;
      EXPECT_EQ(as_double[i], static_cast<double>(v)) << v;
    }
    // the smallest of values that are all above INT64_MAX: the reduction starts from the largest uint64
    auto top = values_of<uint64_t>(realize_value(reduce(alu(Ops::OR, x, big), Ops::MIN, {0})));
    EXPECT_EQ(top[0], (uint64_t{1} << 63) + 1);
  }
}

TEST(Kernel, Uint32DivisionByTheLargestValueIsNotANegation) {
  auto x = buffer(filled_with<uint32_t>(DType::UInt32, {5, UINT32_MAX, 0, UINT32_MAX - 1}));
  auto d = full_like_shape(const_int(DType::UInt32, UINT32_MAX), 4);
  EXPECT_EQ(values_of<uint32_t>(realize_value(checked_division(Ops::IDIV, x, d))), std::vector<uint32_t>({0, 1, 0, 0}));
  EXPECT_EQ(values_of<uint32_t>(realize_value(alu(Ops::MOD, x, d))), std::vector<uint32_t>({5, 0, 0, UINT32_MAX - 1}));
}

TEST(Kernel, AUint16ProductWrapsInItsOwnWidth) {
  auto x = buffer(filled_with<uint16_t>(DType::UInt16, {65535, 300, 2}));
  EXPECT_EQ(values_of<uint16_t>(realize_value(alu(Ops::MUL, x, x))),
            std::vector<uint16_t>({1, static_cast<uint16_t>(90000 % 65536), 4}));
}

// torch's CPU (x86, its vectorized loops) converts these as below: out of range, C++ leaves the value undefined.
TEST(Kernel, FloatsConvertToUint32AndUint64AsTorchsCpuDoes) {
  std::vector<float> in = {-1.0f, 3.7f, 3e9f, 5e9f, 1e19f, 2e19f, NAN, INFINITY, -INFINITY, -3e9f};
  auto x = buffer(filled(in));
  EXPECT_EQ(values_of<uint32_t>(realize_value(cast(x, DType::UInt32))),
            std::vector<uint32_t>({4294967295u, 3, 3000000000u, 0, 0, 0, 2147483648u, 0, 2147483648u, 2147483648u}));
  EXPECT_EQ(values_of<uint64_t>(realize_value(cast(x, DType::UInt64))),
            std::vector<uint64_t>({UINT64_MAX, 3, 3000000000u, 5000000000u, 9999999980506447872u, 0, uint64_t{1} << 63,
                                   0, uint64_t{1} << 63, UINT64_MAX - 2999999999u}));
}

// Kernels whose lanes are uint64 declare their vector type in a library with a kernel that does not (the C
// renderer declares the unsigned vector types only where they are used; the library renames each kernel's).
TEST(Kernel, KernelsWithUint64LanesRunInALibraryWithOtherKernels) {
  const int64_t n = 320;
  std::vector<uint64_t> xv(n);
  for (int64_t i = 0; i < n; i++)
    xv[i] = (uint64_t{1} << 63) + static_cast<uint64_t>((i * 7919) % 1000) + 3;
  int64_t salt = static_cast<int64_t>(std::random_device{}() % 1000000); // sources new to the cache
  auto x = alu(Ops::ADD, buffer(filled_with(DType::UInt64, xv)), full_like_shape(const_int(DType::UInt64, salt), n));
  auto smallest = std::make_shared<Buffer>(cpu_device(), DType::UInt64, 1);
  auto largest = std::make_shared<Buffer>(cpu_device(), DType::UInt64, 1);
  auto shifted = std::make_shared<Buffer>(cpu_device(), DType::Float32, 64);
  auto floats = alu(Ops::ADD, buffer(filled(random_vec(64, 12))),
                    full_like_shape(const_float(DType::Float32, static_cast<double>(salt) + 0.5), 64));
  std::vector<Kernel> kernels{lower_kernel(smallest, View::contiguous({1}), reduce(x, Ops::MIN, {0})),
                              lower_kernel(largest, View::contiguous({1}), reduce(x, Ops::MAX, {0})),
                              lower_kernel(shifted, View::contiguous({64}), floats)};
  std::vector<std::pair<std::string, std::string>> sources;
  for (const Kernel& k : kernels)
    sources.emplace_back(render_c(k, "k"), "k");
  ASSERT_NE(sources[0].first.find("tv_uint64_t"), std::string::npos) << sources[0].first;
  ASSERT_EQ(sources[2].first.find("tv_uint64_t"), std::string::npos) << sources[2].first;
  int64_t before = stats().compiles;
  cpu_device().precompile(sources);
  EXPECT_EQ(stats().compiles - before, 3);
  for (size_t i = 0; i < 2; i++)
    launch_on_cpu(kernels[i], sources[i].first, "k");
  uint64_t offset = static_cast<uint64_t>(salt);
  EXPECT_EQ(*static_cast<uint64_t*>(smallest->ptr()), *std::min_element(xv.begin(), xv.end()) + offset);
  EXPECT_EQ(*static_cast<uint64_t*>(largest->ptr()), *std::max_element(xv.begin(), xv.end()) + offset);
  EXPECT_EQ(stats().compiles - before, 3);
}

// The CPU device runs the newest clang-N on PATH (clang-19 compiles the demo's first step 2-3x faster than
// Debian 12's clang 14), else plain clang; TINY_CC overrides both.
TEST(Kernel, TheCpuCompilerIsTheNewestClangOnPath) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("tiny_cc_" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto tool = [&](const char* name) {
    std::ofstream(dir / name) << "#!/bin/sh\n";
    fs::permissions(dir / name, fs::perms::owner_all);
  };
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  const char* tiny_cc = std::getenv("TINY_CC");
  std::string saved_cc = tiny_cc ? tiny_cc : "";
  unsetenv("TINY_CC");
  setenv("PATH", dir.c_str(), 1);
  tool("clang");
  EXPECT_EQ(cpu_c_compiler(), "clang");
  tool("clang-15");
  tool("clang-21");
  tool("clang-9");
  EXPECT_EQ(cpu_c_compiler(), "clang-21");
  std::ofstream(dir / "clang-22") << "not executable";
  fs::create_directories(dir / "clang-23"); // a directory, searchable but not a program
  EXPECT_EQ(cpu_c_compiler(), "clang-21");
  setenv("TINY_CC", "gcc", 1);
  EXPECT_EQ(cpu_c_compiler(), "gcc");
  setenv("PATH", path.c_str(), 1);
  if (tiny_cc)
    setenv("TINY_CC", saved_cc.c_str(), 1);
  else
    unsetenv("TINY_CC");
  fs::remove_all(dir);
}

// A matmul's epilogue with a prelude polynomial (GELU's erf in its gradient's kernel) computes it over the lanes in
// a loop clang vectorizes, not one call a lane, and the values are the scalar function's.
TEST(Kernel, APolynomialInAMatmulsEpilogueRunsOverItsLanesInOneLoop) {
  const int64_t M = 32, K = 64, N = 64;
  auto xv = random_vec(M * K, 31), wv = random_vec(K * N, 32);
  UOpPtr mm = matmul_of(reshape(buffer(filled(xv)), {M, K}), reshape(buffer(filled(wv)), {K, N}));
  UOpPtr v = alu(Ops::ERF, alu(Ops::MUL, mm, expand(reshape(const_float(DType::Float32, 0.05), {1, 1, 1}), mm->shape)));
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, M * N);
  Kernel k = lower_kernel(out, View::contiguous(mm->shape), v);
  ASSERT_GE(k.lane_range, 0);
  std::string src = render_c(k, "k");
  EXPECT_NE(src.find("o_[l_] = tiny_erff(a0_[l_])"), std::string::npos) << src.substr(src.find("void k("));
  EXPECT_EQ(src.find("tiny_erff(v"), std::string::npos);
  auto got = values(realize_value(v));
  auto [want, mag] = plain_matmul(xv, wv, M, K, N);
  for (int64_t i = 0; i < M * N; i++)
    EXPECT_NEAR(got[i], std::erf(0.05 * want[i]), 1e-6 + 1e-6 * 0.05 * mag[i]) << i;
}

// A reduction whose last two output loops are 3 long (a first convolution's weight gradient: 24 x 3 x 3 x 3 taps,
// (c, kh, kw) not merged)
// unrolls a block over the inner loops that divide (the 24 output channels by 8, a tap loop by 3): independent sums,
// not one chain of dependent adds an output.
TEST(Kernel, AReductionOverShortInnerLoopsUnrollsABlockOfOtherLoops) {
  const int64_t P = 2, O = 24, T = 3, R = 40;
  auto av = random_vec(P * T * T * T * R, 33), bv = random_vec(P * O * R, 34);
  Shape full{P, O, T, T, T, R};
  // the taps stored (kh, c, kw): their loops do not merge (a strided window's do not either)
  UOpPtr taps = permute(reshape(buffer(filled(av)), {P, T, T, T, R}), {0, 2, 1, 3, 4});
  UOpPtr a = expand(reshape(taps, {P, 1, T, T, T, R}), full);
  UOpPtr b = expand(reshape(buffer(filled(bv)), {P, O, 1, 1, 1, R}), full);
  UOpPtr v = reduce(alu(Ops::MUL, a, b), Ops::ADD, {5});
  auto out = std::make_shared<Buffer>(cpu_device(), DType::Float32, P * O * T * T * T);
  Kernel k = lower_kernel(out, View::contiguous(v->shape), v);
  EXPECT_GE(k.ast->src.size(), 8u); // stores: a block of outputs
  auto got = values(realize_value(v));
  for (int64_t p = 0; p < P; p++)
    for (int64_t o = 0; o < O; o++)
      for (int64_t t = 0; t < T * T * T; t++) {
        double want = 0;
        for (int64_t r = 0; r < R; r++)
          want += static_cast<double>(av[(((p * T + t / 3 % 3) * T + t / 9) * T + t % 3) * R + r]) *
                  bv[(p * O + o) * R + r];
        EXPECT_NEAR(got[(p * O + o) * T * T * T + t], want, 1e-4) << p << " " << o << " " << t;
      }
}

// A matmul whose rows divide by 5 and by neither 8 nor 7 (a ViT's 65 tokens) takes blocks of 5 rows by two vectors:
// ten products a step of the reduction, not one row's two (a ViT step's kernels, one thread: 202 -> 168 ms).
TEST(Kernel, AMatmulOf65RowsComputesBlocksOfFiveRows) {
  if (!wide_vectors()) GTEST_SKIP() << "this CPU has no AVX-512 (one vector of lanes, up to 4 rows, there)";
  RandomMatmul m = RandomMatmul::make(65, 40, 64, 31);
  int64_t reduces = 0;
  for (const UOpPtr& n : toposort(m.kernel.ast))
    reduces += n->op == Ops::REDUCE;
  EXPECT_EQ(reduces, 10) << m.kernel.name;
  m.expect_values();
}

// x (N, C, H, W) correlated with filters w (K, C, 3, 3) padded by p a side, by Winograd's kernel (compiler/winograd.h),
// against the direct sum in double: blocks of 32 and 16 outputs, rows of several tile blocks (the last with a tile of
// zeros), odd sizes (a last tile of one output), paddings 0 to 2.
TEST(Kernel, AWinogradConvolutionMatchesTheDirectSum) {
  if (!cpu_device().target().winograd) GTEST_SKIP() << "this CPU has no AVX-512F (or TINY_WINOGRAD=0): no Winograd";
  struct Case {
    int64_t N, C, K, H, W, p;
  };
  for (const Case& c :
       {Case{2, 32, 32, 12, 12, 1}, Case{1, 16, 48, 7, 33, 1}, Case{2, 32, 16, 5, 6, 0}, Case{1, 16, 32, 4, 3, 2}}) {
    const auto xv = random_vec(c.N * c.C * c.H * c.W, 5), wv = random_vec(c.K * c.C * 9, 6);
    const UOpPtr x = reshape(buffer(filled(xv)), {c.N, c.C, c.H, c.W});
    const UOpPtr w = reshape(buffer(filled(wv)), {c.K, c.C, 3, 3});
    const UOpPtr y = winograd_correlation(x, w, {c.p, c.p});
    const int64_t Ho = c.H + 2 * c.p - 2, Wo = c.W + 2 * c.p - 2;
    ASSERT_EQ(y->shape, (Shape{c.N, c.K, Ho, Wo}));
    const auto got = values(realize_value(y));
    for (int64_t n = 0; n < c.N; n++)
      for (int64_t k = 0; k < c.K; k++)
        for (int64_t oy = 0; oy < Ho; oy++)
          for (int64_t ox = 0; ox < Wo; ox++) {
            double sum = 0, mag = 0;
            for (int64_t ch = 0; ch < c.C; ch++)
              for (int64_t i = 0; i < 3; i++)
                for (int64_t j = 0; j < 3; j++) {
                  const int64_t iy = oy + i - c.p, ix = ox + j - c.p;
                  if (iy < 0 || iy >= c.H || ix < 0 || ix >= c.W) continue;
                  const double t = static_cast<double>(xv[((n * c.C + ch) * c.H + iy) * c.W + ix]) *
                                   wv[((k * c.C + ch) * 3 + i) * 3 + j];
                  sum += t;
                  mag += std::abs(t);
                }
            ASSERT_NEAR(got[((n * c.K + k) * Ho + oy) * Wo + ox], sum, 2e-6 * mag + 1e-6)
                << "N " << c.N << " C " << c.C << " K " << c.K << " " << c.H << "x" << c.W << " padding " << c.p
                << " at " << n << ", " << k << ", " << oy << ", " << ox;
          }
  }
}

// The filter gradient of that correlation by F(3 x 3, 2 x 2) (winograd_filter_gradient): dw[k, c, i, j] = the sum over
// images and output positions of go[n, k, oy, ox] x[n, c, oy + i - p, ox + j - p], against the direct sum in double:
// chunks of one image, of several and of unequal counts, odd sizes (a last tile half outside the output), paddings 0
// to 2, blocks of outputs with a tail.
TEST(Kernel, AWinogradFilterGradientMatchesTheDirectSum) {
  if (!cpu_device().target().winograd) GTEST_SKIP() << "this CPU has no AVX-512F (or TINY_WINOGRAD=0): no Winograd";
  struct Case {
    int64_t N, C, K, H, W, p, chunks;
  };
  for (const Case& c : {Case{3, 32, 32, 12, 12, 1, 2}, Case{2, 16, 48, 7, 33, 1, 2}, Case{2, 32, 16, 5, 6, 0, 1},
                        Case{3, 16, 64, 4, 3, 2, 3}}) {
    const int64_t Ho = c.H + 2 * c.p - 2, Wo = c.W + 2 * c.p - 2;
    const auto xv = random_vec(c.N * c.C * c.H * c.W, 9), gv = random_vec(c.N * c.K * Ho * Wo, 10);
    const UOpPtr x = reshape(buffer(filled(xv)), {c.N, c.C, c.H, c.W});
    const UOpPtr go = reshape(buffer(filled(gv)), {c.N, c.K, Ho, Wo});
    const UOpPtr dw = winograd_filter_gradient(x, go, {c.p, c.p}, c.chunks);
    ASSERT_EQ(dw->shape, (Shape{c.K, c.C, 3, 3}));
    const auto got = values(realize_value(dw));
    for (int64_t k = 0; k < c.K; k++)
      for (int64_t ch = 0; ch < c.C; ch++)
        for (int64_t i = 0; i < 3; i++)
          for (int64_t j = 0; j < 3; j++) {
            double sum = 0, mag = 0;
            for (int64_t n = 0; n < c.N; n++)
              for (int64_t oy = 0; oy < Ho; oy++)
                for (int64_t ox = 0; ox < Wo; ox++) {
                  const int64_t iy = oy + i - c.p, ix = ox + j - c.p;
                  if (iy < 0 || iy >= c.H || ix < 0 || ix >= c.W) continue;
                  const double t = static_cast<double>(gv[((n * c.K + k) * Ho + oy) * Wo + ox]) *
                                   xv[((n * c.C + ch) * c.H + iy) * c.W + ix];
                  sum += t;
                  mag += std::abs(t);
                }
            ASSERT_NEAR(got[((k * c.C + ch) * 3 + i) * 3 + j], sum, 4e-6 * mag + 1e-6)
                << "N " << c.N << " C " << c.C << " K " << c.K << " " << c.H << "x" << c.W << " padding " << c.p
                << " at " << k << ", " << ch << ", " << i << ", " << j;
          }
  }
}

// A WINOGRAD node is realized by its own kernel, reading its input's padded channels-last copy and the filters'
// transform, before the kernels that read it; a GPU target has no such kernel.
TEST(Kernel, AWinogradNodeIsAKernelOfItsOwnBeforeItsReaders) {
  const UOpPtr x = reshape(buffer(filled(random_vec(2 * 16 * 8 * 8, 7))), {2, 16, 8, 8});
  const UOpPtr w = reshape(buffer(filled(random_vec(16 * 16 * 9, 8))), {16, 16, 3, 3});
  const UOpPtr y = alu(Ops::MAX, winograd_correlation(x, w, {1, 1}),
                       expand(reshape(const_float(DType::Float32, 0), {1, 1, 1, 1}), {2, 16, 8, 8}));
  const Schedule s = schedule({y}, cpu_device().target(),
                              [](DType dt, int64_t n) { return std::make_shared<Buffer>(cpu_device(), dt, n); });
  std::vector<std::string> names;
  for (const Kernel& k : s.kernels)
    names.push_back(k.name);
  ASSERT_GE(s.kernels.size(), 3u) << ::testing::PrintToString(names);
  const Kernel& wk = s.kernels[s.kernels.size() - 2];
  ASSERT_TRUE(wk.winograd) << ::testing::PrintToString(names);
  EXPECT_EQ(wk.buffers[0], s.kernels.back().buffers[1]); // the ReLU reads the Winograd kernel's output
  for (size_t i = 1; i < wk.buffers.size(); i++)         // written by the kernels before it
    EXPECT_TRUE(std::ranges::any_of(s.kernels, [&](const Kernel& k) { return k.buffers[0] == wk.buffers[i]; }));
  Target gpu;
  gpu.dialect = Dialect::CUDA;
  EXPECT_THROW(render_gpu(wk, "k", gpu), std::logic_error);
}
