#pragma once
// The realize engine: schedules lazy graphs into kernels (compiler/schedule.h), renders, compiles and
// runs them on their device's queue, and replays a schedule seen before (the schedule cache).

#include <vector>

#include "compiler/uop.h"

namespace tiny::runtime {

class Device;

// Realizes the contents of pending storages together: each root becomes a BUFFER node holding
// its value (schedule() says which kernels do it). The kernels run on `on` (null: the device of the
// buffers the graphs read, tiny:0 when they read none); a graph reading buffers of two devices throws.
std::vector<UOpPtr> realize_all(const std::vector<UOpPtr>& roots, Device* on = nullptr);

// Evaluates a graph over realized buffers into a new contiguous buffer (row-major over its shape).
BufferRef realize_value(const UOpPtr& value, Device* on = nullptr);

} // namespace tiny::runtime
