// The fake GPU driver of fake_cuda.h: the calls the CUDA device resolves (cuda.h's names and signatures)
// and those the HIP device resolves (hip_runtime_api.h's), one implementation over host memory.

#include "tests/fake_cuda/fake_cuda.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

using CUresult = int;
constexpr CUresult CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2,
                   CUDA_ERROR_NOT_INITIALIZED = 3, CUDA_ERROR_INVALID_CONTEXT = 201, CUDA_ERROR_INVALID_IMAGE = 200,
                   CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101, CUDA_ERROR_NOT_FOUND = 500,
                   CUDA_ERROR_LAUNCH_FAILED = 719;

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
  const char* hip_name; // HIP's codes are CUDA's for these
};
constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error", "hipSuccess"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument", "hipErrorInvalidValue"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "hipErrorOutOfMemory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error", "hipErrorNotInitialized"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected", "hipErrorNoDevice"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal", "hipErrorInvalidDevice"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid", "hipErrorInvalidImage"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context", "hipErrorInvalidContext"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found", "hipErrorNotFound"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure", "hipErrorLaunchFailure"},
};

struct Stream {
  int device = 0;
  std::deque<std::function<void()>> work;
};

struct Function {
  std::string name;
  int device = 0;
};

struct Module {
  int device = 0;
  std::string image;                                // its bytes: an ELF's up to its section headers, text up to the NUL
  std::vector<std::unique_ptr<Function>> functions; // handed out by cuModuleGetFunction, freed with it
};

struct State {
  std::recursive_mutex mu;
  bool initialized = false;
  // a process that loads the fake as its driver (torch_tests) sets the count with TINY_FAKE_GPU_DEVICES
  int devices = std::getenv("TINY_FAKE_GPU_DEVICES") ? std::atoi(std::getenv("TINY_FAKE_GPU_DEVICES")) : 1;
  size_t memory = size_t{1} << 30;
  std::map<std::string, int> fail_next, calls;
  std::map<uint64_t, std::vector<unsigned char>> blocks; // device address -> contents
  std::map<uint64_t, int> block_devices;                 // device address -> the device it is on
  uint64_t next_address = 0x100000000;
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<FakeCudaLaunch> launches;
  std::map<std::string, FakeCudaKernel> kernels;
  int misuses = 0;
  std::string log;
  std::array<int, 16> contexts{}; // the primary contexts' identities: &contexts[device]
};

State& state() {
  static State s;
  return s;
}

std::unique_lock<std::recursive_mutex> locked() { return std::unique_lock(state().mu); }

thread_local std::vector<void*> current_contexts;
thread_local int hip_current_device = 0;

// The device calls act on: CUDA's current context's, HIP's thread's device.
int cuda_current_device() {
  if (current_contexts.empty()) return 0;
  return static_cast<int>(static_cast<int*>(current_contexts.back()) - state().contexts.data());
}

// Work on a stream (or a function) of another device than the current one is a misuse the device must
// not make (its guard makes its device current around each call).
void check_device(int used, int current) {
  if (used != current) state().misuses++;
}

// Counts the call; a failure asked for is returned instead of doing it.
CUresult enter(const char* call, bool needs_context = true) {
  State& s = state();
  s.calls[call]++;
  if (auto it = s.fail_next.find(call); it != s.fail_next.end()) {
    CUresult r = it->second;
    s.fail_next.erase(it);
    return r;
  }
  if (needs_context && current_contexts.empty()) s.misuses++;
  return CUDA_SUCCESS;
}

unsigned char* host(uint64_t address) {
  State& s = state();
  auto it = s.blocks.upper_bound(address);
  if (it == s.blocks.begin()) return nullptr;
  --it;
  if (address >= it->first + it->second.size()) return nullptr;
  return it->second.data() + (address - it->first);
}

