// The AMD device: runtime/gpu_device.cpp's over the HIP runtime's row of entry points, and its compiler:
// clang's HIP device-only mode makes a code object (an ELF the HIP runtime's hipModuleLoadData takes)
// from render_gpu's HIP dialect, without the HIP headers or device libraries except ROCm's ocml for the
// libm functions a kernel calls.

#include "runtime/hip_device.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "runtime/disk_cache.h"
#include "runtime/gpu_device.h"

namespace tiny::runtime {

namespace {

namespace fs = std::filesystem;

// The first line `command` prints, or "" when it fails.
std::string first_line(const std::string& command) {
  FILE* f = popen((command + " 2>/dev/null").c_str(), "r");
  if (!f) return "";
  char buf[512] = {};
  std::string line = std::fgets(buf, sizeof buf, f) ? buf : "";
  int rc = pclose(f);
  if (rc != 0) return "";
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
    line.pop_back();
  return line;
}

std::string shell_quoted(const std::string& s) { return "'" + s + "'"; }

// The clang to run and its version line; clang-14 knows gfx targets only up to gfx90a.
std::pair<std::string, std::string> find_clang(const std::string& requested) {
  std::vector<std::string> candidates;
  if (!requested.empty())
    candidates = {requested};
  else if (const char* env = std::getenv("TINY_HIP_CLANG"))
    candidates = {env};
  else
    candidates = {"clang-19", "/usr/lib/llvm-19/bin/clang", "clang-20", "clang-18"};
  std::string tried;
  for (const std::string& c : candidates) {
    std::string version = first_line(shell_quoted(c) + " --version");
    if (!version.empty()) return {c, version};
    tried += (tried.empty() ? "" : ", ") + c;
  }
  throw std::runtime_error("tiny: the HIP device compiles kernels with clang 18 or newer and its lld (Debian: "
                           "apt install clang-19 lld-19; TINY_HIP_CLANG=path names one), and none runs here (tried " +
                           tried + ")");
}

// The directory holding ROCm's ocml.bc, or "" when there is none.
fs::path find_device_libs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("TINY_HIP_DEVICE_LIBS")) dirs.push_back(env);
  for (const char* d : {"/usr/lib/x86_64-linux-gnu/amdgcn/bitcode", "/opt/rocm/amdgcn/bitcode",
                        "/opt/rocm/lib/llvm/lib/clang/amdgcn/bitcode"})
    dirs.push_back(d);
  for (const fs::path& d : dirs)
    if (fs::exists(d / "ocml.bc")) return d;
  return {};
}

// The libm functions render_gpu's HIP dialect calls (as __builtin_NAME, float ones suffixed f) and
// their arity. clang lowers such a call to an instruction, to a call to the plain libm name (which
// nothing defines on the device), or to an LLVM intrinsic the AMDGPU backend cannot lower at all
// (clang-19: cosh, sinh, tan, asin, acos, atan: "no libcall available for fcosh"). So the prelude
// defines each one the source calls through ocml, and the source's __builtin_NAME names it.
const std::vector<std::pair<std::string, int>> kLibm = {
    {"sqrt", 1},  {"exp", 1},    {"exp2", 1}, {"log", 1},   {"log2", 1}, {"sin", 1},  {"cos", 1},   {"tan", 1},
    {"tanh", 1},  {"erf", 1},    {"erfc", 1}, {"floor", 1}, {"ceil", 1}, {"rint", 1}, {"trunc", 1}, {"log1p", 1},
    {"expm1", 1}, {"asin", 1},   {"acos", 1}, {"atan", 1},  {"sinh", 1}, {"cosh", 1}, {"asinh", 1}, {"acosh", 1},
    {"atanh", 1}, {"lgamma", 1}, {"fabs", 1}, {"fmod", 2},  {"pow", 2},  {"atan2", 2}};

