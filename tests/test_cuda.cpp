// The CUDA device without a GPU: its driver calls against a fake driver library built by the tests
// (tests/fake_cuda), and the CUDA dialect's kernels compiled to cubins by NVRTC (loaded with dlopen,
// as the device does) and checked with cuobjdump. What needs NVRTC or cuobjdump skips, saying so,
// where they are not found.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <vector>

#include "compiler/render_gpu.h"
#include "runtime/cuda_device.h"
#include "runtime/gpu_check.h"
#include "runtime/lazy_buffer.h"
#include "runtime/realize.h"
#include "tests/fake_cuda/fake_cuda.h"
#include "tests/fake_cuda/fake_driver_testing.h"
#include "tests/gpu_kernels.h"

using namespace tiny;
using namespace tiny::runtime;

namespace {

template <class F> F* fake(const char* name) { return fake_gpu::fake_driver_function<F>(TINY_FAKE_CUDA, name); }
#define FAKE(fn) fake<decltype(fn)>(#fn)

struct SourceAsBinary : fake_gpu::SourceAsBinaryCompiler {
  SourceAsBinary() : SourceAsBinaryCompiler(cuda_binary_path) {}
};

// A kernel source that takes the error flag as render_gpu writes it.
std::string with_error_flag(const std::string& name) {
  return "extern \"C\" __global__ void " + name + "(float* a, long long n, int* " + kGpuErrorFlag + ")";
}

class CudaFakeDriver : public ::testing::Test {
protected:
  std::unique_ptr<Device> dev;
  SourceAsBinary* compiler = nullptr;
  void SetUp() override {
    FAKE(fake_cuda_reset)(1, size_t{1} << 30);
    dev = open();
    dev->synchronize(); // its error flag's memset ran: the stream starts empty
  }
  void TearDown() override {
    dev.reset();
    EXPECT_EQ(FAKE(fake_cuda_misuses)(), 0) << "a free with queued work, or a call without a current context";
    EXPECT_EQ(FAKE(fake_cuda_pending)(), 0u);
  }
  std::unique_ptr<Device> open() {
    auto c = std::make_unique<SourceAsBinary>();
    compiler = c.get();
    return make_cuda_device(TINY_FAKE_CUDA, 0, std::move(c));
  }
  void* alloc(size_t n) { return dev->allocator().alloc(n); }
  static size_t launches() { return static_cast<size_t>(FAKE(fake_cuda_launch_count)()); }
  static const FakeCudaLaunch& launch(int i) { return *FAKE(fake_cuda_launch)(i); }
  static int calls(const char* call) { return FAKE(fake_cuda_calls)(call); }
};

template <class T> T arg_at(const FakeCudaLaunch& l, size_t offset) {
  T v;
  std::memcpy(&v, l.args + offset, sizeof v);
  return v;
}

uint64_t device_address(void* p) { return reinterpret_cast<uint64_t>(p); }

// The fake's stand-ins for kernels: (float* a, long long n) doubled; the error flag (last) set.
void twice(const unsigned char* args, size_t) {
  uint64_t a;
  int64_t n;
  std::memcpy(&a, args, 8);
  std::memcpy(&n, args + 8, 8);
  auto* x = static_cast<float*>(FAKE(fake_cuda_host_pointer)(a));
  for (int64_t i = 0; i < n; i++)
    x[i] *= 2;
}
void divides_by_zero(const unsigned char* args, size_t size) {
  uint64_t flag;
  std::memcpy(&flag, args + size - 8, 8);
  *static_cast<int*>(FAKE(fake_cuda_host_pointer)(flag)) = 1;
}

} // namespace

TEST_F(CudaFakeDriver, ArgumentsArePackedInKernelOrderEachAlignedToItsSize) {
  void* a = alloc(256);
  void* b = alloc(256);
  // buffers, int64 scalars, float scalars as float, then the error flag (8-aligned after the floats)
  auto p = dev->program(with_error_flag("packs"), "packs");
  std::vector<void*> bufs = {a, b};
  std::vector<int64_t> ivars = {7, -3};
  std::vector<double> fvars = {0.1, 2.25, -1.5};
  p->launch(bufs, ivars, fvars, Launch{});
  ASSERT_EQ(launches(), 1u);
  const FakeCudaLaunch& l = launch(0);
  EXPECT_STREQ(l.name, "packs");
  ASSERT_EQ(l.arg_size, 56u);
  EXPECT_EQ(arg_at<uint64_t>(l, 0), device_address(a));
  EXPECT_EQ(arg_at<uint64_t>(l, 8), device_address(b));
  EXPECT_EQ(arg_at<int64_t>(l, 16), 7);
  EXPECT_EQ(arg_at<int64_t>(l, 24), -3);
  EXPECT_EQ(arg_at<float>(l, 32), 0.1f);
  EXPECT_EQ(arg_at<float>(l, 36), 2.25f);
  EXPECT_EQ(arg_at<float>(l, 40), -1.5f);
  uint64_t flag = arg_at<uint64_t>(l, 48);
  EXPECT_NE(FAKE(fake_cuda_host_pointer)(flag), nullptr); // device memory of the device's own
  EXPECT_NE(flag, device_address(a));
  EXPECT_NE(flag, device_address(b));
  // a float64 kernel takes its float scalars as double; without a division, no flag
  auto q = dev->program("extern \"C\" __global__ void doubles(double* a, double s)", "doubles");
  Launch f64;
  f64.f64_scalars = true;
  q->launch(std::vector<void*>{a}, {}, std::vector<double>{0.1}, f64);
  ASSERT_EQ(launch(1).arg_size, 16u);
  EXPECT_EQ(arg_at<double>(launch(1), 8), 0.1);
  dev->synchronize();
  dev->allocator().free(a, 256);
  dev->allocator().free(b, 256);
}

