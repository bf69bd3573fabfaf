#pragma once
// tiny as torch's PrivateUse1 backend: the device index, the device guard, the hooks, the default
// random generators and pinned host memory. Everything registers itself when the extension loads.

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>

namespace tiny {

c10::DeviceIndex device_count() noexcept;
void check_device_index(c10::DeviceIndex index); // raises torch's error for an index out of range

// The current tiny device of the calling thread (like CUDA's, per thread; 0 until set).
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);

// The default generator of tiny:`index` (-1: the current device): what torch.manual_seed,
// torch.tiny.manual_seed and get/set_rng_state work with.
const at::Generator& default_generator(c10::DeviceIndex index = -1);

// 64 random bits for one random op on `device`, drawn from `gen` (a tiny torch.Generator) or from the
// device's default generator. A random op derives every element from this key and the element's
// index (a counter-based generator on the device), so a generator advances once per op: successive
// ops differ, and manual_seed and get/set_rng_state replay the stream. A generator of another device
// raises torch's error.
uint64_t random_key(const std::optional<at::Generator>& gen, c10::Device device);

} // namespace tiny
