#include "csrc/stream.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <memory>
#include <vector>

#include "csrc/backend.h"
#include "runtime/device.h"
#include "runtime/lazy_buffer.h"

namespace tiny {

namespace {

constexpr c10::DeviceType kTiny = c10::DeviceType::PrivateUse1;

// Stream ids of new streams, unique over all devices (stream 0 is each device's default stream).
std::atomic<c10::StreamId> next_stream_id{1};

// The calling thread's current stream per device, as CUDA keeps it.
c10::StreamId& current_id(c10::DeviceIndex index) {
  thread_local std::vector<c10::StreamId> ids;
  check_device_index(index);
  if (ids.size() < static_cast<size_t>(device_count())) ids.resize(static_cast<size_t>(device_count()), 0);
  return ids[static_cast<size_t>(index)];
}

c10::DeviceIndex index_of(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kTiny, "expected a tiny stream, got one on ", stream.device());
  return stream.device_index();
}

struct Event {
  c10::DeviceIndex device;
  bool timing;
  std::unique_ptr<runtime::Event> marker; // on the device's queue, after the work recorded before it
};

Event& as_event(void* event) { return *static_cast<Event*>(event); }

} // namespace

c10::Stream default_stream(c10::DeviceIndex index) {
  check_device_index(index);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTiny, index), 0);
}

c10::Stream current_stream(c10::DeviceIndex index) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTiny, index), current_id(index));
}

c10::Stream new_stream(c10::DeviceIndex index) {
  check_device_index(index);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTiny, index), next_stream_id++);
}

c10::Stream exchange_stream(c10::Stream stream) {
  c10::StreamId& id = current_id(index_of(stream));
  c10::Stream old(c10::Stream::UNSAFE, stream.device(), id);
  id = stream.id();
  return old;
}

bool query_stream(const c10::Stream& stream) {
  synchronize_stream(stream);
  return true;
}

void synchronize_stream(const c10::Stream& stream) {
  c10::DeviceIndex index = index_of(stream);
  check_device_index(index);
  runtime::synchronize(runtime::device(index));
}

void record_event(void** event, const c10::Stream& stream, c10::EventFlag flag) {
  c10::DeviceIndex index = index_of(stream);
  check_device_index(index);
  if (*event == nullptr) // handed to c10::Event, which gives it back to destroy_event
    *event = std::make_unique<Event>(Event{index, flag == c10::EventFlag::BACKEND_DEFAULT, nullptr}).release();
  Event& e = as_event(*event);
  TORCH_CHECK(e.device == index, "Event device index ", static_cast<int>(e.device),
              " does not match recording stream's device index ", static_cast<int>(index), ".");
  synchronize_stream(stream); // the pending work is realized (and, today, waited for) first
  e.marker = runtime::device(index).record_event(e.timing);
}

bool query_event(void* event) {
  if (event == nullptr) return true;
  const Event& e = as_event(event);
  return e.marker && e.marker->query();
}

void synchronize_event(void* event) {
  if (event != nullptr && as_event(event).marker) as_event(event).marker->synchronize();
}

double elapsed_ms(void* start, void* end) {
  TORCH_CHECK(start && end, "Both events must be recorded before calculating elapsed time.");
  const Event &a = as_event(start), &b = as_event(end);
  TORCH_CHECK_VALUE(a.timing && b.timing, "Both events must be created with argument 'enable_timing=True'.");
  TORCH_CHECK(a.device == b.device,
              "Both events must be recorded on the same device (tiny:", static_cast<int>(a.device),
              " and tiny:", static_cast<int>(b.device), ")");
  TORCH_CHECK(a.marker && b.marker, "Both events must be recorded before calculating elapsed time.");
  return a.marker->elapsed_ms(*b.marker);
}

void destroy_event(void* event) noexcept { std::unique_ptr<Event>(static_cast<Event*>(event)).reset(); }

} // namespace tiny
