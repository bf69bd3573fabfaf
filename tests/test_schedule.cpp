// The scheduler (compiler/schedule.h) without running anything: which kernels a graph becomes, and the
// split of long reductions into few outputs, whose results are then checked on the CPU device.
#include <gtest/gtest.h>

#include <numeric>

#include "aten_ops/sliding_window.h"
#include "compiler/lower.h"
#include "compiler/schedule.h"
#include "runtime/device.h"
#include "runtime/realize.h"

using namespace tiny;
using namespace tiny::runtime;

namespace {

// Buffers that only record their dtype and size: scheduling never touches memory.
struct Placeholder : BufferBase {
  using BufferBase::BufferBase;
};

BufferRef placeholder(DType dt, int64_t n) { return std::make_shared<Placeholder>(dt, n); }

Schedule schedule_of(const UOpPtr& value, const Target& target = Target{}) {
  return schedule_value(value, target, placeholder);
}

UOpPtr input(const Shape& shape) { return reshape(buffer(placeholder(DType::Float32, prod(shape))), shape); }

// Whether a layout copy's kernel writes its output c elements at a time, adjacent: its innermost loop walks
// them, or (a transposed copy on AVX-512, see lower_transposed_copy) its lanes store c elements apart, each
// lane 8 adjacent ones a block, the innermost loop the blocks of 8.
bool writes_runs_of(const Kernel& k, int64_t c) {
  if (k.lane_range < 0) return k.loops.back() == c;
  for (const UOpPtr& st : k.ast->src)
    if (auto split = lane_split(st->src[1], lane_node(k)); !split || split->second != c) return false;
  return k.loops.back() * 8 == c;
}

std::shared_ptr<Buffer> iota_buffer(int64_t n) {
  auto b = std::make_shared<Buffer>(cpu_device(), DType::Int64, n);
  std::iota(static_cast<int64_t*>(b->ptr()), static_cast<int64_t*>(b->ptr()) + n, int64_t{0});
  return b;
}

} // namespace

TEST(Schedule, AFullReductionOfManyElementsRunsAsPartialResultsThenTheirReduction) {
  Schedule s = schedule_of(reduce(input({1 << 20}), Ops::ADD, {0}));
  ASSERT_EQ(s.kernels.size(), 2u);
  ASSERT_EQ(s.made.size(), 2u);
  EXPECT_EQ(s.results[0]->buffer(), s.made[0]);
  EXPECT_EQ(s.made[1]->numel, 256); // partial results: 256 runs of 4096 elements, computed first
  EXPECT_EQ(s.kernels[0].buffers[0], s.made[1]);
  EXPECT_EQ(s.kernels[1].buffers[0], s.made[0]);
}

TEST(Schedule, ARowReductionWithManyOutputsOrFewElementsIsNotSplit) {
  EXPECT_EQ(schedule_of(reduce(input({4096, 1024}), Ops::ADD, {1})).kernels.size(), 1u);
  EXPECT_EQ(schedule_of(reduce(input({4, 1000}), Ops::MAX, {1})).kernels.size(), 1u);
  // a prime count of elements has no even split
  EXPECT_EQ(schedule_of(reduce(input({65537}), Ops::ADD, {0})).kernels.size(), 1u);
}

TEST(Schedule, AReductionOverSeveralAxesSplitsTheFlattenedAxes) {
  // (8, 64, 3, 64): reduce axes 1 and 3 (4096 elements per output, 24 outputs): not long enough
  EXPECT_EQ(schedule_of(reduce(input({8, 64, 3, 64}), Ops::ADD, {1, 3})).kernels.size(), 1u);
  // (2, 256, 3, 128): 32768 elements per output, 6 outputs: 32 runs each (the largest divisor of 32768
  // up to 256 / 6, rounded up)
  Schedule s = schedule_of(reduce(input({2, 256, 3, 128}), Ops::MAX, {1, 3}));
  ASSERT_EQ(s.kernels.size(), 2u);
  EXPECT_EQ(s.made[1]->numel, 6 * 32);
}

// x @ w with w row-major (1024 x 1024 floats, its rows 4 KiB apart) and 9 to 63 rows of x: each block of 8 rows would
// read all of w from L3 (its strided rows do not stay in L2), so the sum runs in parts of 256 (partial results laid out
// parts outermost, then their sum), each part's rows of w held in L2 while every block reads them. Not with 8 rows
// (one block), 64 (w is copied in panels), a GPU target, w read along its rows (x @ w.t()), rows of w wider than 4
// KiB or a reduced axis longer than 2048.
TEST(Schedule, AFewRowsTimesARowMajorWeightSumInPartsOf256) {
  auto product = [](int64_t M, bool transposed, int64_t K = 1024, int64_t N = 1024) {
    auto a = expand(reshape(input({M, K}), {M, 1, K}), {M, N, K});
    auto w = transposed ? input({N, K}) : permute(input({K, N}), {1, 0});
    auto b = expand(reshape(w, {1, N, K}), {M, N, K});
    return reshape(reduce(alu(Ops::MUL, a, b), Ops::ADD, {2}), {M, N});
  };
  Schedule s = schedule_of(product(32, false));
  ASSERT_EQ(s.kernels.size(), 2u);
  EXPECT_EQ(s.made[1]->numel, 4 * 32 * 1024);
  EXPECT_EQ(s.kernels[0].buffers[0], s.made[1]);
  auto no_partials = [](const Schedule& sc) { // one kernel reduces
    int64_t reducing = 0;
    for (const Kernel& k : sc.kernels)
      reducing += std::ranges::any_of(toposort(k.ast), [](const UOpPtr& n) { return n->op == Ops::REDUCE; });
    return reducing == 1;
  };
  EXPECT_TRUE(no_partials(schedule_of(product(8, false))));
  EXPECT_TRUE(no_partials(schedule_of(product(64, false))));
  EXPECT_TRUE(no_partials(schedule_of(product(32, true))));
  Target gpu;
  gpu.dialect = Dialect::OpenCL;
  EXPECT_TRUE(no_partials(schedule_of(product(32, false), gpu)));
  EXPECT_FALSE(no_partials(schedule_of(product(16, false))));
  EXPECT_FALSE(no_partials(schedule_of(product(32, false, 2048, 512))));
  // measured slower: rows of 8 KiB (N = 2048), and 16 parts of a reduced axis of 4096
  EXPECT_TRUE(no_partials(schedule_of(product(32, false, 1024, 2048))));
  EXPECT_TRUE(no_partials(schedule_of(product(24, false, 4096, 1024))));
}

// A column sum over 3072 or more rows 1 KiB or more apart sums runs of about 256 rows (a divisor of the rows: 256 of
// 4096, 273 of 4095) into partial results laid out runs outermost, then their sum. Not over 2080 rows (measured no
// faster), rows 512 bytes apart, a prime count of rows, fewer than 256 columns read contiguously, a read broadcast
// along the columns (a product's operand) or on a GPU.
TEST(Schedule, AColumnSumOverManyRowsFarApartSumsInRunsOfAbout256) {
  auto partials = [](const UOpPtr& value, const Target& target = Target{}) -> int64_t {
    Schedule s = schedule_of(value, target);
    return s.kernels.size() == 2 ? s.made[1]->numel : 0;
  };
  EXPECT_EQ(partials(reduce(input({4096, 1000}), Ops::ADD, {0})), 16 * 1000);
  EXPECT_EQ(partials(reduce(input({4095, 1000}), Ops::MAX, {0})), 15 * 1000);
  EXPECT_EQ(partials(reduce(permute(input({4096, 300}), {1, 0}), Ops::ADD, {1})), 16 * 300);
  EXPECT_EQ(partials(reduce(alu(Ops::MUL, input({4096, 1000}), input({4096, 1000})), Ops::ADD, {0})), 16 * 1000);
  EXPECT_EQ(partials(reduce(input({2080, 512}), Ops::ADD, {0})), 0);
  EXPECT_EQ(partials(reduce(input({4096, 128}), Ops::ADD, {0})), 0);
  EXPECT_EQ(partials(reduce(input({4099, 1000}), Ops::ADD, {0})), 0);
  EXPECT_EQ(partials(reduce(input({4096, 200}), Ops::ADD, {0})), 0);
  auto row = expand(reshape(input({1000}), {1, 1000}), {4096, 1000}); // broadcast along the rows: a column scale
  EXPECT_EQ(partials(reduce(alu(Ops::MUL, input({4096, 1000}), row), Ops::ADD, {0})), 16 * 1000);
  auto column = expand(reshape(input({4096}), {4096, 1}), {4096, 1000}); // x.t() @ v
  EXPECT_EQ(partials(reduce(alu(Ops::MUL, input({4096, 1000}), column), Ops::ADD, {0})), 0);
  Target gpu;
  gpu.dialect = Dialect::OpenCL;
  EXPECT_EQ(partials(reduce(input({4096, 1000}), Ops::ADD, {0}), gpu), 0);
}

