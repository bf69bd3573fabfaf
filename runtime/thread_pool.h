#pragma once
// A persistent pool of worker threads that kernels split their outermost loop across.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tiny::runtime {

class ThreadPool {
public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  int size() const; // threads a kernel runs on: the pool's, at most the limit
  // A kernel runs on at most limit() threads from now on (the extension passes torch's
  // get_num_threads, so that torch.set_num_threads sizes tiny's kernels too).
  static void set_limit(std::function<int()> limit);
  // Runs fn over [0, n): each thread owns one contiguous block (the caller the first) and runs it in
  // order, a few chunks at a time; a thread that finishes its block takes the last chunks of the
  // others', so a thread the machine deschedules (another process, another library's spinning
  // threads) delays the call by at most a chunk. The caller returns once every chunk has run.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
  // The same on `threads` threads (at most the pool's): a kernel's, sized when it was launched (a CPU device's
  // queue runs it later, on a thread of its own, where the limit is not the launching thread's).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int threads);
  static ThreadPool& get(); // sized by TINY_THREADS, default the hardware's

private:
  void work(int id);
  void start_workers();
  void run_chunks(int id);
  bool claim(int owner, bool own, int64_t& begin, int64_t& end);
  int threads_;
  std::once_flag started_;
  std::vector<std::thread> workers_; // started at the first kernel that runs on them
  int parts_ = 0;                    // threads the current job is split for
  std::mutex run_mu_;                // one parallel_for at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0;
  std::atomic<uint64_t> generation_ = 0; // written under mu_; workers spin on it before waiting
  bool open_ = false;                    // workers may still join the current job
  std::atomic<int> active_ = 0;          // workers that joined it (under mu_) and have not finished
  bool stop_ = false;
  // Per thread: the chunks of its block not yet claimed, as (first << 32 | end); the owner claims
  // from the front, the others from the back.
  std::unique_ptr<std::atomic<uint64_t>[]> chunks_;
};

} // namespace tiny::runtime
