// The OpenCL device: libOpenCL.so.1 is loaded with dlopen at first use, so the build needs no OpenCL
// header or library and runs where there is none. One device, one in-order command queue; kernels
// come from render_gpu's OpenCL dialect, built once and cached in memory and on disk.

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "compiler/render_gpu.h"
#include "runtime/debug.h"
#include "runtime/device.h"
#include "runtime/disk_cache.h"
#include "runtime/lazy_buffer.h"
#include "runtime/program_cache.h"

namespace tiny::runtime {

namespace {

namespace fs = std::filesystem;

// The part of the OpenCL 1.2 C API tiny calls (types and constants as cl.h defines them).
using cl_int = int32_t;
using cl_uint = uint32_t;
using cl_ulong = uint64_t;
using cl_bitfield = cl_ulong;
using cl_platform_id = struct _cl_platform_id*;
using cl_device_id = struct _cl_device_id*;
using cl_context = struct _cl_context*;
using cl_command_queue = struct _cl_command_queue*;
using cl_mem = struct _cl_mem*;
using cl_program = struct _cl_program*;
using cl_kernel = struct _cl_kernel*;
using cl_event = struct _cl_event*;

constexpr cl_int CL_SUCCESS = 0;
constexpr cl_int CL_DEVICE_NOT_FOUND = -1;
constexpr cl_int CL_MEM_OBJECT_ALLOCATION_FAILURE = -4;
constexpr cl_int CL_OUT_OF_RESOURCES = -5;
constexpr cl_int CL_OUT_OF_HOST_MEMORY = -6;
constexpr cl_int CL_INVALID_BUFFER_SIZE = -61;
constexpr cl_int CL_PLATFORM_NOT_FOUND_KHR = -1001;
constexpr cl_bitfield CL_DEVICE_TYPE_ALL = 0xFFFFFFFF;
constexpr cl_uint CL_PLATFORM_NAME = 0x0902;
constexpr cl_uint CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002;
constexpr cl_uint CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004;
constexpr cl_uint CL_DEVICE_SINGLE_FP_CONFIG = 0x101B;
constexpr cl_uint CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F;
constexpr cl_uint CL_DEVICE_LOCAL_MEM_SIZE = 0x1023;
constexpr cl_uint CL_DEVICE_NAME = 0x102B;
constexpr cl_uint CL_DRIVER_VERSION = 0x102D;
constexpr cl_uint CL_DEVICE_EXTENSIONS = 0x1030;
constexpr cl_uint CL_DEVICE_PLATFORM = 0x1031;
constexpr cl_bitfield CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT = 1 << 7;
constexpr cl_bitfield CL_MEM_READ_WRITE = 1 << 0;
constexpr cl_uint CL_PROGRAM_BINARY_SIZES = 0x1165;
constexpr cl_uint CL_PROGRAM_BINARIES = 0x1166;
constexpr cl_uint CL_PROGRAM_BUILD_LOG = 0x1183;
constexpr cl_uint CL_TRUE = 1;
constexpr cl_bitfield CL_QUEUE_PROFILING_ENABLE = 1 << 1;
constexpr cl_uint CL_EVENT_COMMAND_EXECUTION_STATUS = 0x11D3;
constexpr cl_int CL_COMPLETE = 0;
constexpr cl_uint CL_PROFILING_COMMAND_END = 0x1283;

struct ClApi {
  cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id*, cl_uint*);
  cl_int (*GetPlatformInfo)(cl_platform_id, cl_uint, size_t, void*, size_t*);
  cl_int (*GetDeviceIDs)(cl_platform_id, cl_bitfield, cl_uint, cl_device_id*, cl_uint*);
  cl_int (*GetDeviceInfo)(cl_device_id, cl_uint, size_t, void*, size_t*);
  cl_context (*CreateContext)(const intptr_t*, cl_uint, const cl_device_id*, void*, void*, cl_int*);
  cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_bitfield, cl_int*);
  cl_mem (*CreateBuffer)(cl_context, cl_bitfield, size_t, void*, cl_int*);
  cl_int (*ReleaseMemObject)(cl_mem);
  cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_uint, size_t, size_t, const void*, cl_uint, const cl_event*,
                               cl_event*);
  cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_uint, size_t, size_t, void*, cl_uint, const cl_event*,
                              cl_event*);
  cl_program (*CreateProgramWithSource)(cl_context, cl_uint, const char**, const size_t*, cl_int*);
  cl_program (*CreateProgramWithBinary)(cl_context, cl_uint, const cl_device_id*, const size_t*, const unsigned char**,
                                        cl_int*, cl_int*);
  cl_int (*BuildProgram)(cl_program, cl_uint, const cl_device_id*, const char*, void*, void*);
  cl_int (*GetProgramBuildInfo)(cl_program, cl_device_id, cl_uint, size_t, void*, size_t*);
  cl_int (*GetProgramInfo)(cl_program, cl_uint, size_t, void*, size_t*);
  cl_kernel (*CreateKernel)(cl_program, const char*, cl_int*);
  cl_int (*SetKernelArg)(cl_kernel, cl_uint, size_t, const void*);
  cl_int (*EnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const size_t*, const size_t*, const size_t*,
                                 cl_uint, const cl_event*, cl_event*);
  cl_int (*Finish)(cl_command_queue);
  cl_int (*ReleaseKernel)(cl_kernel);
  cl_int (*ReleaseProgram)(cl_program);
  cl_int (*EnqueueMarkerWithWaitList)(cl_command_queue, cl_uint, const cl_event*, cl_event*);
  cl_int (*WaitForEvents)(cl_uint, const cl_event*);
  cl_int (*GetEventInfo)(cl_event, cl_uint, size_t, void*, size_t*);
  cl_int (*GetEventProfilingInfo)(cl_event, cl_uint, size_t, void*, size_t*);
  cl_int (*SetEventCallback)(cl_event, cl_int, void (*)(cl_event, cl_int, void*), void*);
  cl_int (*ReleaseEvent)(cl_event);
};

