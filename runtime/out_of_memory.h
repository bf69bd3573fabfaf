#pragma once
// How the allocators raise running out of memory: an OutOfMemoryError (runtime/device.h) unless a raiser
// is installed. The torch layer installs one that raises torch's OutOfMemoryError (runtime/ knows nothing
// of torch), so that `except torch.OutOfMemoryError` catches tiny's as it catches CUDA's.

#include <string>

namespace tiny::runtime {

// Must throw; null restores the default.
using OutOfMemoryRaiser = void (*)(const std::string& message);
void set_out_of_memory_raiser(OutOfMemoryRaiser raiser);

} // namespace tiny::runtime