TEST_F(CudaFakeDriver, TheGridIsTheLaunchsWorkGroupsAndTheBlockItsThreadsEnqueuedNotRun) {
  auto p = dev->program("extern \"C\" __global__ void grid()", "grid");
  Launch l;
  l.global = {5, 3, 2};
  l.local = {64, 2, 1};
  p->launch({}, {}, {}, l);
  ASSERT_EQ(launches(), 1u);
  EXPECT_EQ(std::vector<unsigned>(launch(0).grid, launch(0).grid + 3), (std::vector<unsigned>{5, 3, 2}));
  EXPECT_EQ(std::vector<unsigned>(launch(0).block, launch(0).block + 3), (std::vector<unsigned>{64, 2, 1}));
  EXPECT_EQ(launch(0).shared_bytes, 0u); // __shared__ arrays are static
  EXPECT_EQ(FAKE(fake_cuda_pending)(), 1u);
  dev->synchronize();
  EXPECT_EQ(FAKE(fake_cuda_pending)(), 0u);
}

TEST_F(CudaFakeDriver, ALaunchPastTheDeviceLimitsIsAClearErrorAndNothingIsEnqueued) {
  auto p = dev->program("extern \"C\" __global__ void big()", "big");
  Launch tall;
  tall.global = {1, 70000, 1}; // y takes 65535 blocks at most
  Launch wide;
  wide.local = {1024, 2, 1}; // 1024 threads per block at most
  for (const Launch& l : {tall, wide}) {
    try {
      p->launch({}, {}, {}, l);
      ADD_FAILURE() << "no error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("kernel big"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("limits"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(launches(), 0u);
}

TEST_F(CudaFakeDriver, CopiesAndLaunchesRunInStreamOrderAndAReadWaitsForThem) {
  FAKE(fake_cuda_set_kernel)("twice", twice);
  std::vector<float> x(256);
  for (size_t i = 0; i < x.size(); i++)
    x[i] = static_cast<float>(i) - 100;
  void* a = alloc(x.size() * 4);
  dev->allocator().copy_in(a, x.data(), x.size() * 4);
  float first = x[0];
  x[0] = 12345; // copied into a staging buffer: changing it now changes nothing
  auto p = dev->program("extern \"C\" __global__ void twice(float* a, long long n)", "twice");
  std::vector<void*> bufs = {a};
  std::vector<int64_t> n = {256};
  p->launch(bufs, n, {}, Launch{});
  p->launch(bufs, n, {}, Launch{});
  EXPECT_EQ(FAKE(fake_cuda_pending)(), 4u); // nothing ran yet: the copy, its staging buffer's event, the launches
  x[0] = first;
  std::vector<float> got(256);
  dev->allocator().copy_out(got.data(), a, 0, got.size() * 4);
  for (size_t i = 0; i < got.size(); i++)
    EXPECT_EQ(got[i], 4 * (static_cast<float>(i) - 100)) << i;
  EXPECT_NE(std::string(FAKE(fake_cuda_log)()).find("htod 1024 pinned;launch twice;launch twice;dtoh 1024 pinned;"),
            std::string::npos)
      << FAKE(fake_cuda_log)();
  // a copy from an offset
  float third = 0;
  dev->allocator().copy_out(&third, a, 12, 4);
  EXPECT_EQ(third, 4 * (3.0f - 100));
  dev->allocator().free(a, x.size() * 4);
}

TEST_F(CudaFakeDriver, AFreedBlockIsReusedAndGoesBackToTheDriverOnlyAfterTheStreamPassedItsLastUse) {
  size_t live = FAKE(fake_cuda_live_bytes)();
  int allocs = calls("cuMemAlloc_v2");
  auto p = dev->program("extern \"C\" __global__ void uses(float* a)", "uses");
  void* a = alloc(8192);
  p->launch(std::vector<void*>{a}, {}, {}, Launch{});
  dev->allocator().free(a, 8192); // its last use is enqueued, not run
  void* b = alloc(8000);          // the same bucket: the same block, after that use on the stream
  EXPECT_EQ(b, a);
  EXPECT_EQ(calls("cuMemAlloc_v2") - allocs, 1);
  p->launch(std::vector<void*>{b}, {}, {}, Launch{});
  dev->allocator().free(b, 8000);
  EXPECT_EQ(FAKE(fake_cuda_pending)(), 2u);
  // given back to the driver once an event after its last use passed (the fake counts a misuse for a
  // cuMemFree of memory queued work uses); the stream has not run it yet
  dev->allocator().empty_cache();
  EXPECT_EQ(calls("cuMemFree_v2"), 0);
  EXPECT_EQ(FAKE(fake_cuda_pending)(), 3u); // the launches and the event
  dev->synchronize();
  EXPECT_EQ(calls("cuMemFree_v2"), 1);
  EXPECT_EQ(FAKE(fake_cuda_pending)(), 0u);
  EXPECT_EQ(FAKE(fake_cuda_live_bytes)(), live);
  auto stats = dev->allocator().memory_stats();
  EXPECT_EQ(stats.num_device_free, 1);
}

TEST_F(CudaFakeDriver, ADeviceGoneGivesAllItsMemoryBack) {
  size_t before_device = FAKE(fake_cuda_live_bytes)();
  dev.reset();
  size_t without = FAKE(fake_cuda_live_bytes)();
  dev = open();
  void* a = alloc(1 << 20);
  dev->allocator().free(a, 1 << 20); // cached
  EXPECT_GT(FAKE(fake_cuda_live_bytes)(), before_device);
  dev.reset();
  EXPECT_EQ(FAKE(fake_cuda_live_bytes)(), without);
  EXPECT_EQ(calls("cuStreamDestroy_v2"), 2);
  EXPECT_EQ(calls("cuDevicePrimaryCtxRelease_v2"), 2);
}

TEST_F(CudaFakeDriver, OutOfMemoryIsAnErrorOfItsOwnAndTheDeviceAndItsBuffersStayUsable) {
  FAKE(fake_cuda_reset)(1, size_t{4} << 20); // 4 MiB
  std::vector<int32_t> kept(256, 7), kept_got(256);
  void* k = alloc(1024);
  dev->allocator().copy_in(k, kept.data(), 1024);
  try {
    alloc(size_t{8} << 20);
    FAIL() << "no error";
  } catch (const OutOfMemoryError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("out of memory allocating 8388608 bytes on CUDA: Fake GPU (sm_90)"), std::string::npos) << what;
    EXPECT_NE(what.find("tiny holds"), std::string::npos) << what;
  }
  dev->allocator().copy_out(kept_got.data(), k, 0, 1024);
  EXPECT_EQ(kept_got, kept);
  dev->allocator().free(k, 1024);
  EXPECT_EQ(dev->allocator().memory_stats().num_ooms, 1);
  // a cached free block goes back to the driver to make room, and the allocation is retried
  void* a = alloc(size_t{3} << 20);
  dev->allocator().free(a, size_t{3} << 20);
  void* b = alloc(size_t{2} << 20);
  EXPECT_EQ(dev->allocator().memory_stats().num_alloc_retries, 1);
  std::vector<int32_t> x(1000, 42), got(1000);
  dev->allocator().copy_in(b, x.data(), 4000);
  dev->allocator().copy_out(got.data(), b, 0, 4000);
  EXPECT_EQ(got, x);
  dev->allocator().free(b, size_t{2} << 20);
}

TEST_F(CudaFakeDriver, AModuleTheDriverRefusesIsAnErrorNamingTheCallAndTheDriversReason) {
  FAKE(fake_cuda_fail_next)("cuModuleLoadData", 200);
  std::string src = "extern \"C\" __global__ void refused()";
  try {
    dev->program(src, "refused");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("cuModuleLoadData of kernel refused"), std::string::npos) << what;
    EXPECT_NE(what.find("CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)"), std::string::npos) << what;
  }
  // not remembered as a program: asked again, the (cached) binary loads and runs
  auto p = dev->program(src, "refused");
  p->launch({}, {}, {}, Launch{});
  dev->synchronize();
  EXPECT_EQ(launches(), 1u);
  EXPECT_EQ(compiler->compiles, 1);
}