// Loads libOpenCL.so.1 (once); throws saying what is missing.
const ClApi& cl_api() {
  static const ClApi api = [] {
    void* lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      throw std::runtime_error(std::string("tiny: the CL device needs libOpenCL.so.1 (Debian: ocl-icd-libopencl1 and a "
                                           "driver such as pocl-opencl-icd), which cannot be loaded: ") +
                               dlerror());
    ClApi a{};
    const std::pair<const char*, void*> symbols[] = {
        {"clGetPlatformIDs", &a.GetPlatformIDs},
        {"clGetPlatformInfo", &a.GetPlatformInfo},
        {"clGetDeviceIDs", &a.GetDeviceIDs},
        {"clGetDeviceInfo", &a.GetDeviceInfo},
        {"clCreateContext", &a.CreateContext},
        {"clCreateCommandQueue", &a.CreateCommandQueue},
        {"clCreateBuffer", &a.CreateBuffer},
        {"clReleaseMemObject", &a.ReleaseMemObject},
        {"clEnqueueWriteBuffer", &a.EnqueueWriteBuffer},
        {"clEnqueueReadBuffer", &a.EnqueueReadBuffer},
        {"clCreateProgramWithSource", &a.CreateProgramWithSource},
        {"clCreateProgramWithBinary", &a.CreateProgramWithBinary},
        {"clBuildProgram", &a.BuildProgram},
        {"clGetProgramBuildInfo", &a.GetProgramBuildInfo},
        {"clGetProgramInfo", &a.GetProgramInfo},
        {"clCreateKernel", &a.CreateKernel},
        {"clSetKernelArg", &a.SetKernelArg},
        {"clEnqueueNDRangeKernel", &a.EnqueueNDRangeKernel},
        {"clFinish", &a.Finish},
        {"clReleaseKernel", &a.ReleaseKernel},
        {"clReleaseProgram", &a.ReleaseProgram},
        {"clEnqueueMarkerWithWaitList", &a.EnqueueMarkerWithWaitList},
        {"clWaitForEvents", &a.WaitForEvents},
        {"clGetEventInfo", &a.GetEventInfo},
        {"clGetEventProfilingInfo", &a.GetEventProfilingInfo},
        {"clSetEventCallback", &a.SetEventCallback},
        {"clReleaseEvent", &a.ReleaseEvent},
    };
    for (const auto& [name, slot] : symbols) {
      void* f = dlsym(lib, name);
      if (!f) throw std::runtime_error(std::string("tiny: libOpenCL.so.1 has no ") + name);
      *static_cast<void**>(slot) = f;
    }
    return a; // the library stays loaded for the life of the process
  }();
  return api;
}