// ocml's settings, which the ROCm driver would link as oclc_*.bc for the target: IEEE behaviour (no
// finite-only or unsafe math, denormals kept, correctly rounded sqrt), the ISA version and wave size.
std::string ocml_settings(const std::string& gfx) {
  // gfx<major><minor><stepping>: the last two characters are minor and stepping (hex), e.g. gfx90a
  std::string digits = gfx.substr(3);
  if (digits.size() < 3) throw std::runtime_error("tiny: '" + gfx + "' is not a gfx target (gfx942, gfx1100, ...)");
  int major = std::stoi(digits.substr(0, digits.size() - 2));
  int minor = std::stoi(digits.substr(digits.size() - 2, 1), nullptr, 16);
  int stepping = std::stoi(digits.substr(digits.size() - 1), nullptr, 16);
  bool wave64 = major < 10; // RDNA (gfx10+) compiles for wave32 by default
  std::ostringstream s;
  s << "extern \"C\" __attribute__((constant)) const int __oclc_ISA_version = " << major * 1000 + minor * 100 + stepping
    << ";\n"
    << "extern \"C\" __attribute__((constant)) const bool __oclc_finite_only_opt = false, __oclc_unsafe_math_opt = "
       "false, __oclc_daz_opt = false, __oclc_correctly_rounded_sqrt32 = true, __oclc_wavefrontsize64 = "
    << (wave64 ? "true" : "false") << ";\n";
  return s.str();
}

// Definitions of the libm functions `src` calls, through ocml; empty when it calls none.
std::string libm_prelude(const std::string& src) {
  std::string out;
  for (const auto& [name, arity] : kLibm)
    for (bool f32 : {true, false}) {
      std::string fn = name + (f32 ? "f" : "");
      if (src.find("__builtin_" + fn + "(") == std::string::npos) continue;
      std::string t = f32 ? "float" : "double", ocml = "__ocml_" + name + (f32 ? "_f32" : "_f64");
      std::string params = t + " a" + (arity == 2 ? ", " + t + " b" : ""), args = arity == 2 ? "a, b" : "a";
      std::string wrapper = "tiny_ocml_" + fn;
      out += "extern \"C\" __attribute__((device)) " + t + " " + ocml + "(" + params + ");\n";
      out += "static __attribute__((device)) inline " + t + " " + wrapper + "(" + params + ") { return " + ocml + "(" +
             args + "); }\n";
      out += "#define __builtin_" + fn + " " + wrapper + "\n";
    }
  return out;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class HipClangCompiler : public Compiler {
public:
  HipClangCompiler(const std::string& gfx, const std::string& clang) : gfx_(gfx), libs_(find_device_libs()) {
    if (!std::regex_match(gfx, std::regex("gfx[0-9]{2,3}[0-9a-f]")))
      throw std::runtime_error("tiny: '" + gfx + "' is not a gfx target (gfx942, gfx1100, ...)");
    auto [cc, version] = find_clang(clang);
    clang_ = cc;
    flags_ = "-x hip --offload-device-only --no-gpu-bundle-output --offload-arch=" + gfx +
             " -nogpulib -nogpuinc -O3 -fno-math-errno -ffp-contract=fast";
    key_ = version + " " + flags_ + (libs_.empty() ? "" : " ocml " + libs_.string());
  }
  std::string key() const override { return key_; }
  std::string compile(const std::string& src, const std::string& name) override {
    fs::path path = hip_binary_path(key_, src);
    fs::create_directories(path.parent_path());
    // every file this process writes has a name of its own until renamed: processes sharing the cache
    // compile the same kernel at once
    std::string mine = "." + std::to_string(getpid());
    fs::path hip = fs::path(path).replace_extension(".hip"), hip_tmp = path.string() + mine + ".hip",
             out_tmp = path.string() + mine, log = path.string() + mine + ".log";
    std::string libm = libm_prelude(src), link;
    if (!libm.empty()) {
      if (libs_.empty())
        throw std::runtime_error("tiny: kernel " + name +
                                 " calls libm functions, which the HIP device takes from "
                                 "ROCm's ocml.bc (Debian: apt install rocm-device-libs; TINY_HIP_DEVICE_LIBS=dir "
                                 "names its directory), and none is found");
      libm = ocml_settings(gfx_) + libm;
      link = " -Xclang -mlink-builtin-bitcode -Xclang " + shell_quoted((libs_ / "ocml.bc").string());
    }
    std::ofstream(hip_tmp) << libm << src;
    std::string cmd = shell_quoted(clang_) + " " + flags_ + link + " -o " + shell_quoted(out_tmp.string()) + " " +
                      shell_quoted(hip_tmp.string()) + " >" + shell_quoted(log.string()) + " 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      std::string msg = read_text(log);
      fs::remove(log);
      fs::rename(hip_tmp, hip);
      throw std::runtime_error("tiny: compiling kernel " + name + " with " + clang_ + " for " + gfx_ +
                               " failed (source at " + hip.string() + "):\n" + msg);
    }
    fs::remove(log);
    fs::rename(hip_tmp, hip);
    fs::rename(out_tmp, path);
    return path.string();
  }

private:
  std::string gfx_;
  fs::path libs_;
  std::string clang_, flags_, key_;
};