TEST_F(CudaFakeDriver, AKernelMissingFromItsModuleIsNamedAndTheModuleUnloaded) {
  try {
    dev->program("extern \"C\" __global__ void other()", "missing");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuModuleGetFunction missing failed: CUDA_ERROR_NOT_FOUND"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(calls("cuModuleUnload"), 1);
}

TEST_F(CudaFakeDriver, AKernelThatFailedIsReportedAtTheSyncAndTheDeviceStaysUsable) {
  auto p = dev->program("extern \"C\" __global__ void fails()", "fails");
  p->launch({}, {}, {}, Launch{});
  FAKE(fake_cuda_fail_next)("cuStreamSynchronize", 719);
  try {
    dev->synchronize();
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuStreamSynchronize"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unspecified launch failure"), std::string::npos) << e.what();
  }
  dev->synchronize();
  EXPECT_EQ(FAKE(fake_cuda_pending)(), 0u);
}

TEST_F(CudaFakeDriver, AZeroDivisionAKernelFlagsRaisesAfterTheSyncOnce) {
  FAKE(fake_cuda_set_kernel)("divides", divides_by_zero);
  auto p = dev->program(with_error_flag("divides"), "divides");
  p->launch({}, {}, {}, Launch{});
  dev->synchronize();
  EXPECT_THROW(raise_kernel_errors(), std::runtime_error);
  // the flag was cleared: the next sync raises nothing
  FAKE(fake_cuda_set_kernel)("divides", nullptr);
  p->launch({}, {}, {}, Launch{});
  dev->synchronize();
  EXPECT_NO_THROW(raise_kernel_errors());
}

TEST_F(CudaFakeDriver, ProgramsAreCachedInMemoryThenOnDisk) {
  std::string src = "extern \"C\" __global__ void cached()";
  auto p = dev->program(src, "cached");
  EXPECT_EQ(dev->program(src, "cached"), p);
  EXPECT_EQ(compiler->compiles, 1);
  EXPECT_EQ(calls("cuModuleLoadData"), 1);
  // another device with the same compiler key loads the binary from disk
  std::string key = compiler->key();
  auto path = cuda_binary_path(key, src);
  EXPECT_TRUE(std::filesystem::exists(path));
  struct SameKey : SourceAsBinary {
    std::string k;
    std::string key() const override { return k; }
  };
  auto same = std::make_unique<SameKey>();
  same->k = key;
  SameKey* second = same.get();
  p.reset();
  dev.reset();
  int64_t disk_hits = stats().disk_hits;
  dev = make_cuda_device(TINY_FAKE_CUDA, 0, std::move(same));
  dev->program(src, "cached");
  EXPECT_EQ(second->compiles, 0);
  EXPECT_EQ(stats().disk_hits - disk_hits, 1);
  std::filesystem::remove(path);
}

