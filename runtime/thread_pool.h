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

// Another library's team of threads that kernels may run on instead of the pool's own (torch's intra-op
// threads, when tiny runs inside torch): one team in a process, so tiny's kernels and torch's own
// parallel work never compete for the cores, and torch.set_num_threads sizes both.
struct ThreadTeam {
  std::function<int()> size;                                     // threads it would run on now
  std::function<void(int, const std::function<void(int)>&)> run; // body(id), id in [0, n), concurrently
};

class ThreadPool {
public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  int size() const; // threads a kernel runs on: the team's when one is set
  // Kernels run on `team` from now on (the pool's own threads stay asleep).
  static void set_team(ThreadTeam team);
  // Runs fn over [0, n): each thread owns one contiguous block (the caller the first) and runs it in
  // order, a few chunks at a time; a thread that finishes its block takes the last chunks of the
  // others', so a thread the machine deschedules (another process, another library's spinning
  // threads) delays the call by at most a chunk. The caller returns once every chunk has run.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
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
  int chunks_capacity_ = 0;
};

} // namespace tiny::runtime