// The HIP runtime's entry points (hip_runtime_api.h's names).
std::vector<std::pair<const char*, void**>> hip_symbols(GpuApi& a) {
  auto slot = [](auto& f) { return reinterpret_cast<void**>(&f); };
  return {
      {"hipInit", slot(a.Init)},
      {"hipGetDeviceCount", slot(a.DeviceGetCount)},
      {"hipDeviceGet", slot(a.DeviceGet)},
      {"hipDeviceGetName", slot(a.DeviceGetName)},
      {"hipDeviceGetAttribute", slot(a.DeviceGetAttribute)},
      {"hipDeviceTotalMem", slot(a.DeviceTotalMem)},
      {"hipGetDevice", slot(a.GetDevice)},
      {"hipSetDevice", slot(a.SetDevice)},
      {"hipGetDeviceProperties", slot(a.GetDeviceProperties)},
      {"hipStreamCreateWithFlags", slot(a.StreamCreate)},
      {"hipStreamDestroy", slot(a.StreamDestroy)},
      {"hipStreamSynchronize", slot(a.StreamSynchronize)},
      {"hipMemGetInfo", slot(a.MemGetInfo)},
      {"hipMalloc", slot(a.MemAlloc)},
      {"hipFree", slot(a.MemFree)},
      {"hipMemcpyHtoDAsync", slot(a.MemcpyHtoDAsync)},
      {"hipMemcpyDtoHAsync", slot(a.MemcpyDtoHAsync)},
      {"hipMemsetD8Async", slot(a.MemsetD8Async)},
      {"hipModuleLoadData", slot(a.ModuleLoadData)},
      {"hipModuleGetFunction", slot(a.ModuleGetFunction)},
      {"hipModuleUnload", slot(a.ModuleUnload)},
      {"hipModuleLaunchKernel", slot(a.LaunchKernel)},
      {"hipHostMalloc", slot(a.MemHostAlloc)},
      {"hipHostFree", slot(a.MemFreeHost)},
      {"hipEventCreateWithFlags", slot(a.EventCreate)},
      {"hipEventRecord", slot(a.EventRecord)},
      {"hipEventQuery", slot(a.EventQuery)},
      {"hipEventSynchronize", slot(a.EventSynchronize)},
      {"hipEventElapsedTime", slot(a.EventElapsedTime)},
      {"hipEventDestroy", slot(a.EventDestroy)},
      {"hipStreamBeginCapture", slot(a.StreamBeginCapture)},
      {"hipStreamEndCapture", slot(a.StreamEndCapture)},
      {"hipGraphInstantiateWithFlags", slot(a.GraphInstantiate)},
      {"hipGraphExecUpdate", slot(a.GraphExecUpdate)},
      {"hipGraphLaunch", slot(a.GraphLaunch)},
      {"hipGraphExecDestroy", slot(a.GraphExecDestroy)},
      {"hipGraphDestroy", slot(a.GraphDestroy)},
      {"hipGetErrorName", slot(a.ErrorName)},
      {"hipGetErrorString", slot(a.ErrorString)},
  };
}

