#include "runtime/thread_pool.h"

#include <cstdlib>

namespace tiny::runtime {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; i++)
    workers_.emplace_back([this, i] { work(i); });
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

static std::pair<int64_t, int64_t> block(int64_t n, int parts, int i) {
  int64_t per = n / parts, extra = n % parts;
  int64_t b = i * per + (i < extra ? i : extra);
  return {b, b + per + (i < extra ? 1 : 0)};
}

void ThreadPool::work(int id) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = n_;
    }
    auto [b, e] = block(n, size(), id);
    if (b < e) (*job)(b, e);
    {
      std::lock_guard lock(mu_);
      if (--remaining_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (workers_.empty() || n < 2) {
    if (n > 0) fn(0, n);
    return;
  }
  std::lock_guard run_lock(run_mu_);
  {
    std::lock_guard lock(mu_);
    job_ = &fn;
    n_ = n;
    remaining_ = static_cast<int>(workers_.size());
    generation_++;
  }
  cv_.notify_all();
  auto [b, e] = block(n, size(), 0);
  if (b < e) fn(b, e);
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return remaining_ == 0; });
}

} // namespace tiny::runtime
