// The NVIDIA device: the CUDA driver API (libcuda.so.1) and NVRTC are loaded with dlopen, so the build
// needs no CUDA header or library. The device itself is runtime/gpu_device.cpp's over the driver's row of
// entry points; each device works on its primary context (torch.cuda's too). Kernels come from
// render_gpu's CUDA dialect, compiled to cubins once and cached in memory and on disk.

#include "runtime/cuda_device.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "runtime/disk_cache.h"
#include "runtime/gpu_device.h"

namespace tiny::runtime {

namespace {

namespace fs = std::filesystem;

// The driver's entry points, by their versioned names (cuda.h maps cuMemAlloc to cuMemAlloc_v2, ...).
std::vector<std::pair<const char*, void**>> cuda_symbols(GpuApi& a) {
  auto slot = [](auto& f) { return reinterpret_cast<void**>(&f); };
  return {
      {"cuInit", slot(a.Init)},
      {"cuDeviceGetCount", slot(a.DeviceGetCount)},
      {"cuDeviceGet", slot(a.DeviceGet)},
      {"cuDeviceGetName", slot(a.DeviceGetName)},
      {"cuDeviceGetAttribute", slot(a.DeviceGetAttribute)},
      {"cuDeviceTotalMem_v2", slot(a.DeviceTotalMem)},
      {"cuDevicePrimaryCtxRetain", slot(a.PrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease_v2", slot(a.PrimaryCtxRelease)},
      {"cuCtxPushCurrent_v2", slot(a.CtxPushCurrent)},
      {"cuCtxPopCurrent_v2", slot(a.CtxPopCurrent)},
      {"cuStreamCreate", slot(a.StreamCreate)},
      {"cuStreamDestroy_v2", slot(a.StreamDestroy)},
      {"cuStreamSynchronize", slot(a.StreamSynchronize)},
      {"cuMemGetInfo_v2", slot(a.MemGetInfo)},
      {"cuMemAlloc_v2", slot(a.MemAlloc)},
      {"cuMemFree_v2", slot(a.MemFree)},
      {"cuMemcpyHtoDAsync_v2", slot(a.MemcpyHtoDAsync)},
      {"cuMemcpyDtoHAsync_v2", slot(a.MemcpyDtoHAsync)},
      {"cuMemsetD8Async", slot(a.MemsetD8Async)},
      {"cuModuleLoadData", slot(a.ModuleLoadData)},
      {"cuModuleGetFunction", slot(a.ModuleGetFunction)},
      {"cuModuleUnload", slot(a.ModuleUnload)},
      {"cuLaunchKernel", slot(a.LaunchKernel)},
      {"cuMemHostAlloc", slot(a.MemHostAlloc)},
      {"cuMemFreeHost", slot(a.MemFreeHost)},
      {"cuEventCreate", slot(a.EventCreate)},
      {"cuEventRecord", slot(a.EventRecord)},
      {"cuEventQuery", slot(a.EventQuery)},
      {"cuEventSynchronize", slot(a.EventSynchronize)},
      {"cuEventElapsedTime", slot(a.EventElapsedTime)},
      {"cuEventDestroy_v2", slot(a.EventDestroy)},
      {"cuStreamBeginCapture_v2", slot(a.StreamBeginCapture)},
      {"cuStreamEndCapture", slot(a.StreamEndCapture)},
      {"cuGraphInstantiateWithFlags", slot(a.GraphInstantiate)},
      {"cuGraphExecUpdate_v2", slot(a.GraphExecUpdateInfo)},
      {"cuGraphLaunch", slot(a.GraphLaunch)},
      {"cuGraphExecDestroy", slot(a.GraphExecDestroy)},
      {"cuGraphDestroy", slot(a.GraphDestroy)},
      {"cuGetErrorName", slot(a.ErrorNameTo)},
      {"cuGetErrorString", slot(a.ErrorStringTo)},
  };
}

// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR and _MINOR: "sm_90"
std::string cuda_arch(const GpuApi& api, int device) {
  int major = 0, minor = 0;
  api.DeviceGetAttribute(&major, 75, device);
  api.DeviceGetAttribute(&minor, 76, device);
  return "sm_" + std::to_string(10 * major + minor);
}

std::unique_ptr<Compiler> cuda_compiler(const std::string& arch) { return nvrtc_compiler(std::stoi(arch.substr(3))); }

std::string cuda_binary(const std::string& key, const std::string& src) { return cuda_binary_path(key, src).string(); }

// CU_DEVICE_ATTRIBUTE_*: MAX_THREADS_PER_BLOCK 1, MAX_BLOCK_DIM_X 2 (Y, Z follow), MAX_GRID_DIM_X 5,
// MAX_SHARED_MEMORY_PER_BLOCK 8, MULTIPROCESSOR_COUNT 16; CUDA_ERROR_OUT_OF_MEMORY 2;
// CU_LAUNCH_PARAM_END is null. Static __shared__ arrays take 48 KiB at most, whatever more a block may
// opt into.
const GpuVendor kCuda{
    "CUDA",  "the NVIDIA driver", Dialect::CUDA, cuda_symbols, 1, 2, 5, 8, 16, 48 * 1024, 2,
    nullptr, cuda_arch,           cuda_compiler, cuda_binary,
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

int cuda_device_count(const std::string& libcuda) { return gpu_device_count(kCuda, libcuda); }

std::unique_ptr<Device> make_cuda_device(const std::string& libcuda, int ordinal, std::unique_ptr<Compiler> compiler) {
  return make_gpu_device(kCuda, libcuda, ordinal, std::move(compiler));
}

Device& cuda_device(int ordinal) { return gpu_device(kCuda, default_libcuda(), ordinal); }

} // namespace tiny::runtime