// Bytes allocated on `device` (-1: on every device).
size_t live_bytes(int device = -1) {
  size_t n = 0;
  for (const auto& [a, b] : state().blocks)
    if (device < 0 || state().block_devices[a] == device) n += b.size();
  return n;
}

void run_streams() {
  for (auto& st : state().streams)
    while (!st->work.empty()) {
      auto w = std::move(st->work.front());
      st->work.pop_front();
      w();
    }
}

size_t elf_size(const char* image) {
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0;
  std::memcpy(&shoff, image + 0x28, 8);
  std::memcpy(&shentsize, image + 0x3a, 2);
  std::memcpy(&shnum, image + 0x3c, 2);
  return shoff + size_t{shentsize} * shnum;
}

// ---- one implementation of each call, on `device` (the current one) ----

CUresult device_count(int* n) {
  if (!state().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *n = state().devices;
  return CUDA_SUCCESS;
}
CUresult device_get(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= state().devices) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}
CUresult stream_create(Stream** stream, int device) {
  state().streams.push_back(std::make_unique<Stream>());
  state().streams.back()->device = device;
  *stream = state().streams.back().get();
  return CUDA_SUCCESS;
}
CUresult stream_destroy(Stream* stream) {
  auto& ss = state().streams;
  for (auto it = ss.begin(); it != ss.end(); ++it)
    if (it->get() == stream) {
      if (!stream->work.empty()) state().misuses++;
      ss.erase(it);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult stream_synchronize(Stream* stream) {
  while (!stream->work.empty()) {
    auto w = std::move(stream->work.front());
    stream->work.pop_front();
    w();
  }
  return CUDA_SUCCESS;
}
CUresult mem_get_info(size_t* free, size_t* total, int device) {
  *total = state().memory;
  *free = state().memory - live_bytes(device);
  return CUDA_SUCCESS;
}
CUresult mem_alloc(uint64_t* ptr, size_t n, int device) {
  State& s = state();
  if (n == 0) return CUDA_ERROR_INVALID_VALUE;
  if (live_bytes(device) + n > s.memory) return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = s.next_address;
  s.next_address += (n + 0xffff) / 0x10000 * 0x10000;
  s.blocks[*ptr].assign(n, 0xcd); // not zeroed, as the driver's memory is not
  s.block_devices[*ptr] = device;
  return CUDA_SUCCESS;
}
CUresult mem_free(uint64_t ptr) {
  if (fake_cuda_pending()) {
    state().misuses++;
    run_streams();
  }
  state().block_devices.erase(ptr);
  return state().blocks.erase(ptr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult memcpy_htod(uint64_t dst, const void* src, size_t n, Stream* stream, int device) {
  if (!host(dst) || !host(dst + n - 1)) return CUDA_ERROR_INVALID_VALUE;
  check_device(stream->device, device);
  // pageable host memory is staged before the call returns
  std::vector<unsigned char> staged(static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + n);
  stream->work.push_back([dst, staged = std::move(staged)] {
    std::memcpy(host(dst), staged.data(), staged.size());
    state().log += "htod " + std::to_string(staged.size()) + ";";
  });
  return CUDA_SUCCESS;
}
CUresult memcpy_dtoh(void* dst, uint64_t src, size_t n, Stream* stream, int device) {
  if (!host(src) || !host(src + n - 1)) return CUDA_ERROR_INVALID_VALUE;
  check_device(stream->device, device);
  stream->work.push_back([dst, src, n] {
    std::memcpy(dst, host(src), n);
    state().log += "dtoh " + std::to_string(n) + ";";
  });
  return CUDA_SUCCESS;
}
CUresult memset_d8(uint64_t dst, unsigned char value, size_t n, Stream* stream, int device) {
  if (!host(dst) || !host(dst + n - 1)) return CUDA_ERROR_INVALID_VALUE;
  check_device(stream->device, device);
  stream->work.push_back([dst, value, n] {
    std::memset(host(dst), value, n);
    state().log += "memset " + std::to_string(n) + ";";
  });
  return CUDA_SUCCESS;
}
CUresult module_load(Module** module, const void* image, int device) {
  const char* bytes = static_cast<const char*>(image);
  size_t n = std::memcmp(bytes,
                         "\x7f"
                         "ELF",
                         4) == 0
                 ? elf_size(bytes)
                 : std::strlen(bytes);
  *module = new Module{device, std::string(bytes, n), {}};
  return CUDA_SUCCESS;
}
CUresult module_get_function(Function** f, Module* module, const char* name) {
  if (module->image.find(name) == std::string::npos) return CUDA_ERROR_NOT_FOUND;
  *f = module->functions.emplace_back(std::make_unique<Function>(Function{name, module->device})).get();
  return CUDA_SUCCESS;
}
// Arguments come packed: extra is {BUFFER_POINTER (1), args, BUFFER_SIZE (2), &size, `end`}.
CUresult launch(Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared, Stream* stream, void** params, void** extra, void* end, int device) {
  if (params || !extra || extra[0] != reinterpret_cast<void*>(1) || extra[2] != reinterpret_cast<void*>(2) ||
      extra[4] != end)
    return CUDA_ERROR_INVALID_VALUE;
  check_device(stream->device, device);
  check_device(f->device, device);
  FakeCudaLaunch l{};
  std::snprintf(l.name, sizeof l.name, "%s", f->name.c_str());
  l.grid[0] = gx, l.grid[1] = gy, l.grid[2] = gz;
  l.block[0] = bx, l.block[1] = by, l.block[2] = bz;
  l.shared_bytes = shared;
  l.arg_size = *static_cast<size_t*>(extra[3]);
  if (l.arg_size > sizeof l.args) return CUDA_ERROR_INVALID_VALUE;
  if (l.arg_size) std::memcpy(l.args, extra[1], l.arg_size); // a kernel without arguments packs none
  state().launches.push_back(l);
  FakeCudaKernel fn = state().kernels.count(f->name) ? state().kernels[f->name] : nullptr;
  stream->work.push_back([l, fn] {
    if (fn) fn(l.args, l.arg_size);
    state().log += std::string("launch ") + l.name + ";";
  });
  return CUDA_SUCCESS;
}
const ErrorText* error_of(CUresult code) {
  for (const ErrorText& e : kErrors)
    if (e.code == code) return &e;
  return nullptr;
}

} // namespace

extern "C" {

// ---- the control API ----

void fake_cuda_reset(int devices, size_t memory) {
  auto lock = locked();
  State& s = state();
  s.devices = devices;
  s.memory = memory;
  s.fail_next.clear();
  s.calls.clear();
  s.launches.clear();
  s.kernels.clear();
  s.misuses = 0;
  s.log.clear();
}
void fake_cuda_fail_next(const char* call, int result) {
  auto lock = locked();
  state().fail_next[call] = result;
}
int fake_cuda_calls(const char* call) {
  auto lock = locked();
  return state().calls[call];
}
int fake_cuda_launch_count() {
  auto lock = locked();
  return static_cast<int>(state().launches.size());
}
const FakeCudaLaunch* fake_cuda_launch(int i) {
  auto lock = locked();
  return &state().launches.at(static_cast<size_t>(i));
}
void fake_cuda_set_kernel(const char* name, FakeCudaKernel fn) {
  auto lock = locked();
  state().kernels[name] = fn;
}
void* fake_cuda_host_pointer(uint64_t device_ptr) {
  auto lock = locked();
  return host(device_ptr);
}
size_t fake_cuda_pending() {
  auto lock = locked();
  size_t n = 0;
  for (const auto& st : state().streams)
    n += st->work.size();
  return n;
}
size_t fake_cuda_live_bytes() {
  auto lock = locked();
  return live_bytes();
}
int fake_cuda_misuses() {
  auto lock = locked();
  return state().misuses;
}
int fake_cuda_block_device(uint64_t device_ptr) {
  auto lock = locked();
  auto it = state().blocks.upper_bound(device_ptr);
  if (it == state().blocks.begin()) return -1;
  --it;
  if (device_ptr >= it->first + it->second.size()) return -1;
  return state().block_devices[it->first];
}
const char* fake_cuda_log() {
  auto lock = locked();
  return state().log.c_str();
}

// ---- the CUDA driver ----

CUresult cuInit(unsigned) {
  auto lock = locked();
  if (CUresult r = enter("cuInit", false)) return r;
  state().initialized = true;
  return CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int* v) {
  auto lock = locked();
  *v = 13000;
  return enter("cuDriverGetVersion", false);
}
CUresult cuDeviceGetCount(int* n) {
  auto lock = locked();
  if (CUresult r = enter("cuDeviceGetCount", false)) return r;
  return device_count(n);
}
CUresult cuDeviceGet(int* dev, int ordinal) {
  auto lock = locked();
  if (CUresult r = enter("cuDeviceGet", false)) return r;
  return device_get(dev, ordinal);
}
CUresult cuDeviceGetName(char* name, int len, int) {
  auto lock = locked();
  std::snprintf(name, static_cast<size_t>(len), "Fake GPU");
  return enter("cuDeviceGetName", false);
}
CUresult cuDeviceGetAttribute(int* v, int attribute, int) {
  auto lock = locked();
  if (CUresult r = enter("cuDeviceGetAttribute", false)) return r;
  const std::map<int, int> values = {{1, 1024},  {2, 1024},  {3, 1024}, {4, 64}, {5, 2147483647}, {6, 65535},
                                     {7, 65535}, {8, 49152}, {16, 132}, {75, 9}, {76, 0}};
  auto it = values.find(attribute);
  if (it == values.end()) return CUDA_ERROR_INVALID_VALUE;
  *v = it->second;
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, int) {
  auto lock = locked();
  *bytes = state().memory;
  return enter("cuDeviceTotalMem_v2", false);
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  auto lock = locked();
  *ctx = &state().contexts.at(static_cast<size_t>(dev));
  return enter("cuDevicePrimaryCtxRetain", false);
}
CUresult cuDevicePrimaryCtxRelease_v2(int) {
  auto lock = locked();
  return enter("cuDevicePrimaryCtxRelease_v2", false);
}
CUresult cuCtxPushCurrent_v2(void* ctx) {
  auto lock = locked();
  if (CUresult r = enter("cuCtxPushCurrent_v2", false)) return r;
  current_contexts.push_back(ctx);
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent_v2(void** ctx) {
  auto lock = locked();
  if (CUresult r = enter("cuCtxPopCurrent_v2", false)) return r;
  if (current_contexts.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  *ctx = current_contexts.back();
  current_contexts.pop_back();
  return CUDA_SUCCESS;
}
CUresult cuStreamCreate(Stream** stream, unsigned) {
  auto lock = locked();
  if (CUresult r = enter("cuStreamCreate")) return r;
  return stream_create(stream, cuda_current_device());
}
CUresult cuStreamDestroy_v2(Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("cuStreamDestroy_v2")) return r;
  return stream_destroy(stream);
}
CUresult cuStreamSynchronize(Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("cuStreamSynchronize")) return r;
  return stream_synchronize(stream);
}
CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  auto lock = locked();
  if (CUresult r = enter("cuMemGetInfo_v2")) return r;
  return mem_get_info(free, total, cuda_current_device());
}
CUresult cuMemAlloc_v2(uint64_t* ptr, size_t n) {
  auto lock = locked();
  if (CUresult r = enter("cuMemAlloc_v2")) return r;
  return mem_alloc(ptr, n, cuda_current_device());
}
CUresult cuMemFree_v2(uint64_t ptr) {
  auto lock = locked();
  if (CUresult r = enter("cuMemFree_v2")) return r;
  return mem_free(ptr);
}
CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void* src, size_t n, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("cuMemcpyHtoDAsync_v2")) return r;
  return memcpy_htod(dst, src, n, stream, cuda_current_device());
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, uint64_t src, size_t n, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("cuMemcpyDtoHAsync_v2")) return r;
  return memcpy_dtoh(dst, src, n, stream, cuda_current_device());
}
CUresult cuMemsetD8Async(uint64_t dst, unsigned char value, size_t n, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("cuMemsetD8Async")) return r;
  return memset_d8(dst, value, n, stream, cuda_current_device());
}
CUresult cuModuleLoadData(Module** module, const void* image) {
  auto lock = locked();
  if (CUresult r = enter("cuModuleLoadData")) return r;
  return module_load(module, image, cuda_current_device());
}
CUresult cuModuleGetFunction(Function** f, Module* module, const char* name) {
  auto lock = locked();
  if (CUresult r = enter("cuModuleGetFunction")) return r;
  return module_get_function(f, module, name);
}
CUresult cuModuleUnload(Module* module) {
  auto lock = locked();
  if (CUresult r = enter("cuModuleUnload")) return r;
  delete module;
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, Stream* stream, void** params, void** extra) {
  auto lock = locked();
  if (CUresult r = enter("cuLaunchKernel")) return r;
  return launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra, nullptr, cuda_current_device());
}
CUresult cuGetErrorName(CUresult code, const char** name) {
  const ErrorText* e = error_of(code);
  *name = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult code, const char** text) {
  const ErrorText* e = error_of(code);
  *text = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- the HIP runtime: a device current per thread (0 until set), no contexts ----

CUresult hipInit(unsigned) {
  auto lock = locked();
  if (CUresult r = enter("hipInit", false)) return r;
  state().initialized = true;
  return CUDA_SUCCESS;
}
CUresult hipGetDeviceCount(int* n) {
  auto lock = locked();
  if (CUresult r = enter("hipGetDeviceCount", false)) return r;
  return device_count(n);
}
CUresult hipDeviceGet(int* dev, int ordinal) {
  auto lock = locked();
  if (CUresult r = enter("hipDeviceGet", false)) return r;
  return device_get(dev, ordinal);
}
CUresult hipDeviceGetName(char* name, int len, int) {
  auto lock = locked();
  std::snprintf(name, static_cast<size_t>(len), "Fake GPU");
  return enter("hipDeviceGetName", false);
}
// hipDeviceAttribute_t: MaxThreadsPerBlock 56, MaxBlockDimX/Y/Z 26-28, MaxGridDimX/Y/Z 29-31,
// MaxSharedMemoryPerBlock 74, MultiprocessorCount 63 (an MI300X's)
CUresult hipDeviceGetAttribute(int* v, int attribute, int) {
  auto lock = locked();
  if (CUresult r = enter("hipDeviceGetAttribute", false)) return r;
  const std::map<int, int> values = {{56, 1024},  {26, 1024},  {27, 1024},  {28, 1024}, {29, 2147483647},
                                     {30, 65536}, {31, 65536}, {74, 65536}, {63, 304}};
  auto it = values.find(attribute);
  if (it == values.end()) return CUDA_ERROR_INVALID_VALUE;
  *v = it->second;
  return CUDA_SUCCESS;
}
CUresult hipDeviceTotalMem(size_t* bytes, int) {
  auto lock = locked();
  *bytes = state().memory;
  return enter("hipDeviceTotalMem", false);
}
// hipDeviceProp_t: the name first, gcnArchName further on (where depends on the ROCm release)
CUresult hipGetDeviceProperties(char* props, int) {
  auto lock = locked();
  if (CUresult r = enter("hipGetDeviceProperties", false)) return r;
  std::snprintf(props, 256, "Fake GPU");
  std::snprintf(props + 1160, 256, "gfx942:sramecc+:xnack-");
  return CUDA_SUCCESS;
}
CUresult hipGetDevice(int* dev) {
  auto lock = locked();
  *dev = hip_current_device;
  return enter("hipGetDevice", false);
}
CUresult hipSetDevice(int dev) {
  auto lock = locked();
  if (CUresult r = enter("hipSetDevice", false)) return r;
  if (dev < 0 || dev >= state().devices) return CUDA_ERROR_INVALID_DEVICE;
  hip_current_device = dev;
  return CUDA_SUCCESS;
}
CUresult hipStreamCreateWithFlags(Stream** stream, unsigned) {
  auto lock = locked();
  if (CUresult r = enter("hipStreamCreateWithFlags", false)) return r;
  return stream_create(stream, hip_current_device);
}
CUresult hipStreamDestroy(Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("hipStreamDestroy", false)) return r;
  return stream_destroy(stream);
}
CUresult hipStreamSynchronize(Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("hipStreamSynchronize", false)) return r;
  return stream_synchronize(stream);
}
CUresult hipMemGetInfo(size_t* free, size_t* total) {
  auto lock = locked();
  if (CUresult r = enter("hipMemGetInfo", false)) return r;
  return mem_get_info(free, total, hip_current_device);
}
CUresult hipMalloc(void** ptr, size_t n) {
  auto lock = locked();
  if (CUresult r = enter("hipMalloc", false)) return r;
  uint64_t p = 0;
  CUresult r = mem_alloc(&p, n, hip_current_device);
  *ptr = reinterpret_cast<void*>(p);
  return r;
}
CUresult hipFree(void* ptr) {
  auto lock = locked();
  if (CUresult r = enter("hipFree", false)) return r;
  return mem_free(reinterpret_cast<uint64_t>(ptr));
}
CUresult hipMemcpyHtoDAsync(void* dst, const void* src, size_t n, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("hipMemcpyHtoDAsync", false)) return r;
  return memcpy_htod(reinterpret_cast<uint64_t>(dst), src, n, stream, hip_current_device);
}
CUresult hipMemcpyDtoHAsync(void* dst, void* src, size_t n, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("hipMemcpyDtoHAsync", false)) return r;
  return memcpy_dtoh(dst, reinterpret_cast<uint64_t>(src), n, stream, hip_current_device);
}
CUresult hipMemsetD8Async(void* dst, unsigned char value, size_t n, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("hipMemsetD8Async", false)) return r;
  return memset_d8(reinterpret_cast<uint64_t>(dst), value, n, stream, hip_current_device);
}
CUresult hipModuleLoadData(Module** module, const void* image) {
  auto lock = locked();
  if (CUresult r = enter("hipModuleLoadData", false)) return r;
  return module_load(module, image, hip_current_device);
}
CUresult hipModuleGetFunction(Function** f, Module* module, const char* name) {
  auto lock = locked();
  if (CUresult r = enter("hipModuleGetFunction", false)) return r;
  return module_get_function(f, module, name);
}
CUresult hipModuleUnload(Module* module) {
  auto lock = locked();
  if (CUresult r = enter("hipModuleUnload", false)) return r;
  delete module;
  return CUDA_SUCCESS;
}
CUresult hipModuleLaunchKernel(Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, Stream* stream, void** params, void** extra) {
  auto lock = locked();
  if (CUresult r = enter("hipModuleLaunchKernel", false)) return r;
  return launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra, reinterpret_cast<void*>(3),
                hip_current_device);
}
const char* hipGetErrorName(CUresult code) {
  const ErrorText* e = error_of(code);
  return e ? e->hip_name : "hipErrorUnknown";
}
const char* hipGetErrorString(CUresult code) {
  const ErrorText* e = error_of(code);
  return e ? e->text : "unknown error";
}

} // extern "C"
