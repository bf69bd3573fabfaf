// The GPU device of gpu_device.h, written once over a vendor's GpuApi: one in-order stream per device,
// the caching allocator over device memory, modules loaded from compiled binaries (cached in memory and
// on disk), launches with their arguments packed into one buffer.

#include "runtime/gpu_device.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "compiler/render_gpu.h"
#include "runtime/debug.h"
#include "runtime/lazy_buffer.h"
#include "runtime/program_cache.h"

namespace tiny::runtime {

namespace {

namespace fs = std::filesystem;

constexpr GpuResult kSuccess = 0;
constexpr unsigned kStreamNonBlocking = 1; // CU_STREAM_NON_BLOCKING, hipStreamNonBlocking
void* const kLaunchParamBufferPointer = reinterpret_cast<void*>(1);
void* const kLaunchParamBufferSize = reinterpret_cast<void*>(2);

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", "hipErrorOutOfMemory (out of memory)": the library's own.
std::string error_text(const GpuApi& api, GpuResult r) {
  const char *name = nullptr, *text = nullptr;
  if (api.ErrorNameTo) {
    api.ErrorNameTo(r, &name);
    api.ErrorStringTo(r, &text);
  } else {
    name = api.ErrorName(r);
    text = api.ErrorString(r);
  }
  return std::string(name ? name : "error " + std::to_string(r)) + " (" + (text ? text : "unknown") + ")";
}

void check(const GpuVendor& v, const GpuApi& api, GpuResult r, const std::string& what) {
  if (r != kSuccess)
    throw std::runtime_error(std::string("tiny: ") + v.name + " " + what + " failed: " + error_text(api, r));
}

// What a device's calls need in common: the vendor, its entry points, its device and its stream.
struct GpuContext {
  const GpuVendor& vendor;
  const GpuApi& api;
  int device = 0;
  GpuHandle ctx = nullptr; // CUDA's primary context
  GpuHandle stream = nullptr;
  void check(GpuResult r, const std::string& what) const { runtime::check(vendor, api, r, what); }
};

// The device is current on the calling thread for the guard's life, and what was current before is
// current again after (torch's threads may use another device): CUDA pushes its primary context, HIP
// sets the thread's device.
class CurrentGuard {
public:
  explicit CurrentGuard(const GpuContext& c) : c_(c) {
    if (c.api.CtxPushCurrent) {
      c.check(c.api.CtxPushCurrent(c.ctx), c.api.name(c.api.CtxPushCurrent));
      return;
    }
    c.check(c.api.GetDevice(&previous_), c.api.name(c.api.GetDevice));
    if (previous_ != c.device)
      c.check(c.api.SetDevice(c.device), c.api.name(c.api.SetDevice) + " " + std::to_string(c.device));
  }
  ~CurrentGuard() {
    if (c_.api.CtxPopCurrent) {
      GpuHandle ctx = nullptr;
      c_.api.CtxPopCurrent(&ctx);
    } else if (previous_ != c_.device) {
      c_.api.SetDevice(previous_);
    }
  }
  CurrentGuard(const CurrentGuard&) = delete;
  CurrentGuard& operator=(const CurrentGuard&) = delete;

private:
  const GpuContext& c_;
  int previous_ = 0;
};

GpuPtr handle(const void* p) { return reinterpret_cast<GpuPtr>(p); }

// Device memory in size buckets. The stream is in order: whatever is enqueued with a block after it
// came back here runs after every use enqueued before, so a block is reused only once the stream has
// passed its last use. Blocks go back to the driver only after the stream has drained.
class GpuAllocator : public Allocator {
public:
  explicit GpuAllocator(const GpuContext& c) : c_(c) {}
  // The driver stages pageable host memory before the async copy returns: the caller may reuse it.
  void copy_in(void* dst, const void* src, size_t n) override {
    CurrentGuard g(c_);
    c_.check(c_.api.MemcpyHtoDAsync(handle(dst), src, n, c_.stream), c_.api.name(c_.api.MemcpyHtoDAsync));
  }
  // The host memory is read when this returns: the copy waits for the stream to reach it.
  void copy_out(void* dst, const void* src, size_t offset, size_t n) override {
    CurrentGuard g(c_);
    c_.check(c_.api.MemcpyDtoHAsync(dst, handle(src) + offset, n, c_.stream), c_.api.name(c_.api.MemcpyDtoHAsync));
    c_.check(c_.api.StreamSynchronize(c_.stream), c_.api.name(c_.api.StreamSynchronize));
  }
  void memset(void* dst, unsigned char value, size_t n) {
    CurrentGuard g(c_);
    c_.check(c_.api.MemsetD8Async(handle(dst), value, n, c_.stream), c_.api.name(c_.api.MemsetD8Async));
  }

protected:
  void* system_alloc(size_t nbytes) override {
    CurrentGuard g(c_);
    GpuPtr p = 0;
    GpuResult r = c_.api.MemAlloc(&p, nbytes);
    if (r == c_.vendor.out_of_memory) return nullptr;
    c_.check(r, c_.api.name(c_.api.MemAlloc) + " of " + std::to_string(nbytes) + " bytes");
    return reinterpret_cast<void*>(p);
  }
  void system_free(void* ptr) override {
    CurrentGuard g(c_);
    c_.check(c_.api.StreamSynchronize(c_.stream), c_.api.name(c_.api.StreamSynchronize));
    c_.check(c_.api.MemFree(handle(ptr)), c_.api.name(c_.api.MemFree));
  }

private:
  const GpuContext& c_;
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

class GpuProgram : public Program {
public:
  GpuProgram(const GpuContext& c, const std::vector<char>& image, const std::string& name, const Limits& limits,
             ErrorFlag* errors)
      : c_(c), name_(name), limits_(limits), errors_(errors) {
    CurrentGuard g(c_);
    c_.check(c_.api.ModuleLoadData(&module_, image.data()), c_.api.name(c_.api.ModuleLoadData) + " of kernel " + name);
    GpuResult r = c_.api.ModuleGetFunction(&function_, module_, name.c_str());
    if (r != kSuccess) c_.api.ModuleUnload(module_);
    c_.check(r, c_.api.name(c_.api.ModuleGetFunction) + " " + name);
  }
  ~GpuProgram() override {
    CurrentGuard g(c_);
    c_.api.ModuleUnload(module_);
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
      GpuPtr p = handle(b);
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
      GpuPtr p = handle(errors_->mem);
      put(&p, sizeof p);
      errors_->used = true;
    }
    size_t size = args.size();
    void* extra[] = {kLaunchParamBufferPointer, args.data(), kLaunchParamBufferSize, &size, c_.vendor.launch_param_end};
    auto dim = [](int64_t v) { return static_cast<unsigned>(v); };
    CurrentGuard g(c_);
    c_.check(c_.api.LaunchKernel(function_, dim(launch.global[0]), dim(launch.global[1]), dim(launch.global[2]),
                                 dim(launch.local[0]), dim(launch.local[1]), dim(launch.local[2]), 0, c_.stream,
                                 nullptr, extra),
             c_.api.name(c_.api.LaunchKernel) + " of " + name_);
  }

private:
  // The lowering keeps within the target's limits; a launch past them says so before the driver's
  // invalid-value error would.
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
                             dims(launch.local) + " threads, past the " + c_.vendor.name + " device's limits (grid " +
                             dims(limits_.grid) + ", block " + dims(limits_.block) + ", " +
                             std::to_string(limits_.threads) + " threads)");
  }
  GpuContext c_; // a copy: a cached schedule may hold the program after a test's device went away
  GpuHandle module_ = nullptr;
  GpuHandle function_ = nullptr;
  std::string name_;
  Limits limits_;
  ErrorFlag* errors_; // null: the kernel divides no user's integers
};

