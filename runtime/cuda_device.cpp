// The NVIDIA device: the CUDA driver API (libcuda.so.1) and NVRTC are loaded with dlopen, so the build
// needs no CUDA header or library. One device, its primary context (torch.cuda's too), one in-order
// stream; kernels come from render_gpu's CUDA dialect, compiled to cubins once and cached in memory
// and on disk.

#include "runtime/cuda_device.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "compiler/render_gpu.h"
#include "runtime/debug.h"
#include "runtime/disk_cache.h"
#include "runtime/lazy_buffer.h"
#include "runtime/program_cache.h"

namespace tiny::runtime {

namespace {

namespace fs = std::filesystem;

// The part of the CUDA driver API tiny calls (types and values as cuda.h defines them).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = uint64_t;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2; // Y and Z follow
constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5;  // Y and Z follow
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
void* const CU_LAUNCH_PARAM_END = nullptr;
void* const CU_LAUNCH_PARAM_BUFFER_POINTER = reinterpret_cast<void*>(1);
void* const CU_LAUNCH_PARAM_BUFFER_SIZE = reinterpret_cast<void*>(2);

// Resolved by their versioned names (cuda.h maps cuMemAlloc to cuMemAlloc_v2, ...).
struct CuApi {
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int*);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*DeviceTotalMem)(size_t*, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext*);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*MemGetInfo)(size_t*, size_t*);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void**, void**);
  CUresult (*GetErrorName)(CUresult, const char**);
  CUresult (*GetErrorString)(CUresult, const char**);
};

// Fills the function pointers `symbols` point at from `lib` (loaded from `path`; it stays loaded for the
// process); throws naming the library and the missing symbol.
template <size_t N>
void resolve(void* lib, const std::string& path, const std::array<std::pair<const char*, void*>, N>& symbols) {
  for (const auto& [name, slot] : symbols) {
    void* f = dlsym(lib, name);
    if (!f) throw std::runtime_error("tiny: " + path + " has no " + name);
    *static_cast<void**>(slot) = f;
  }
}

// The driver at `path`, loaded once.
const CuApi& cu_api(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, CuApi> apis;
  std::lock_guard lock(mu);
  if (auto it = apis.find(path); it != apis.end()) return it->second;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    throw std::runtime_error("tiny: the CUDA device needs the NVIDIA driver's " + path +
                             ", which cannot be loaded: " + dlerror());
  CuApi a{};
  const std::array<std::pair<const char*, void*>, 26> symbols{{
      {"cuInit", &a.Init},
      {"cuDriverGetVersion", &a.DriverGetVersion},
      {"cuDeviceGetCount", &a.DeviceGetCount},
      {"cuDeviceGet", &a.DeviceGet},
      {"cuDeviceGetName", &a.DeviceGetName},
      {"cuDeviceGetAttribute", &a.DeviceGetAttribute},
      {"cuDeviceTotalMem_v2", &a.DeviceTotalMem},
      {"cuDevicePrimaryCtxRetain", &a.DevicePrimaryCtxRetain},
      {"cuDevicePrimaryCtxRelease_v2", &a.DevicePrimaryCtxRelease},
      {"cuCtxPushCurrent_v2", &a.CtxPushCurrent},
      {"cuCtxPopCurrent_v2", &a.CtxPopCurrent},
      {"cuStreamCreate", &a.StreamCreate},
      {"cuStreamDestroy_v2", &a.StreamDestroy},
      {"cuStreamSynchronize", &a.StreamSynchronize},
      {"cuMemGetInfo_v2", &a.MemGetInfo},
      {"cuMemAlloc_v2", &a.MemAlloc},
      {"cuMemFree_v2", &a.MemFree},
      {"cuMemcpyHtoDAsync_v2", &a.MemcpyHtoDAsync},
      {"cuMemcpyDtoHAsync_v2", &a.MemcpyDtoHAsync},
      {"cuMemsetD8Async", &a.MemsetD8Async},
      {"cuModuleLoadData", &a.ModuleLoadData},
      {"cuModuleGetFunction", &a.ModuleGetFunction},
      {"cuModuleUnload", &a.ModuleUnload},
      {"cuLaunchKernel", &a.LaunchKernel},
      {"cuGetErrorName", &a.GetErrorName},
      {"cuGetErrorString", &a.GetErrorString},
  }};
  resolve(lib, path, symbols);
  return apis.emplace(path, a).first->second;
}

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", from the driver's own tables.
std::string error_text(const CuApi& cu, CUresult r) {
  const char *name = nullptr, *text = nullptr;
  cu.GetErrorName(r, &name);
  cu.GetErrorString(r, &text);
  return std::string(name ? name : "CUDA error " + std::to_string(r)) + " (" + (text ? text : "unknown") + ")";
}