TEST_F(CudaFakeDriver, TheTargetIsTheDevicesLimits) {
  const Target& t = dev->target();
  EXPECT_EQ(t.dialect, Dialect::CUDA);
  EXPECT_EQ(t.local_mem, 48 * 1024);
  EXPECT_EQ(t.max_local, 1024);
  EXPECT_EQ(t.max_groups, (std::array<int64_t, 3>{2147483647, 65535, 65535}));
  EXPECT_EQ(dev->name(), "CUDA: Fake GPU (sm_90)");
  EXPECT_EQ(dev->compute_units(), 132);
  EXPECT_EQ(dev->total_memory(), int64_t{1} << 30);
  EXPECT_EQ(dev->free_memory(), static_cast<int64_t>((size_t{1} << 30) - FAKE(fake_cuda_live_bytes)()));
}

TEST(CudaDriver, WithoutTheDriverLibraryThereAreNoDevicesAndOpeningOneSaysWhy) {
  EXPECT_EQ(cuda_device_count("/nonexistent/libcuda.so.1"), 0);
  try {
    make_cuda_device("/nonexistent/libcuda.so.1", 0);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("NVIDIA driver's /nonexistent/libcuda.so.1, which cannot be loaded"),
              std::string::npos)
        << e.what();
  }
}

TEST(CudaDriver, ADriverWithoutDevicesCountsNoneAndOpeningOneSaysSo) {
  FAKE(fake_cuda_reset)(0, size_t{1} << 30);
  EXPECT_EQ(cuda_device_count(TINY_FAKE_CUDA), 0);
  EXPECT_THROW(
      {
        try {
          make_cuda_device(TINY_FAKE_CUDA, 0);
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("reports no CUDA device"), std::string::npos) << e.what();
          throw;
        }
      },
      std::runtime_error);
  // a driver whose cuInit fails (no GPU it can use)
  FAKE(fake_cuda_reset)(2, size_t{1} << 30);
  EXPECT_EQ(cuda_device_count(TINY_FAKE_CUDA), 2);
  FAKE(fake_cuda_fail_next)("cuInit", 100);
  EXPECT_EQ(cuda_device_count(TINY_FAKE_CUDA), 0);
  FAKE(fake_cuda_fail_next)("cuInit", 100);
  try {
    make_cuda_device(TINY_FAKE_CUDA, 0);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuInit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_NO_DEVICE"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_cuda_device(TINY_FAKE_CUDA, 2), std::runtime_error); // two devices: 0 and 1
  FAKE(fake_cuda_reset)(1, size_t{1} << 30);
}

// TINY_DEVICE=CUDA: the backend's device is the driver's (the fake here, unless TINY_LIBCUDA names one).
TEST(CudaDriver, TheCudaBackendIsTheDriversDevice) {
  FAKE(fake_cuda_reset)(1, size_t{1} << 30);
  bool was_set = std::getenv("TINY_LIBCUDA") != nullptr;
  setenv("TINY_LIBCUDA", TINY_FAKE_CUDA, 0);
  Device& d = backend_device("CUDA");
  EXPECT_EQ(d.name().rfind("CUDA: ", 0), 0u) << d.name();
  EXPECT_EQ(d.target().dialect, Dialect::CUDA);
  EXPECT_EQ(&backend_device("CUDA"), &d);
  d.synchronize(); // its stream is left empty for the tests after (the fake's streams are one process's)
  // the default backend (TINY_DEVICE unset) is chosen at the first use of a device: not the fake
  if (!was_set) unsetenv("TINY_LIBCUDA");
}

// ---- NVRTC ----

namespace {

std::unique_ptr<Compiler> test_nvrtc(int arch, std::string* why) {
  try {
    return nvrtc_compiler(arch, TINY_TEST_NVRTC);
  } catch (const std::runtime_error& e) {
    *why = e.what();
    return nullptr;
  }
}

// The limits of an H100/H200 (sm_90) and an A100 (sm_80) as the device reads them.
Target cuda_target() {
  Target t;
  t.dialect = Dialect::CUDA;
  t.max_local = 1024;
  t.local_mem = 48 * 1024;
  t.max_groups = {2147483647, 65535, 65535};
  return t;
}

struct Cubin {
  std::string what, name, path;
  int64_t allowed_stack; // bytes: libdevice's sin/cos/tan keep a small array there (runtime/gpu_check.h)
};

// Every sample kernel rendered for CUDA and compiled for sm_<arch> (once per process).
const std::vector<Cubin>& sample_cubins(int arch) {
  static std::map<int, std::vector<Cubin>> done;
  if (auto it = done.find(arch); it != done.end()) return it->second;
  std::string why;
  auto nvrtc = test_nvrtc(arch, &why);
  if (!nvrtc) throw std::runtime_error(why);
  std::vector<Cubin> out;
  for (const auto& [what, k] : sample_gpu_kernels(cuda_target())) {
    std::string src = render_gpu(k, k.name, cuda_target());
    try {
      out.push_back({what, k.name, nvrtc->compile(src, k.name), cuda_allowed_stack(src)});
    } catch (const std::runtime_error& e) {
      ADD_FAILURE() << what << " for sm_" << arch << ": " << e.what();
    }
  }
  return done[arch] = out;
}

std::string run(const std::string& command) {
  std::string out;
  FILE* f = popen(command.c_str(), "r");
  char buf[4096];
  while (f && std::fgets(buf, sizeof buf, f))
    out += buf;
  if (f) pclose(f);
  return out;
}

} // namespace

