// Which backend `tiny:N` is: TINY_DEVICE=CPU|CL|CUDA (default CPU), and how many devices it has.

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/cuda_device.h"
#include "runtime/device.h"

namespace tiny::runtime {

namespace {

Device& first_cpu_device() { return cpu_device(0); }

const std::pair<const char*, Device& (*)()> kBackends[] = {
    {"CPU", first_cpu_device}, {"CL", cl_device}, {"CUDA", cuda_device}};

std::string backend_name() { return std::getenv("TINY_DEVICE") ? std::getenv("TINY_DEVICE") : "CPU"; }

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
  static Device& first = backend_device(backend_name());
  if (index < 0 || index >= device_count())
    throw std::out_of_range("tiny: device index " + std::to_string(index) + " out of range (" +
                            std::to_string(device_count()) + " devices)");
  return index == 0 ? first : cpu_device(index);
}

int device_count() {
  static const int count = backend_name() == "CPU" ? cpu_device_count() : 1;
  return count;
}

} // namespace tiny::runtime