// a.t() @ b (a linear layer's weight gradient: its activations stored tokens-major) with a's rows 512 B or more apart
// and 1 MiB or more of them walked: each step of the reduce loop would read a block of output rows' elements from one
// line of its own, lines that share cache sets, from L3; a is copied first, in panels of a line of its columns with
// the reduced axis between ((M / 16, K, 16): the copy's innermost loop moves a line whole), or transposed (its reduced
// axis innermost) where its columns do not divide into lines, and the product reads a block of rows' elements a step
// from one line (2080 x 512 by 2080 x 128, one thread: 3.2 -> 1.58 + 0.53 ms). Not where a's walk spans less (2080 x
// 64, 256 x 256), a GPU target, or a reduction over several axes, nor where a is reused fewer than 512 times (b's
// columns: the next test).
TEST(Schedule, ATransposedLeftOperandIsCopiedInPanelsOfALine) {
  int64_t innermost = 0; // the copy's innermost loop
  // whether the product of a (stored K x M) and b reads a from a copy, and the copy holds a's K x M elements
  auto copies_a = [&](int64_t K, int64_t M, int64_t N, const Target& target = Target{}) {
    BufferRef stored = placeholder(DType::Float32, K * M);
    auto a = expand(reshape(permute(reshape(buffer(stored), {K, M}), {1, 0}), {M, 1, K}), {M, N, K});
    auto b = expand(reshape(permute(input({K, N}), {1, 0}), {1, N, K}), {M, N, K});
    Schedule s = schedule_of(reshape(reduce(alu(Ops::MUL, a, b), Ops::ADD, {2}), {M, N}), target);
    bool read_directly = false, copied = false;
    for (const Kernel& k : s.kernels) {
      bool reduces = std::ranges::any_of(toposort(k.ast), [](const UOpPtr& n) { return n->op == Ops::REDUCE; });
      bool reads = std::ranges::find(k.buffers, stored) != k.buffers.end();
      read_directly = read_directly || (reduces && reads);
      if (!reduces && reads && k.buffers[0]->numel == K * M) {
        copied = true;
        innermost = k.loops.back();
      }
    }
    EXPECT_NE(read_directly, copied);
    return copied;
  };
  EXPECT_TRUE(copies_a(2080, 512, 512));
  EXPECT_EQ(innermost, 16);
  EXPECT_TRUE(copies_a(1024, 1024, 1024));
  EXPECT_EQ(innermost, 16);
  EXPECT_TRUE(copies_a(1024, 1000, 512)); // 1000 columns: no lines, transposed
  EXPECT_NE(innermost, 16);
  EXPECT_FALSE(copies_a(2080, 512, 128)); // reused 128 times: summed in runs instead (see below)
  EXPECT_FALSE(copies_a(2080, 64, 512));
  EXPECT_FALSE(copies_a(256, 256, 256));
  Target gpu;
  gpu.dialect = Dialect::OpenCL;
  EXPECT_FALSE(copies_a(2080, 512, 128, gpu));
  // summed over two axes (a convolution's weight gradient over batch and pixels): read directly
  BufferRef stored = placeholder(DType::Float32, 32 * 65 * 512);
  auto a = permute(reshape(buffer(stored), {32, 65, 512}), {2, 0, 1});
  auto b = permute(input({32, 65, 128}), {2, 0, 1});
  auto product = alu(Ops::MUL, expand(reshape(a, {512, 1, 32, 65}), {512, 128, 32, 65}),
                     expand(reshape(b, {1, 128, 32, 65}), {512, 128, 32, 65}));
  for (const Kernel& k : schedule_of(reduce(product, Ops::ADD, {2, 3})).kernels)
    EXPECT_TRUE(std::ranges::find(k.buffers, stored) == k.buffers.end() ||
                std::ranges::any_of(toposort(k.ast), [](const UOpPtr& n) { return n->op == Ops::REDUCE; }));
}

// a.t() @ b where b has fewer than 512 columns: a's copy would cost a third of the product or more, so the product sums
// runs of about 256 of its reduced axis into partial results (parts outermost), then their sum, each run's rows of a
// held in L2 without the copy (2080 x 512 x 128, two threads: 1.47 -> 1.19 ms). Not with 512 columns, a's rows
// more than 2 KiB apart or on a GPU.
TEST(Schedule, AnOperandReusedLittleIsSummedInRunsInsteadOfCopied) {
  auto product = [](int64_t K, int64_t M, int64_t N, const Target& target = Target{}) {
    auto a = expand(reshape(permute(input({K, M}), {1, 0}), {M, 1, K}), {M, N, K});
    auto b = expand(reshape(permute(input({K, N}), {1, 0}), {1, N, K}), {M, N, K});
    return schedule_of(reshape(reduce(alu(Ops::MUL, a, b), Ops::ADD, {2}), {M, N}), target);
  };
  auto parts = [&](int64_t K, int64_t M, int64_t N, const Target& target = Target{}) -> int64_t {
    for (const BufferRef& made : product(K, M, N, target).made) // partial results: parts x M x N, not a copy
      if (made->numel > M * N && made->numel % (M * N) == 0 && made->numel != K * M && made->numel != K * N)
        return made->numel / (M * N);
    return 0;
  };
  EXPECT_EQ(parts(2080, 512, 128), 8);
  EXPECT_EQ(product(2080, 512, 128).kernels.size(), 2u); // the runs and their sum, a read where it lies
  EXPECT_EQ(parts(2080, 128, 384), 8);
  EXPECT_EQ(parts(4096, 320, 192), 16);
  EXPECT_EQ(parts(2048, 512, 512), 0);  // reused 512 times: copied
  EXPECT_EQ(parts(4096, 1024, 128), 0); // rows 4 KiB apart: copied
  Target gpu;
  gpu.dialect = Dialect::OpenCL;
  EXPECT_EQ(parts(2080, 512, 128, gpu), 0);
}

// Autograd's sum of the gradients of q, k and v selected from a packed projection (select_backward pads each, a masked
// view of a computed value): one kernel would compute all three parts' values at every element and mask two. The sum
// is written in three kernels, one a part, each reading only its own part's buffer. Not below 2^17 elements, not with
// one masked read (a pad), not on a GPU.
TEST(Schedule, ASumOfPaddedPartsIsWrittenAPartAtATime) {
  auto scaled = [](const UOpPtr& x) {
    return alu(Ops::MUL, x, expand(reshape(const_float(DType::Float32, 0.5), {1, 1}), x->shape));
  };
  auto parts = [&](int64_t n, int count, const Target& target = Target{}) {
    UOpPtr sum;
    for (int64_t p = 0; p < count; p++) {
      auto part = pad(reshape(scaled(input({n, 128})), {1, n, 128}), {{p, 2 - p}, {0, 0}, {0, 0}});
      sum = sum ? alu(Ops::ADD, sum, part) : part;
    }
    return schedule_of(sum, target);
  };
  Schedule s = parts(2080, 3);
  ASSERT_EQ(s.kernels.size(), 3u);
  for (const Kernel& k : s.kernels) {
    EXPECT_EQ(k.buffers.size(), 2u) << k.name; // the output and one part
    EXPECT_EQ(prod(k.loops), 2080 * 128) << k.name;
  }
  EXPECT_EQ(parts(256, 3).kernels.size(), 1u);
  EXPECT_EQ(parts(2080, 1).kernels.size(), 1u);
  Target gpu;
  gpu.dialect = Dialect::OpenCL;
  EXPECT_EQ(parts(2080, 3, gpu).kernels.size(), 1u);
}