TEST(CudaNvrtc, EverySampleKernelCompilesToACubinForSm80AndSm90) {
  std::string why;
  if (!test_nvrtc(90, &why)) GTEST_SKIP() << why;
  for (int arch : {80, 90}) {
    const auto& cubins = sample_cubins(arch);
    EXPECT_EQ(cubins.size(), sample_gpu_kernels(cuda_target()).size());
    for (const Cubin& c : cubins) {
      std::ifstream in(c.path, std::ios::binary);
      char magic[4] = {};
      in.read(magic, 4);
      EXPECT_EQ(std::string(magic, 4), "\x7f"
                                       "ELF")
          << c.what << " at " << c.path;
    }
  }
}

TEST(CudaNvrtc, TheMatmulStagesTilesInSharedMemoryBetweenBarriers) {
  for (const auto& [what, k] : sample_gpu_kernels(cuda_target())) {
    if (what.find("tiles in local memory") == std::string::npos) continue;
    std::string src = render_gpu(k, k.name, cuda_target());
    EXPECT_NE(src.find("__shared__ float tile"), std::string::npos) << src;
    EXPECT_NE(src.find("__syncthreads();"), std::string::npos) << src;
    return;
  }
  FAIL() << "no matmul among the sample kernels";
}

// cuobjdump -res-usage: "Function NAME:\n REG:32 STACK:0 SHARED:4096 LOCAL:0 ..." per kernel.
TEST(CudaNvrtc, CubinsSpillNothingAndKeepSharedMemoryWithin48KiB) {
  std::string why;
  if (!test_nvrtc(90, &why)) GTEST_SKIP() << why;
  std::string cuobjdump = TINY_TEST_CUOBJDUMP;
  if (cuobjdump.empty()) GTEST_SKIP() << "cuobjdump is not found (the triton wheel ships one)";
  std::regex usage(R"(STACK:(\d+) SHARED:(\d+) LOCAL:(\d+))");
  int64_t staged_shared = 0;
  for (int arch : {80, 90})
    for (const Cubin& c : sample_cubins(arch)) {
      std::string out = run(cuobjdump + " -res-usage " + c.path + " 2>&1");
      std::smatch m;
      ASSERT_TRUE(std::regex_search(out, m, usage)) << c.what << ": " << out;
      EXPECT_LE(std::stoll(m[1]), c.allowed_stack) << c.what << " sm_" << arch << " uses stack: " << out;
      EXPECT_LE(std::stoll(m[2]), 48 * 1024) << c.what << " sm_" << arch << ": " << out;
      EXPECT_EQ(std::stoll(m[3]), 0) << c.what << " sm_" << arch << " spills to local memory: " << out;
      if (c.what.find("tiles in local memory") != std::string::npos) staged_shared = std::stoll(m[2]);
    }
  EXPECT_GT(staged_shared, 0) << "the staged matmul uses no shared memory";
}

TEST(CudaNvrtc, ACompileErrorNamesTheKernelTheLogAndTheSource) {
  std::string why;
  auto nvrtc = test_nvrtc(90, &why);
  if (!nvrtc) GTEST_SKIP() << why;
  try {
    nvrtc->compile("extern \"C\" __global__ void broken(float* a) { a[0] = not_declared; }", "broken");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("compiling kernel broken with NVRTC for sm_90"), std::string::npos) << what;
    EXPECT_NE(what.find("not_declared"), std::string::npos) << what;
    EXPECT_NE(what.find("source at "), std::string::npos) << what;
  }
}

TEST(CudaNvrtc, WithoutNvrtcTheCompilerSaysWhatToInstall) {
  try {
    nvrtc_compiler(90, "/nonexistent/libnvrtc.so.13");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("nvidia-cuda-nvrtc"), std::string::npos) << e.what();
  }
}

// The whole path on the fake driver: a graph on the CUDA device is lowered for its target, rendered,
// compiled by NVRTC and launched on the stream with the kernel's grid (the fake cannot run a cubin).
TEST_F(CudaFakeDriver, ARealizedGraphIsCompiledByNvrtcAndLaunchedWithItsGrid) {
  std::string why;
  if (!test_nvrtc(90, &why)) GTEST_SKIP() << why;
  dev.reset();
  dev = make_cuda_device(TINY_FAKE_CUDA, 0, nvrtc_compiler(90, TINY_TEST_NVRTC));
  const int64_t n = 100000;
  auto x = std::make_shared<Buffer>(*dev, DType::Float32, n);
  std::vector<float> ones(n, 1.0f);
  dev->allocator().copy_in(x->ptr(), ones.data(), n * 4);
  UOpPtr value = alu(Ops::EXP, buffer(x));
  Kernel k =
      lower_kernel(std::make_shared<Buffer>(*dev, DType::Float32, n), View::contiguous({n}), value, dev->target());
  realize_value(value);
  dev->synchronize();
  ASSERT_EQ(launches(), 1u);
  EXPECT_STREQ(launch(0).name, k.name.c_str());
  EXPECT_EQ(launch(0).grid[0], k.launch.global[0]);
  EXPECT_EQ(launch(0).block[0], k.launch.local[0]);
  EXPECT_GE(int64_t{launch(0).grid[0]} * launch(0).block[0] * k.lanes, n); // a thread computes k.lanes outputs
  EXPECT_EQ(launch(0).arg_size, 16u);                                      // out, x
  EXPECT_EQ(arg_at<uint64_t>(launch(0), 8), device_address(x->ptr()));
}

