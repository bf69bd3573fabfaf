// The HIP device without an AMD GPU: its runtime calls against the fake driver library the CUDA tests
// use (tests/fake_cuda, by its hip* names), and the HIP dialect's kernels compiled by clang to code
// objects for gfx942 (MI300) and gfx1100 (RDNA3). What needs clang-19 skips, saying so, where it is not
// found.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "compiler/render_gpu.h"
#include "runtime/backend.h"
#include "runtime/device.h"
#include "runtime/hip_device.h"
#include "runtime/lazy_buffer.h"
#include "runtime/realize.h"
#include "tests/fake_cuda/fake_cuda.h"
#include "tests/fake_cuda/fake_driver_testing.h"
#include "tests/gpu_kernels.h"

using namespace tiny;
using namespace tiny::runtime;

namespace {

std::unique_ptr<Compiler> test_hip_compiler(const std::string& gfx, std::string* why) {
  try {
    return hip_compiler(gfx);
  } catch (const std::runtime_error& e) {
    *why = e.what();
    return nullptr;
  }
}

// The limits an MI300 (gfx942) reports: 1024 threads a block, 64 KiB of LDS.
Target hip_target() {
  Target t;
  t.dialect = Dialect::HIP;
  t.max_local = 1024;
  t.local_mem = 64 * 1024;
  t.max_groups = {2147483647, 65535, 65535};
  return t;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

} // namespace

TEST(HipClang, EverySampleKernelCompilesToACodeObjectForGfx942AndGfx1100) {
  std::string why;
  if (!test_hip_compiler("gfx942", &why)) GTEST_SKIP() << why;
  auto kernels = sample_gpu_kernels(hip_target());
  for (const char* gfx : {"gfx942", "gfx1100"}) {
    auto clang = hip_compiler(gfx);
    for (const auto& [what, k] : kernels) {
      std::string src = render_gpu(k, k.name, hip_target());
      try {
        std::string bytes = read_bytes(clang->compile(src, k.name));
        EXPECT_EQ(bytes.substr(0, 4), "\x7f"
                                      "ELF")
            << what << " for " << gfx;
        // the code object holds the kernel and its descriptor, which hipModuleGetFunction looks up
        EXPECT_NE(bytes.find(k.name + ".kd"), std::string::npos) << what << " for " << gfx;
        EXPECT_NE(bytes.find(std::string("amdgcn-amd-amdhsa--") + gfx), std::string::npos) << what << " for " << gfx;
      } catch (const std::runtime_error& e) {
        ADD_FAILURE() << what << " for " << gfx << ": " << e.what();
      }
    }
  }
}

TEST(HipClang, ACompileErrorNamesTheKernelTheLogAndTheSource) {
  std::string why;
  auto clang = test_hip_compiler("gfx942", &why);
  if (!clang) GTEST_SKIP() << why;
  try {
    clang->compile("extern \"C\" __attribute__((global)) void broken(float* a) { a[0] = not_declared; }", "broken");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("compiling kernel broken with"), std::string::npos) << what;
    EXPECT_NE(what.find("for gfx942"), std::string::npos) << what;
    EXPECT_NE(what.find("not_declared"), std::string::npos) << what;
    size_t at = what.find("source at ");
    ASSERT_NE(at, std::string::npos) << what;
    std::string path = what.substr(at + 10, what.find(')', at) - at - 10);
    EXPECT_NE(read_bytes(path).find("not_declared"), std::string::npos) << path;
  }
}

TEST(HipClang, TheCompilerKeyNamesTheTargetSoEachTargetCachesItsOwnBinary) {
  std::string why;
  auto a = test_hip_compiler("gfx942", &why);
  if (!a) GTEST_SKIP() << why;
  auto b = hip_compiler("gfx1100");
  EXPECT_NE(a->key().find("gfx942"), std::string::npos) << a->key();
  EXPECT_NE(hip_binary_path(a->key(), "k"), hip_binary_path(b->key(), "k"));
}