// Attention's scores q @ k.t() over heads of 64 features or fewer: every read walks the sum contiguously, and a
// loop vectorized along it is a few multiply-adds and a horizontal sum an output. k is copied keys-innermost and the
// lanes run along the keys, 65 of them ending on a vector that overlaps the one before (a MIN in the index); (128, 65,
// 32) x (128, 32, 65) on one Sapphire Rapids thread 975 -> 98 + 390 us, 64 keys: sdpa's forward and backward 4.2 ->
// 2.7 ms. Not for a sum of 256, a GPU target, or scores stored transposed (the lanes would store apart).
TEST(Schedule, ScoresOverAShortContiguousSumTakeLanesAlongTheKeys) {
  auto scores = [](int64_t L, int64_t D, bool transposed = false) {
    auto q = expand(reshape(input({128, L, D}), {128, L, 1, D}), {128, L, L, D});
    auto k = expand(reshape(input({128, L, D}), {128, 1, L, D}), {128, L, L, D});
    auto s = reshape(reduce(alu(Ops::MUL, q, k), Ops::ADD, {3}), {128, L, L});
    return transposed ? contiguous(permute(s, {0, 2, 1})) : s;
  };
  auto lanes_of = [](const Schedule& s) {
    const Kernel& k = s.kernels.back();
    return std::ranges::any_of(toposort(k.ast), [](const UOpPtr& n) { return n->op == Ops::REDUCE; }) ? k.lane_range
                                                                                                      : -2;
  };
  for (int64_t L : {65, 64}) {
    Schedule s = schedule_of(scores(L, 32));
    ASSERT_EQ(s.kernels.size(), 2u) << L;
    EXPECT_EQ(s.kernels[0].buffers[0]->numel, 128 * L * 32); // the keys' copy
    EXPECT_GE(lanes_of(s), 0) << L;
    bool overlaps = std::ranges::any_of(toposort(s.kernels[1].ast), [](const UOpPtr& n) { return n->op == Ops::MIN; });
    EXPECT_EQ(overlaps, L == 65);
    EXPECT_EQ(s.kernels[1].stores_twice, L == 65);
  }
  auto copies_keys = [&](int64_t D, const Target& target = Target{}, bool transposed = false) {
    Schedule s = schedule_of(scores(65, D, transposed), target);
    return std::ranges::any_of(s.kernels, [&](const Kernel& k) { return k.buffers[0]->numel == 128 * 65 * D; });
  };
  EXPECT_TRUE(copies_keys(32));
  EXPECT_FALSE(copies_keys(256));
  Target gpu;
  gpu.dialect = Dialect::OpenCL;
  EXPECT_FALSE(copies_keys(32, gpu));
  EXPECT_FALSE(copies_keys(32, Target{}, true));
  // q and k read through two views of a packed projection (nn.MultiheadAttention's (65, 32, 384), sequence-first, as
  // (128, 65, 32)): their flat index walks the features contiguously all the same
  auto packed = input({65, 32, 384});
  auto head = [&](int64_t part) {
    auto x = shrink(packed, {{0, 65}, {0, 32}, {part * 128, part * 128 + 128}});
    return reshape(permute(reshape(x, {65, 32, 4, 32}), {1, 2, 0, 3}), {128, 65, 32});
  };
  auto q = expand(reshape(head(0), {128, 65, 1, 32}), {128, 65, 65, 32});
  auto k = expand(reshape(head(1), {128, 1, 65, 32}), {128, 65, 65, 32});
  Schedule s = schedule_of(reshape(reduce(alu(Ops::MUL, q, k), Ops::ADD, {3}), {128, 65, 65}));
  EXPECT_GE(lanes_of(s), 0);
  EXPECT_TRUE(std::ranges::any_of(s.kernels, [](const Kernel& kn) { return kn.buffers[0]->numel == 128 * 65 * 32; }));
}

// sdpa's scores of a query and keys scaled before the product, (q * s) @ (k * s).T: the scale, one value everywhere,
// multiplies each score once after its sum (hoist_factors), so that the product reads the query in place as plain
// loads and the keys from their transposed copy, nothing scaled in the loop.
TEST(Schedule, AScalarFactorOfAProductScalesItsSum) {
  auto scale = [](const UOpPtr& x) {
    return alu(Ops::MUL, x, expand(reshape(var_float(DType::Float32, 0.42), {1, 1, 1}), x->shape));
  };
  auto q = expand(reshape(scale(input({128, 65, 32})), {128, 65, 1, 32}), {128, 65, 65, 32});
  auto k = expand(reshape(scale(input({128, 65, 32})), {128, 1, 65, 32}), {128, 65, 65, 32});
  Schedule s = schedule_of(reshape(reduce(alu(Ops::MUL, q, k), Ops::ADD, {3}), {128, 65, 65}));
  ASSERT_EQ(s.kernels.size(), 2u); // the keys' copy (transposed), the scores
  EXPECT_EQ(s.kernels[0].buffers[0]->numel, 128 * 65 * 32);
  const Kernel& k_scores = s.kernels.back();
  ASSERT_GE(k_scores.lane_range, 0);
  auto scaled = [](const UOpPtr& n) {
    return std::ranges::any_of(toposort(n), [](const UOpPtr& m) { return m->op == Ops::ARG; });
  };
  int epilogue = 0; // the scale multiplies sums, never a load
  for (const UOpPtr& n : toposort(k_scores.ast))
    if (n->op == Ops::MUL && std::ranges::any_of(n->src, scaled)) {
      EXPECT_TRUE(std::ranges::none_of(n->src, [](const UOpPtr& m) { return m->op == Ops::LOAD; }))
          << "scaled in the loop";
      epilogue += std::ranges::any_of(n->src, [](const UOpPtr& m) { return m->op == Ops::REDUCE; });
    }
  EXPECT_GE(epilogue, 1);
}

// A factor of the scores that the lanes (along the keys) broadcast, computed from reads (the queries weighted by a
// per-query value): computed once into a copy, so that the block's rows read plain loads (a multiply and a broadcast
// beside each multiply-add otherwise).
TEST(Schedule, AComputedFactorThatTheLanesBroadcastIsCopiedFirst) {
  auto scores = [&](bool weighted) {
    auto qw = weighted ? alu(Ops::MUL, input({128, 65, 32}), expand(input({128, 65, 1}), {128, 65, 32}))
                       : input({128, 65, 32});
    auto q = expand(reshape(qw, {128, 65, 1, 32}), {128, 65, 65, 32});
    auto k = expand(reshape(input({128, 65, 32}), {128, 1, 65, 32}), {128, 65, 65, 32});
    return reshape(reduce(alu(Ops::MUL, q, k), Ops::ADD, {3}), {128, 65, 65});
  };
  auto copies = [](const Schedule& s) {
    return std::ranges::count_if(s.kernels, [](const Kernel& k) { return k.buffers[0]->numel == 128 * 65 * 32; });
  };
  Schedule s = schedule_of(scores(true));
  EXPECT_EQ(copies(s), 2); // the keys' (transposed) and the weighted queries'
  ASSERT_GE(s.kernels.back().lane_range, 0);
  EXPECT_EQ(copies(schedule_of(scores(false))), 1); // a plain query is read as it is
}

// Scores over bfloat16 keys widened, transposed, then shifted, (k.float().transpose(-2, -1) + s) (sdpa's math path
// scaled them so, before its scale moved onto the sums): a computed value the product reuses across the queries. It is
// realized in its source's order, written as read (one loop), so that the scores take lanes along the keys from the
// keys' copy as float32 inputs do; realized in its transposed shape, the keys were copied back and the scores summed
// each output's 32 products alone (one thread: 2.37 -> 1.64 ms for sdpa's forward).
TEST(Schedule, AReusedValueOfTransposedReadsIsRealizedInTheirOrder) {
  auto bf16 = [](const Shape& shape) { return reshape(buffer(placeholder(DType::BFloat16, prod(shape))), shape); };
  // (shifted, not scaled: a scale, one value everywhere, would scale the sums instead, see hoist_factors)
  auto scale = [](const UOpPtr& x) {
    return alu(Ops::ADD, x, expand(reshape(var_float(DType::Float32, 0.42), {1, 1, 1}), x->shape));
  };
  auto kt = scale(permute(cast(bf16({128, 65, 32}), DType::Float32), {0, 2, 1})); // (128, 32, 65)
  auto k = expand(reshape(permute(kt, {0, 2, 1}), {128, 1, 65, 32}), {128, 65, 65, 32});
  auto q = expand(reshape(scale(cast(bf16({128, 65, 32}), DType::Float32)), {128, 65, 1, 32}), {128, 65, 65, 32});
  Schedule s = schedule_of(reshape(reduce(alu(Ops::MUL, q, k), Ops::ADD, {3}), {128, 65, 65}));
  EXPECT_GE(s.kernels.back().lane_range, 0) << s.kernels.back().name;
  int64_t in_order = 0; // the keys' and the queries' values, each one loop
  for (const Kernel& kn : s.kernels)
    in_order += kn.buffers[0]->numel == 128 * 65 * 32 && kn.loops.size() == 1;
  EXPECT_EQ(in_order, 2);
  EXPECT_EQ(s.kernels.size(), 4u); // and the keys copied keys-innermost for the lanes (transposed, two more copies)
}