// The device's gfx target, from hipDeviceProp_t's gcnArchName ("gfx942:sramecc+:xnack-"). The struct's
// layout changed between ROCm releases, so it is read into a generous buffer and the first "gfx" string
// after the device's name (the first 256 bytes) is taken. $TINY_HIP_ARCH overrides it.
std::string hip_arch(const GpuApi& api, int device) {
  if (const char* env = std::getenv("TINY_HIP_ARCH")) return env;
  std::vector<char> props(16384, '\0');
  GpuResult r = api.GetDeviceProperties(props.data(), device);
  if (r != 0)
    throw std::runtime_error("tiny: HIP hipGetDeviceProperties failed: " + std::string(api.ErrorName(r)) + " (" +
                             api.ErrorString(r) + ")");
  std::string bytes(props.begin() + 256, props.end());
  static const std::regex gfx("gfx[0-9]{2,3}[0-9a-f]");
  std::smatch m;
  for (size_t at = bytes.find("gfx"); at != std::string::npos; at = bytes.find("gfx", at + 1)) {
    std::string candidate = bytes.c_str() + at; // up to its NUL
    candidate = candidate.substr(0, candidate.find(':'));
    if (std::regex_match(candidate, gfx)) return candidate;
  }
  throw std::runtime_error("tiny: the HIP runtime names no gfx target for device " + std::to_string(device) +
                           " (TINY_HIP_ARCH=gfx942 sets it)");
}

std::unique_ptr<Compiler> hip_arch_compiler(const std::string& arch) { return hip_compiler(arch); }

std::string hip_binary(const std::string& key, const std::string& src) { return hip_binary_path(key, src).string(); }

// hipDeviceAttribute_t (ROCm 5 and 6): MaxThreadsPerBlock 56, MaxBlockDimX 26 (Y, Z follow), MaxGridDimX
// 29, MaxSharedMemoryPerBlock 74, MultiprocessorCount 63; hipErrorOutOfMemory 2; HIP_LAUNCH_PARAM_END is
// 3. LDS is 64 KiB a work-group.
const GpuVendor kHip{
    "HIP", "the HIP runtime (ROCm)",   Dialect::HIP, hip_symbols,       56,         26, 29, 74, 63, 64 * 1024,
    2,     reinterpret_cast<void*>(3), hip_arch,     hip_arch_compiler, hip_binary,
};
} // namespace

fs::path hip_binary_path(const std::string& compiler_key, const std::string& src) {
  return cache_dir() / "hip" / (content_hash(compiler_key + "\n" + src) + ".hsaco");
}

std::unique_ptr<Compiler> hip_compiler(const std::string& gfx_arch, const std::string& clang) {
  return std::make_unique<HipClangCompiler>(gfx_arch, clang);
}

std::string default_libhip() {
  if (const char* env = std::getenv("TINY_LIBHIP")) return env;
  for (const char* name : {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"})
    if (dlopen(name, RTLD_NOW | RTLD_LOCAL)) return name; // stays loaded: gpu_api opens it again
  return "libamdhip64.so";
}

int hip_device_count(const std::string& libhip) { return gpu_device_count(kHip, libhip); }

std::unique_ptr<Device> make_hip_device(const std::string& libhip, int ordinal, std::unique_ptr<Compiler> compiler) {
  return make_gpu_device(kHip, libhip, ordinal, std::move(compiler));
}

Device& hip_device(int ordinal) {
  static const std::string lib = default_libhip();
  return gpu_device(kHip, lib, ordinal);
}

} // namespace tiny::runtime
