#pragma once
// The realize engine: schedules lazy graphs into kernels (compiler/schedule.h), renders, compiles and
// runs them on their device's queue, and replays a schedule seen before (the schedule cache).

#include <vector>

#include "compiler/uop.h"

namespace tiny::runtime {

// Realizes the contents of pending storages together: each root becomes a BUFFER node holding
// its value (schedule() says which kernels do it).
std::vector<UOpPtr> realize_all(const std::vector<UOpPtr>& roots);

// Evaluates a graph over realized buffers into a new contiguous buffer (row-major over its shape).
BufferRef realize_value(const UOpPtr& value);

} // namespace tiny::runtime