// A reduction read through a reshape that merges its output dims with others' (sdpa's query gradient: (128, 65, 32)
// written as (32, 4, 65, 32), scaled after the product) is lowered at the reduction's own shape: its rows unroll beside
// the lanes. Lowered as one flat loop its block was a single row of two vectors (one thread: 556 -> 280 us).
TEST(Schedule, AReductionReadThroughAReshapeIsBlockedAtItsOwnShape) {
  auto s = expand(reshape(var_float(DType::Float32, 0.42), {1, 1, 1, 1}), {128, 65, 65, 32});
  auto a = expand(reshape(input({128, 65, 65}), {128, 65, 65, 1}), {128, 65, 65, 32});
  auto k = expand(reshape(input({128, 65, 32}), {128, 1, 65, 32}), {128, 65, 65, 32});
  auto g = reduce(alu(Ops::MUL, a, alu(Ops::MUL, k, s)), Ops::ADD, {2});
  auto out = reshape(g, {32, 4, 65, 32});
  auto scaled = alu(Ops::MUL, out, expand(reshape(var_float(DType::Float32, 0.42), {1, 1, 1, 1}), {32, 4, 65, 32}));
  Schedule sch = schedule_of(scaled);
  ASSERT_EQ(sch.kernels.size(), 1u);
  const Kernel& kn = sch.kernels[0];
  EXPECT_GE(kn.lane_range, 0);
  EXPECT_GE(kn.ast->src.size(), 8u) << kn.name; // a block of rows by two vectors, not one row
}

// A column sum whose width does not divide into 16 lanes (4096 x 1000) is one loop of vectors, the last overlapping the
// one before, split into the threads' loop and an inner one of the smallest divisor of the vector count, so that the
// two that overlap run on one thread: 63 vectors as 21 x 3, 61 (a prime) as 1 x 61. It was a scalar walk down each
// column, lines 4000 bytes apart (28 ms on one thread, 1.2 with lanes).
TEST(Schedule, AColumnSumOfAnOddWidthTakesOverlappingLanesOnOneThreadAtTheEnd) {
  for (auto [width, outer, inner] : {std::tuple{1000, 21, 3}, {973, 1, 61}}) {
    Schedule s = schedule_of(reduce(input({2048, width}), Ops::ADD, {0})); // (4096 rows sum in runs, see above)
    ASSERT_EQ(s.kernels.size(), 1u);
    const Kernel& k = s.kernels[0];
    EXPECT_GE(k.lane_range, 0);
    EXPECT_EQ(k.loops, (Shape{outer, inner})) << width;
    EXPECT_EQ(k.launch.global[0], outer);
    EXPECT_TRUE(k.stores_twice); // never written in place over a buffer it reads (write_in_place)
  }
}

// Attention's key gradient in a sequence-first layout: dK[j, b, d] = sum over i of dS[b, i, j] q[i, b, d]. Rows of
// the register block along the batch (the innermost loop that unrolls by 8) share no load: every row read its own
// vectors of q and its own element of dS (16 vector loads and 8 broadcasts for 16 multiply-adds). They run along the
// keys instead, whose rows share q's vectors (a ViT's step on one thread: these kernels 2.4 -> 0.85 and 1.8 -> 0.55
// ms).
TEST(Schedule, RowsOfARegisterBlockRunAlongALoopThatSharesALoad) {
  const int64_t I = 65, J = 65, B = 32, D = 32;
  auto ds = expand(reshape(permute(input({B, I, J}), {2, 0, 1}), {J, B, I, 1}), {J, B, I, D}); // [j, b, i, d]
  auto q = expand(reshape(permute(input({I, B, D}), {1, 0, 2}), {1, B, I, D}), {J, B, I, D});
  auto dk = reduce(alu(Ops::MUL, permute(ds, {0, 1, 3, 2}), permute(q, {0, 1, 3, 2})), Ops::ADD, {3});
  Schedule s = schedule_of(reshape(dk, {J, B, D}));
  const Kernel& k = s.kernels.back();
  ASSERT_GE(k.lane_range, 0);
  EXPECT_EQ(k.loops[0], J / 5) << k.name; // 5 keys a block
}

// A batch norm's per-channel sum over (batch, h, w): the parts split the batch axis, so that their loops
// index x without recovering (batch, h, w) from one flat axis by a division and a modulo per element.
TEST(Schedule, APerChannelSumSplitsItsFirstReducedAxisAndIndexesWithoutDivisions) {
  Schedule s = schedule_of(reduce(input({128, 32, 28, 28}), Ops::ADD, {0, 2, 3}));
  ASSERT_EQ(s.kernels.size(), 2u);
  EXPECT_EQ(s.made[1]->numel, 32 * 8);
  for (const UOpPtr& n : toposort(s.kernels[0].ast))
    EXPECT_TRUE(n->op != Ops::IDIV && n->op != Ops::MOD) << op_name(n->op);
}

// The step along each dim of a stack of views that does not merge (the demo's batch norm reads its convolution's bias,
// broadcast over (N, C, H, W), as its split sum's (C, parts, N / parts, H * W)): 1 along the channels, 0 along the
// reduced axes, so that the sum steps by vector lanes (reads_contiguously_along). A transposed read flattened steps
// by no fixed amount.
TEST(Schedule, TheStepOfAStackOfViewsAlongADimIsWhatItsIndexWalks) {
  ShapeTracker bias;
  bias.views = {View{{128, 32, 28, 28}, {0, 1, 0, 0}, 0, std::nullopt},
                View{{32, 8, 16, 784}, {784, 401408, 25088, 1}, 0, std::nullopt}};
  EXPECT_EQ(step_along(bias, 0), 1);
  for (size_t d : {1, 2, 3})
    EXPECT_EQ(step_along(bias, d), 0) << d;
  ShapeTracker one = ShapeTracker::of(View{{32, 8, 16, 784}, {784, 401408, 25088, 1}, 0, std::nullopt});
  EXPECT_EQ(step_along(one, 3), 1);
  EXPECT_EQ(step_along(one, 1), 401408);
  ShapeTracker flat_transpose;
  flat_transpose.views = {View{{6, 4}, {1, 6}, 0, std::nullopt}, View{{24}, {1}, 0, std::nullopt}};
  EXPECT_EQ(step_along(flat_transpose, 0), -1);
}

// A matmul's ReLU read elementwise by two values (the next layer and the ReLU's gradient mask): the
// ReLU is realized once, not inlined into both kernels, each recomputing the whole matmul per element.
// Read through a broadcast (a layer norm's mean), a reduction stays inline: lowering computes it once
// per row.
TEST(Schedule, AReductionReadElementwiseByTwoValuesIsComputedOnce) {
  auto full = [](double v, const Shape& shape) {
    return expand(reshape(const_float(DType::Float32, v), Shape(shape.size(), 1)), shape);
  };
  const int64_t M = 64, K = 64, N = 64;
  auto a = expand(reshape(input({M, K}), {M, 1, K}), {M, N, K});
  auto b = expand(reshape(permute(input({K, N}), {1, 0}), {1, N, K}), {M, N, K});
  auto relu = alu(Ops::MAX, reshape(reduce(alu(Ops::MUL, a, b), Ops::ADD, {2}), {M, N}), full(0, {M, N}));
  auto next = alu(Ops::MUL, relu, full(2, {M, N}));
  auto mask = alu(Ops::CMPLT, full(0, {M, N}), relu);
  Schedule s = schedule({next, mask}, Target{}, placeholder);
  int64_t reducing = 0;
  for (const Kernel& k : s.kernels)
    for (const UOpPtr& n : toposort(k.ast))
      if (n->op == Ops::REDUCE) {
        reducing++;
        break;
      }
  EXPECT_EQ(reducing, 1);
  EXPECT_EQ(s.kernels.size(), 2u); // the product, then next and mask (both read it) merged into one kernel

  auto x = input({64, 1024});
  auto mean = alu(Ops::MUL, reduce(x, Ops::ADD, {1}), full(1.0 / 1024, {64, 1}));
  auto centered = alu(Ops::ADD, x, alu(Ops::NEG, expand(mean, {64, 1024})));
  auto var = reduce(alu(Ops::MUL, centered, centered), Ops::ADD, {1});
  EXPECT_EQ(schedule_of(alu(Ops::MUL, centered, expand(var, {64, 1024}))).kernels.size(), 1u);
}

