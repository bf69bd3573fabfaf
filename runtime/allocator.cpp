// The caching allocator every device uses: freed blocks are kept by size and handed out again, and
// every request and system allocation is counted (torch.tiny.memory_stats).

#include "runtime/out_of_memory.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "runtime/device.h"

namespace tiny::runtime {

namespace {

// At most this much memory stays cached; past it the whole cache is returned to the system.
constexpr size_t kMaxCached = size_t{1} << 30;
constexpr size_t kLargeBlock = size_t{1} << 20; // torch's caching allocators: the large pool

size_t bucket(size_t n) { return n <= 64 ? 64 : (n + 4095) / 4096 * 4096; }

std::atomic<OutOfMemoryRaiser> out_of_memory_raiser{nullptr};

} // namespace

void set_out_of_memory_raiser(OutOfMemoryRaiser raiser) { out_of_memory_raiser = raiser; }

void MemoryCounter::increase(int64_t n) {
  current += n;
  peak = std::max(peak, current);
  allocated += n;
}

void MemoryCounter::decrease(int64_t n) {
  current -= n;
  freed += n;
}

namespace {

// The counters a block of `size` bytes moves: those of all blocks and those of its pool.
template <typename Fn> void for_pools(MemoryStats& stats, size_t size, Fn fn) {
  fn(stats.pools[static_cast<size_t>(MemoryPool::All)]);
  fn(stats.pools[static_cast<size_t>(size >= kLargeBlock ? MemoryPool::Large : MemoryPool::Small)]);
}

void for_counters(MemoryStats& stats, void (*fn)(MemoryCounter&)) {
  for (PoolMemoryStats& p : stats.pools)
    for (MemoryCounter* c : {&p.allocation, &p.allocated_bytes, &p.requested_bytes, &p.segment, &p.reserved_bytes})
      fn(*c);
}

} // namespace

void* Allocator::alloc(size_t nbytes) {
  size_t size = bucket(nbytes);
  std::lock_guard lock(mu_);
  void* p = nullptr;
  if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= size;
  } else {
    p = system_alloc(size);
    if (!p && cached_bytes_ > 0) {
      stats_.num_alloc_retries++;
      empty_cache_locked();
      p = system_alloc(size);
    }
    if (!p) {
      stats_.num_ooms++;
      const PoolMemoryStats& all = stats_.all();
      std::string message = "tiny: out of memory allocating " + std::to_string(nbytes) + " bytes on " + device_name_ +
                            " (tiny holds " + std::to_string(all.allocated_bytes.current) + " bytes in " +
                            std::to_string(all.allocation.current) + " live blocks and " +
                            std::to_string(all.reserved_bytes.current) + " bytes reserved)";
      if (OutOfMemoryRaiser raise = out_of_memory_raiser.load()) raise(message);
      throw OutOfMemoryError(message);
    }
    stats_.num_device_alloc++;
    for_pools(stats_, size, [&](PoolMemoryStats& s) {
      s.segment.increase(1);
      s.reserved_bytes.increase(static_cast<int64_t>(size));
    });
  }
  for_pools(stats_, size, [&](PoolMemoryStats& s) {
    s.allocation.increase(1);
    s.allocated_bytes.increase(static_cast<int64_t>(size));
    s.requested_bytes.increase(static_cast<int64_t>(nbytes));
  });
  return p;
}

void Allocator::free(void* ptr, size_t nbytes) {
  size_t size = bucket(nbytes);
  std::lock_guard lock(mu_);
  for_pools(stats_, size, [&](PoolMemoryStats& s) {
    s.allocation.decrease(1);
    s.allocated_bytes.decrease(static_cast<int64_t>(size));
    s.requested_bytes.decrease(static_cast<int64_t>(nbytes));
  });
  free_[size].push_back(ptr);
  cached_bytes_ += size;
  if (cached_bytes_ > kMaxCached) empty_cache_locked();
}

void Allocator::empty_cache() {
  std::lock_guard lock(mu_);
  empty_cache_locked();
}

void Allocator::empty_cache_locked() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) {
      system_free(p, size);
      stats_.num_device_free++;
      for_pools(stats_, size, [&](PoolMemoryStats& s) {
        s.segment.decrease(1);
        s.reserved_bytes.decrease(static_cast<int64_t>(size));
      });
    }
  }
  free_.clear();
  cached_bytes_ = 0;
  returned_to_system();
}

MemoryStats Allocator::memory_stats() {
  std::lock_guard lock(mu_);
  return stats_;
}

void Allocator::reset_peak_memory_stats() {
  std::lock_guard lock(mu_);
  for_counters(stats_, [](MemoryCounter& c) { c.peak = c.current; });
}

void Allocator::reset_accumulated_memory_stats() {
  std::lock_guard lock(mu_);
  for_counters(stats_, [](MemoryCounter& c) { c.allocated = c.freed = 0; });
  stats_.num_alloc_retries = stats_.num_ooms = stats_.num_device_alloc = stats_.num_device_free = 0;
}

} // namespace tiny::runtime