std::vector<char> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.push_back('\0'); // an image the driver reads as text (PTX) ends at a NUL
  return bytes;
}

class GpuDevice : public Device {
public:
  GpuDevice(const GpuVendor& vendor, const GpuApi& api, int ordinal, std::unique_ptr<Compiler> compiler)
      : c_{vendor, api}, compiler_(std::move(compiler)) {
    c_.check(api.DeviceGet(&c_.device, ordinal), api.name(api.DeviceGet) + " " + std::to_string(ordinal));
    char name[256] = {};
    c_.check(api.DeviceGetName(name, sizeof name - 1, c_.device), api.name(api.DeviceGetName));
    name_ = name;
    arch_ = vendor.arch(api, c_.device);
    for (int a = 0; a < 3; a++) {
      limits_.grid[a] = attribute(vendor.attr_grid_x + a);
      limits_.block[a] = attribute(vendor.attr_block_x + a);
    }
    limits_.threads = attribute(vendor.attr_threads);
    compute_units_ = attribute(vendor.attr_units);
    c_.check(api.DeviceTotalMem(&total_memory_, c_.device), api.name(api.DeviceTotalMem));
    target_.dialect = vendor.dialect;
    target_.max_local = limits_.threads;
    target_.local_mem = std::min<int64_t>(attribute(vendor.attr_shared), vendor.max_static_shared);
    target_.max_groups = limits_.grid;
    target_.fp64 = true;
    if (api.PrimaryCtxRetain) c_.check(api.PrimaryCtxRetain(&c_.ctx, c_.device), api.name(api.PrimaryCtxRetain));
    CurrentGuard g(c_);
    c_.check(api.StreamCreate(&c_.stream, kStreamNonBlocking), api.name(api.StreamCreate));
    allocator_ = std::make_unique<GpuAllocator>(c_);
    errors_.mem = allocator_->alloc(sizeof(int));
    allocator_->memset(errors_.mem, 0, sizeof(int));
    if (debug_level() >= 1) std::fprintf(stderr, "tiny: %s\n", this->name().c_str());
  }
  // Only devices made for a test go away (the process-wide ones stay): what they hold goes back to the
  // driver, and a failure to do so (a lost device) is not raised from a destructor.
  ~GpuDevice() override {
    try {
      programs_.clear();
      allocator_->free(errors_.mem, sizeof(int));
      allocator_->empty_cache();
      CurrentGuard g(c_);
      c_.api.StreamDestroy(c_.stream);
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr, "tiny: releasing the %s device failed: %s\n", c_.vendor.name, e.what());
    }
    if (c_.api.PrimaryCtxRelease) c_.api.PrimaryCtxRelease(c_.device);
  }
  std::string name() const override { return std::string(c_.vendor.name) + ": " + name_ + " (" + arch_ + ")"; }
  int64_t total_memory() const override { return static_cast<int64_t>(total_memory_); }
  int compute_units() const override { return compute_units_; }
  std::optional<int64_t> free_memory() const override {
    CurrentGuard g(c_);
    size_t free = 0, total = 0;
    c_.check(c_.api.MemGetInfo(&free, &total), c_.api.name(c_.api.MemGetInfo));
    return static_cast<int64_t>(free);
  }
  const Target& target() const override { return target_; }
  Allocator& allocator() override { return *allocator_; }
  // The vendor's compiler for this device's arch, made at the first compile
  Compiler& compiler() override {
    std::lock_guard lock(compiler_mu_);
    if (!compiler_) compiler_ = c_.vendor.compiler(arch_);
    return *compiler_;
  }
  std::shared_ptr<Program> program(const std::string& src, const std::string& fn_name) override {
    return programs_.get(fn_name + "\n" + src, [&] {
      Compiler& c = compiler();
      fs::path bin = c_.vendor.binary_path(c.key(), src);
      if (fs::exists(bin)) {
        stats().cache_hits++;
        stats().disk_hits++;
      } else {
        bin = c.compile(src, fn_name);
        stats().compiles++;
      }
      bool checks = src.find(std::string("int* ") + kGpuErrorFlag) != std::string::npos;
      return std::make_shared<GpuProgram>(c_, read_file(bin), fn_name, limits_, checks ? &errors_ : nullptr);
    });
  }
  // Waits for the stream; a kernel that failed asynchronously is reported here, by the driver.
  void synchronize() override {
    {
      CurrentGuard g(c_);
      c_.check(c_.api.StreamSynchronize(c_.stream),
               c_.api.name(c_.api.StreamSynchronize) + " (a kernel or copy enqueued before failed)");
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
    c_.check(c_.api.DeviceGetAttribute(&v, which, c_.device),
             c_.api.name(c_.api.DeviceGetAttribute) + " " + std::to_string(which));
    return v;
  }
  GpuContext c_;
  std::string name_, arch_;
  int compute_units_ = 0;
  size_t total_memory_ = 0;
  Limits limits_;
  Target target_;
  std::unique_ptr<GpuAllocator> allocator_;
  std::mutex compiler_mu_;
  std::unique_ptr<Compiler> compiler_;
  ErrorFlag errors_;
  ProgramCache programs_;
};

