// Which backend `tiny:N` is: TINY_DEVICE=CPU|CL|CUDA (default CPU).

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/cuda_device.h"
#include "runtime/device.h"

namespace tiny::runtime {

namespace {

const std::pair<const char*, Device& (*)()> kBackends[] = {
    {"CPU", cpu_device}, {"CL", cl_device}, {"CUDA", cuda_device}};

} // namespace

Device& backend_device(const std::string& backend) {
  std::string names;
  for (const auto& [name, get] : kBackends) {
    if (backend == name) return get();
    names += std::string(names.empty() ? "" : ", ") + name;
  }
  throw std::runtime_error("tiny: unknown device backend '" + backend + "' (TINY_DEVICE takes one of " + names + ")");
}

Device& device(int index) {
  if (index != 0) throw std::out_of_range("tiny: device index " + std::to_string(index) + " out of range (1 device)");
  static Device& dev = backend_device(std::getenv("TINY_DEVICE") ? std::getenv("TINY_DEVICE") : "CPU");
  return dev;
}

int device_count() { return 1; }

} // namespace tiny::runtime