void check(const CuApi& cu, CUresult r, const std::string& what) {
  if (r != CUDA_SUCCESS) throw std::runtime_error("tiny: CUDA " + what + " failed: " + error_text(cu, r));
}

// The device's context is current on the calling thread for the guard's life (torch's threads may
// have another one current: it is current again after).
class ContextGuard {
public:
  ContextGuard(const CuApi& cu, CUcontext ctx) : cu_(cu) { check(cu, cu.CtxPushCurrent(ctx), "cuCtxPushCurrent"); }
  ~ContextGuard() {
    CUcontext ctx = nullptr;
    cu_.CtxPopCurrent(&ctx);
  }
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

private:
  const CuApi& cu_;
};

// Device memory in size buckets. The stream is in order: whatever is enqueued with a block after it
// came back here runs after every use enqueued before, so a block is reused only once the stream has
// passed its last use. Blocks go back to the driver only after the stream has drained.
class CudaAllocator : public Allocator {
public:
  CudaAllocator(const CuApi& cu, CUcontext ctx, CUstream stream) : cu_(cu), ctx_(ctx), stream_(stream) {}
  // The driver stages pageable host memory before cuMemcpyHtoDAsync returns: the caller may reuse it.
  void copy_in(void* dst, const void* src, size_t n) override {
    ContextGuard g(cu_, ctx_);
    check(cu_, cu_.MemcpyHtoDAsync(handle(dst), src, n, stream_), "cuMemcpyHtoDAsync");
  }
  // The host memory is read when this returns: the copy waits for the stream to reach it.
  void copy_out(void* dst, const void* src, size_t offset, size_t n) override {
    ContextGuard g(cu_, ctx_);
    check(cu_, cu_.MemcpyDtoHAsync(dst, handle(src) + offset, n, stream_), "cuMemcpyDtoHAsync");
    check(cu_, cu_.StreamSynchronize(stream_), "cuStreamSynchronize");
  }
  void memset(void* dst, unsigned char value, size_t n) {
    ContextGuard g(cu_, ctx_);
    check(cu_, cu_.MemsetD8Async(handle(dst), value, n, stream_), "cuMemsetD8Async");
  }
  static CUdeviceptr handle(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

protected:
  void* system_alloc(size_t nbytes) override {
    ContextGuard g(cu_, ctx_);
    CUdeviceptr p = 0;
    CUresult r = cu_.MemAlloc(&p, nbytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
    check(cu_, r, "cuMemAlloc of " + std::to_string(nbytes) + " bytes");
    return reinterpret_cast<void*>(p);
  }
  void system_free(void* ptr) override {
    ContextGuard g(cu_, ctx_);
    check(cu_, cu_.StreamSynchronize(stream_), "cuStreamSynchronize");
    check(cu_, cu_.MemFree(handle(ptr)), "cuMemFree");
  }

private:
  const CuApi& cu_;
  CUcontext ctx_;
  CUstream stream_;
};

// The device's integer-division error flag: kernels that divide a user's integers set it (their last
// argument); a sync reads and clears it.
struct ErrorFlag {
  void* mem = nullptr;            // a device int
  std::atomic<bool> used = false; // a kernel that may set it ran since the last check
};

// What a launch may ask of the device.
struct Limits {
  std::array<int64_t, 3> grid{};
  std::array<int64_t, 3> block{};
  int64_t threads = 0;
};

class CudaProgram : public Program {
public:
  CudaProgram(const CuApi& cu, CUcontext ctx, CUstream stream, const std::vector<char>& image, const std::string& name,
              const Limits& limits, ErrorFlag* errors)
      : cu_(cu), ctx_(ctx), stream_(stream), name_(name), limits_(limits), errors_(errors) {
    ContextGuard g(cu_, ctx_);
    check(cu_, cu_.ModuleLoadData(&module_, image.data()), "cuModuleLoadData of kernel " + name);
    CUresult r = cu_.ModuleGetFunction(&function_, module_, name.c_str());
    if (r != CUDA_SUCCESS) cu_.ModuleUnload(module_);
    check(cu_, r, "cuModuleGetFunction " + name);
  }
  ~CudaProgram() override {
    ContextGuard g(cu_, ctx_);
    cu_.ModuleUnload(module_);
  }
  // Arguments in render_gpu's order (buffers, int64 scalars, float or double scalars, the error flag),
  // packed as the kernel's parameters lie in memory: each aligned to its size. Enqueued; a sync waits.
  void launch(std::span<void* const> bufs, std::span<const int64_t> ivars, std::span<const double> fvars,
              const Launch& launch) override {
    check_limits(launch);
    std::vector<unsigned char> args;
    auto put = [&](const void* v, size_t n) {
      size_t at = (args.size() + n - 1) / n * n;
      args.resize(at + n);
      std::memcpy(args.data() + at, v, n);
    };
    for (void* b : bufs) {
      CUdeviceptr p = CudaAllocator::handle(b);
      put(&p, sizeof p);
    }
    for (int64_t v : ivars)
      put(&v, sizeof v);
    for (double v : fvars) {
      float f = static_cast<float>(v);
      if (launch.f64_scalars)
        put(&v, sizeof v);
      else
        put(&f, sizeof f);
    }
    if (errors_) {
      CUdeviceptr p = CudaAllocator::handle(errors_->mem);
      put(&p, sizeof p);
      errors_->used = true;
    }
    size_t size = args.size();
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, args.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    auto dim = [](int64_t v) { return static_cast<unsigned>(v); };
    ContextGuard g(cu_, ctx_);
    check(cu_,
          cu_.LaunchKernel(function_, dim(launch.global[0]), dim(launch.global[1]), dim(launch.global[2]),
                           dim(launch.local[0]), dim(launch.local[1]), dim(launch.local[2]), 0, stream_, nullptr,
                           extra),
          "cuLaunchKernel of " + name_);
  }

private:
  // The lowering keeps within the target's limits; a launch past them says so before the driver's
  // CUDA_ERROR_INVALID_VALUE would.
  void check_limits(const Launch& launch) const {
    bool ok = launch.local[0] * launch.local[1] * launch.local[2] <= limits_.threads;
    for (int a = 0; a < 3; a++)
      ok = ok && launch.global[a] >= 1 && launch.global[a] <= limits_.grid[a] && launch.local[a] >= 1 &&
           launch.local[a] <= limits_.block[a];
    if (ok) return;
    auto dims = [](const std::array<int64_t, 3>& d) {
      return "(" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) + ")";
    };
    throw std::runtime_error("tiny: kernel " + name_ + " launches a grid of " + dims(launch.global) + " blocks of " +
                             dims(launch.local) + " threads, past the CUDA device's limits (grid " +
                             dims(limits_.grid) + ", block " + dims(limits_.block) + ", " +
                             std::to_string(limits_.threads) + " threads)");
  }
  const CuApi& cu_;
  CUcontext ctx_;
  CUstream stream_;
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
  std::string name_;
  Limits limits_;
  ErrorFlag* errors_; // null: the kernel divides no user's integers
};

// ---- NVRTC ----

using nvrtcProgram = struct _nvrtcProgram*;

struct NvrtcApi {
  int (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
  int (*CompileProgram)(nvrtcProgram, int, const char* const*);
  int (*GetProgramLogSize)(nvrtcProgram, size_t*);
  int (*GetProgramLog)(nvrtcProgram, char*);
  int (*GetCUBINSize)(nvrtcProgram, size_t*);
  int (*GetCUBIN)(nvrtcProgram, char*);
  int (*DestroyProgram)(nvrtcProgram*);
  const char* (*GetErrorString)(int);
  int (*Version)(int*, int*);
  std::string version; // "13.0"
};

// NVRTC compiles through libnvrtc-builtins, which it finds only when that is already loaded (the
// nvidia-cuda-nvrtc wheel's directory is on no search path): load it from `dir` first, globally.
void load_nvrtc_builtins(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string f = e.path().filename().string();
    if (f.starts_with("libnvrtc-builtins.so.") && f.find(".alt.") == std::string::npos)
      dlopen(e.path().c_str(), RTLD_NOW | RTLD_GLOBAL);
  }
}

const NvrtcApi& nvrtc_api(const std::string& requested) {
  static std::mutex mu;
  static std::map<std::string, NvrtcApi> apis;
  std::lock_guard lock(mu);
  if (auto it = apis.find(requested); it != apis.end()) return it->second;
  std::vector<std::string> candidates;
  if (!requested.empty())
    candidates = {requested};
  else if (const char* env = std::getenv("TINY_NVRTC"))
    candidates = {env};
  else
    candidates = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  void* lib = nullptr;
  std::string tried, path;
  for (const std::string& c : candidates) {
    if (c.find('/') != std::string::npos) load_nvrtc_builtins(fs::path(c).parent_path());
    if ((lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      path = c;
      break;
    }
    tried += "\n  " + std::string(dlerror());
  }
  if (!lib)
    throw std::runtime_error("tiny: the CUDA device compiles kernels with NVRTC (pip's nvidia-cuda-nvrtc, or the CUDA "
                             "toolkit's; TINY_NVRTC=path names it), which cannot be loaded:" +
                             tried);
  char origin[4096] = {};
  if (dlinfo(lib, RTLD_DI_ORIGIN, origin) == 0) load_nvrtc_builtins(origin);
  NvrtcApi a{};
  const std::array<std::pair<const char*, void*>, 9> symbols{{
      {"nvrtcCreateProgram", &a.CreateProgram},
      {"nvrtcCompileProgram", &a.CompileProgram},
      {"nvrtcGetProgramLogSize", &a.GetProgramLogSize},
      {"nvrtcGetProgramLog", &a.GetProgramLog},
      {"nvrtcGetCUBINSize", &a.GetCUBINSize},
      {"nvrtcGetCUBIN", &a.GetCUBIN},
      {"nvrtcDestroyProgram", &a.DestroyProgram},
      {"nvrtcGetErrorString", &a.GetErrorString},
      {"nvrtcVersion", &a.Version},
  }};
  resolve(lib, path, symbols);
  int major = 0, minor = 0;
  a.Version(&major, &minor);
  a.version = std::to_string(major) + "." + std::to_string(minor);
  return apis.emplace(requested, a).first->second;
}

class NvrtcCompiler : public Compiler {
public:
  NvrtcCompiler(int arch, const std::string& nvrtc)
      : nv_(nvrtc_api(nvrtc)), arch_("sm_" + std::to_string(arch)), arch_option_("--gpu-architecture=" + arch_),
        key_("NVRTC " + nv_.version + " " + arch_option_) {}
  std::string key() const override { return key_; }
  std::string compile(const std::string& src, const std::string& name) override {
    fs::path path = cuda_binary_path(key_, src);
    nvrtcProgram p = nullptr;
    int r = nv_.CreateProgram(&p, src.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
    if (r != 0) throw std::runtime_error(std::string("tiny: nvrtcCreateProgram failed: ") + nv_.GetErrorString(r));
    const char* options[] = {arch_option_.c_str()};
    r = nv_.CompileProgram(p, 1, options);
    std::vector<char> cubin;
    size_t size = 0;
    if (r == 0 && (r = nv_.GetCUBINSize(p, &size)) == 0) {
      cubin.resize(size);
      r = nv_.GetCUBIN(p, cubin.data());
    }
    if (r != 0) {
      size_t n = 0;
      nv_.GetProgramLogSize(p, &n);
      std::string log(n, '\0');
      if (n) nv_.GetProgramLog(p, log.data());
      nv_.DestroyProgram(&p);
      fs::path at = fs::path(path).replace_extension(".cu");
      fs::create_directories(at.parent_path());
      std::ofstream(at) << src;
      throw std::runtime_error("tiny: compiling kernel " + name + " with NVRTC for " + arch_ + " failed (" +
                               nv_.GetErrorString(r) + "; source at " + at.string() + "):\n" + log);
    }
    nv_.DestroyProgram(&p);
    fs::create_directories(path.parent_path());
    // written under a name of its own, then renamed: processes sharing the cache compile at once
    fs::path tmp = path.string() + "." + std::to_string(getpid());
    std::ofstream(tmp, std::ios::binary).write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
    fs::rename(tmp, path);
    return path.string();
  }

private:
  const NvrtcApi& nv_;
  std::string arch_, arch_option_, key_;
};

std::vector<char> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.push_back('\0'); // an image the driver reads as text (PTX) ends at a NUL
  return bytes;
}

class CudaDevice : public Device {
public:
  CudaDevice(const CuApi& cu, int ordinal, std::unique_ptr<Compiler> compiler)
      : cu_(cu), compiler_(std::move(compiler)) {
    check(cu_, cu_.DeviceGet(&dev_, ordinal), "cuDeviceGet " + std::to_string(ordinal));
    char name[256] = {};
    check(cu_, cu_.DeviceGetName(name, sizeof name - 1, dev_), "cuDeviceGetName");
    name_ = name;
    arch_ = 10 * attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) +
            attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    for (int a = 0; a < 3; a++) {
      limits_.grid[a] = attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X + a);
      limits_.block[a] = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X + a);
    }
    limits_.threads = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    compute_units_ = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    check(cu_, cu_.DeviceTotalMem(&total_memory_, dev_), "cuDeviceTotalMem");
    target_.dialect = Dialect::CUDA;
    target_.max_local = limits_.threads;
    // static __shared__ arrays: 48 KiB at most, whatever more a block may opt into
    target_.local_mem = std::min<int64_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK), 48 * 1024);
    target_.max_groups = limits_.grid;
    target_.fp64 = true;
    check(cu_, cu_.DevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
    ContextGuard g(cu_, ctx_);
    check(cu_, cu_.StreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    allocator_ = std::make_unique<CudaAllocator>(cu_, ctx_, stream_);
    errors_.mem = allocator_->alloc(sizeof(int));
    allocator_->memset(errors_.mem, 0, sizeof(int));
    if (debug_level() >= 1) std::fprintf(stderr, "tiny: %s\n", this->name().c_str());
  }
  // Only devices made for a test go away (the process-wide one stays): what they hold goes back to the
  // driver, and a failure to do so (a lost device) is not raised from a destructor.
  ~CudaDevice() override {
    try {
      programs_.clear();
      allocator_->free(errors_.mem, sizeof(int));
      allocator_->empty_cache();
      ContextGuard g(cu_, ctx_);
      cu_.StreamDestroy(stream_);
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr, "tiny: releasing the CUDA device failed: %s\n", e.what());
    }
    cu_.DevicePrimaryCtxRelease(dev_);
  }
  std::string name() const override { return "CUDA: " + name_ + " (sm_" + std::to_string(arch_) + ")"; }
  int64_t total_memory() const override { return static_cast<int64_t>(total_memory_); }
  int compute_units() const override { return compute_units_; }
  std::optional<int64_t> free_memory() const override {
    ContextGuard g(cu_, ctx_);
    size_t free = 0, total = 0;
    check(cu_, cu_.MemGetInfo(&free, &total), "cuMemGetInfo");
    return static_cast<int64_t>(free);
  }
  const Target& target() const override { return target_; }
  Allocator& allocator() override { return *allocator_; }
  // NVRTC for this device's compute capability, loaded at the first compile
  Compiler& compiler() override {
    std::lock_guard lock(compiler_mu_);
    if (!compiler_) compiler_ = nvrtc_compiler(arch_);
    return *compiler_;
  }
  std::shared_ptr<Program> program(const std::string& src, const std::string& fn_name) override {
    return programs_.get(fn_name + "\n" + src, [&] {
      Compiler& c = compiler();
      fs::path bin = cuda_binary_path(c.key(), src);
      if (fs::exists(bin)) {
        stats().cache_hits++;
        stats().disk_hits++;
      } else {
        bin = c.compile(src, fn_name);
        stats().compiles++;
      }
      bool checks = src.find(std::string("int* ") + kGpuErrorFlag) != std::string::npos;
      return std::make_shared<CudaProgram>(cu_, ctx_, stream_, read_file(bin), fn_name, limits_,
                                           checks ? &errors_ : nullptr);
    });
  }
  // Waits for the stream; a kernel that failed asynchronously is reported here, by the driver.
  void synchronize() override {
    {
      ContextGuard g(cu_, ctx_);
      check(cu_, cu_.StreamSynchronize(stream_), "cuStreamSynchronize (a kernel or copy enqueued before failed)");
    }
    if (!errors_.used.exchange(false)) return;
    int flag = 0;
    allocator_->copy_out(&flag, errors_.mem, 0, sizeof flag);
    if (!flag) return;
    allocator_->memset(errors_.mem, 0, sizeof flag);
    report_zero_division();
  }

