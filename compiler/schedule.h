#pragma once
// Scheduling, the first pass of the compiler: the lazy graphs of a sync become kernels, in the order
// they must run. Realize points (each gets a buffer and a kernel) are the roots, every ASSIGN, SCATTER
// and CONTIGUOUS, a reduction several nodes read, and a long computation several nodes read; everything
// else fuses into the kernel of the realize point that reads it. Each kernel is lowered for the target
// here (lowering may ask for reductions to be realized first); the runtime renders, compiles and runs
// the kernels in order. Scheduling runs nothing and allocates no memory: buffers come from new_buffer
// and get their memory when a kernel first runs.

#include <functional>
#include <vector>

#include "compiler/lower.h"
#include "compiler/target.h"
#include "compiler/uop.h"

namespace tiny {

struct Schedule {
  std::vector<Kernel> kernels; // in order; kernels[i].buffers[0] is the buffer it writes
  std::vector<BufferRef> made; // the buffers this schedule made (through new_buffer), in order
  std::vector<UOpPtr> results; // per root (or the one value): a BUFFER node holding its value
};

// A buffer of `numel` elements of a dtype on the device the kernels will run on.
using NewBuffer = std::function<BufferRef(DType, int64_t)>;

// The kernels that realize the contents of pending storages together: each root becomes a BUFFER
// node holding its value. A root that is a storage's flat reshape of a value shares that value's buffer.
// `reusable`: input buffers that nothing but the roots' graphs holds (dead once they are computed). A root
// is written into one of them instead of a new buffer (an in-place update of a storage: an optimizer's
// state, x.mul_(2)) when the one kernel that writes the root reads it only at the element it writes, the
// same dtype and size, and no later kernel reads it.
Schedule schedule(const std::vector<UOpPtr>& roots, const Target& target, const NewBuffer& new_buffer,
                  const std::vector<BufferRef>& reusable = {});

// The kernels that evaluate a graph over realized buffers into a new contiguous buffer (row-major
// over its shape); results[0] is that buffer (or the value itself when it is a BUFFER already).
Schedule schedule_value(const UOpPtr& value, const Target& target, const NewBuffer& new_buffer);

} // namespace tiny
