// The CPU thread pool: every index of a parallel_for runs exactly once, whatever the split, and a
// thread held up inside its block does not hold up the rest of it.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "runtime/thread_pool.h"

using tiny::runtime::ThreadPool;

static std::vector<int> counts_after(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> counts(static_cast<size_t>(n));
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++)
      counts[static_cast<size_t>(i)]++;
  });
  std::vector<int> out;
  for (auto& c : counts)
    out.push_back(c.load());
  return out;
}

TEST(ThreadPool, EveryIndexRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 3, 7, 8, 16, 17, 100, 1000, 12345})
      for (int round = 0; round < 3; round++)
        EXPECT_EQ(counts_after(pool, n), std::vector<int>(static_cast<size_t>(n), 1))
            << threads << " threads, n = " << n;
  }
}

TEST(ThreadPool, OthersTakeOverTheBlockOfAThreadThatIsHeldUp) {
  ThreadPool pool(2);
  // The worker's first chunk sleeps; the caller waits for the worker to start it, then runs its own
  // block and the rest of the worker's, so the worker runs only the chunk it is held in.
  constexpr int64_t n = 64;
  std::vector<std::thread::id> ran_on(n);
  std::atomic<bool> worker_started{false};
  auto caller = std::this_thread::get_id();
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    if (std::this_thread::get_id() == caller) {
      while (!worker_started)
        std::this_thread::yield();
    } else if (!worker_started.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (int64_t i = b; i < e; i++)
      ran_on[static_cast<size_t>(i)] = std::this_thread::get_id();
  });
  int64_t by_caller = 0;
  for (auto id : ran_on)
    by_caller += id == caller;
  EXPECT_EQ(by_caller, n - n / 2 / 8) << "the worker ran more than the chunk it was held up in";
}

TEST(ThreadPool, ALimitSizesEachCallAndEveryIndexStillRunsOnce) {
  ThreadPool pool(3);
  int limit = 3;
  ThreadPool::set_limit([&] { return limit; });
  for (int l : {2, 1, 3, 5, 2}) { // a larger limit than the pool keeps the pool's threads
    limit = l;
    EXPECT_EQ(pool.size(), std::min(l, 3));
    for (int64_t n : {2, 5, 100, 1001})
      EXPECT_EQ(counts_after(pool, n), std::vector<int>(static_cast<size_t>(n), 1)) << "limit " << l << ", n = " << n;
  }
  ThreadPool::set_limit({});
  EXPECT_EQ(pool.size(), 3);
}

TEST(ThreadPool, ACallSizedByItsCallerRunsOnThatManyThreadsAtMost) {
  ThreadPool pool(3);
  for (int threads : {1, 2, 3, 8, 0}) { // at least one, at most the pool's
    std::mutex mu;
    std::set<std::thread::id> ran_on;
    std::vector<std::atomic<int>> counts(64);
    pool.parallel_for(
        64,
        [&](int64_t b, int64_t e) {
          {
            std::lock_guard lock(mu);
            ran_on.insert(std::this_thread::get_id());
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(1)); // long enough for every thread to join
          for (int64_t i = b; i < e; i++)
            counts[static_cast<size_t>(i)]++;
        },
        threads);
    EXPECT_LE(ran_on.size(), static_cast<size_t>(std::clamp(threads, 1, 3))) << threads << " threads";
    if (threads <= 1) {
      EXPECT_EQ(*ran_on.begin(), std::this_thread::get_id());
    }
    for (const auto& c : counts)
      EXPECT_EQ(c.load(), 1);
  }
}
