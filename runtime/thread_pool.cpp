#include "runtime/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace tiny::runtime {

// Chunks per thread's block: enough that a thread descheduled mid-call leaves little for the others
// to wait on, few enough that a chunk's call costs nothing next to its work.
static constexpr int64_t kChunksPerThread = 8;

static std::function<int()>& limit() {
  static std::function<int()> f;
  return f;
}

void ThreadPool::set_limit(std::function<int()> f) { limit() = std::move(f); }

ThreadPool::ThreadPool(int threads) : threads_(threads), chunks_(new std::atomic<uint64_t>[threads]) {}

int ThreadPool::size() const { return limit() ? std::clamp(limit()(), 1, threads_) : threads_; }

void ThreadPool::start_workers() {
  std::call_once(started_, [this] {
    for (int i = 1; i < threads_; i++)
      workers_.emplace_back([this, i] { work(i); });
  });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_)
    t.join();
}

ThreadPool& ThreadPool::get() {
  static ThreadPool* pool = [] {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("TINY_THREADS")) n = std::atoi(env);
    return new ThreadPool(n < 1 ? 1 : n); // never destroyed: kernels may run during static teardown
  }();
  return *pool;
}

static std::pair<int64_t, int64_t> block(int64_t n, int64_t parts, int64_t i) {
  int64_t per = n / parts, extra = n % parts;
  int64_t b = i * per + (i < extra ? i : extra);
  return {b, b + per + (i < extra ? 1 : 0)};
}

static int64_t chunk_count(int64_t block_size) { return std::min(block_size, kChunksPerThread); }

bool ThreadPool::claim(int owner, bool own, int64_t& begin, int64_t& end) {
  std::atomic<uint64_t>& slot = chunks_[owner];
  uint64_t range = slot.load(std::memory_order_relaxed);
  uint64_t chunk;
  for (;;) {
    uint64_t first = range >> 32, last = range & 0xffffffffu;
    if (first >= last) return false;
    chunk = own ? first : last - 1;
    uint64_t next = own ? (first + 1) << 32 | last : first << 32 | (last - 1);
    if (slot.compare_exchange_weak(range, next, std::memory_order_acq_rel, std::memory_order_relaxed)) break;
  }
  auto [b, e] = block(n_, parts_, owner);
  auto [cb, ce] = block(e - b, chunk_count(e - b), static_cast<int64_t>(chunk));
  begin = b + cb;
  end = b + ce;
  return true;
}

void ThreadPool::run_chunks(int id) {
  int64_t b, e;
  while (claim(id, true, b, e))
    (*job_)(b, e);
  for (int k = 1; k < parts_; k++)
    while (claim((id + k) % parts_, false, b, e))
      (*job_)(b, e);
}

// How long a worker that finished a job watches for the next before it sleeps: a schedule's kernels
// follow each other closely, and waking a sleeping thread costs more than a small kernel's work.
static std::chrono::microseconds spin_time() {
  static const auto us = [] {
    const char* env = std::getenv("TINY_SPIN_US");
    return std::chrono::microseconds(env ? std::atoll(env) : 200);
  }();
  return us;
}

// Waits up to spin_time() for done(): a few microseconds of pause instructions, then yields the core
// between checks, so that on a loaded machine the waiting thread gives its time to whatever else runs
// there (the caller's own thread among them) instead of holding it.
template <class Done> static void spin_until(Done done) {
  auto until = std::chrono::steady_clock::now() + spin_time();
  for (int i = 1; !done(); i++) {
    if (i < 256) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    if (std::chrono::steady_clock::now() > until) return;
    std::this_thread::yield();
  }
}

void ThreadPool::work(int id) {
  uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (!open_ || id >= parts_) continue; // woken after the others ran every chunk, or not needed
      active_++;
    }
    run_chunks(id);
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mu_);
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_for(n, fn, size());
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int threads) {
  const int parts = std::clamp(threads, 1, threads_);
  if (parts < 2 || n < 2) {
    if (n > 0) fn(0, n);
    return;
  }
  std::lock_guard run_lock(run_mu_);
  start_workers();
  {
    std::lock_guard lock(mu_);
    job_ = &fn;
    n_ = n;
    parts_ = parts;
    for (int i = 0; i < parts; i++) {
      auto [b, e] = block(n, parts, i);
      chunks_[i].store(static_cast<uint64_t>(chunk_count(e - b)), std::memory_order_relaxed);
    }
    open_ = true;
    active_ = 0;
    generation_++;
  }
  cv_.notify_all();
  run_chunks(0);
  {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  // The workers that joined are running the last chunks: they end within a chunk's time.
  spin_until([&] { return active_.load(std::memory_order_acquire) == 0; });
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return active_.load(std::memory_order_acquire) == 0; });
}

} // namespace tiny::runtime