private:
  int attribute(int which) const {
    int v = 0;
    check(cu_, cu_.DeviceGetAttribute(&v, which, dev_), "cuDeviceGetAttribute " + std::to_string(which));
    return v;
  }
  const CuApi& cu_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  std::string name_;
  int arch_ = 0, compute_units_ = 0;
  size_t total_memory_ = 0;
  Limits limits_;
  Target target_;
  std::unique_ptr<CudaAllocator> allocator_;
  std::mutex compiler_mu_;
  std::unique_ptr<Compiler> compiler_;
  ErrorFlag errors_;
  ProgramCache programs_;
};

// The driver at `libcuda`, initialized; throws saying what is missing.
const CuApi& initialized_driver(const std::string& libcuda) {
  const CuApi& cu = cu_api(libcuda);
  check(cu, cu.Init(0), "cuInit (no usable NVIDIA GPU or driver)");
  return cu;
}

} // namespace

std::string default_libcuda() {
  const char* env = std::getenv("TINY_LIBCUDA");
  return env ? env : "libcuda.so.1";
}

fs::path cuda_binary_path(const std::string& compiler_key, const std::string& src) {
  return cache_dir() / "cuda" / (content_hash(compiler_key + "\n" + src) + ".cubin");
}

std::unique_ptr<Compiler> nvrtc_compiler(int arch, const std::string& nvrtc) {
  return std::make_unique<NvrtcCompiler>(arch, nvrtc);
}

