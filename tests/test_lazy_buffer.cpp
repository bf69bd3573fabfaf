// LazyBuffer's storage model: what a read of a storage returns after whole and partial writes, and what
// recording them costs in graph nodes.
#include "runtime/device.h"
#include "runtime/lazy_buffer.h"
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <memory>
#include <numeric>
#include <vector>

using namespace tiny;
using namespace tiny::runtime;

namespace {

StridedView rows(int64_t r, int64_t c) { return {{r, c}, {c, 1}, 0, DType::Float32}; }

std::vector<float> host(LazyBuffer& b, const StridedView& v) {
  std::vector<float> out(prod(v.sizes));
  b.read_host(v, out.data());
  return out;
}

// a (4, 16) storage filled with 0..63, realized
void fill(LazyBuffer& b) {
  std::vector<float> x(64);
  std::iota(x.begin(), x.end(), 0.0f);
  b.write_host({{64}, {1}, 0, DType::Float32}, x.data());
}

} // namespace

TEST(LazyBuffer, AResultReadWholeOrByAWindowNeedsNoFlatteningNode) {
  LazyBuffer src(cpu_device(), 64 * 4), dst(cpu_device(), 64 * 4);
  fill(src);
  UOpPtr x = src.read(rows(4, 16));
  UOpPtr value = alu(Ops::ADD, x, x);
  size_t made = uops_made();
  dst.write(rows(4, 16), value); // every op's result
  EXPECT_EQ(dst.read(rows(4, 16)), value);
  EXPECT_EQ(uops_made(), made); // no node for the storage's flat content yet
  EXPECT_TRUE(dst.pending());
  // a row of it (y[1]) is one view of the value, still without the flattening
  UOpPtr row = dst.read({{16}, {1}, 16, DType::Float32});
  EXPECT_EQ(uops_made(), made + 1);
  EXPECT_EQ(row->src[0], value);
  // read another way (transposed, then a window), the flat content is built and the values are the sum
  std::vector<float> t = host(dst, {{16, 4}, {1, 16}, 0, DType::Float32});
  for (int64_t i = 0; i < 16; i++)
    for (int64_t j = 0; j < 4; j++)
      EXPECT_EQ(t[i * 4 + j], 2.0f * static_cast<float>(j * 16 + i));
  std::vector<float> w = host(dst, {{2, 3}, {16, 1}, 17, DType::Float32});
  EXPECT_EQ(w, (std::vector<float>{34, 36, 38, 66, 68, 70}));
}

TEST(LazyBuffer, AResultWrittenWholeThenPartlyHoldsBoth) {
  LazyBuffer src(cpu_device(), 64 * 4), dst(cpu_device(), 64 * 4);
  fill(src);
  UOpPtr x = src.read(rows(4, 16));
  dst.write(rows(4, 16), alu(Ops::MUL, x, x));
  // row 1 replaced by a constant: the deferred flattening is the content the partial write changes
  dst.write({{16}, {1}, 16, DType::Float32}, expand(reshape(const_float(DType::Float32, -1.0), {1}), {16}));
  std::vector<float> got = host(dst, rows(4, 16));
  for (int64_t i = 0; i < 64; i++)
    EXPECT_EQ(got[i], i / 16 == 1 ? -1.0f : static_cast<float>(i * i)) << i;
}

TEST(LazyBuffer, TheSameViewReadAgainIsTheSameNodeUntilTheContentChanges) {
  LazyBuffer b(cpu_device(), 64 * 4);
  fill(b);
  StridedView col{{4}, {16}, 2, DType::Float32};
  UOpPtr first = b.read(col);
  size_t made = uops_made();
  EXPECT_EQ(b.read(col), first);
  EXPECT_EQ(uops_made(), made);
  EXPECT_EQ(host(b, col), (std::vector<float>{2, 18, 34, 50}));
  // a write into the column: the next read of it sees the new content, not the node read before
  b.write({{1}, {1}, 18, DType::Float32}, reshape(const_float(DType::Float32, 7.0), {1}));
  UOpPtr again = b.read(col);
  EXPECT_NE(again, first);
  EXPECT_EQ(host(b, col), (std::vector<float>{2, 7, 34, 50}));
  // another view of the same storage replaces the remembered one; both read right
  EXPECT_EQ(host(b, {{2}, {1}, 17, DType::Float32}), (std::vector<float>{17, 7}));
  EXPECT_EQ(host(b, col), (std::vector<float>{2, 7, 34, 50}));
}