void check(cl_int err, const std::string& what) {
  if (err != CL_SUCCESS)
    throw std::runtime_error("tiny: OpenCL " + what + " failed (error " + std::to_string(err) + ")");
}

std::string device_string(cl_device_id dev, cl_uint param) {
  size_t n = 0;
  check(cl_api().GetDeviceInfo(dev, param, 0, nullptr, &n), "clGetDeviceInfo");
  std::string s(n, '\0');
  check(cl_api().GetDeviceInfo(dev, param, n, s.data(), nullptr), "clGetDeviceInfo");
  while (!s.empty() && s.back() == '\0')
    s.pop_back();
  return s;
}

template <class T> T device_value(cl_device_id dev, cl_uint param) {
  T v{};
  check(cl_api().GetDeviceInfo(dev, param, sizeof v, &v, nullptr), "clGetDeviceInfo");
  return v;
}

// Every device of every platform, in order.
std::vector<cl_device_id> all_devices(std::string* platforms) {
  const ClApi& cl = cl_api();
  cl_uint np = 0;
  cl_int err = cl.GetPlatformIDs(0, nullptr, &np);
  if (err == CL_PLATFORM_NOT_FOUND_KHR || np == 0) return {};
  check(err, "clGetPlatformIDs");
  std::vector<cl_platform_id> ps(np);
  check(cl.GetPlatformIDs(np, ps.data(), nullptr), "clGetPlatformIDs");
  std::vector<cl_device_id> out;
  for (cl_platform_id p : ps) {
    char name[256] = {};
    cl.GetPlatformInfo(p, CL_PLATFORM_NAME, sizeof name - 1, name, nullptr);
    *platforms += std::string(platforms->empty() ? "" : ", ") + name;
    cl_uint nd = 0;
    err = cl.GetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd);
    if (err == CL_DEVICE_NOT_FOUND || nd == 0) continue;
    check(err, "clGetDeviceIDs");
    std::vector<cl_device_id> ds(nd);
    check(cl.GetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, ds.data(), nullptr), "clGetDeviceIDs");
    out.insert(out.end(), ds.begin(), ds.end());
  }
  return out;
}

// Device memory in size buckets, as on the CPU. The queue is in order: a kernel or copy enqueued after
// a block came back here runs after every command enqueued before, so a block freed once its last
// user is enqueued (a Buffer dies when the last graph or schedule holding it lets go) is reused
// only after the queue has passed that use.
class ClAllocator : public Allocator {
public:
  ClAllocator(cl_context ctx, cl_command_queue queue) : ctx_(ctx), queue_(queue) {}
  // Host memory is the caller's again when these return, so both copies block.
  void copy_in(void* dst, const void* src, size_t n) override {
    check(cl_api().EnqueueWriteBuffer(queue_, static_cast<cl_mem>(dst), CL_TRUE, 0, n, src, 0, nullptr, nullptr),
          "clEnqueueWriteBuffer");
  }
  void copy_out(void* dst, const void* src, size_t offset, size_t n) override {
    check(cl_api().EnqueueReadBuffer(queue_, static_cast<cl_mem>(const_cast<void*>(src)), CL_TRUE, offset, n, dst, 0,
                                     nullptr, nullptr),
          "clEnqueueReadBuffer");
  }

protected:
  void* system_alloc(size_t nbytes) override {
    cl_int err = CL_SUCCESS;
    cl_mem m = cl_api().CreateBuffer(ctx_, CL_MEM_READ_WRITE, nbytes, nullptr, &err);
    // out of memory, or more than the device's largest allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE): torch's
    // OutOfMemoryError either way, as CUDA's allocator raises for a request it cannot place
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY ||
        err == CL_INVALID_BUFFER_SIZE)
      return nullptr;
    check(err, "clCreateBuffer of " + std::to_string(nbytes) + " bytes");
    return m;
  }
  // clReleaseMemObject defers the release until enqueued commands using the block have finished.
  void system_free(void* ptr, size_t) override { cl_api().ReleaseMemObject(static_cast<cl_mem>(ptr)); }

