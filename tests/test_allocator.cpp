// The caching allocator every device uses (runtime/allocator.cpp): blocks reused by size, the counters
// torch.tiny.memory_stats reports, empty_cache, and the retry after a failed system allocation.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/device.h"

using namespace tiny::runtime;

namespace {

constexpr size_t MiB = size_t{1} << 20;

// Host memory that can be told to run out, and remembers what the system handed out.
class FakeDeviceAllocator : public Allocator {
public:
  size_t system_limit = SIZE_MAX; // bytes the "device" has
  size_t system_bytes = 0;
  std::map<void*, size_t> live;
  ~FakeDeviceAllocator() override { empty_cache(); }
  void copy_in(void*, const void*, size_t) override {}
  void copy_out(void*, const void*, size_t, size_t) override {}

protected:
  void* system_alloc(size_t nbytes) override {
    if (system_bytes + nbytes > system_limit) return nullptr;
    system_bytes += nbytes;
    void* p = std::malloc(nbytes);
    live[p] = nbytes;
    return p;
  }
  void system_free(void* ptr, size_t nbytes) override {
    EXPECT_EQ(live.at(ptr), nbytes);
    system_bytes -= nbytes;
    live.erase(ptr);
    std::free(ptr);
  }
};

} // namespace

TEST(Allocator, AllocatedAndReservedFollowAllocationsAndFrees) {
  FakeDeviceAllocator a;
  void* big = a.alloc(2 * MiB);
  void* small = a.alloc(10);
  MemoryStats s = a.memory_stats();
  EXPECT_EQ(s.all().allocated_bytes.current, static_cast<int64_t>(2 * MiB + 64)); // 10 bytes: a 64-byte block
  EXPECT_EQ(s.all().requested_bytes.current, static_cast<int64_t>(2 * MiB + 10));
  EXPECT_EQ(s.pools[static_cast<size_t>(MemoryPool::Large)].allocated_bytes.current, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(s.pools[static_cast<size_t>(MemoryPool::Small)].allocation.current, 1);
  EXPECT_EQ(s.all().reserved_bytes.current, s.all().allocated_bytes.current);
  EXPECT_EQ(s.num_device_alloc, 2);

  a.free(big, 2 * MiB);
  s = a.memory_stats();
  EXPECT_EQ(s.all().allocated_bytes.current, 64);
  EXPECT_EQ(s.all().allocated_bytes.peak, static_cast<int64_t>(2 * MiB + 64));
  EXPECT_EQ(s.all().reserved_bytes.current, static_cast<int64_t>(2 * MiB + 64)); // cached, still reserved

  EXPECT_EQ(a.alloc(2 * MiB - 100), big); // same block size: the cached block again, no system call
  EXPECT_EQ(a.memory_stats().num_device_alloc, 2);
  a.free(big, 2 * MiB - 100);
  a.free(small, 10);
  a.empty_cache();
  s = a.memory_stats();
  EXPECT_EQ(s.all().reserved_bytes.current, 0);
  EXPECT_EQ(s.all().segment.current, 0);
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_TRUE(a.live.empty());
}

TEST(Allocator, ResetsClearPeaksAndTotals) {
  FakeDeviceAllocator a;
  void* p = a.alloc(4096);
  a.free(p, 4096);
  a.reset_peak_memory_stats();
  MemoryStats s = a.memory_stats();
  EXPECT_EQ(s.all().allocated_bytes.peak, 0);
  EXPECT_EQ(s.all().reserved_bytes.peak, 4096);
  EXPECT_EQ(s.all().allocated_bytes.allocated, 4096);
  EXPECT_EQ(s.all().allocated_bytes.freed, 4096);
  a.reset_accumulated_memory_stats();
  s = a.memory_stats();
  EXPECT_EQ(s.all().allocated_bytes.allocated, 0);
  EXPECT_EQ(s.all().allocated_bytes.freed, 0);
  EXPECT_EQ(s.num_device_alloc, 0);
}

TEST(Allocator, AFailedSystemAllocationEmptiesTheCacheAndRetries) {
  FakeDeviceAllocator a;
  a.system_limit = 3 * MiB;
  void* p = a.alloc(2 * MiB);
  a.free(p, 2 * MiB); // cached: 2 MiB of the 3 are held
  void* q = a.alloc(3 * MiB - 4096);
  EXPECT_NE(q, nullptr);
  MemoryStats s = a.memory_stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.all().reserved_bytes.current, static_cast<int64_t>(3 * MiB - 4096));
  a.free(q, 3 * MiB - 4096);
  a.empty_cache();
  a.system_limit = a.system_bytes; // nothing left
  EXPECT_THROW(a.alloc(4096), std::runtime_error);
  EXPECT_EQ(a.memory_stats().num_ooms, 1);
}