TEST(LazyBuffer, ATensorAndAViewOfItReadInTurnAreEachBuiltOnce) {
  LazyBuffer b(cpu_device(), 64 * 4);
  fill(b);
  StridedView whole = rows(4, 16), t{{16, 4}, {1, 16}, 0, DType::Float32}, row{{16}, {1}, 32, DType::Float32};
  // x @ x.t(), y + y[0]: the two reads alternate, op after op. Only the buffer holds the nodes (raw pointers
  // here): a node it forgot would die and be built anew.
  const UOp *x = b.read(whole).get(), *xt = b.read(t).get();
  size_t made = uops_made();
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(b.read(whole).get(), x);
    EXPECT_EQ(b.read(t).get(), xt);
  }
  EXPECT_EQ(uops_made(), made);
  // a third view pushes out the one read longest ago (whole), and is remembered beside the transpose
  const UOp* r = b.read(row).get();
  EXPECT_EQ(b.read(t).get(), xt);
  EXPECT_EQ(b.read(row).get(), r);
  EXPECT_EQ(uops_made(), made + 1);
  EXPECT_EQ(host(b, row), (std::vector<float>{32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47}));
  // a write drops both: the next reads see the new content
  UOpPtr before = b.read(t);
  b.write({{1}, {1}, 32, DType::Float32}, reshape(const_float(DType::Float32, -5.0), {1}));
  EXPECT_NE(b.read(t), before);
  EXPECT_EQ(host(b, row)[0], -5.0f);
  EXPECT_EQ(host(b, t)[2], -5.0f);
}

TEST(LazyBuffer, AStorageWrittenWholeInPlaceKeepsTheValueUnflattened) {
  LazyBuffer b(cpu_device(), 64 * 4);
  fill(b);
  UOpPtr x = b.read(rows(4, 16));
  UOpPtr value = alu(Ops::MUL, x, x); // b.mul_(b), as an optimizer updates a parameter
  size_t made = uops_made();
  b.write(rows(4, 16), value);
  EXPECT_EQ(b.read(rows(4, 16)), value);
  EXPECT_EQ(uops_made(), made);
  // it reads back squared, realized, and a strided window of it after the sync too
  std::vector<float> got = host(b, rows(4, 16));
  for (int64_t i = 0; i < 64; i++)
    EXPECT_EQ(got[i], static_cast<float>(i * i)) << i;
  EXPECT_FALSE(b.pending());
  EXPECT_EQ(host(b, {{2}, {16}, 1, DType::Float32}), (std::vector<float>{1, 17 * 17}));
}

namespace {

// The buffer a realized storage holds (its content is that BUFFER node, or a view of it).
const BufferBase* buffer_of(LazyBuffer& b) {
  UOpPtr n = b.read({{64}, {1}, 0, DType::Float32});
  while (n->op != Ops::BUFFER)
    n = n->src[0];
  return n->buffer().get();
}

} // namespace

TEST(LazyBuffer, AStorageUpdatedInPlaceKeepsItsBufferUnlessAnotherStorageHoldsIt) {
  LazyBuffer b(cpu_device(), 64 * 4), copy(cpu_device(), 64 * 4);
  fill(b);
  const BufferBase* before = buffer_of(b);
  UOpPtr x = b.read(rows(4, 16));
  b.write(rows(4, 16), alu(Ops::ADD, alu(Ops::MUL, x, x), x)); // b.mul_(b).add_(b): x read where written
  x.reset();
  std::vector<float> got = host(b, rows(4, 16));
  for (int64_t i = 0; i < 64; i++)
    EXPECT_EQ(got[i], static_cast<float>(i * i + i)) << i;
  EXPECT_EQ(buffer_of(b), before); // written into the buffer it read: nothing else held it
  // a copy of it holds the same buffer (a whole copy of a realized storage is its content): b's next update
  // goes to a new buffer, and the copy keeps the old values
  copy.write(rows(4, 16), b.read(rows(4, 16)));
  x = b.read(rows(4, 16));
  b.write(rows(4, 16), alu(Ops::MUL, x, x));
  x.reset();
  got = host(b, rows(4, 16));
  std::vector<float> kept = host(copy, rows(4, 16));
  for (int64_t i = 0; i < 64; i++) {
    float v = static_cast<float>(i * i + i);
    EXPECT_EQ(got[i], v * v) << i;
    EXPECT_EQ(kept[i], v) << i;
  }
  EXPECT_NE(buffer_of(b), before);
  EXPECT_EQ(buffer_of(copy), before);
}