TEST(Schedule, SplitReductionsGiveExactIntegerResults) {
  // Sums and maxima of integers are exact in any order: a split must give the same numbers.
  const int64_t R = 3, C = 40000;
  auto x = reshape(buffer(iota_buffer(R * C)), {R, C});
  auto sums = realize_value(reduce(x, Ops::ADD, {1}));
  auto maxes = realize_value(reduce(view(x, ShapeTracker::from_shape({R, C}).permute({1, 0})), Ops::MAX, {0}));
  auto* s = static_cast<int64_t*>(std::static_pointer_cast<Buffer>(sums)->ptr());
  auto* m = static_cast<int64_t*>(std::static_pointer_cast<Buffer>(maxes)->ptr());
  for (int64_t r = 0; r < R; r++) {
    EXPECT_EQ(s[r], C * r * C + C * (C - 1) / 2);
    EXPECT_EQ(m[r], r * C + C - 1);
  }
}

// A 3 x 3 convolution with padding 1 as the ATen layer records it: x's windows (N, C, 14, 14, 3, 3)
// times the filters, reduced over (kernel rows, kernel columns, input channels), input channels innermost.
TEST(Schedule, AConvolutionsPaddedInputIsCopiedWithTheInnermostReducedAxisInnermostOnTheCpu) {
  const int64_t N = 4, C = 32, Co = 64;
  window::Geometry g{{3, 3}, {1, 1}, {1, 1}, {1, 1}};
  UOpPtr win = window::windows(window::pad_for_windows(input({N, C, 14, 14}), {14, 14}, g), {14, 14}, g);
  Shape full{N, Co, 14, 14, 3, 3, C};
  UOpPtr x = expand(reshape(permute(win, {0, 2, 3, 4, 5, 1}), {N, 1, 14, 14, 3, 3, C}), full);
  UOpPtr w = expand(reshape(permute(input({Co, C, 3, 3}), {0, 2, 3, 1}), {1, Co, 1, 1, 3, 3, C}), full);
  UOpPtr conv = reduce(alu(Ops::MUL, x, w), Ops::ADD, {4, 5, 6});
  // The copy of the padded input (N * C * 16 * 16 elements) walks the channels innermost, so the
  // convolution's reduce loop over them reads adjacent elements (a GPU target keeps x's layout, where
  // adjacent threads read adjacent pixels).
  const Kernel* copy = nullptr;
  Schedule s = schedule_of(conv);
  for (const Kernel& k : s.kernels)
    if (k.buffers[0]->numel == N * C * 16 * 16) copy = &k;
  ASSERT_NE(copy, nullptr);
  EXPECT_TRUE(writes_runs_of(*copy, C));
  EXPECT_EQ(prod(copy->loops) * (copy->lane_range < 0 ? 1 : 8 * copy->lanes), N * C * 16 * 16);
}

// A stride-1 convolution's two gradients as aten_ops/conv.cpp records them: the input gradient sums the adjoint
// windows of grad_output (flipped) times the filters over the output channels, innermost; the weight gradient
// sums the input times the same adjoint windows over the batch and the positions, its lanes the output channels.
TEST(Schedule, AWeightGradientOverAdjointWindowsReadsTheInputGradientsPaddedCopyOfGradOutput) {
  const int64_t N = 4, C = 16, O = 32;
  window::Geometry g{{3, 3}, {1, 1}, {1, 1}, {1, 1}};
  UOpPtr go = input({N, O, 14, 14}), x = input({N, C, 14, 14});
  UOpPtr u = window::windows_adjoint(go, {14, 14}, g); // (N, O, 14, 14, 3, 3)
  Shape in_full{N, C, 14, 14, 3, 3, O};
  UOpPtr taps = window::flipped(u, {false, false, false, false, true, true});
  UOpPtr gu = expand(reshape(permute(taps, {0, 2, 3, 4, 5, 1}), {N, 1, 14, 14, 3, 3, O}), in_full);
  UOpPtr w = window::flipped(input({O, C, 3, 3}), {false, false, true, true});
  UOpPtr gw = expand(reshape(permute(w, {1, 2, 3, 0}), {1, C, 1, 1, 3, 3, O}), in_full);
  UOpPtr grad_input = reduce(alu(Ops::MUL, gu, gw), Ops::ADD, {4, 5, 6});
  Shape w_full{C, O, 3, 3, N, 14, 14};
  UOpPtr wu = expand(reshape(permute(u, {1, 4, 5, 0, 2, 3}), {1, O, 3, 3, N, 14, 14}), w_full);
  UOpPtr wx = expand(reshape(permute(x, {1, 0, 2, 3}), {C, 1, 1, 1, N, 14, 14}), w_full);
  UOpPtr grad_weight = reduce(alu(Ops::MUL, wx, wu), Ops::ADD, {4, 5, 6});
  Schedule s = schedule({grad_input, grad_weight}, Target{}, placeholder);
  // one copy of grad_output, padded (N * O * 16 * 16 elements) with the channels innermost, and no copy of x
  // (the weight gradient's lanes, the output channels, read that copy; with the lanes along the input channels,
  // x was copied channels-last and grad_output padded a second time, its positions innermost)
  int64_t padded_copies = 0, input_sized = 0; // input_sized: the input gradient, and a copy of x
  for (const Kernel& k : s.kernels) {
    if (k.buffers[0]->numel == N * O * 16 * 16) {
      padded_copies++;
      EXPECT_TRUE(writes_runs_of(k, O));
    }
    input_sized += k.buffers[0]->numel == N * C * 14 * 14;
  }
  EXPECT_EQ(padded_copies, 1);
  EXPECT_EQ(input_sized, 1);
}

// The input gradient of a convolution from 3 channels (a transposed convolution to 3 channels, an image decoder's
// last layer): 3 outputs a position leave no lanes along the channels, and the positions (30 x 30) none that divide
// into vectors, so the sum over the output channels is the loop that vectorizes. It reads grad_output from a copy,
// padded, the channels innermost (adjacent in its loop, not a plane apart) and the filters with the output channels
// innermost (conv_transpose2d of (16, 64, 31, 31) by (64, 3, 4, 4), padding 1, one thread: 134 ms -> 2.7 ms).
TEST(Schedule, AnInputGradientToThreeChannelsSumsAPaddedChannelsLastCopyOfGradOutputInVectors) {
  const int64_t N = 2, C = 3, O = 64, H = 30;
  window::Geometry g{{4, 4}, {1, 1}, {1, 1}, {1, 1}};
  UOpPtr u = window::windows_adjoint(input({N, O, H - 1, H - 1}), {H, H}, g); // (N, O, H, H, 4, 4)
  Shape full{N, C, H, H, 4, 4, O};
  UOpPtr taps = window::flipped(u, {false, false, false, false, true, true});
  UOpPtr gu = expand(reshape(permute(taps, {0, 2, 3, 4, 5, 1}), {N, 1, H, H, 4, 4, O}), full);
  UOpPtr w = window::flipped(input({O, C, 4, 4}), {false, false, true, true});
  UOpPtr gw = expand(reshape(permute(w, {1, 2, 3, 0}), {1, C, 1, 1, 4, 4, O}), full);
  Schedule s = schedule_of(reduce(alu(Ops::MUL, gu, gw), Ops::ADD, {4, 5, 6}));
  const Kernel* copy = nullptr;
  const Kernel* sum = nullptr;
  for (const Kernel& k : s.kernels) {
    if (k.buffers[0]->numel == N * O * (H + 3) * (H + 3)) copy = &k;
    if (k.buffers[0]->numel == N * C * H * H) sum = &k;
  }
  ASSERT_NE(copy, nullptr);
  ASSERT_NE(sum, nullptr);
  EXPECT_TRUE(writes_runs_of(*copy, O));
  EXPECT_TRUE(sum->vectorize_reduce);
}