TEST(HipClang, WithoutClangTheCompilerSaysWhatToInstall) {
  try {
    hip_compiler("gfx942", "/nonexistent/clang-19");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("apt install clang-19 lld-19"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/nonexistent/clang-19"), std::string::npos) << e.what();
  }
  EXPECT_THROW(hip_compiler("sm_90"), std::runtime_error);
}

// ---- the runtime, on the fake driver ----

namespace {

template <class F> F* fake(const char* name) { return fake_gpu::fake_driver_function<F>(TINY_FAKE_GPU, name); }
#define FAKE(fn) fake<decltype(fn)>(#fn)

struct SourceAsBinary : fake_gpu::SourceAsBinaryCompiler {
  SourceAsBinary() : SourceAsBinaryCompiler(hip_binary_path) {}
};

std::string kernel_with_error_flag(const std::string& name) {
  return "extern \"C\" __attribute__((global)) void " + name + "(float* a, long long n, int* " + kGpuErrorFlag + ")";
}

template <class T> T arg_at(const FakeCudaLaunch& l, size_t offset) {
  T v;
  std::memcpy(&v, l.args + offset, sizeof v);
  return v;
}

void twice(const unsigned char* args, size_t) {
  uint64_t a;
  int64_t n;
  std::memcpy(&a, args, 8);
  std::memcpy(&n, args + 8, 8);
  auto* x = static_cast<float*>(FAKE(fake_cuda_host_pointer)(a));
  for (int64_t i = 0; i < n; i++)
    x[i] *= 2;
}

class HipFakeRuntime : public ::testing::Test {
protected:
  std::unique_ptr<Device> dev;
  SourceAsBinary* compiler = nullptr;
  void SetUp() override {
    FAKE(fake_cuda_reset)(2, size_t{1} << 30);
    dev = open(0);
    dev->synchronize();
  }
  void TearDown() override {
    dev.reset();
    EXPECT_EQ(FAKE(fake_cuda_misuses)(), 0) << "a free with queued work, or work on another device's stream";
    EXPECT_EQ(FAKE(fake_cuda_pending)(), 0u);
  }
  std::unique_ptr<Device> open(int ordinal) {
    auto c = std::make_unique<SourceAsBinary>();
    compiler = c.get();
    return make_hip_device(TINY_FAKE_GPU, ordinal, std::move(c));
  }
  static size_t launches() { return static_cast<size_t>(FAKE(fake_cuda_launch_count)()); }
  static const FakeCudaLaunch& launch(int i) { return *FAKE(fake_cuda_launch)(i); }
  static int calls(const char* call) { return FAKE(fake_cuda_calls)(call); }
};

} // namespace

TEST_F(HipFakeRuntime, TheDeviceIsNamedByItsGfxTargetAndItsLimitsAreTheRuntimes) {
  EXPECT_EQ(dev->name(), "HIP: Fake GPU (gfx942)");
  const Target& t = dev->target();
  EXPECT_EQ(t.dialect, Dialect::HIP);
  EXPECT_EQ(t.max_local, 1024);
  EXPECT_EQ(t.local_mem, 64 * 1024);
  EXPECT_EQ(t.max_groups, (std::array<int64_t, 3>{2147483647, 65536, 65536}));
  EXPECT_EQ(dev->compute_units(), 304);
  EXPECT_EQ(dev->total_memory(), int64_t{1} << 30);
  EXPECT_EQ(dev->free_memory(), static_cast<int64_t>((size_t{1} << 30) - FAKE(fake_cuda_live_bytes)()));
}

TEST_F(HipFakeRuntime, ArgumentsArePackedInKernelOrderAndTheLaunchEndsWithHipsEndMarker) {
  void* a = dev->allocator().alloc(256);
  auto p = dev->program(kernel_with_error_flag("packs"), "packs");
  Launch l;
  l.global = {5, 3, 2};
  l.local = {64, 2, 1};
  p->launch(std::vector<void*>{a}, std::vector<int64_t>{7}, std::vector<double>{2.25}, l);
  // the fake refuses an `extra` that does not end with HIP_LAUNCH_PARAM_END (3)
  ASSERT_EQ(launches(), 1u);
  EXPECT_EQ(calls("hipModuleLaunchKernel"), 1);
  const FakeCudaLaunch& got = launch(0);
  ASSERT_EQ(got.arg_size, 32u); // a, 7, 2.25f, then the flag 8-aligned
  EXPECT_EQ(arg_at<uint64_t>(got, 0), reinterpret_cast<uint64_t>(a));
  EXPECT_EQ(arg_at<int64_t>(got, 8), 7);
  EXPECT_EQ(arg_at<float>(got, 16), 2.25f);
  EXPECT_NE(FAKE(fake_cuda_host_pointer)(arg_at<uint64_t>(got, 24)), nullptr);
  EXPECT_EQ(std::vector<unsigned>(got.grid, got.grid + 3), (std::vector<unsigned>{5, 3, 2}));
  EXPECT_EQ(std::vector<unsigned>(got.block, got.block + 3), (std::vector<unsigned>{64, 2, 1}));
  Launch tall;
  tall.global = {1, 70000, 1}; // y takes 65536 blocks at most
  EXPECT_THROW(p->launch(std::vector<void*>{a}, std::vector<int64_t>{7}, std::vector<double>{2.25}, tall),
               std::runtime_error);
  EXPECT_EQ(launches(), 1u);
  dev->synchronize();
  dev->allocator().free(a, 256);
}

TEST_F(HipFakeRuntime, CopiesAndLaunchesRunInStreamOrderAndAFreedBlockIsReusedAfterItsLastUse) {
  FAKE(fake_cuda_set_kernel)("twice", twice);
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); i++)
    x[i] = static_cast<float>(i);
  int mallocs = calls("hipMalloc"), frees = calls("hipFree");
  void* a = dev->allocator().alloc(256);
  dev->allocator().copy_in(a, x.data(), 256);
  auto p = dev->program("extern \"C\" __attribute__((global)) void twice(float* a, long long n)", "twice");
  p->launch(std::vector<void*>{a}, std::vector<int64_t>{64}, {}, Launch{});
  EXPECT_EQ(FAKE(fake_cuda_pending)(), 3u); // nothing ran yet: the copy, its staging buffer's event, the launch
  std::vector<float> got(64);
  dev->allocator().copy_out(got.data(), a, 0, 256);
  for (size_t i = 0; i < got.size(); i++)
    EXPECT_EQ(got[i], 2 * x[i]) << i;
  EXPECT_NE(std::string(FAKE(fake_cuda_log)()).find("htod 256 pinned;launch twice;dtoh 256 pinned;"), std::string::npos)
      << FAKE(fake_cuda_log)();
  // freed with a launch still queued, the block comes back for the next allocation of its bucket, and
  // goes back to the runtime only once the stream passed an event after its last use (the fake counts a
  // misuse otherwise)
  p->launch(std::vector<void*>{a}, std::vector<int64_t>{64}, {}, Launch{});
  dev->allocator().free(a, 256);
  EXPECT_EQ(dev->allocator().alloc(200), a);
  EXPECT_EQ(calls("hipMalloc") - mallocs, 1);
  dev->allocator().free(a, 200);
  dev->allocator().empty_cache();
  EXPECT_EQ(calls("hipFree") - frees, 0);
  dev->synchronize();
  EXPECT_EQ(calls("hipFree") - frees, 1);
  EXPECT_EQ(FAKE(fake_cuda_pending)(), 0u);
}

