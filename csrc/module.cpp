// torch_tiny._C: the Python side of the backend (torch.tiny's functions call these).

#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include "csrc/backend.h"
#include "csrc/fallback.h"
#include "runtime/device.h"
#include "runtime/lazy_buffer.h"

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "tiny: a lazy PyTorch device backend (torch.device('tiny'))";

  m.def("device_count", [] { return static_cast<int>(tiny::device_count()); });
  // What runs `tiny:index` (torch.tiny.get_device_name): "CPU (clang)", "CL: <device> (<platform>)". Opens
  // the device, so a backend that cannot run here raises its error saying what is missing.
  m.def("device_name", [](int index) { return tiny::runtime::device(index).name(); });
  m.def("current_device", [] { return static_cast<int>(tiny::current_device()); });
  m.def("set_device", [](int index) { tiny::set_device(static_cast<c10::DeviceIndex>(index)); });
  m.def(
      "synchronize", [] { tiny::runtime::synchronize(); }, py::call_guard<py::gil_scoped_release>(),
      "Runs every pending computation on every tiny device.");

  m.def("stats", [] {
    const tiny::runtime::Stats& s = tiny::runtime::stats();
    py::dict d;
    d["kernels"] = s.kernels.load();
    d["compiles"] = s.compiles.load();
    d["cache_hits"] = s.cache_hits.load();
    d["schedule_hits"] = s.schedule_hits.load();
    d["disk_hits"] = s.disk_hits.load();
    d["syncs"] = s.syncs.load();
    d["fallbacks"] = s.fallbacks.load();
    d["live_buffers"] = s.live_buffers.load();
    d["live_bytes"] = s.live_bytes.load();
    d["peak_bytes"] = s.peak_bytes.load();
    d["loaded_programs"] = tiny::runtime::loaded_programs();
    py::dict by_op; // CPU-fallback calls per op
    for (const auto& [name, count] : tiny::fallback_op_counts())
      by_op[py::str(name)] = count;
    d["fallback_ops"] = by_op;
    return d;
  });
  m.def("reset_stats", [] {
    tiny::runtime::reset_stats();
    tiny::reset_fallback_op_counts();
  });

  m.def("manual_seed", [](uint64_t seed) {
    at::Generator gen = tiny::default_generator(-1); // a handle sharing the default generator
    std::lock_guard lock(gen.mutex());
    gen.set_current_seed(seed);
  });
  // torch.Generator objects for the default generators, made once per device by torch_tiny.
  m.def("_default_generator", [](int index) {
    PyObject* gen = THPGenerator_initDefaultGenerator(tiny::default_generator(static_cast<c10::DeviceIndex>(index)));
    if (gen == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(gen);
  });
}
