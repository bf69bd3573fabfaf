#pragma once
// tiny as torch's PrivateUse1 backend: the device index, the device guard, the hooks, the default
// random generators and pinned host memory. Everything registers itself when the extension loads.

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

namespace tiny {

c10::DeviceIndex device_count() noexcept;
void check_device_index(c10::DeviceIndex index); // raises torch's error for an index out of range

// The current tiny device of the calling thread (like CUDA's, per thread; 0 until set).
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);

// The default generator of tiny:`index` (-1: the current device). Random ops will draw from it; until
// then it holds the seed and state that torch.manual_seed and get/set_rng_state work with.
const at::Generator& default_generator(c10::DeviceIndex index = -1);

} // namespace tiny