// ---- replayed schedules as graphs, staged host copies, events ----

namespace {

std::vector<float> iota_floats(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; i++)
    x[i] = static_cast<float>(i) - 50;
  return x;
}

} // namespace

TEST_F(CudaFakeDriver, AReplayIsCapturedOnceAndEachRepeatIsOneGraphLaunch) {
  FAKE(fake_cuda_set_kernel)("twice", twice);
  auto p = dev->program("extern \"C\" __global__ void twice(float* a, long long n)", "twice");
  std::vector<float> x = iota_floats(64), got(64);
  void* a = alloc(256);
  dev->allocator().copy_in(a, x.data(), 256);
  std::unique_ptr<ReplayState> state;
  auto two = [&] {
    p->launch(std::vector<void*>{a}, std::vector<int64_t>{64}, {}, Launch{});
    p->launch(std::vector<void*>{a}, std::vector<int64_t>{64}, {}, Launch{});
  };
  int64_t graphs = stats().graph_launches;
  for (int r = 0; r < 3; r++)
    dev->replay(state, two);
  EXPECT_EQ(FAKE(fake_cuda_graph_launches)(), 3);
  EXPECT_EQ(stats().graph_launches - graphs, 3);
  EXPECT_EQ(calls("cuStreamBeginCapture_v2"), 1);
  EXPECT_EQ(calls("cuGraphInstantiateWithFlags"), 1);
  EXPECT_EQ(calls("cuLaunchKernel"), 2); // the captured launches; the repeats launch the graph only
  dev->allocator().copy_out(got.data(), a, 0, 256);
  for (size_t i = 0; i < got.size(); i++)
    EXPECT_EQ(got[i], 64 * x[i]) << i;
  EXPECT_NE(std::string(FAKE(fake_cuda_log)()).find("graph;launch twice;launch twice;graph;launch twice;launch twice;"),
            std::string::npos)
      << FAKE(fake_cuda_log)();
  state.reset();
  EXPECT_EQ(calls("cuGraphExecDestroy"), 1);
  dev->allocator().free(a, 256);
}

TEST_F(CudaFakeDriver, AReplayOnOtherBuffersUpdatesTheGraphAndOtherKernelsInstantiateANewOne) {
  FAKE(fake_cuda_set_kernel)("twice", twice);
  auto p = dev->program("extern \"C\" __global__ void twice(float* a, long long n)", "twice");
  std::vector<float> x = iota_floats(64), got(64);
  void* a = alloc(256);
  void* b = alloc(256);
  dev->allocator().copy_in(a, x.data(), 256);
  dev->allocator().copy_in(b, x.data(), 256);
  std::unique_ptr<ReplayState> state;
  auto on = [&](void* buf, int times) {
    return [&p, buf, times] {
      for (int i = 0; i < times; i++)
        p->launch(std::vector<void*>{buf}, std::vector<int64_t>{64}, {}, Launch{});
    };
  };
  dev->replay(state, on(a, 2));
  dev->replay(state, on(b, 2)); // other arguments: the graph is updated
  EXPECT_EQ(calls("cuStreamBeginCapture_v2"), 2);
  EXPECT_EQ(calls("cuGraphExecUpdate_v2"), 1);
  EXPECT_EQ(calls("cuGraphInstantiateWithFlags"), 1);
  dev->replay(state, on(a, 3)); // another topology: the driver refuses the update, a new graph
  EXPECT_EQ(calls("cuGraphExecUpdate_v2"), 2);
  EXPECT_EQ(calls("cuGraphInstantiateWithFlags"), 2);
  EXPECT_EQ(calls("cuGraphExecDestroy"), 1);
  EXPECT_EQ(FAKE(fake_cuda_graph_launches)(), 3);
  dev->allocator().copy_out(got.data(), a, 0, 256);
  for (size_t i = 0; i < got.size(); i++)
    EXPECT_EQ(got[i], 32 * x[i]) << i;
  dev->allocator().copy_out(got.data(), b, 0, 256);
  for (size_t i = 0; i < got.size(); i++)
    EXPECT_EQ(got[i], 4 * x[i]) << i;
  state.reset();
  dev->allocator().free(a, 256);
  dev->allocator().free(b, 256);
}

