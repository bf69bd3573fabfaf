// The CPU device's in-order queue: what the host waits for before it reads a block, and when it may write one.
#include "runtime/queue.h"
#include <chrono>
#include <future>
#include <gtest/gtest.h>
#include <stdexcept>

using namespace tiny::runtime;

namespace {

// A task that runs until the test opens it.
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  std::function<void()> task() {
    return [f = opened] { f.wait(); };
  }
};

constexpr auto kPatience = std::chrono::seconds(20);

} // namespace

TEST(Queue, AReadWaitsForTheTasksThatWriteItsBlockNotForTheTasksAfterThem) {
  Queue q;
  int a = 0, b = 0, c = 0;
  void* const blocks[] = {&a, &b, &c};
  Gate gate;
  q.push([&] { a = 1; }, {blocks, 1});
  q.push(gate.task(), {blocks + 1, 1}, {blocks, 1}); // writes b, reads a: runs until the gate opens
  q.push([&] { c = 3; }, {blocks + 2, 1});
  auto read_a = std::async(std::launch::async, [&] { q.wait_for_writes(&a); });
  ASSERT_EQ(read_a.wait_for(kPatience), std::future_status::ready) << "the read of a waited for the gate";
  EXPECT_EQ(a, 1);
  auto read_untouched = std::async(std::launch::async, [&] { q.wait_for_writes(&gate); }); // a block no task writes
  ASSERT_EQ(read_untouched.wait_for(kPatience), std::future_status::ready);
  auto read_c = std::async(std::launch::async, [&] { q.wait_for_writes(&c); });
  EXPECT_EQ(read_c.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout); // behind the gate
  gate.open.set_value();
  read_c.get();
  EXPECT_EQ(c, 3);
}

TEST(Queue, ABlockIsInUseUntilTheLastTaskThatReadsOrWritesItHasRun) {
  Queue q;
  int a = 0, b = 0, free = 0;
  void* const blocks[] = {&a, &b};
  Gate gate;
  q.push(gate.task(), {blocks, 1}, {blocks + 1, 1}); // writes a, reads b
  EXPECT_TRUE(q.uses(&a));
  EXPECT_TRUE(q.uses(&b)); // a host write into b must wait for the task reading it
  EXPECT_FALSE(q.uses(&free));
  gate.open.set_value();
  q.wait();
  EXPECT_FALSE(q.uses(&a));
  EXPECT_FALSE(q.uses(&b));
}

TEST(Queue, ALaterWriteOfABlockIsWaitedForByItsReads) {
  Queue q;
  int a = 0;
  void* const blocks[] = {&a};
  Gate gate;
  q.push([&] { a = 1; }, blocks);
  q.push(gate.task(), {});
  q.push([&] { a = 2; }, blocks); // behind the gate
  auto read_a = std::async(std::launch::async, [&] {
    q.wait_for_writes(&a);
    return a;
  });
  EXPECT_EQ(read_a.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  gate.open.set_value();
  EXPECT_EQ(read_a.get(), 2);
}

TEST(Queue, AnExceptionOfATaskIsRethrownByTheNextWaitOnce) {
  Queue q;
  int a = 0;
  void* const blocks[] = {&a};
  q.push([] { throw std::runtime_error("a task failed"); }, {});
  q.push([&] { a = 1; }, blocks);
  EXPECT_THROW(q.wait_for_writes(&a), std::runtime_error);
  EXPECT_EQ(a, 1); // the tasks after it ran
  EXPECT_NO_THROW(q.wait());
}
