#pragma once
// A persistent pool of worker threads that kernels split their outermost loop across.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tiny::runtime {

class ThreadPool {
public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs fn over [0, n) split into one contiguous block per thread; the caller runs the first.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
  static ThreadPool& get(); // sized by TINY_THREADS, default the hardware's

private:
  void work(int id);
  std::vector<std::thread> workers_;
  std::mutex run_mu_; // one parallel_for at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0;
  uint64_t generation_ = 0;
  int remaining_ = 0;
  bool stop_ = false;
};

} // namespace tiny::runtime