// The library at `path`, initialized; throws saying what is missing.
const GpuApi& initialized(const GpuVendor& vendor, const std::string& path) {
  const GpuApi& api = gpu_api(vendor, path);
  check(vendor, api, api.Init(0), api.name(api.Init) + " (no usable GPU, or " + vendor.runtime + " cannot use it)");
  return api;
}

} // namespace

const GpuApi& gpu_api(const GpuVendor& vendor, const std::string& path) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, GpuApi> apis;
  std::lock_guard lock(mu);
  std::pair key{std::string(vendor.name), path};
  if (auto it = apis.find(key); it != apis.end()) return it->second;
  // stays loaded for the process: the devices it makes are never destroyed
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    throw std::runtime_error(std::string("tiny: the ") + vendor.name + " device needs " + vendor.runtime + "'s " +
                             path + ", which cannot be loaded: " + dlerror());
  GpuApi api{};
  for (const auto& [name, slot] : vendor.symbols(api)) {
    void* f = dlsym(lib, name);
    if (!f) throw std::runtime_error("tiny: " + path + " has no " + name);
    *slot = f;
    api.names[f] = name;
  }
  return apis.emplace(key, api).first->second;
}

int gpu_device_count(const GpuVendor& vendor, const std::string& path) {
  try {
    const GpuApi& api = initialized(vendor, path);
    int n = 0;
    return api.DeviceGetCount(&n) == kSuccess ? n : 0;
  } catch (const std::runtime_error&) {
    return 0;
  }
}