TEST(LazyBuffer, AValueHeldAcrossTheSyncThatUpdatesItsStorageReadsTheOldValues) {
  // What an op's code keeps across a sync (linalg.eig's steps, another thread's op in the middle of its
  // recording) reads the storage's old buffer after the sync: the update then goes to a new buffer.
  for (bool hold_the_update : {false, true}) {
    LazyBuffer b(cpu_device(), 64 * 4), later(cpu_device(), 64 * 4);
    fill(b);
    UOpPtr x = b.read(rows(4, 16));
    UOpPtr square = alu(Ops::MUL, x, x);
    b.write(rows(4, 16), square);
    // held: the read of the old values (not a storage's), or the update itself
    UOpPtr kept = hold_the_update ? square : x;
    x.reset();
    square.reset();
    std::vector<float> got = host(b, rows(4, 16));
    later.write(rows(4, 16), alu(Ops::ADD, kept, kept));
    std::vector<float> doubled = host(later, rows(4, 16));
    for (int64_t i = 0; i < 64; i++) {
      auto v = static_cast<float>(i);
      EXPECT_EQ(got[i], v * v) << i;
      EXPECT_EQ(doubled[i], hold_the_update ? 2 * v * v : 2 * v) << hold_the_update << " " << i;
    }
  }
}

TEST(LazyBuffer, ARealizedStorageIsReadFromHostMemoryWithoutRunningAnything) {
  LazyBuffer src(cpu_device(), 64 * 4), dst(cpu_device(), 64 * 4), never(cpu_device(), 64 * 4);
  fill(src);
  ASSERT_FALSE(src.pending());
  const int64_t kernels = stats().kernels.load();
  std::vector<float> t(64, -1.0f);
  ASSERT_TRUE(src.read_host_if_realized({{16, 4}, {1, 16}, 0, DType::Float32}, t.data())); // transposed
  for (int64_t i = 0; i < 16; i++)
    for (int64_t j = 0; j < 4; j++)
      EXPECT_EQ(t[i * 4 + j], static_cast<float>(j * 16 + i));
  std::vector<float> w(6);
  ASSERT_TRUE(src.read_host_if_realized({{2, 3}, {16, 1}, 17, DType::Float32}, w.data())); // a window
  EXPECT_EQ(w, (std::vector<float>{17, 18, 19, 33, 34, 35}));
  std::vector<int32_t> bits(2);
  ASSERT_TRUE(src.read_host_if_realized({{2}, {1}, 1, DType::Int32}, bits.data())); // its bytes as another dtype
  EXPECT_EQ(bits[0], std::bit_cast<int32_t>(1.0f));
  EXPECT_EQ(stats().kernels.load(), kernels);
  std::vector<int64_t> wide(2);
  EXPECT_FALSE(src.read_host_if_realized({{2}, {1}, 0, DType::Int64}, wide.data())); // another element size
  EXPECT_FALSE(never.read_host_if_realized(rows(4, 16), t.data()));                  // never written
  // a pending result is not realized by it: false, and still pending
  UOpPtr x = src.read(rows(4, 16));
  dst.write(rows(4, 16), alu(Ops::ADD, x, x));
  EXPECT_FALSE(dst.read_host_if_realized(rows(4, 16), t.data()));
  EXPECT_TRUE(dst.pending());
  EXPECT_EQ(stats().kernels.load(), kernels);
  synchronize();
  ASSERT_TRUE(dst.read_host_if_realized({{4}, {16}, 1, DType::Float32}, w.data())); // column 1
  EXPECT_EQ(std::vector<float>(w.begin(), w.begin() + 4), (std::vector<float>{2, 34, 66, 98}));
}