namespace {

// The mapping of this process that holds `address` ([begin, end) and its VmFlags line from /proc/self/smaps), or
// begin == end == 0 where none does.
struct Mapping {
  uintptr_t begin = 0, end = 0;
  std::string flags;
};
Mapping mapping_of(uintptr_t address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  Mapping found;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR, &begin, &end) == 2) { // a mapping's first line
      inside = begin <= address && address < end;
      if (inside) found.begin = begin, found.end = end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      found.flags = line;
    }
  }
  return found;
}

} // namespace

// The CPU device's own blocks: from 2 MiB on, each is mapped on its own, from a 2 MiB boundary, and advised to use
// transparent huge pages (the kernel's VM_HUGEPAGE, "hg" in /proc/self/smaps), so that a kernel streaming through it
// is not held up by the TLB and the prefetchers at every 4 KiB page; the block starts a few pages past the boundary
// (its color, see CpuAllocator). Smaller ones come from the heap. All are writable to their last byte and go back to
// the system, their whole mapping, with empty_cache.
TEST(Allocator, TheCpuMapsALargeBlockForHugePages) {
  Allocator& a = cpu_device().allocator();
  a.empty_cache();
  const size_t sizes[] = {3 * MiB + 4096, 2 * MiB, 64 * 1024};
  std::vector<uintptr_t> starts; // the large blocks' mappings
  for (size_t n : sizes) {
    auto* p = static_cast<unsigned char*>(a.alloc(n));
    p[0] = 1;
    p[n - 1] = 2;
    auto address = reinterpret_cast<uintptr_t>(p);
    EXPECT_EQ(address % 64, 0u) << n;
    if (n >= 2 * MiB) {
      const uintptr_t color = address % (2 * MiB), start = address - color;
      EXPECT_EQ(color % 4096, 0u) << n;
      EXPECT_LT(color, 32 * 4096u) << n;
      const Mapping m = mapping_of(address);
      EXPECT_LE(m.begin, start) << n;
      EXPECT_GE(m.end, address + n) << n;
      starts.push_back(start);
      if (std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
        EXPECT_NE(m.flags.find(" hg"), std::string::npos) << n << ": " << m.flags;
      }
    }
    a.free(p, n);
  }
  int64_t segments = a.memory_stats().all().segment.current;
  a.empty_cache();
  EXPECT_EQ(a.memory_stats().all().segment.current, segments - 3);
  for (uintptr_t start : starts)
    EXPECT_EQ(mapping_of(start).end, 0u) << "a freed block's mapping is still there";
}

// Large blocks in use together start at different offsets from their 2 MiB boundaries (different colors): element i
// of each lies in a different L2 set, where, all aligned alike, a kernel streaming through several of them (Adam's
// update of a parameter: four read, three written) evicted its own prefetched lines (2.5 -> 0.92 ms on two threads).
TEST(Allocator, TheCpusLargeBlocksInUseTogetherStartInDifferentCacheSets) {
  Allocator& a = cpu_device().allocator();
  a.empty_cache();
  std::vector<void*> blocks;
  std::set<uintptr_t> colors;
  for (int i = 0; i < 8; i++) {
    blocks.push_back(a.alloc(4 * MiB));
    colors.insert(reinterpret_cast<uintptr_t>(blocks.back()) % (2 * MiB));
  }
  EXPECT_EQ(colors.size(), blocks.size());
  for (void* p : blocks)
    a.free(p, 4 * MiB);
  a.empty_cache();
}