TEST_F(CudaFakeDriver, WhenTheDriverRefusesACaptureAnUpdateOrAnInstantiationTheKernelsStillRunInOrder) {
  FAKE(fake_cuda_set_kernel)("twice", twice);
  auto p = dev->program("extern \"C\" __global__ void twice(float* a, long long n)", "twice");
  std::vector<float> x = iota_floats(64), got(64);
  void* a = alloc(256);
  dev->allocator().copy_in(a, x.data(), 256);
  auto two = [&] {
    p->launch(std::vector<void*>{a}, std::vector<int64_t>{64}, {}, Launch{});
    p->launch(std::vector<void*>{a}, std::vector<int64_t>{64}, {}, Launch{});
  };
  // no capture: one by one, now and at the schedule's later replays
  std::unique_ptr<ReplayState> uncaptured;
  FAKE(fake_cuda_fail_next)("cuStreamBeginCapture_v2", 900);
  dev->replay(uncaptured, two);
  dev->replay(uncaptured, two);
  EXPECT_EQ(FAKE(fake_cuda_graph_launches)(), 0);
  EXPECT_EQ(calls("cuLaunchKernel"), 4);
  // no instantiation: one by one
  std::unique_ptr<ReplayState> uninstantiated;
  FAKE(fake_cuda_fail_next)("cuGraphInstantiateWithFlags", 1);
  dev->replay(uninstantiated, two);
  EXPECT_EQ(FAKE(fake_cuda_graph_launches)(), 0);
  // a refused update: a new graph
  std::unique_ptr<ReplayState> graph;
  void* b = alloc(256);
  dev->allocator().copy_in(b, x.data(), 256);
  dev->replay(graph, two);
  FAKE(fake_cuda_fail_next)("cuGraphExecUpdate_v2", 910);
  dev->replay(graph, [&] {
    p->launch(std::vector<void*>{b}, std::vector<int64_t>{64}, {}, Launch{});
    p->launch(std::vector<void*>{b}, std::vector<int64_t>{64}, {}, Launch{});
  });
  EXPECT_EQ(calls("cuGraphInstantiateWithFlags"), 3);
  EXPECT_EQ(FAKE(fake_cuda_graph_launches)(), 2);
  dev->allocator().copy_out(got.data(), a, 0, 256);
  for (size_t i = 0; i < got.size(); i++)
    EXPECT_EQ(got[i], 256 * x[i]) << i; // doubled 8 times
  dev->allocator().copy_out(got.data(), b, 0, 256);
  for (size_t i = 0; i < got.size(); i++)
    EXPECT_EQ(got[i], 4 * x[i]) << i;
  dev->allocator().free(a, 256);
  dev->allocator().free(b, 256);
}

TEST_F(CudaFakeDriver, AZeroDivisionInAGraphRaisesAfterTheSync) {
  FAKE(fake_cuda_set_kernel)("divides", divides_by_zero);
  auto p = dev->program(with_error_flag("divides"), "divides");
  std::unique_ptr<ReplayState> state;
  auto two = [&] {
    p->launch({}, {}, {}, Launch{});
    p->launch({}, {}, {}, Launch{});
  };
  dev->replay(state, two);
  dev->synchronize();
  EXPECT_THROW(raise_kernel_errors(), std::runtime_error);
  FAKE(fake_cuda_set_kernel)("divides", nullptr);
  dev->replay(state, two);
  dev->synchronize();
  EXPECT_NO_THROW(raise_kernel_errors());
  EXPECT_EQ(FAKE(fake_cuda_graph_launches)(), 2);
}

TEST_F(CudaFakeDriver, TinyGpuGraphsZeroLaunchesAReplayKernelByKernel) {
  dev.reset();
  setenv("TINY_GPU_GRAPHS", "0", 1);
  dev = open();
  unsetenv("TINY_GPU_GRAPHS");
  auto p = dev->program("extern \"C\" __global__ void plain()", "plain");
  std::unique_ptr<ReplayState> state;
  for (int r = 0; r < 2; r++)
    dev->replay(state, [&] {
      p->launch({}, {}, {}, Launch{});
      p->launch({}, {}, {}, Launch{});
    });
  dev->synchronize();
  EXPECT_EQ(FAKE(fake_cuda_graph_launches)(), 0);
  EXPECT_EQ(calls("cuLaunchKernel"), 4);
  EXPECT_EQ(calls("cuStreamBeginCapture_v2"), 0);
}

// The realize engine's schedule cache: a repeated graph on other inputs replays as one graph launch of the
// same kernels, in the same order, on the new inputs (the fake runs no generated kernel: the launches are
// compared).
TEST_F(CudaFakeDriver, ARepeatedScheduleOnTheDeviceIsOneGraphLaunchOfTheSameKernels) {
  const int64_t n = 1000;
  auto input = [&] {
    auto b = std::make_shared<Buffer>(*dev, DType::Float32, n);
    std::vector<float> ones(n, 1.0f);
    dev->allocator().copy_in(b->ptr(), ones.data(), n * 4);
    return b;
  };
  auto roots = [&](const std::shared_ptr<Buffer>& x) {
    UOpPtr e = alu(Ops::MUL, alu(Ops::EXP, buffer(x)), expand(reshape(const_float(DType::Float32, 3.25), {1}), {n}));
    return std::vector<UOpPtr>{e, reduce(e, Ops::ADD, {0})};
  };
  realize_all(roots(input()));
  dev->synchronize();
  size_t first = launches();
  ASSERT_GE(first, 2u);
  std::vector<std::string> names;
  for (size_t i = 0; i < first; i++)
    names.push_back(launch(static_cast<int>(i)).name);
  int64_t hits = stats().schedule_hits, graphs = stats().graph_launches;
  auto x = input();
  std::vector<UOpPtr> out = realize_all(roots(x));
  dev->synchronize();
  EXPECT_EQ(stats().schedule_hits - hits, 1);
  EXPECT_EQ(stats().graph_launches - graphs, 1);
  EXPECT_EQ(FAKE(fake_cuda_graph_launches)(), 1);
  ASSERT_EQ(launches(), 2 * first); // the replay's launches, captured
  bool reads_x = false;
  for (size_t i = 0; i < first; i++) {
    const FakeCudaLaunch& l = launch(static_cast<int>(first + i));
    EXPECT_EQ(l.name, names[i]);
    for (size_t at = 0; at + 8 <= l.arg_size; at += 8)
      reads_x = reads_x || arg_at<uint64_t>(l, at) == device_address(x->ptr());
  }
  EXPECT_TRUE(reads_x);
  std::string log = FAKE(fake_cuda_log)();
  std::string replayed = "graph;";
  for (const std::string& name : names)
    replayed += "launch " + name + ";";
  EXPECT_NE(log.find(replayed), std::string::npos) << log;
}