TEST_F(HipFakeRuntime, OutOfMemoryIsAClearErrorAndTheDeviceStaysUsable) {
  FAKE(fake_cuda_reset)(2, size_t{4} << 20);
  try {
    dev->allocator().alloc(size_t{8} << 20);
    FAIL() << "no error";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory allocating 8388608 bytes on HIP: Fake GPU (gfx942)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(dev->allocator().memory_stats().num_ooms, 1);
  void* b = dev->allocator().alloc(size_t{2} << 20);
  std::vector<int32_t> x(1000, 42), got(1000);
  dev->allocator().copy_in(b, x.data(), 4000);
  dev->allocator().copy_out(got.data(), b, 0, 4000);
  EXPECT_EQ(got, x);
  dev->allocator().free(b, size_t{2} << 20);
}

TEST_F(HipFakeRuntime, ErrorsNameTheHipCallAndTheRuntimesReason) {
  FAKE(fake_cuda_fail_next)("hipModuleLoadData", 200);
  try {
    dev->program("extern \"C\" __attribute__((global)) void refused()", "refused");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("hipModuleLoadData of kernel refused failed: hipErrorInvalidImage (device "
                                         "kernel image is invalid)"),
              std::string::npos)
        << e.what();
  }
  auto p = dev->program("extern \"C\" __attribute__((global)) void fails()", "fails");
  p->launch({}, {}, {}, Launch{});
  FAKE(fake_cuda_fail_next)("hipStreamSynchronize", 719);
  try {
    dev->synchronize();
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("hipStreamSynchronize"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hipErrorLaunchFailure"), std::string::npos) << e.what();
  }
  dev->synchronize();
}

TEST_F(HipFakeRuntime, EachOrdinalIsItsOwnDeviceWithItsMemoryAndTheCallersDeviceIsRestored) {
  auto second = open(1);
  void* a = dev->allocator().alloc(4096);
  void* b = second->allocator().alloc(4096);
  EXPECT_EQ(FAKE(fake_cuda_block_device)(reinterpret_cast<uint64_t>(a)), 0);
  EXPECT_EQ(FAKE(fake_cuda_block_device)(reinterpret_cast<uint64_t>(b)), 1);
  // a kernel of device 1 launches on device 1's stream (the fake counts a misuse otherwise)
  auto p = second->program("extern \"C\" __attribute__((global)) void on_one(float* a)", "on_one");
  p->launch(std::vector<void*>{b}, {}, {}, Launch{});
  second->synchronize();
  // the thread's current device is what it was before
  int current = -1;
  reinterpret_cast<int (*)(int*)>(dlsym(dlopen(TINY_FAKE_GPU, RTLD_NOW | RTLD_LOCAL), "hipGetDevice"))(&current);
  EXPECT_EQ(current, 0);
  dev->allocator().free(a, 4096);
  second->allocator().free(b, 4096);
}

TEST_F(HipFakeRuntime, ABlockCopiesFromOneDeviceToTheOtherStagedThroughTheHost) {
  auto second = open(1);
  FAKE(fake_cuda_set_kernel)("twice", twice);
  std::vector<float> x = {1, 2, 3, 4};
  auto on0 = std::make_shared<Buffer>(*dev, DType::Float32, 4);
  dev->allocator().copy_in(on0->ptr(), x.data(), 16);
  auto on1 = std::make_shared<Buffer>(*second, DType::Float32, 4);
  std::vector<float> staged(4), got(4);
  dev->allocator().copy_out(staged.data(), on0->ptr(), 0, 16);
  second->allocator().copy_in(on1->ptr(), staged.data(), 16);
  second->allocator().copy_out(got.data(), on1->ptr(), 0, 16);
  EXPECT_EQ(got, x);
  EXPECT_EQ(FAKE(fake_cuda_block_device)(reinterpret_cast<uint64_t>(on1->ptr())), 1);
}

TEST_F(HipFakeRuntime, AReplayIsOneHipGraphLaunchUpdatedForOtherBuffers) {
  FAKE(fake_cuda_set_kernel)("twice", twice);
  auto p = dev->program("extern \"C\" __attribute__((global)) void twice(float* a, long long n)", "twice");
  std::vector<float> x = {1, 2, 3, 4}, got(4);
  void* a = dev->allocator().alloc(16);
  void* b = dev->allocator().alloc(16);
  dev->allocator().copy_in(a, x.data(), 16);
  dev->allocator().copy_in(b, x.data(), 16);
  std::unique_ptr<ReplayState> state;
  auto on = [&](void* buf) {
    return [&p, buf] {
      p->launch(std::vector<void*>{buf}, std::vector<int64_t>{4}, {}, Launch{});
      p->launch(std::vector<void*>{buf}, std::vector<int64_t>{4}, {}, Launch{});
    };
  };
  dev->replay(state, on(a));
  dev->replay(state, on(a));
  dev->replay(state, on(b));
  EXPECT_EQ(FAKE(fake_cuda_graph_launches)(), 3);
  EXPECT_EQ(calls("hipStreamBeginCapture"), 2);
  EXPECT_EQ(calls("hipGraphExecUpdate"), 1);
  EXPECT_EQ(calls("hipGraphInstantiateWithFlags"), 1);
  dev->allocator().copy_out(got.data(), a, 0, 16);
  EXPECT_EQ(got, (std::vector<float>{16, 32, 48, 64}));
  dev->allocator().copy_out(got.data(), b, 0, 16);
  EXPECT_EQ(got, (std::vector<float>{4, 8, 12, 16}));
  state.reset();
  EXPECT_EQ(calls("hipGraphExecDestroy"), 1);
  dev->allocator().free(a, 16);
  dev->allocator().free(b, 16);
}

TEST_F(HipFakeRuntime, EventsMarkTheStreamAndMeasureTheTimeBetween) {
  auto p = dev->program("extern \"C\" __attribute__((global)) void timed()", "timed");
  auto start = dev->record_event();
  for (int i = 0; i < 3; i++)
    p->launch({}, {}, {}, Launch{});
  auto end = dev->record_event();
  EXPECT_FALSE(end->query());
  EXPECT_EQ(start->elapsed_ms(*end), 3.0); // waits for both; the fake's launches take 1 ms each
  EXPECT_TRUE(end->query());
  EXPECT_EQ(calls("hipEventCreateWithFlags"), 2);
}

TEST(HipRuntime, WithoutTheLibraryThereAreNoDevicesAndOpeningOneSaysWhy) {
  EXPECT_EQ(hip_device_count("/nonexistent/libamdhip64.so"), 0);
  try {
    make_hip_device("/nonexistent/libamdhip64.so", 0);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("HIP runtime (ROCm)'s /nonexistent/libamdhip64.so, which cannot be loaded"),
              std::string::npos)
        << e.what();
  }
  FAKE(fake_cuda_reset)(0, size_t{1} << 30);
  EXPECT_EQ(hip_device_count(TINY_FAKE_GPU), 0);
  try {
    make_hip_device(TINY_FAKE_GPU, 0);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("reports no HIP device"), std::string::npos) << e.what();
  }
  FAKE(fake_cuda_reset)(2, size_t{1} << 30);
  EXPECT_EQ(hip_device_count(TINY_FAKE_GPU), 2);
}

