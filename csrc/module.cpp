// torch_tiny._C: the Python side of the backend (torch.tiny's functions call these).

#include <ATen/Parallel.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/utils/pybind.h>

#include <filesystem>
#include <fstream>

#include "csrc/allocator.h"
#include "csrc/backend.h"
#include "csrc/fallback.h"
#include "csrc/profiler.h"
#include "runtime/device.h"
#include "runtime/lazy_buffer.h"
#include "runtime/thread_pool.h"

namespace py = pybind11;

namespace {

// Whether torch's autograd engine has started its device threads (named pt_autograd_<index>) in this process.
bool autograd_device_threads_started() {
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::string name;
    std::getline(std::ifstream(task.path() / "comm"), name);
    if (name.starts_with("pt_autograd_")) return true;
  }
  return false;
}

// torch's autograd engine runs a tiny tensor's backward on a thread of its own per tiny device. The graph task it
// worked on last holds the caller's thread-local state, which holds a Python object (torch.autograd.graph stashes
// a copy of the contextvars there): when that thread drops the task after the caller has, it takes the GIL to
// free it, and once the interpreter finalizes, taking the GIL ends the thread by pthread_exit, whose forced unwind
// through torch's noexcept frames calls std::terminate ("terminate called without an active exception" after a
// script's last line, 5 runs in 10 of one that ran eager convolutions, whose spinning OpenMP threads delay that
// thread). Called at exit, before finalization: each device's thread runs a backward made here (no Python object,
// nothing stashed) with the GIL released, so that it has dropped the task before it takes this one.
void drain_autograd_device_threads() {
  if (!autograd_device_threads_started()) return;
  py::gil_scoped_release no_gil;
  for (c10::DeviceIndex i = 0; i < static_cast<c10::DeviceIndex>(tiny::device_count()); i++) {
    at::Tensor leaf = at::zeros({1}, at::TensorOptions().device(c10::Device(c10::DeviceType::PrivateUse1, i)));
    leaf.requires_grad_(true);
    torch::autograd::grad({leaf.mul(2).sum()}, {leaf});
  }
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "tiny: a lazy PyTorch device backend (torch.device('tiny'))";

  // torch.set_num_threads sizes the CPU device's kernels too; TINY_THREADS fixes the pool's size instead.
  // (The kernels run on tiny's own pool, not torch's OpenMP team: on it, whose end-of-region barrier waits
  // for every thread, the demo's step ran 762 ms against the pool's 257 on a machine loaded by builds.)
  if (!std::getenv("TINY_THREADS")) tiny::runtime::ThreadPool::set_limit([] { return at::get_num_threads(); });
  // The CPU devices run their kernels on queue threads of their own (runtime/device.h), unless TINY_ASYNC=0.
  if (const char* v = std::getenv("TINY_ASYNC"); !v || std::string(v) != "0") tiny::runtime::set_cpu_queues(true);

  m.def("device_count", [] { return static_cast<int>(tiny::device_count()); });
  // What runs `tiny:index` (torch.tiny.get_device_name): "CPU (clang)", "CL: <device> (<platform>)". Opens
  // the device, so a backend that cannot run here raises its error saying what is missing.
  m.def("device_name", [](int index) { return tiny::runtime::device(index).name(); });
  // torch.tiny.get_device_properties: name, memory in bytes, parallel units.
  m.def("device_properties", [](int index) {
    tiny::check_device_index(static_cast<c10::DeviceIndex>(index));
    const tiny::runtime::Device& d = tiny::runtime::device(index);
    return py::make_tuple(d.name(), d.total_memory(), d.compute_units());
  });
  // Whether bfloat16 products on `tiny:index` pair their reduced axis (AMX tiles, or pair dot products where they
  // pay on this CPU: Target::bf16_pairs), which the kernels of a bfloat16 weight gradient depend on (the tests ask).
  m.def("bf16_pairs", [](int index) {
    tiny::check_device_index(static_cast<c10::DeviceIndex>(index));
    return tiny::runtime::device(index).target().bf16_pairs();
  });
  m.def("current_device", [] { return static_cast<int>(tiny::current_device()); });
  m.def("set_device", [](int index) { tiny::set_device(static_cast<c10::DeviceIndex>(index)); });
  m.def(
      "synchronize", [] { tiny::runtime::synchronize(); }, py::call_guard<py::gil_scoped_release>(),
      "Runs every pending computation on every tiny device.");
  m.def(
      "_flush", [] { tiny::runtime::flush(); }, py::call_guard<py::gil_scoped_release>(),
      "Starts every pending computation on every tiny device, without waiting for it (the end of an optimizer "
      "step).");

  // Memory: torch.tiny.memory_stats and friends, from the same counters torch.accelerator reads.
  m.def("memory_stats", [](int index) {
    c10::CachingDeviceAllocator::DeviceStats s = tiny::device_memory_stats(static_cast<c10::DeviceIndex>(index));
    auto stat = [](const c10::CachingAllocator::Stat& c) {
      py::dict d;
      d["current"] = c.current;
      d["peak"] = c.peak;
      d["allocated"] = c.allocated;
      d["freed"] = c.freed;
      return d;
    };
    auto pools = [&stat](const c10::CachingAllocator::StatArray& a) {
      py::dict d;
      const char* names[] = {"all", "small_pool", "large_pool"};
      for (size_t i = 0; i < a.size(); ++i)
        d[names[i]] = stat(a[i]);
      return d;
    };
    py::dict d;
    d["allocation"] = pools(s.allocation);
    d["segment"] = pools(s.segment);
    d["active"] = pools(s.active);
    d["inactive_split"] = pools(s.inactive_split);
    d["allocated_bytes"] = pools(s.allocated_bytes);
    d["reserved_bytes"] = pools(s.reserved_bytes);
    d["active_bytes"] = pools(s.active_bytes);
    d["inactive_split_bytes"] = pools(s.inactive_split_bytes);
    d["requested_bytes"] = pools(s.requested_bytes);
    d["num_alloc_retries"] = s.num_alloc_retries;
    d["num_ooms"] = s.num_ooms;
    d["num_device_alloc"] = s.num_device_alloc;
    d["num_device_free"] = s.num_device_free;
    // tiny's allocator never splits blocks nor has oversize ones: these stay 0, as torch reports them
    d["num_sync_all_streams"] = s.num_sync_all_streams;
    d["max_split_size"] = s.max_split_size;
    d["oversize_allocations"] = stat(s.oversize_allocations);
    d["oversize_segments"] = stat(s.oversize_segments);
    return d;
  });
  auto* allocator = &dynamic_cast<c10::DeviceAllocator&>(tiny::tiny_allocator());
  m.def("reset_peak_memory_stats",
        [allocator](int index) { allocator->resetPeakStats(static_cast<c10::DeviceIndex>(index)); });
  m.def("reset_accumulated_memory_stats",
        [allocator](int index) { allocator->resetAccumulatedStats(static_cast<c10::DeviceIndex>(index)); });
  m.def("empty_cache", [allocator] { allocator->emptyCache(); });
  m.def("memory_info",
        [allocator](int index) { return allocator->getMemoryInfo(static_cast<c10::DeviceIndex>(index)); });

  m.def("stats", [] {
    const tiny::runtime::Stats& s = tiny::runtime::stats();
    py::dict d;
    d["kernels"] = s.kernels.load();
    d["compiles"] = s.compiles.load();
    d["cache_hits"] = s.cache_hits.load();
    d["schedule_hits"] = s.schedule_hits.load();
    d["graph_launches"] = s.graph_launches.load();
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
  // Whether tiny:index runs float32 3 x 3 convolutions of stride 1 as Winograd kernels (compiler/winograd.h).
  m.def("_winograd", [](int index) { return tiny::runtime::device(index).target().winograd; });
  // True while a torch.profiler trace records tiny's activity (the realize engine then times its work).
  m.def("profiler_tracing", [] { return tiny::profiler_tracing(); });
  m.def("reset_stats", [] {
    tiny::runtime::reset_stats();
    tiny::reset_fallback_op_counts();
  });

  m.def("_drain_autograd_device_threads", &drain_autograd_device_threads);
  m.def(
      "_wait_for_queues",
      [] {
        for (int i = 0; i < tiny::device_count(); i++)
          tiny::runtime::device(i).synchronize();
      },
      py::call_guard<py::gil_scoped_release>(), "Waits for the kernels the devices' queues hold (at exit).");

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