private:
  cl_context ctx_;
  cl_command_queue queue_;
};

// The device's integer-division error flag: kernels that divide a user's integers set it (their last
// argument); a sync reads and clears it.
struct ErrorFlag {
  void* mem = nullptr;            // a cl_mem of one int
  std::atomic<bool> used = false; // a kernel that may set it ran since the last check
};

class ClProgram : public Program {
public:
  ClProgram(cl_program program, const std::string& name, cl_command_queue queue, ErrorFlag* errors)
      : program_(program), queue_(queue), errors_(errors) {
    cl_int err = CL_SUCCESS;
    kernel_ = cl_api().CreateKernel(program_, name.c_str(), &err);
    if (err != CL_SUCCESS) cl_api().ReleaseProgram(program_);
    check(err, "clCreateKernel " + name);
    name_ = name;
  }
  ~ClProgram() override {
    cl_api().ReleaseKernel(kernel_);
    cl_api().ReleaseProgram(program_);
  }
  // Arguments in render_gpu's order: buffers, int64 scalars, then float scalars (double when the
  // kernel computes in float64). Enqueued; a sync point waits for the queue.
  void launch(std::span<void* const> bufs, std::span<const int64_t> ivars, std::span<const double> fvars,
              const Launch& launch) override {
    const ClApi& cl = cl_api();
    std::lock_guard lock(mu_); // arguments live in the kernel object until the enqueue
    cl_uint i = 0;
    for (void* b : bufs)
      check(cl.SetKernelArg(kernel_, i++, sizeof(cl_mem), &b), "clSetKernelArg of " + name_);
    for (int64_t v : ivars)
      check(cl.SetKernelArg(kernel_, i++, sizeof v, &v), "clSetKernelArg of " + name_);
    for (double v : fvars) {
      float f = static_cast<float>(v);
      check(launch.f64_scalars ? cl.SetKernelArg(kernel_, i++, sizeof v, &v)
                               : cl.SetKernelArg(kernel_, i++, sizeof f, &f),
            "clSetKernelArg of " + name_);
    }
    if (errors_) {
      check(cl.SetKernelArg(kernel_, i++, sizeof(cl_mem), &errors_->mem), "clSetKernelArg of " + name_);
      errors_->used = true;
    }
    size_t global[3], local[3];
    for (int a = 0; a < 3; a++) {
      global[a] = static_cast<size_t>(launch.global[a] * launch.local[a]);
      local[a] = static_cast<size_t>(launch.local[a]);
    }
    check(cl.EnqueueNDRangeKernel(queue_, kernel_, 3, nullptr, global, local, 0, nullptr, nullptr),
          "clEnqueueNDRangeKernel of " + name_);
  }

private:
  cl_program program_;
  cl_kernel kernel_ = nullptr;
  cl_command_queue queue_;
  ErrorFlag* errors_; // null: the kernel divides no user's integers
  std::string name_;
  std::mutex mu_;
};

