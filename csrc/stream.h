#pragma once
// Streams and events of tiny devices, with torch's semantics (what the device guard hands to c10::Stream,
// c10::Event, torch.Stream, torch.Event and torch.tiny.Stream/Event).
//
// A tiny device has one in-order queue, and every stream of the device names it: stream 0 is the default
// stream, a new stream gets a fresh id, and each thread has a current stream per device. Work on two
// streams of a device never overlaps or reorders, so waiting for another stream or event has nothing left
// to wait for. Work is lazy: it is submitted to the queue when a sync realizes it. Recording an event
// submits the pending work of its device (a sync of that device), waits until the queue has run it and
// takes the time, so an event is complete once recorded, and elapsed_time between two events measures the
// device work submitted between them (and the time the queue idled meanwhile, as CUDA's events do).

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace tiny {

c10::Stream current_stream(c10::DeviceIndex index);
c10::Stream default_stream(c10::DeviceIndex index);
c10::Stream new_stream(c10::DeviceIndex index);
// Makes `stream` the calling thread's current stream of its device; returns the one it replaces.
c10::Stream exchange_stream(c10::Stream stream);
// Realizes the device's pending work and waits for its queue: true once that work has run.
bool query_stream(const c10::Stream& stream);
void synchronize_stream(const c10::Stream& stream);

// Events, as the device guard's record/queryEvent/synchronizeEvent/elapsedTime/destroyEvent see them:
// `*event` is created at the first record, a marker on the device's queue (runtime::Device::record_event)
// after the stream's work. BACKEND_DEFAULT events keep the time (enable_timing=True).
void record_event(void** event, const c10::Stream& stream, c10::EventFlag flag);
bool query_event(void* event);
void synchronize_event(void* event);
double elapsed_ms(void* start, void* end);
void destroy_event(void* event) noexcept;

} // namespace tiny
