#pragma once
// An in-order work queue with a thread of its own: the CPU device's stream (see set_cpu_queues in runtime/device.h).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>

namespace tiny::runtime {

// One thread runs the tasks pushed, oldest first (a kernel, on that thread or shared with the thread pool; a copy
// into device memory). Each task names the device blocks it writes and those it only reads, so that the host can
// wait for what writes one block (before reading it) and learn whether anything queued still uses a block (before
// writing it), not only wait for the whole queue: a training loop that reads its loss each step waits for the
// kernel that computed the loss, while the step's backward pass and weight updates run on behind the recording of
// the next step. An exception that escapes a task is rethrown by the next wait.
class Queue {
public:
  Queue();
  ~Queue(); // runs what is queued, then stops the thread
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  void push(std::function<void()> task, std::span<void* const> writes, std::span<void* const> reads = {});
  // Whether a task queued and not yet finished reads or writes `block`.
  bool uses(const void* block);
  // Blocks until the tasks queued so far that write `block` have run.
  void wait_for_writes(const void* block);
  // Blocks until every task queued so far has run.
  void wait();

private:
  // The last task (its number: tasks are numbered 1, 2, ... as pushed) that reads or writes a block, and the last
  // that writes it.
  struct Marks {
    uint64_t used = 0, written = 0;
  };
  void run();
  void wait_until(std::unique_lock<std::mutex>& lock, uint64_t task);
  std::mutex mu_;
  std::condition_variable ready_, progress_;
  std::deque<std::function<void()>> tasks_;
  uint64_t pushed_ = 0, finished_ = 0;
  std::unordered_map<const void*, Marks> blocks_; // emptied whenever the queue drains
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace tiny::runtime
