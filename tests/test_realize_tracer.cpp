// The realize engine's work as a profiler sees it (runtime/realize.h: RealizeTracer), no torch involved.
#include <gtest/gtest.h>

#include <random>

#include "runtime/device.h"
#include "runtime/lazy_buffer.h"
#include "runtime/realize.h"

using namespace tiny;
using namespace tiny::runtime;

namespace {

struct SpanList : RealizeTracer {
  std::vector<RealizeSpan> spans;
  void record(const RealizeSpan& span) override { spans.push_back(span); }
  std::vector<RealizeSpan> of(RealizeSpan::Kind kind) const {
    std::vector<RealizeSpan> out;
    for (const RealizeSpan& s : spans)
      if (s.kind == kind) out.push_back(s);
    return out;
  }
};

// Installs a tracer for one scope.
struct Tracing {
  explicit Tracing(RealizeTracer& t) { set_realize_tracer(&t); }
  ~Tracing() { set_realize_tracer(nullptr); }
};

UOpPtr input(int64_t n) {
  auto b = std::make_shared<Buffer>(cpu_device(), DType::Float32, n);
  std::fill_n(static_cast<float*>(b->ptr()), n, 1.0f);
  return buffer(b);
}

// exp(a + b) * c, summed: an elementwise chain into a reduction, with a constant no other test uses (its
// schedule is new to this process).
UOpPtr graph(const UOpPtr& a, const UOpPtr& b, double c) {
  int64_t n = a->buffer()->numel;
  auto scaled =
      alu(Ops::MUL, alu(Ops::EXP, alu(Ops::ADD, a, b)), expand(reshape(const_float(DType::Float32, c), {1}), {n}));
  return reduce(scaled, Ops::ADD, {0});
}

bool inside(const RealizeSpan& inner, const RealizeSpan& outer) {
  return outer.begin_ns <= inner.begin_ns && inner.end_ns <= outer.end_ns;
}

} // namespace

TEST(RealizeTracer, ASyncReportsItsSchedulingCompilingAndKernelsInsideIt) {
  double c = static_cast<double>(std::random_device{}() % 1000000) + 0.25;
  SpanList seen;
  int64_t k0 = stats().kernels;
  {
    Tracing on(seen);
    realize_all({graph(input(4096), input(4096), c)});
  }
  int64_t launched = stats().kernels - k0;
  auto syncs = seen.of(RealizeSpan::Kind::Sync);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0].name, "tiny::sync");
  EXPECT_EQ(syncs[0].count, launched);
  EXPECT_FALSE(syncs[0].cached);
  auto kernels = seen.of(RealizeSpan::Kind::Kernel);
  ASSERT_EQ(static_cast<int64_t>(kernels.size()), launched);
  for (const RealizeSpan& k : kernels) {
    EXPECT_TRUE(inside(k, syncs[0]));
    EXPECT_LE(k.begin_ns, k.end_ns);
    EXPECT_EQ(k.device, &cpu_device());
    EXPECT_FALSE(k.name.empty());
  }
  ASSERT_EQ(seen.of(RealizeSpan::Kind::Schedule).size(), 1u);
  EXPECT_EQ(seen.of(RealizeSpan::Kind::Schedule)[0].count, launched);
  EXPECT_FALSE(seen.of(RealizeSpan::Kind::Compile).empty());
  for (const RealizeSpan& s : seen.spans)
    EXPECT_TRUE(inside(s, syncs[0]));
  // the sync is reported last: after the spans it encloses
  EXPECT_EQ(seen.spans.back().kind, RealizeSpan::Kind::Sync);
}

TEST(RealizeTracer, AReplayedScheduleReportsItsKernelsAsCached) {
  double c = static_cast<double>(std::random_device{}() % 1000000) + 0.75;
  realize_all({graph(input(1024), input(1024), c)}); // recorded in the schedule cache
  SpanList seen;
  int64_t hits = stats().schedule_hits;
  {
    Tracing on(seen);
    realize_all({graph(input(1024), input(1024), c)}); // the same graph on other buffers: a replay
  }
  EXPECT_EQ(stats().schedule_hits - hits, 1);
  auto syncs = seen.of(RealizeSpan::Kind::Sync);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_TRUE(syncs[0].cached);
  EXPECT_TRUE(seen.of(RealizeSpan::Kind::Schedule).empty());
  EXPECT_TRUE(seen.of(RealizeSpan::Kind::Compile).empty());
  auto kernels = seen.of(RealizeSpan::Kind::Kernel);
  ASSERT_FALSE(kernels.empty());
  for (const RealizeSpan& k : kernels)
    EXPECT_TRUE(k.cached);
}

TEST(RealizeTracer, NothingIsReportedWithoutATracer) {
  SpanList seen;
  { Tracing on(seen); }
  realize_all({graph(input(256), input(256), 3.5)});
  EXPECT_TRUE(seen.spans.empty());
}