// A GPU kernel cannot compute a row's statistics as it writes the row: they are realized first, the
// variance over the realized mean; the kernel's next try reads both and computes neither again.
TEST(Schedule, ALayerNormsStatisticsOnAGpuAreEachOneKernel) {
  Target gpu;
  gpu.dialect = Dialect::OpenCL;
  Shape full{16, 64}, row{16, 1};
  auto c = [&](double v) { return expand(reshape(const_float(DType::Float32, v), {1, 1}), row); };
  auto mean_of = [&](const UOpPtr& v) { return alu(Ops::MUL, reshape(reduce(v, Ops::ADD, {1}), row), c(1.0 / 64)); };
  UOpPtr x = input(full);
  UOpPtr dev = alu(Ops::SUB, x, expand(mean_of(x), full));
  UOpPtr rstd = alu(Ops::RECIP, alu(Ops::SQRT, alu(Ops::ADD, mean_of(alu(Ops::MUL, dev, dev)), c(1e-5))));
  UOpPtr y = alu(Ops::MUL, dev, expand(rstd, full));
  EXPECT_EQ(schedule_of(y, gpu).kernels.size(), 3u); // the mean, the variance, the output
  EXPECT_EQ(schedule_of(y).kernels.size(), 1u);      // the CPU's row kernel computes them per row
}

namespace {

// Each element of x (n, c, h, w) spread over the 2x2 window it pools, as a max pool's gradient reads it:
// a reshape of an expand, whose index takes divisions.
UOpPtr spread2x2(const UOpPtr& x) {
  const Shape& s = x->shape;
  UOpPtr split = reshape(x, {s[0], s[1], s[2], 1, s[3], 1});
  return reshape(expand(split, {s[0], s[1], s[2], 2, s[3], 2}), {s[0], s[1], 2 * s[2], 2 * s[3]});
}

size_t kernels_of(const std::vector<UOpPtr>& roots) { return schedule(roots, Target{}, placeholder).kernels.size(); }

} // namespace

// A reduction read through a reshape by several nodes is one value: computed once, not recomputed by each
// reader, whose kernels could round it differently (a Jacobi rotation tested a dot of orthogonal columns for
// zero in one kernel and divided by it in another: 0 in one, 1e-9 in the other).
TEST(Schedule, AShortReductionReadThroughAReshapeBySeveralNodesIsComputedOnce) {
  UOpPtr dots = reshape(reduce(alu(Ops::MUL, input({4, 3}), input({4, 3})), Ops::ADD, {0}), {3});
  UOpPtr none = alu(Ops::CMPNE, dots, expand(reshape(const_float(DType::Float32, 0.0), {1}), {3}));
  UOpPtr theta = alu(Ops::FDIV, input({3}), dots);
  Schedule s = schedule({theta, none}, Target{}, placeholder);
  int64_t reducing = 0;
  for (const Kernel& k : s.kernels)
    for (const UOpPtr& n : toposort(k.ast))
      reducing += n->op == Ops::REDUCE;
  EXPECT_EQ(reducing, 1);
}

// A gradient read through one reshape by batch norm's backward (two sums and the input gradient) is
// computed once: its three readers would each recompute it, divisions and all.
TEST(Schedule, AValueReadThroughOneViewBySeveralNodesCountsEachRead) {
  const int64_t N = 2, C = 4, H = 7;
  UOpPtr g = alu(Ops::MUL, spread2x2(input({N, C, H, H})), spread2x2(input({N, C, H, H})));
  g = alu(Ops::ADD, alu(Ops::MUL, g, spread2x2(input({N, C, H, H}))), spread2x2(input({N, C, H, H})));
  UOpPtr flat = reshape(g, {N, C, 4 * H * H});
  UOpPtr sum = reduce(flat, Ops::ADD, {0, 2});
  UOpPtr sum_sq = reduce(alu(Ops::MUL, flat, input({N, C, 4 * H * H})), Ops::ADD, {0, 2});
  UOpPtr dx = alu(Ops::EXP, flat);
  EXPECT_EQ(kernels_of({sum, sum_sq, dx}), 3u); // g (with dx, which reads it elementwise: one kernel), the two sums
  EXPECT_EQ(kernels_of({sum, dx}), 2u);         // read twice it costs less than a buffer: inlined
}

// Read by every element of its window (a max pool's gradient compares each element with its window's max), a
// reduction is computed once a window: realized first, or (its window a row of the kernel's loops) once a row
// before the row's elements, not once an element.
TEST(Schedule, AReductionReadByEveryElementOfItsWindowIsComputedOnceAWindow) {
  UOpPtr x = input({14});
  UOpPtr max = reduce(reshape(x, {7, 2}), Ops::MAX, {1});
  UOpPtr spread = reshape(expand(max, {7, 2}), {14});
  UOpPtr grad = where(alu(Ops::CMPEQ, x, spread), x, alu(Ops::MUL, x, x));
  // the max's evaluations in all kernels: for each reduction, the iterations of the kernel loops it indexes with
  int64_t evaluations = 0;
  for (const Kernel& k : schedule_of(grad).kernels)
    for (const UOpPtr& r : toposort(k.ast)) {
      if (r->op != Ops::REDUCE) continue;
      int64_t times = 1;
      for (const UOpPtr& n : toposort(r))
        if (n->op == Ops::RANGE && std::get<int64_t>(n->arg) < static_cast<int64_t>(k.loops.size()))
          times *= k.loops[static_cast<size_t>(std::get<int64_t>(n->arg))];
      evaluations += times;
    }
  EXPECT_EQ(evaluations, 7);
}

// sdpa's query gradient as torch records it: the scores' gradient times the key scaled by a runtime scalar, that
// scalar broadcast to the key's shape through a reshape (a view over a view). The broadcast is read as it is, not
// copied (a kernel that only fills a buffer with the scalar, whose layout then kept the reduction's lanes off).
TEST(Schedule, AScalarBroadcastThroughTwoViewsIsReadAsItIsNotCopied) {
  const int64_t B = 8, L = 65, D = 32;
  // the key transposed, scaled, transposed back, then read by the batched matmul as (B, L, D)
  UOpPtr s = expand(reshape(var_float(DType::Float32, 0.42), {1, 1, 1, 1}), {2, 4, D, L});
  UOpPtr kt = permute(reshape(input({B, L, D}), {2, 4, L, D}), {0, 1, 3, 2});
  UOpPtr ks = reshape(permute(alu(Ops::MUL, kt, s), {0, 1, 3, 2}), {B, L, D});
  Shape full{B, L, D, L};
  UOpPtr a = expand(reshape(input({B, L, L}), {B, L, 1, L}), full);
  UOpPtr k = expand(reshape(permute(ks, {0, 2, 1}), {B, 1, D, L}), full);
  Schedule sched = schedule_of(reduce(alu(Ops::MUL, a, k), Ops::ADD, {3}));
  ASSERT_EQ(sched.kernels.size(), 1u);
  EXPECT_GE(sched.kernels[0].lane_range, 0); // vector lanes along the key's columns
}

// A ViT block's MLP output with its residual: the linear layer's rows are batch-first, the block's tokens
// sequence-first, and the sum is stored flat. Lowered at the shape the flattening reshape reads (each dim a loop of
// its own), its block unrolls rows beside the vector lanes; one flat loop had one row of two vectors.
TEST(Schedule, AFlatSumOverAPermutedMatmulUnrollsRowsBesideItsLanes) {
  const int64_t B = 32, L = 65, K = 512, N = 128;
  Shape full{B * L, N, K};
  UOpPtr h = expand(reshape(input({B * L, K}), {B * L, 1, K}), full);
  UOpPtr w = expand(reshape(permute(input({K, N}), {1, 0}), {1, N, K}), full);
  UOpPtr mm = reduce(alu(Ops::MUL, h, w), Ops::ADD, {2});
  auto seq_first = [&](const UOpPtr& x) { return reshape(permute(reshape(x, {B, L, N}), {1, 0, 2}), {L * B * N}); };
  Schedule s = schedule_of(alu(Ops::ADD, seq_first(mm), seq_first(input({B, L, N}))));
  const Kernel& k = s.kernels.back();
  ASSERT_GE(k.lane_range, 0);
  EXPECT_GT(k.ast->src.size(), 2u); // stores: more than one row of two vectors
}