// The CPU device's queue (set_cpu_queues): kernels run on a thread of their own while the host goes on.
namespace {
struct CpuQueues : ::testing::Test {
  void SetUp() override { set_cpu_queues(true); }
  void TearDown() override { set_cpu_queues(false); }
};

// sqrt(x * x + x) eight times over: a kernel of some milliseconds over 4M floats
UOpPtr slow(UOpPtr v) {
  for (int i = 0; i < 8; i++)
    v = alu(Ops::SQRT, alu(Ops::ADD, alu(Ops::MUL, v, v), v));
  return v;
}

float slow(float x) {
  for (int i = 0; i < 8; i++)
    x = std::sqrt(x * x + x);
  return x;
}
} // namespace

TEST_F(CpuQueues, AHostWriteIntoABlockFreedWhileItsKernelIsQueuedLandsAfterThatKernel) {
  constexpr int64_t n = int64_t{1} << 22;
  const StridedView all{{n}, {1}, 0, DType::Float32};
  std::vector<float> ones(n, 1.0f), twos(n, 2.0f), out(n);
  auto x = std::make_unique<LazyBuffer>(cpu_device(), n * 4);
  x->write_host(all, ones.data());
  LazyBuffer y(cpu_device(), n * 4), z(cpu_device(), n * 4);
  y.write(all, slow(x->read(all)));
  flush();   // y's kernel on the queue, reading x's block
  x.reset(); // x's block back in the allocator's cache: z's write below takes it, behind y's kernel
  z.write_host(all, twos.data());
  y.read_host(all, out.data());
  const float expected = slow(1.0f); // (slow(2.0f) is larger by ~1)
  EXPECT_EQ(std::count_if(out.begin(), out.end(), [&](float v) { return std::abs(v - expected) < 1e-5f; }), n);
  z.read_host(all, out.data());
  EXPECT_EQ(std::count(out.begin(), out.end(), 2.0f), n);
}

TEST_F(CpuQueues, AReadWaitsForTheLastKernelThatWritesItsBuffer) {
  constexpr int64_t n = int64_t{1} << 22;
  const StridedView all{{n}, {1}, 0, DType::Float32};
  std::vector<float> ones(n, 1.0f), out(n);
  LazyBuffer x(cpu_device(), n * 4), small(cpu_device(), 64 * 4);
  x.write_host(all, ones.data());
  small.write(rows(4, 16), expand(reshape(const_like(x.read(all), 3.0f), {1, 1}), {4, 16}));
  flush(); // small's kernel first
  x.write(all, slow(x.read(all)));
  flush(); // then the slow kernel, rewriting x's block in place
  EXPECT_EQ(host(small, rows(4, 16)), std::vector<float>(64, 3.0f)); // without waiting for x's kernel
  x.read_host(all, out.data());
  const float expected = slow(1.0f);
  EXPECT_EQ(std::count_if(out.begin(), out.end(), [&](float v) { return std::abs(v - expected) < 1e-5f; }), n);
}

TEST_F(CpuQueues, ResultsOfFlushedStepsReadBackAsSyncedOnes) {
  constexpr int64_t n = 4096;
  const StridedView all{{n}, {1}, 0, DType::Float32};
  std::vector<float> host_x(n), out(n);
  std::iota(host_x.begin(), host_x.end(), 0.0f);
  LazyBuffer x(cpu_device(), n * 4);
  x.write_host(all, host_x.data());
  for (int step = 0; step < 20; step++) { // in place, as an optimizer's update: each step reads the last one's
    UOpPtr v = x.read(all), half = expand(reshape(const_like(v, 0.5), {1}), {n});
    x.write(all, alu(Ops::ADD, v, alu(Ops::MUL, v, half)));
    flush();
    for (float& v : host_x)
      v = v + v * 0.5f;
  }
  x.read_host(all, out.data());
  EXPECT_EQ(out, host_x);
  synchronize(); // nothing pending: it waits for the queue, and returns
  EXPECT_FALSE(x.pending());
}
