#pragma once
// The realize engine: turns lazy graphs into kernels (the schedule), compiles and runs them.

#include <vector>

#include "compiler/uop.h"

namespace tiny::runtime {

// Realizes the contents of pending storages together: each root becomes a BUFFER node holding
// its value. Realize points are the roots and every ASSIGN; everything else fuses into the
// kernel of the realize point that reads it.
std::vector<UOpPtr> realize_all(const std::vector<UOpPtr>& roots);

// Evaluates a graph over realized buffers into a new contiguous buffer (row-major over its shape).
BufferRef realize_value(const UOpPtr& value);

} // namespace tiny::runtime