// Debian's libamdhip64-5 loads where there is no AMD GPU and reports none.
TEST(HipRuntime, TheInstalledRuntimeWithoutAnAmdGpuReportsNoDevice) {
  std::string lib = default_libhip();
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) GTEST_SKIP() << "no HIP runtime here (" << lib << "): apt install libamdhip64-5";
  if (std::filesystem::exists("/dev/kfd")) GTEST_SKIP() << "this machine has an AMD GPU driver (/dev/kfd)";
  EXPECT_EQ(hip_device_count(lib), 0);
}

// ---- which backend tiny:N is ----

TEST(BackendChoice, TinyDeviceNamesTheBackendAndUnsetTheFirstGpuBackendWithADeviceElseCpu) {
  std::vector<std::string> asked;
  auto counts = [&](int cuda, int hip) {
    return [&asked, cuda, hip](const std::string& name) {
      asked.push_back(name);
      return name == "CUDA" ? cuda : hip;
    };
  };
  EXPECT_EQ(choose_backend("CL", counts(1, 1)), "CL");
  EXPECT_EQ(choose_backend("HIP", counts(1, 0)), "HIP"); // named: whatever the drivers report
  EXPECT_TRUE(asked.empty());
  EXPECT_EQ(choose_backend(nullptr, counts(2, 1)), "CUDA");
  EXPECT_EQ(asked, std::vector<std::string>{"CUDA"}); // HIP is not loaded when CUDA has a device
  EXPECT_EQ(choose_backend(nullptr, counts(0, 2)), "HIP");
  EXPECT_EQ(choose_backend(nullptr, counts(0, 0)), "CPU");
  try {
    choose_backend("TPU", counts(0, 0));
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("CPU, CL, CUDA, HIP"), std::string::npos) << e.what();
  }
}

