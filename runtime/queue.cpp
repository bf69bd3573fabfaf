#include "runtime/queue.h"

#include <utility>

namespace tiny::runtime {

Queue::Queue() : thread_([this] { run(); }) {}

Queue::~Queue() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  ready_.notify_one();
  thread_.join();
}

void Queue::push(std::function<void()> task, std::span<void* const> writes, std::span<void* const> reads) {
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(task));
    const uint64_t n = ++pushed_;
    for (void* b : reads)
      blocks_[b].used = n;
    for (void* b : writes)
      blocks_[b] = {n, n};
  }
  ready_.notify_one();
}

bool Queue::uses(const void* block) {
  std::lock_guard lock(mu_);
  auto it = blocks_.find(block);
  return it != blocks_.end() && it->second.used > finished_;
}

void Queue::wait_for_writes(const void* block) {
  std::unique_lock lock(mu_);
  auto it = blocks_.find(block);
  wait_until(lock, it == blocks_.end() ? 0 : it->second.written);
}

void Queue::wait() {
  std::unique_lock lock(mu_);
  wait_until(lock, pushed_);
}

void Queue::wait_until(std::unique_lock<std::mutex>& lock, uint64_t task) {
  progress_.wait(lock, [&] { return finished_ >= task; });
  if (std::exception_ptr e = std::exchange(error_, nullptr)) std::rethrow_exception(e);
}

void Queue::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      ready_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    task = nullptr; // what it holds (a program) dies before a wait for it returns
    {
      std::lock_guard lock(mu_);
      if (error && !error_) error_ = error;
      if (++finished_ == pushed_) blocks_.clear();
    }
    progress_.notify_all();
  }
}

} // namespace tiny::runtime