TEST_F(CudaFakeDriver, CopyInReturnsBeforeItsCopyRanAndTheCallersMemoryIsFreeAtOnce) {
  std::vector<float> x = iota_floats(1000), sent = x, got(1000);
  void* a = alloc(4000);
  dev->allocator().copy_in(a, x.data(), 4000);
  EXPECT_GT(FAKE(fake_cuda_pending)(), 0u); // enqueued, not run
  std::fill(x.begin(), x.end(), -1.0f);     // the caller's memory, overwritten at once
  dev->allocator().copy_out(got.data(), a, 0, 4000);
  EXPECT_EQ(got, sent);
  // the staging buffers are page-locked once and reused
  for (int i = 0; i < 10; i++) {
    dev->allocator().copy_in(a, x.data(), 4000);
    dev->allocator().copy_out(got.data(), a, 0, 4000);
    EXPECT_EQ(got, x);
  }
  EXPECT_LE(calls("cuMemHostAlloc"), 4);
  EXPECT_EQ(FAKE(fake_cuda_misuses)(), 0);
  dev->allocator().free(a, 4000);
}

TEST_F(CudaFakeDriver, LargeCopiesGoInChunksAndAStagingBufferIsRefilledOnlyAfterItsCopyRan) {
  size_t n = (size_t{18} << 20) / 4; // 18 MiB: five 4 MiB chunks through four staging buffers
  std::vector<float> x(n), got(n);
  for (size_t i = 0; i < n; i++)
    x[i] = static_cast<float>(i % 100003);
  void* a = alloc(n * 4);
  int waits = calls("event waited");
  dev->allocator().copy_in(a, x.data(), n * 4);
  // the fifth chunk waited for the first's copy to run (the fake reads page-locked memory when it does)
  EXPECT_EQ(calls("event waited") - waits, 1);
  EXPECT_EQ(calls("cuMemHostAlloc"), 4);
  EXPECT_EQ(FAKE(fake_cuda_pinned_bytes)(), size_t{16} << 20);
  dev->allocator().copy_out(got.data(), a, 0, n * 4);
  EXPECT_TRUE(got == x);
  std::string log = FAKE(fake_cuda_log)();
  EXPECT_NE(log.find("htod 4194304 pinned;htod 4194304 pinned;htod 4194304 pinned;htod 4194304 pinned;htod 2097152 "
                     "pinned;dtoh 4194304 pinned;"),
            std::string::npos)
      << log;
  dev->allocator().free(a, n * 4);
  dev.reset();
  EXPECT_EQ(FAKE(fake_cuda_pinned_bytes)(), 0u);
}

TEST_F(CudaFakeDriver, WithoutPageLockedMemoryCopiesGoFromTheCallersMemory) {
  dev.reset();
  dev = open();
  dev->synchronize();
  FAKE(fake_cuda_fail_next)("cuMemHostAlloc", 2);
  std::vector<float> x = iota_floats(100), got(100);
  void* a = alloc(400);
  dev->allocator().copy_in(a, x.data(), 400);
  dev->allocator().copy_out(got.data(), a, 0, 400);
  EXPECT_EQ(got, x);
  EXPECT_NE(std::string(FAKE(fake_cuda_log)()).find("htod 400;dtoh 400;"), std::string::npos) << FAKE(fake_cuda_log)();
  dev->allocator().free(a, 400);
}

TEST_F(CudaFakeDriver, EventsMarkTheStreamAndMeasureTheTimeBetween) {
  auto p = dev->program("extern \"C\" __global__ void timed()", "timed");
  auto start = dev->record_event();
  p->launch({}, {}, {}, Launch{});
  p->launch({}, {}, {}, Launch{});
  auto end = dev->record_event();
  EXPECT_FALSE(end->query()); // the stream has not run yet
  end->synchronize();
  EXPECT_TRUE(end->query());
  EXPECT_TRUE(start->query());
  EXPECT_EQ(start->elapsed_ms(*end), 2.0); // the fake's launches take 1 ms each
  auto untimed = dev->record_event(false);
  EXPECT_THROW(start->elapsed_ms(*untimed), std::runtime_error);
  dev->wait_event(*end); // a marker of its own stream: nothing to wait for
  auto other = make_cuda_device(TINY_FAKE_CUDA, 0, std::make_unique<SourceAsBinary>());
  auto theirs = other->record_event();
  EXPECT_THROW(start->elapsed_ms(*theirs), std::runtime_error);
  dev->wait_event(*theirs); // another device's: the host waits
  EXPECT_TRUE(theirs->query());
  dev->synchronize();
}