std::unique_ptr<Device> make_gpu_device(const GpuVendor& vendor, const std::string& path, int ordinal,
                                        std::unique_ptr<Compiler> compiler) {
  const GpuApi& api = initialized(vendor, path);
  int n = 0;
  check(vendor, api, api.DeviceGetCount(&n), api.name(api.DeviceGetCount));
  if (n == 0)
    throw std::runtime_error(std::string("tiny: ") + vendor.runtime + " (" + path + ") reports no " + vendor.name +
                             " device");
  if (ordinal < 0 || ordinal >= n)
    throw std::runtime_error(std::string("tiny: ") + vendor.name + " device " + std::to_string(ordinal) +
                             " asked for, but there are " + std::to_string(n));
  return std::make_unique<GpuDevice>(vendor, api, ordinal, std::move(compiler));
}

Device& gpu_device(const GpuVendor& vendor, const std::string& path, int ordinal) {
  struct Opened {
    Device* device = nullptr; // never destroyed: buffers may be freed during static teardown
    std::string error;
  };
  static std::mutex mu;
  static auto* opened = new std::map<std::tuple<std::string, std::string, int>, Opened>();
  std::lock_guard lock(mu);
  auto [it, fresh] = opened->try_emplace({vendor.name, path, ordinal});
  if (fresh) {
    try {
      it->second.device = make_gpu_device(vendor, path, ordinal).release();
    } catch (const std::runtime_error& e) {
      it->second.error = e.what();
    }
  }
  if (!it->second.device) throw std::runtime_error(it->second.error);
  return *it->second.device;
}

} // namespace tiny::runtime