// A first convolution as aten_ops/conv.cpp records it: 3 channels to 24, stride 2 (ShuffleNet's). No output dim
// divides into vectors but the output columns, which the padded input's windows read 2 floats apart: the forward
// reads a copy of the windows unfolded along the columns (each kernel column's taps contiguous), its lanes the
// output columns, and the weight gradient's sum over the columns reads the same copy in vectors. (Before: both
// scalar, the forward a 4 x 16 block of accumulators, one thread 3.8 ms; the weight gradient 1.9 ms.)
TEST(Schedule, AStrideTwoConvolutionFromThreeChannelsReadsItsWindowsUnfoldedInVectors) {
  const int64_t N = 16, C = 3, Co = 24, H = 64, OH = 32, chunk = 4;
  window::Geometry g{{3, 3}, {2, 2}, {1, 1}, {1, 1}};
  UOpPtr win = window::windows(window::pad_for_windows(input({N, C, H, H}), {OH, OH}, g), {OH, OH}, g);
  Shape full{N, Co, OH, OH, 3, 3, C};
  UOpPtr x = expand(reshape(permute(win, {0, 2, 3, 4, 5, 1}), {N, 1, OH, OH, 3, 3, C}), full);
  UOpPtr w = expand(reshape(permute(input({Co, C, 3, 3}), {0, 2, 3, 1}), {1, Co, 1, 1, 3, 3, C}), full);
  UOpPtr conv = reduce(alu(Ops::MUL, x, w), Ops::ADD, {4, 5, 6});
  // the weight gradient: (N, Co, C, positions, kernel) summed over chunks of images and the positions, then the chunks
  Shape p_shape{N / chunk, chunk, Co, C, OH, OH, 3, 3};
  UOpPtr wx = expand(reshape(win, {N / chunk, chunk, 1, C, OH, OH, 3, 3}), p_shape);
  UOpPtr wg = expand(reshape(input({N, Co, OH, OH}), {N / chunk, chunk, Co, 1, OH, OH, 1, 1}), p_shape);
  UOpPtr p = permute(alu(Ops::MUL, wx, wg), {0, 2, 3, 6, 7, 1, 4, 5});
  UOpPtr grad_w = reduce(reduce(p, Ops::ADD, {5, 6, 7}), Ops::ADD, {0});
  Schedule s = schedule({conv, grad_w}, Target{}, placeholder);
  const Kernel *forward = nullptr, *sums = nullptr;
  for (const Kernel& k : s.kernels) {
    if (k.buffers[0]->numel == N * Co * OH * OH) forward = &k;
    if (k.buffers[0]->numel == N / chunk * Co * C * 9) sums = &k;
  }
  ASSERT_NE(forward, nullptr);
  ASSERT_NE(sums, nullptr);
  ASSERT_GE(forward->lane_range, 0);
  for (const UOpPtr& st : forward->ast->src) { // the lanes store adjacent columns
    auto split = lane_split(st->src[1], lane_node(*forward));
    ASSERT_TRUE(split.has_value());
    EXPECT_EQ(split->second, 1);
  }
  EXPECT_GE(sums->lane_range, 0); // the sum over the columns in vectors
  EXPECT_TRUE(sums->vectorize_reduce);
}

// A concatenation of one half of a channel-shuffled computed value (ShuffleNet's units, and their gradients): the
// kernel reads the value through the concatenation's mask, its index clamped there. Unflattened with the channel
// loop bounded as the mask bounds it, the index divides nothing but the channel loop by the shuffle's 2 groups (the
// clamped flat index was divided by each dim, 64 divisions an element in ShuffleNet's backward kernels, which took 4
// of the step's 15 ms of kernels on one thread).
TEST(Schedule, AConcatenatedHalfOfAChannelShuffleDividesOnlyItsChannelLoop) {
  const int64_t N = 16, C = 24, H = 8;
  UOpPtr g = alu(Ops::MUL, input({N, 2 * C, H, H}), input({N, 2 * C, H, H}));
  UOpPtr s = reshape(permute(reshape(g, {N, 2, C, H, H}), {0, 2, 1, 3, 4}), {N, 2 * C, H, H});
  UOpPtr a = pad(shrink(s, {{0, N}, {C, 2 * C}, {0, H}, {0, H}}), {{0, 0}, {0, C}, {0, 0}, {0, 0}});
  UOpPtr b = pad(input({N, C, H, H}), {{0, 0}, {C, 0}, {0, 0}, {0, 0}});
  Schedule sched = schedule_of(alu(Ops::ADD, a, b));
  ASSERT_EQ(sched.kernels.size(), 1u);
  for (const UOpPtr& n : toposort(sched.kernels[0].ast))
    if (n->op == Ops::IDIV || n->op == Ops::MOD) {
      EXPECT_EQ(n->src[0]->op, Ops::RANGE);
      EXPECT_EQ(n->src[1]->const_i(), 2);
    }
}

// A ViT's tokens: a class token concatenated before its patches, the patches a convolution's (N, C, 8, 8) output
// flattened and transposed, every token's row then read as one of N x 65 rows (a reshape merges the concatenation's
// dim). The mask is on the merged row loop's remainder (r % 65 >= 1): with that remainder bounded as the mask
// bounds it, the patch read divides the row loop alone, out of the channel loop (the clamped flat index was divided
// by 8192, 128 and 64 at every element: the ViT's first layer norm 0.57 -> 0.08 ms).
TEST(Schedule, AClassTokenBeforeTransposedPatchesDividesOnlyTheRowLoop) {
  const int64_t N = 4, C = 48, P = 64;
  UOpPtr conv = alu(Ops::MUL, input({N, C, 8, 8}), input({N, C, 8, 8}));
  UOpPtr patches = permute(reshape(conv, {N, C, P}), {0, 2, 1});
  UOpPtr tokens =
      alu(Ops::ADD, pad(patches, {{0, 0}, {1, 0}, {0, 0}}), pad(input({N, 1, C}), {{0, 0}, {0, P}, {0, 0}}));
  UOpPtr rows = alu(Ops::ADD, reshape(tokens, {N * (P + 1), C}), input({N * (P + 1), C}));
  Schedule sched = schedule_of(reduce(rows, Ops::ADD, {1})); // a layer norm's sum over each row
  ASSERT_EQ(sched.kernels.size(), 1u);
  const Kernel& k = sched.kernels[0];
  int divisions = 0;
  for (const UOpPtr& n : toposort(k.ast)) {
    if (n->op != Ops::IDIV && n->op != Ops::MOD) continue;
    divisions++;
    for (const UOpPtr& r : toposort(n->src[0])) {
      if (r->op == Ops::RANGE) {
        EXPECT_EQ(r->src[0]->const_i(), N * (P + 1)) << n->tree_str();
      }
    }
  }
  EXPECT_GT(divisions, 0);
}

// Each kernel tells the device its work, its outputs times the terms each sums: the CPU device runs a kernel of
// little work on the calling thread alone (waking the pool cost more than sharing saved).
TEST(Schedule, AKernelsWorkIsItsOutputsTimesTheTermsEachSums) {
  Schedule sum = schedule_of(reduce(input({64, 128}), Ops::ADD, {1}));
  ASSERT_EQ(sum.kernels.size(), 1u);
  EXPECT_EQ(sum.kernels[0].launch.work, 64 * 128);
  Schedule add = schedule_of(alu(Ops::ADD, input({1000}), input({1000})));
  ASSERT_EQ(add.kernels.size(), 1u);
  EXPECT_EQ(add.kernels[0].launch.work, 1000);
}

TEST(Schedule, ARootReadingADeadInputOnlyWhereItWritesIsWrittenIntoIt) {
  BufferRef b = placeholder(DType::Float32, 4096);
  UOpPtr x = reshape(buffer(b), {64, 64});
  UOpPtr update = alu(Ops::ADD, alu(Ops::MUL, x, x), x); // x.mul_(x).add_(x) of a storage nothing else holds
  Schedule s = schedule({update}, Target{}, placeholder, {b});
  ASSERT_EQ(s.kernels.size(), 1u);
  EXPECT_EQ(s.kernels[0].buffers[0], b);
  EXPECT_TRUE(s.made.empty());
  EXPECT_EQ(s.results[0]->op == Ops::BUFFER ? s.results[0] : s.results[0]->src[0], buffer(b));
  // not when the input is held elsewhere (not reusable), of another dtype, read at other elements (flipped),
  // or read by a later kernel (a second root's sum of it, realized after)
  EXPECT_NE(schedule({update}, Target{}, placeholder).kernels[0].buffers[0], b);
  EXPECT_NE(schedule({cast(update, DType::Float16)}, Target{}, placeholder, {b}).kernels[0].buffers[0], b);
  UOpPtr flipped = alu(Ops::ADD, x, flip(x, {true, false}));
  EXPECT_NE(schedule({flipped}, Target{}, placeholder, {b}).kernels[0].buffers[0], b);
  Schedule two = schedule({update, reduce(x, Ops::ADD, {0, 1})}, Target{}, placeholder, {b});
  for (const Kernel& k : two.kernels)
    EXPECT_NE(k.buffers[0], b) << k.name;
}

