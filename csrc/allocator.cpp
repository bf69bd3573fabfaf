#include "csrc/allocator.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "csrc/backend.h"
#include "runtime/device.h"
#include "runtime/out_of_memory.h"

namespace tiny {

namespace {

// Fake addresses start far from where torch could meet real host pointers in practice, and each
// allocation is followed by a gap, so `base + nbytes` (the end of an empty view) stays inside its range.
constexpr uintptr_t kFirstAddress = 0x7f0000000000;
constexpr uintptr_t kPage = 4096;

struct Allocation {
  size_t nbytes;
  c10::DeviceIndex device;
  runtime::LazyBuffer* buffer;
};

// Live allocations by base address, to answer getDeviceFromPtr and copy_data: a vector sorted by base, in
// which a freed allocation leaves a hole (buffer == nullptr) until holes are half of it, so that allocating
// and freeing a storage allocate nothing themselves (a std::map took a node, a malloc and a free, per
// storage). Bases grow with every allocation: a new one goes at the end, or near it.
struct AddressTable {
  struct Entry {
    uintptr_t base;
    Allocation allocation; // allocation.buffer == nullptr: freed
  };
  std::mutex mu;
  std::vector<Entry> entries;
  size_t holes = 0;

  static AddressTable& get() {
    static auto* t = new AddressTable(); // never destroyed: storages may die during static teardown
    return *t;
  }
  static bool before(const Entry& e, uintptr_t base) { return e.base < base; }
  void insert(uintptr_t base, Allocation a) {
    std::lock_guard lock(mu);
    auto at = entries.end();
    while (at != entries.begin() && std::prev(at)->base > base)
      --at;
    entries.insert(at, Entry{base, a});
  }
  void erase(uintptr_t base) {
    std::lock_guard lock(mu);
    auto it = std::lower_bound(entries.begin(), entries.end(), base, before);
    if (it == entries.end() || it->base != base || !it->allocation.buffer) return;
    it->allocation.buffer = nullptr;
    if (++holes > 64 && 2 * holes > entries.size()) {
      std::erase_if(entries, [](const Entry& e) { return e.allocation.buffer == nullptr; });
      holes = 0;
    }
  }
  // The allocation whose [base, base + nbytes] holds `address`.
  std::optional<std::pair<uintptr_t, Allocation>> find(uintptr_t address) {
    std::lock_guard lock(mu);
    auto it = std::upper_bound(entries.begin(), entries.end(), address,
                               [](uintptr_t a, const Entry& e) { return a < e.base; });
    if (it == entries.begin()) return std::nullopt;
    --it;
    // (ranges do not overlap: a freed one's range holds no live allocation)
    if (!it->allocation.buffer || address > it->base + it->allocation.nbytes) return std::nullopt;
    return std::make_pair(it->base, it->allocation);
  }
};

std::atomic<uintptr_t> next_address{kFirstAddress};

// A DataPtr's context: the lazy buffer and the fake address it was given (0 for an empty one).
struct Context {
  runtime::LazyBuffer buffer;
  uintptr_t base;
  Context(runtime::Device& device, size_t nbytes, uintptr_t b) : buffer(device, nbytes), base(b) {}
};

void delete_lazy_buffer(void* ctx) {
  auto* c = static_cast<Context*>(ctx);
  if (c->base) AddressTable::get().erase(c->base);
  delete c;
}

// A DeviceAllocator, so that torch.accelerator's memory functions work on tiny. A tiny allocation is a lazy
// buffer: it takes device memory only when a sync realizes it, from the device's caching allocator
// (runtime::Allocator), whose counters answer the statistics.
class TinyAllocator final : public c10::DeviceAllocator {
public:
  c10::DataPtr allocate(size_t nbytes) override { return allocate_lazy_buffer(nbytes, current_device()); }

  // Storage-level copies (Allocator::clone) between two live tiny allocations, as a lazy byte copy.
  void copy_data(void* dest, const void* src, size_t count) const override {
    if (count == 0) return;
    AddressTable& t = AddressTable::get();
    auto to = t.find(reinterpret_cast<uintptr_t>(dest));
    auto from = t.find(reinterpret_cast<uintptr_t>(src));
    TORCH_CHECK(to && from, "tiny: copy_data between addresses that are not tiny allocations");
    auto n = static_cast<int64_t>(count);
    runtime::StridedView src_view{
        {n}, {1}, static_cast<int64_t>(reinterpret_cast<uintptr_t>(src) - from->first), DType::UInt8};
    runtime::StridedView dst_view{
        {n}, {1}, static_cast<int64_t>(reinterpret_cast<uintptr_t>(dest) - to->first), DType::UInt8};
    to->second.buffer->write(dst_view, from->second.buffer->read(src_view));
  }

