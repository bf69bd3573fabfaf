#pragma once
// Which backend `tiny:N` is (runtime/device.cpp): TINY_DEVICE=CPU|CL|CUDA|HIP, else the first GPU
// backend with a device, else CPU.

#include <functional>
#include <string>

namespace tiny::runtime {

// The backend `tiny_device` (TINY_DEVICE's value) names; null: the first of CUDA and HIP for which
// `gpu_devices(name)` is positive, else "CPU". Throws naming the choices for an unknown name.
std::string choose_backend(const char* tiny_device, const std::function<int(const std::string&)>& gpu_devices);

// The backend this process chose (once, at the first use of a device): "CPU", "CL", "CUDA" or "HIP".
std::string backend_name();

} // namespace tiny::runtime