// Here (no AMD GPU) opening the HIP backend says why; on an AMD machine it is the runtime's first GPU.
TEST(BackendChoice, TheHipBackendIsTheRuntimesFirstDeviceOrSaysWhyThereIsNone) {
  if (hip_device_count(default_libhip()) > 0) {
    EXPECT_EQ(backend_device("HIP").name().rfind("HIP: ", 0), 0u);
    return;
  }
  try {
    backend_device("HIP");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    EXPECT_TRUE(what.find("reports no HIP device") != std::string::npos ||
                what.find("cannot be loaded") != std::string::npos || what.find("hipInit") != std::string::npos)
        << what;
  }
}

namespace {

// In a fresh process (the backend is chosen once per process): the fake as the driver TINY_DEVICE's
// backend loads, with two devices. Exits 0 when tiny:0 and tiny:1 are its two devices and a buffer
// copied from one to the other through the host reads back; else prints what differs and exits 1.
[[noreturn]] void two_fake_devices(const char* tiny_device, const char* library_env, const char* name) {
  if (tiny_device)
    setenv("TINY_DEVICE", tiny_device, 1);
  else
    unsetenv("TINY_DEVICE");
  setenv(library_env, TINY_FAKE_GPU, 1);
  setenv("TINY_FAKE_GPU_DEVICES", "2", 1);
  int ok = device_count() == 2 && device(0).name() == name && device(1).name() == name && &device(0) != &device(1);
  std::vector<float> x = {1, 2, 3, 4}, got(4);
  LazyBuffer a(device(0), 16), b(device(1), 16);
  StridedView whole{{4}, {1}, 0, DType::Float32};
  a.write_host(whole, x.data());
  std::vector<float> staged(4);
  a.read_host(whole, staged.data());
  b.write_host(whole, staged.data());
  b.read_host(whole, got.data());
  ok = ok && got == x;
  std::fprintf(stderr, "%s %d %s %s\n", backend_name().c_str(), device_count(), device(0).name().c_str(),
               device(1).name().c_str());
  std::exit(ok ? 0 : 1);
}

} // namespace

TEST(BackendChoice, TinyNIsTheGpuBackendsNthDeviceAndCopiesBetweenDevicesGoThroughTheHost) {
  GTEST_FLAG_SET(death_test_style, "threadsafe"); // a fresh process: the backend is chosen once
  EXPECT_EXIT(two_fake_devices("HIP", "TINY_LIBHIP", "HIP: Fake GPU (gfx942)"), ::testing::ExitedWithCode(0), "HIP 2");
  // unset: the first GPU backend with a device (CUDA here, where the fake is the CUDA driver)
  EXPECT_EXIT(two_fake_devices(nullptr, "TINY_LIBCUDA", "CUDA: Fake GPU (sm_90)"), ::testing::ExitedWithCode(0),
              "CUDA 2");
}