// OpenCL C source to a device binary, kept on disk keyed by device, driver, options and source.
class ClCompiler : public Compiler {
public:
  ClCompiler(cl_context ctx, cl_device_id dev, std::string device_key, std::string options)
      : ctx_(ctx), dev_(dev), key_("OpenCL " + device_key + " " + options), options_(std::move(options)) {}
  std::string key() const override { return key_; }
  fs::path binary_path(const std::string& src) const {
    return cache_dir() / "cl" / (content_hash(key_ + "\n" + src) + ".bin");
  }
  std::string compile(const std::string& src, const std::string& name) override {
    cl_program p = build_source(src, name);
    const ClApi& cl = cl_api();
    size_t size = 0;
    cl_int err = cl.GetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr);
    std::vector<unsigned char> bin(size);
    unsigned char* data = bin.data();
    if (err == CL_SUCCESS && size > 0) err = cl.GetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof data, &data, nullptr);
    cl.ReleaseProgram(p);
    check(err, "clGetProgramInfo of " + name);
    fs::path path = binary_path(src);
    fs::create_directories(path.parent_path());
    // written under a name of its own, then renamed: processes sharing the cache build at once
    fs::path tmp = path.string() + "." + std::to_string(getpid());
    std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(bin.data()), static_cast<long>(size));
    fs::rename(tmp, path);
    return path.string();
  }
  cl_program build_source(const std::string& src, const std::string& name) {
    const char* text = src.c_str();
    size_t len = src.size();
    cl_int err = CL_SUCCESS;
    cl_program p = cl_api().CreateProgramWithSource(ctx_, 1, &text, &len, &err);
    check(err, "clCreateProgramWithSource");
    if (cl_api().BuildProgram(p, 1, &dev_, options_.c_str(), nullptr, nullptr) != CL_SUCCESS) {
      std::string log = build_log(p);
      cl_api().ReleaseProgram(p);
      fs::path at = cache_dir() / "cl" / (content_hash(key_ + "\n" + src) + ".cl");
      fs::create_directories(at.parent_path());
      std::ofstream(at) << src;
      throw std::runtime_error("tiny: compiling kernel " + name + " for OpenCL failed (source at " + at.string() +
                               "):\n" + log);
    }
    return p;
  }
  // A program from a cached binary, or null when the driver refuses it (then it is built again).
  cl_program load_binary(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<unsigned char> bin((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const unsigned char* data = bin.data();
    size_t size = bin.size();
    cl_int status = CL_SUCCESS, err = CL_SUCCESS;
    cl_program p = cl_api().CreateProgramWithBinary(ctx_, 1, &dev_, &size, &data, &status, &err);
    if (err != CL_SUCCESS || status != CL_SUCCESS) return nullptr;
    if (cl_api().BuildProgram(p, 1, &dev_, options_.c_str(), nullptr, nullptr) != CL_SUCCESS) {
      cl_api().ReleaseProgram(p);
      return nullptr;
    }
    return p;
  }

private:
  std::string build_log(cl_program p) {
    size_t n = 0;
    cl_api().GetProgramBuildInfo(p, dev_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
    std::string log(n, '\0');
    cl_api().GetProgramBuildInfo(p, dev_, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
    return log;
  }
  cl_context ctx_;
  cl_device_id dev_;
  std::string key_, options_;
};

// A marker on the queue (clEnqueueMarkerWithWaitList). Its time is the device's (profiling info) when
// the queue profiles (TINY_CL_PROFILING=1), else the host clock when the driver reported the marker
// complete (a completion callback): the driver's latency in reporting it is part of the time.
class ClEvent : public Event {
public:
  ClEvent(const Device& device, cl_command_queue queue, bool timing, bool profiling)
      : device_(device), timing_(timing), profiling_(profiling) {
    check(cl_api().EnqueueMarkerWithWaitList(queue, 0, nullptr, &event_), "clEnqueueMarkerWithWaitList");
    if (timing_ && !profiling_) {
      cl_int err = cl_api().SetEventCallback(event_, CL_COMPLETE, &stamp, this);
      if (err != CL_SUCCESS) cl_api().ReleaseEvent(event_);
      check(err, "clSetEventCallback");
    }
  }
  // The callback runs once the marker is complete, and touches this object last when it sets stamped_.
  ~ClEvent() override {
    cl_api().WaitForEvents(1, &event_);
    if (timing_ && !profiling_)
      while (!stamped_.load(std::memory_order_acquire))
        std::this_thread::yield();
    cl_api().ReleaseEvent(event_);
  }
  bool query() override {
    cl_int status = 0;
    check(cl_api().GetEventInfo(event_, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr),
          "clGetEventInfo");
    if (status < 0) check(status, "the queue's work before a marker");
    return status == CL_COMPLETE;
  }
  void synchronize() override { check(cl_api().WaitForEvents(1, &event_), "clWaitForEvents"); }
  double elapsed_ms(Event& end) override {
    auto* e = dynamic_cast<ClEvent*>(&end);
    if (!e || &e->device_ != &device_)
      throw std::runtime_error("tiny: elapsed time between events of two devices (" + device_.name() + " and another)");
    if (!timing_ || !e->timing_) throw std::runtime_error("tiny: elapsed time of an event recorded without timing");
    return static_cast<double>(e->end_ns() - end_ns()) / 1e6;
  }

private:
  static void stamp(cl_event, cl_int, void* self) {
    auto* e = static_cast<ClEvent*>(self);
    e->host_ns_ =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    e->stamped_.store(true, std::memory_order_release);
  }
  int64_t end_ns() {
    synchronize();
    if (profiling_) {
      cl_ulong ns = 0;
      check(cl_api().GetEventProfilingInfo(event_, CL_PROFILING_COMMAND_END, sizeof ns, &ns, nullptr),
            "clGetEventProfilingInfo");
      return static_cast<int64_t>(ns);
    }
    while (!stamped_.load(std::memory_order_acquire))
      std::this_thread::yield();
    return host_ns_;
  }
  const Device& device_;
  bool timing_, profiling_;
  cl_event event_ = nullptr;
  int64_t host_ns_ = 0;
  std::atomic<bool> stamped_{false};
};

class ClDevice : public Device {
public:
  explicit ClDevice(cl_device_id dev) : dev_(dev) {
    const ClApi& cl = cl_api();
    cl_int err = CL_SUCCESS;
    ctx_ = cl.CreateContext(nullptr, 1, &dev_, nullptr, nullptr, &err);
    check(err, "clCreateContext");
    profiling_ = env_limit("TINY_CL_PROFILING", 0) == 1;
    queue_ = cl.CreateCommandQueue(ctx_, dev_, profiling_ ? CL_QUEUE_PROFILING_ENABLE : 0, &err); // in order
    check(err, "clCreateCommandQueue");
    name_ = device_string(dev_, CL_DEVICE_NAME);
    char platform[256] = {};
    cl.GetPlatformInfo(device_value<cl_platform_id>(dev_, CL_DEVICE_PLATFORM), CL_PLATFORM_NAME, sizeof platform - 1,
                       platform, nullptr);
    platform_ = platform;
    target_.dialect = Dialect::OpenCL;
    target_.max_local = static_cast<int64_t>(device_value<size_t>(dev_, CL_DEVICE_MAX_WORK_GROUP_SIZE));
    target_.local_mem = static_cast<int64_t>(device_value<cl_ulong>(dev_, CL_DEVICE_LOCAL_MEM_SIZE));
    // OpenCL's global size is a size_t per axis: no grid limit that matters here
    target_.max_groups = {int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40};
    target_.fp64 = device_string(dev_, CL_DEVICE_EXTENSIONS).find("cl_khr_fp64") != std::string::npos;
    // OpenCL allows float division and sqrt a few ulp of error unless asked otherwise; torch's are IEEE.
    // -w: the kernels are generated; a warning (an unsigned shift amount compared with 0) is noise.
    std::string options = "-w";
    if (device_value<cl_bitfield>(dev_, CL_DEVICE_SINGLE_FP_CONFIG) & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)
      options += " -cl-fp32-correctly-rounded-divide-sqrt";
    allocator_ = std::make_unique<ClAllocator>(ctx_, queue_);
    allocator_->set_device_name(name());
    int zero = 0;
    errors_.mem = allocator_->alloc(sizeof zero);
    allocator_->copy_in(errors_.mem, &zero, sizeof zero);
    compiler_ = std::make_unique<ClCompiler>(ctx_, dev_, name_ + " " + device_string(dev_, CL_DRIVER_VERSION), options);
    if (debug_level() >= 1)
      std::fprintf(stderr, "tiny: CL device %s (work-groups up to %lld threads, %lld bytes local memory)\n",
                   name_.c_str(), static_cast<long long>(target_.max_local), static_cast<long long>(target_.local_mem));
  }
  std::string name() const override { return "CL: " + name_ + " (" + platform_ + ")"; }
  int64_t total_memory() const override {
    return static_cast<int64_t>(device_value<cl_ulong>(dev_, CL_DEVICE_GLOBAL_MEM_SIZE));
  }
  int compute_units() const override {
    return static_cast<int>(device_value<cl_uint>(dev_, CL_DEVICE_MAX_COMPUTE_UNITS));
  }
  std::optional<int64_t> free_memory() const override { return std::nullopt; } // OpenCL has no query for it
  const Target& target() const override { return target_; }
  Allocator& allocator() override { return *allocator_; }
  Compiler& compiler() override { return *compiler_; }
  std::shared_ptr<Program> program(const std::string& src, const std::string& fn_name) override {
    return programs_.get(fn_name + "\n" + src, [&] {
      fs::path bin = compiler_->binary_path(src);
      cl_program p = fs::exists(bin) ? compiler_->load_binary(bin) : nullptr;
      if (p) {
        stats().cache_hits++;
        stats().disk_hits++;
      } else {
        bin = compiler_->compile(src, fn_name);
        stats().compiles++;
        p = compiler_->load_binary(bin);
        if (!p) p = compiler_->build_source(src, fn_name); // a driver that cannot reload its own binaries
      }
      bool checks = src.find(std::string("int* ") + kGpuErrorFlag) != std::string::npos;
      return std::make_shared<ClProgram>(p, fn_name, queue_, checks ? &errors_ : nullptr);
    });
  }
  void synchronize() override {
    check(cl_api().Finish(queue_), "clFinish");
    if (!errors_.used.exchange(false)) return;
    int flag = 0;
    allocator_->copy_out(&flag, errors_.mem, 0, sizeof flag);
    if (!flag) return;
    flag = 0;
    allocator_->copy_in(errors_.mem, &flag, sizeof flag);
    report_zero_division();
  }
  std::unique_ptr<Event> record_event(bool timing) override {
    return std::make_unique<ClEvent>(*this, queue_, timing, profiling_);
  }

private:
  cl_device_id dev_;
  cl_context ctx_ = nullptr;
  cl_command_queue queue_ = nullptr;
  bool profiling_ = false; // TINY_CL_PROFILING=1: the queue records device times (events read them)
  std::string name_, platform_;
  Target target_;
  std::unique_ptr<ClAllocator> allocator_;
  std::unique_ptr<ClCompiler> compiler_;
  ErrorFlag errors_;
  ProgramCache programs_;
};

ClDevice* open_cl_device() {
  std::string platforms;
  std::vector<cl_device_id> devs = all_devices(&platforms);
  if (devs.empty())
    throw std::runtime_error(
        "tiny: the CL device needs an OpenCL platform with a device; found " +
        (platforms.empty() ? std::string("no platform") : "platforms " + platforms + " without devices") +
        " (Debian: pocl-opencl-icd runs OpenCL on the CPU)");
  int64_t index = 0;
  if (const char* v = std::getenv("TINY_CL_DEVICE")) index = std::atoll(v);
  if (index < 0 || index >= static_cast<int64_t>(devs.size()))
    throw std::runtime_error("tiny: TINY_CL_DEVICE=" + std::to_string(index) + " but there are " +
                             std::to_string(devs.size()) + " OpenCL devices");
  return new ClDevice(devs[index]); // never destroyed: buffers may be freed during static teardown
}

} // namespace

Device& cl_device() {
  // Opened once; a failure is remembered and reported again to every caller.
  static std::string error;
  static ClDevice* dev = [] {
    try {
      return open_cl_device();
    } catch (const std::runtime_error& e) {
      error = e.what();
      return static_cast<ClDevice*>(nullptr);
    }
  }();
  if (!dev) throw std::runtime_error(error);
  return *dev;
}

} // namespace tiny::runtime