// Adam's update of a parameter: exp_avg and exp_avg_sq from the gradient, then the parameter from both. One kernel
// writes all three (merge_elementwise), reading the gradient once and the new states as values, not from their
// buffers; with the old storages dead, each result is written in place over its old buffer.
TEST(Schedule, ElementwiseKernelsThatShareABufferAreMergedIntoOneOfSeveralOutputs) {
  const int64_t n = 4096;
  BufferRef p = placeholder(DType::Float32, n), g = placeholder(DType::Float32, n), m = placeholder(DType::Float32, n),
            v = placeholder(DType::Float32, n);
  auto c = [&](double x) { return expand(reshape(const_float(DType::Float32, x), {1}), {n}); };
  UOpPtr grad = buffer(g);
  UOpPtr avg = alu(Ops::ADD, alu(Ops::MUL, buffer(m), c(0.9)), alu(Ops::MUL, grad, c(0.1)));
  UOpPtr sq = alu(Ops::ADD, alu(Ops::MUL, buffer(v), c(0.999)), alu(Ops::MUL, alu(Ops::MUL, grad, grad), c(0.001)));
  UOpPtr param = alu(Ops::ADD, buffer(p),
                     alu(Ops::FDIV, alu(Ops::MUL, avg, c(-0.01)), alu(Ops::ADD, alu(Ops::SQRT, sq), c(1e-8))));
  Schedule s = schedule({avg, sq, param}, Target{}, placeholder);
  ASSERT_EQ(s.kernels.size(), 1u);
  const Kernel& k = s.kernels[0];
  EXPECT_EQ(k.launch.outputs, 3);
  EXPECT_EQ(k.name, "E_4096_o3");
  ASSERT_EQ(k.buffers.size(), 7u); // three outputs, then p, g, m, v each read once
  for (size_t o = 0; o < 3; o++)
    EXPECT_EQ(k.buffers[o], s.results[o]->buffer());
  int64_t loads = 0, stores = 0;
  for (const UOpPtr& x : toposort(k.ast)) {
    loads += x->op == Ops::LOAD;
    stores += x->op == Ops::STORE;
    if (x->op == Ops::LOAD) {
      EXPECT_GE(std::get<int64_t>(x->src[0]->arg), 3) << "a load of an output";
    }
  }
  EXPECT_EQ(loads, 4);
  EXPECT_EQ(stores, 3);
  // the old storages dead (reusable): each result written over its own input, nothing made
  Schedule in_place = schedule({avg, sq, param}, Target{}, placeholder, {p, m, v});
  ASSERT_EQ(in_place.kernels.size(), 1u);
  EXPECT_EQ(in_place.kernels[0].buffers[0], m);
  EXPECT_EQ(in_place.kernels[0].buffers[1], v);
  EXPECT_EQ(in_place.kernels[0].buffers[2], p);
  EXPECT_TRUE(in_place.made.empty());
}

// Not merged: kernels that share no buffer (nothing to read once), a later one that reads an earlier one's output at
// other elements (flipped), of another length, or whose inputs a kernel between them writes (it cannot move up).
TEST(Schedule, ElementwiseKernelsAreNotMergedWhereTheyShareNothingOrCannotMove) {
  const int64_t n = 4096;
  UOpPtr a = buffer(placeholder(DType::Float32, n)), b = buffer(placeholder(DType::Float32, n));
  UOpPtr x = alu(Ops::EXP, a);
  EXPECT_EQ(schedule({x, alu(Ops::EXP, b)}, Target{}, placeholder).kernels.size(), 2u);
  EXPECT_EQ(schedule({x, alu(Ops::EXP, a)}, Target{}, placeholder).kernels.size(), 1u); // one value, one root
  EXPECT_EQ(schedule({x, alu(Ops::NEG, a)}, Target{}, placeholder).kernels.size(), 1u);
  EXPECT_EQ(schedule({x, alu(Ops::ADD, b, flip(x, {true}))}, Target{}, placeholder).kernels.size(), 2u);
  UOpPtr half = buffer(placeholder(DType::Float32, n / 2));
  EXPECT_EQ(schedule({x, alu(Ops::ADD, half, shrink(x, {{0, n / 2}}))}, Target{}, placeholder).kernels.size(), 2u);
  // b += 1 in place (an ASSIGN over b's buffer), between x and a value of a and b: it reads b as written
  BufferRef bb = placeholder(DType::Float32, n);
  UOpPtr written = assign(buffer(bb), alu(Ops::ADD, buffer(bb), alu(Ops::EXP, a)), View::contiguous({n}));
  Schedule s = schedule({x, written, alu(Ops::ADD, a, written)}, Target{}, placeholder);
  for (const Kernel& k : s.kernels)
    EXPECT_EQ(k.launch.outputs, 1) << k.name;
}

// Written in place, an output of a merged kernel goes over an input only where no store after its own reads that
// input: the renderer emits the stores in order, and a later store would read the element already overwritten.
TEST(Schedule, AMergedKernelWritesInPlaceOnlyOverInputsNoLaterStoreReads) {
  const int64_t n = 4096;
  BufferRef a = placeholder(DType::Float32, n), b = placeholder(DType::Float32, n);
  UOpPtr first = alu(Ops::EXP, buffer(b));                            // stored first
  UOpPtr second = alu(Ops::ADD, alu(Ops::NEG, buffer(b)), buffer(a)); // loads a after first's store
  Schedule s = schedule({first, second}, Target{}, placeholder, {a}); // a dead, b held
  ASSERT_EQ(s.kernels.size(), 1u);
  const Kernel& k = s.kernels[0];
  ASSERT_EQ(k.launch.outputs, 2);
  EXPECT_NE(k.buffers[0], a); // first's store would overwrite the elements of a that second's loads read after it
  EXPECT_EQ(k.buffers[1], a); // second's own loads of a come before its store
  EXPECT_EQ(s.made.size(), 1u);
}

// A costly factor that an elementwise kernel's reads broadcast along most of its elements (batch norm's per-channel
// gamma / sqrt(var + eps) over (N, C, H, W)) is computed once per channel, in a kernel of its own: the big kernel
// has no square root or division left. Under 65536 elements, or where the factor reads the big tensor, it stays.
TEST(Schedule, ACostlyPerChannelFactorIsComputedOncePerChannelNotAtEveryElement) {
  auto factor_of = [](int64_t n, int64_t c, int64_t hw) {
    const Shape shape{n, c, hw};
    auto per_channel = [&](const UOpPtr& v) { return expand(reshape(v, {1, c, 1}), shape); };
    UOpPtr eps = expand(reshape(const_float(DType::Float32, 1e-5), {1, 1, 1}), shape);
    UOpPtr factor =
        alu(Ops::FDIV, per_channel(input({c})), alu(Ops::SQRT, alu(Ops::ADD, per_channel(input({c})), eps)));
    return alu(Ops::MUL, input(shape), factor);
  };
  auto costly_ops = [](const Kernel& k) {
    int64_t ops = 0;
    for (const UOpPtr& u : toposort(k.ast))
      ops += u->op == Ops::SQRT || u->op == Ops::FDIV;
    return ops;
  };
  UOpPtr big = factor_of(64, 32, 1024);
  Schedule s = schedule({big}, Target{}, placeholder);
  ASSERT_EQ(s.kernels.size(), 2u);
  EXPECT_EQ(s.kernels[0].loops, (Shape{32})) << s.kernels[0].name; // the factor, once per channel
  EXPECT_GT(costly_ops(s.kernels[0]), 0);
  EXPECT_EQ(costly_ops(s.kernels[1]), 0) << s.kernels[1].name;
  UOpPtr small = factor_of(2, 32, 512); // 32768 elements
  Schedule t = schedule({small}, Target{}, placeholder);
  ASSERT_EQ(t.kernels.size(), 1u);
  EXPECT_GT(costly_ops(t.kernels[0]), 0);
  // a costly op over the big tensor itself stays in its kernel (beside the factor's own)
  Schedule u = schedule({alu(Ops::SQRT, alu(Ops::MUL, big, big))}, Target{}, placeholder);
  ASSERT_EQ(u.kernels.size(), 2u);
  EXPECT_EQ(u.kernels[0].loops, (Shape{32}));
  EXPECT_EQ(costly_ops(u.kernels[1]), 1);
}