  bool initialized() override { return true; }
  // Every device's cached free blocks go back to the system (as CUDA's empty_cache does for all devices);
  // tiny has no private memory pools, so there is only the default one.
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i)
      runtime::device(i).allocator().empty_cache();
  }
  // Each device runs everything on one in-order queue, so a block is never in use by another stream.
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    return device_memory_stats(device);
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device_index(device);
    runtime::device(device).allocator().reset_accumulated_memory_stats();
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    check_device_index(device);
    runtime::device(device).allocator().reset_peak_memory_stats();
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device_index(device);
    const runtime::Device& d = runtime::device(device);
    std::optional<int64_t> free = d.free_memory();
    TORCH_CHECK_NOT_IMPLEMENTED(free.has_value(), "tiny ", d.name(),
                                ": the device cannot tell how much of its memory is free (OpenCL has no query for it)");
    return {static_cast<size_t>(*free), static_cast<size_t>(d.total_memory())};
  }
};

TinyAllocator allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator);

// A device out of memory raises torch's OutOfMemoryError (torch.OutOfMemoryError in Python), as CUDA's does.
[[noreturn]] void raise_out_of_memory(const std::string& message) {
  TORCH_CHECK_WITH(OutOfMemoryError, false, message);
  __builtin_unreachable();
}
const bool out_of_memory_raiser_installed = [] {
  runtime::set_out_of_memory_raiser(raise_out_of_memory);
  return true;
}();

} // namespace

c10::Allocator& tiny_allocator() { return allocator; }

c10::CachingDeviceAllocator::DeviceStats device_memory_stats(c10::DeviceIndex index) {
  check_device_index(index);
  // A lazy tensor takes memory when a sync realizes it: realizing pending work first makes the numbers
  // count every live tensor, as CUDA's do.
  runtime::synchronize();
  runtime::MemoryStats m = runtime::device(index).allocator().memory_stats();
  auto to_stat = [](const runtime::MemoryCounter& c) {
    c10::CachingAllocator::Stat s;
    s.current = c.current;
    s.peak = c.peak;
    s.allocated = c.allocated;
    s.freed = c.freed;
    return s;
  };
  // torch's pools are indexed by StatType (all, small, large), as runtime::MemoryPool is.
  c10::CachingDeviceAllocator::DeviceStats stats;
  for (size_t i = 0; i < m.pools.size(); ++i) {
    const runtime::PoolMemoryStats& p = m.pools[i];
    stats.allocation[i] = to_stat(p.allocation);
    stats.allocated_bytes[i] = to_stat(p.allocated_bytes);
    stats.requested_bytes[i] = to_stat(p.requested_bytes);
    stats.segment[i] = to_stat(p.segment);
    stats.reserved_bytes[i] = to_stat(p.reserved_bytes);
    // Without streams every allocated block is active, and blocks are never split.
    stats.active[i] = to_stat(p.allocation);
    stats.active_bytes[i] = to_stat(p.allocated_bytes);
  }
  stats.num_alloc_retries = m.num_alloc_retries;
  stats.num_ooms = m.num_ooms;
  stats.num_device_alloc = m.num_device_alloc;
  stats.num_device_free = m.num_device_free;
  return stats;
}

c10::DataPtr allocate_lazy_buffer(size_t nbytes, c10::DeviceIndex index) {
  check_device_index(index);
  c10::Device device(c10::DeviceType::PrivateUse1, index);
  // torch allows a null data pointer for zero bytes (as the CPU allocator gives); the context still
  // holds a buffer so that resizing and reading an empty tensor work like any other.
  if (nbytes == 0) return {nullptr, new Context(runtime::device(index), 0, 0), &delete_lazy_buffer, device};
  uintptr_t span = (nbytes + kPage - 1) / kPage * kPage + kPage;
  uintptr_t base = next_address.fetch_add(span);
  auto* ctx = new Context(runtime::device(index), nbytes, base);
  AddressTable::get().insert(base, Allocation{nbytes, index, &ctx->buffer});
  return {reinterpret_cast<void*>(base), ctx, &delete_lazy_buffer, device};
}

runtime::LazyBuffer* lazy_buffer_of(const c10::DataPtr& data_ptr) {
  if (data_ptr.get_deleter() != &delete_lazy_buffer) return nullptr;
  return &static_cast<Context*>(data_ptr.get_context())->buffer;
}

std::optional<c10::DeviceIndex> device_of_address(const void* address) {
  auto found = AddressTable::get().find(reinterpret_cast<uintptr_t>(address));
  if (!found) return std::nullopt;
  return found->second.device;
}

void resize_storage_bytes(c10::StorageImpl& storage, size_t nbytes, DType dtype) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  runtime::LazyBuffer* old = lazy_buffer_of(storage.data_ptr());
  TORCH_CHECK(old != nullptr, "tiny: the storage to resize does not hold a tiny lazy buffer");
  c10::DataPtr fresh = allocate_lazy_buffer(nbytes, storage.device().index());
  size_t keep = std::min(nbytes, storage.nbytes());
  if (keep % itemsize(dtype) != 0) dtype = DType::UInt8;
  if (keep > 0) {
    runtime::StridedView kept{{static_cast<int64_t>(keep / itemsize(dtype))}, {1}, 0, dtype};
    lazy_buffer_of(fresh)->write(kept, old->read(kept));
  }
  storage.set_data_ptr_noswap(std::move(fresh));
  storage.set_nbytes(nbytes);
}

} // namespace tiny
