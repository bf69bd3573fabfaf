// Which backend `tiny:N` is: TINY_DEVICE=CPU|CL|CUDA|HIP; unset, the first of CUDA and HIP that has a
// device, else CPU. tiny:N is the backend's N-th device.

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "runtime/backend.h"
#include "runtime/cuda_device.h"
#include "runtime/device.h"
#include "runtime/hip_device.h"

namespace tiny::runtime {

namespace {

int cl_device_count() { return 1; } // the device TINY_CL_DEVICE picks; opening it says what is missing
Device& cl_device_at(int) { return cl_device(); }
int cuda_count() { return cuda_device_count(default_libcuda()); }
int hip_count() { return hip_device_count(default_libhip()); }

struct Backend {
  const char* name;
  int (*count)();
  Device& (*at)(int index);
};
const Backend kBackends[] = {
    {"CPU", cpu_device_count, cpu_device},
    {"CL", cl_device_count, cl_device_at},
    {"CUDA", cuda_count, cuda_device},
    {"HIP", hip_count, hip_device},
};

const Backend& backend(const std::string& name) {
  std::string names;
  for (const Backend& b : kBackends) {
    if (name == b.name) return b;
    names += std::string(names.empty() ? "" : ", ") + b.name;
  }
  throw std::runtime_error("tiny: unknown device backend '" + name + "' (TINY_DEVICE takes one of " + names + ")");
}

const Backend& chosen() {
  static const Backend& b = backend(
      choose_backend(std::getenv("TINY_DEVICE"), [](const std::string& name) { return backend(name).count(); }));
  return b;
}

} // namespace

std::string choose_backend(const char* tiny_device, const std::function<int(const std::string&)>& gpu_devices) {
  if (tiny_device) return backend(tiny_device).name;
  for (const char* gpu : {"CUDA", "HIP"})
    if (gpu_devices(gpu) > 0) return gpu;
  return "CPU";
}

Device& backend_device(const std::string& name) { return backend(name).at(0); }

std::string backend_name() { return chosen().name; }

Device& device(int index) {
  const Backend& b = chosen();
  int n = device_count();
  // a chosen GPU backend without devices: opening its first one says why (no driver, no GPU)
  if (n == 0 && index == 0) return b.at(0);
  if (index < 0 || index >= n)
    throw std::out_of_range("tiny: device index " + std::to_string(index) + " out of range (" + std::to_string(n) +
                            " " + b.name + " devices)");
  return b.at(index);
}

int device_count() {
  static const int count = chosen().count();
  return count;
}

} // namespace tiny::runtime
