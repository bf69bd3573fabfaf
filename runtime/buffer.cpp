#include "runtime/device.h"
#include "runtime/lazy_buffer.h"

namespace tiny::runtime {

Buffer::Buffer(Device& device, DType dtype, int64_t numel) : BufferBase(dtype, numel), device_(device) {}

Buffer::~Buffer() {
  if (!ptr_) return;
  device_.allocator().free(ptr_, nbytes());
  stats().live_buffers--;
  stats().live_bytes -= static_cast<int64_t>(nbytes());
}

void* Buffer::ptr() {
  if (!ptr_) {
    ptr_ = device_.allocator().alloc(nbytes() ? nbytes() : 1);
    stats().live_buffers++;
    int64_t live = stats().live_bytes += static_cast<int64_t>(nbytes());
    int64_t peak = stats().peak_bytes.load();
    while (live > peak && !stats().peak_bytes.compare_exchange_weak(peak, live)) {
    }
  }
  return ptr_;
}

} // namespace tiny::runtime
