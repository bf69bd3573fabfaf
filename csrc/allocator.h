#pragma once
// The allocator behind every tiny storage.
//
// Each allocation is a runtime::LazyBuffer, owned by the DataPtr's context. Torch sees a unique fake
// address that it never dereferences: it only does arithmetic on it (data_ptr() = base + offset *
// itemsize) and compares it (aliasing, overlap checks), so each buffer gets its own range with room
// for every offset inside it.

#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>

#include <cstddef>
#include <optional>

#include "compiler/dtype.h"
#include "runtime/lazy_buffer.h"

namespace c10::CachingDeviceAllocator {
struct DeviceStats;
} // namespace c10::CachingDeviceAllocator

namespace tiny {

c10::Allocator& tiny_allocator();

// The memory statistics of tiny:`index` (its caching allocator's counters) as torch's caching allocators
// report them: torch.tiny.memory_stats and torch.accelerator.memory_stats.
c10::CachingDeviceAllocator::DeviceStats device_memory_stats(c10::DeviceIndex index);

// A fresh lazy buffer of `nbytes` on tiny:`index`.
c10::DataPtr allocate_lazy_buffer(size_t nbytes, c10::DeviceIndex index);

// The lazy buffer a DataPtr from tiny_allocator owns; nullptr for any other DataPtr.
runtime::LazyBuffer* lazy_buffer_of(const c10::DataPtr& data_ptr);

// The device of the live tiny allocation whose range holds `address`, if any.
std::optional<c10::DeviceIndex> device_of_address(const void* address);

// Replaces `storage`'s buffer with a new one of `nbytes` whose first min(old, new) bytes are the old
// content (copied lazily, as elements of `dtype`); every tensor on the storage sees the new buffer.
void resize_storage_bytes(c10::StorageImpl& storage, size_t nbytes, DType dtype = DType::UInt8);

} // namespace tiny