int cuda_device_count(const std::string& libcuda) {
  try {
    const CuApi& cu = initialized_driver(libcuda);
    int n = 0;
    return cu.DeviceGetCount(&n) == CUDA_SUCCESS ? n : 0;
  } catch (const std::runtime_error&) {
    return 0;
  }
}

std::unique_ptr<Device> make_cuda_device(const std::string& libcuda, int ordinal, std::unique_ptr<Compiler> compiler) {
  const CuApi& cu = initialized_driver(libcuda);
  int n = 0;
  check(cu, cu.DeviceGetCount(&n), "cuDeviceGetCount");
  if (n == 0) throw std::runtime_error("tiny: the NVIDIA driver (" + libcuda + ") reports no CUDA device");
  if (ordinal < 0 || ordinal >= n)
    throw std::runtime_error("tiny: CUDA device " + std::to_string(ordinal) + " asked for, but there are " +
                             std::to_string(n));
  return std::make_unique<CudaDevice>(cu, ordinal, std::move(compiler));
}

Device& cuda_device() {
  static std::string error;
  static Device* dev = [] {
    try {
      const char* v = std::getenv("TINY_CUDA_DEVICE");
      // never destroyed: buffers may be freed during static teardown
      return make_cuda_device(default_libcuda(), v ? std::atoi(v) : 0).release();
    } catch (const std::runtime_error& e) {
      error = e.what();
      return static_cast<Device*>(nullptr);
    }
  }();
  if (!dev) throw std::runtime_error(error);
  return *dev;
}

} // namespace tiny::runtime
