// TINY_GPU_COMPILE_CHECK (runtime/gpu_check.h): a schedule made again for the NVIDIA and AMD targets and
// compiled for their architectures; a kernel that does not compile, or whose binary spills, fails the
// check with a message naming the architecture, the kernel and its source. What needs NVRTC or cuobjdump
// skips, saying so, where they are not found.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compiler/schedule.h"
#include "runtime/cuda_device.h"
#include "runtime/gpu_check.h"
#include "runtime/lazy_buffer.h"

using namespace tiny;
using namespace tiny::runtime;

namespace {

namespace fs = std::filesystem;

// A fresh TINY_CACHE_DIR for one test (markers of checked kernels from earlier runs are not found).
class GpuCompileCheck : public ::testing::Test {
protected:
  fs::path dir;
  std::string old;
  void SetUp() override {
    if (const char* d = std::getenv("TINY_CACHE_DIR")) old = d;
    static int n = 0;
    dir = fs::temp_directory_path() / ("tiny_gpu_check_" + std::to_string(getpid()) + "_" + std::to_string(n++));
    setenv("TINY_CACHE_DIR", dir.c_str(), 1);
  }
  void TearDown() override {
    if (old.empty())
      unsetenv("TINY_CACHE_DIR");
    else
      setenv("TINY_CACHE_DIR", old.c_str(), 1);
    fs::remove_all(dir);
  }
};

BufferRef buf(DType dt, int64_t n) { return std::make_shared<Buffer>(cpu_device(), dt, n); }

// A softmax over rows: grouped reductions on a GPU, several kernels. Its buffers are only identities:
// nothing runs, nothing is allocated.
UOpPtr softmax_graph() {
  auto x = reshape(buffer(buf(DType::Float32, 64 * 500)), {64, 500});
  auto e = alu(Ops::EXP, alu(Ops::SUB, x, expand(reduce(x, Ops::MAX, {1}), {64, 500})));
  return alu(Ops::FDIV, e, expand(reduce(e, Ops::ADD, {1}), {64, 500}));
}

std::function<Schedule(const Target&)> schedule_of(const UOpPtr& value) {
  return [value](const Target& t) { return schedule_value(value, t, [](DType dt, int64_t n) { return buf(dt, n); }); };
}

// A compiler that writes the source as its binary, or fails on a source containing `fail_on`.
class RecordingCompiler : public Compiler {
public:
  explicit RecordingCompiler(std::string fail_on) : fail_on_(std::move(fail_on)) {}
  std::string key() const override { return "recording"; }
  std::string compile(const std::string& src, const std::string& name) override {
    if (!fail_on_.empty() && src.find(fail_on_) != std::string::npos)
      throw std::runtime_error("error: '" + fail_on_ + "' is not allowed in " + name);
    fs::path at = fs::temp_directory_path() / ("tiny_gpu_check_bin_" + std::to_string(getpid()));
    std::ofstream(at) << src;
    return at.string();
  }

private:
  std::string fail_on_;
};

std::vector<CompileCheckTarget>
recording_target(const std::string& fail_on,
                 std::function<std::string(const std::string&, const std::string&)> problems = nullptr) {
  std::vector<CompileCheckTarget> ts(1);
  ts[0].arch = "sm_test";
  ts[0].target = compile_check_targets("sm_90")[0].target;
  ts[0].make_compiler = [fail_on] { return std::make_unique<RecordingCompiler>(fail_on); };
  ts[0].resource_problems = std::move(problems);
  return ts;
}

bool have_nvrtc(std::string* why) {
  try {
    nvrtc_compiler(90, TINY_TEST_NVRTC);
    return true;
  } catch (const std::runtime_error& e) {
    *why = e.what();
    return false;
  }
}

// sm_80 and sm_90 with the test's NVRTC and cuobjdump (CMake found them).
std::vector<CompileCheckTarget> nvrtc_targets() {
  setenv("TINY_NVRTC", TINY_TEST_NVRTC, 1);
  setenv("TINY_CUOBJDUMP", TINY_TEST_CUOBJDUMP, 1);
  return compile_check_targets("sm_80,sm_90");
}

} // namespace

TEST_F(GpuCompileCheck, AKernelThatDoesNotCompileFailsTheCheckNamingArchitectureKernelAndSource) {
  auto ts = recording_target("__syncthreads");
  try {
    check_gpu_compiles(schedule_of(softmax_graph()), ts);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("does not compile for sm_test"), std::string::npos) << what;
    EXPECT_NE(what.find("'__syncthreads' is not allowed in G"), std::string::npos) << what;
    size_t at = what.find("source at ");
    ASSERT_NE(at, std::string::npos) << what;
    fs::path src = what.substr(at + 10, what.find(')', at) - at - 10);
    std::ifstream in(src);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("__syncthreads"), std::string::npos) << src;
  }
}

TEST_F(GpuCompileCheck, ABinaryWithAResourceProblemFailsTheCheck) {
  auto ts =
      recording_target("", [](const std::string&, const std::string&) { return std::string("E_1 spills 16 bytes"); });
  try {
    check_gpu_compiles(schedule_of(alu(Ops::EXP, buffer(buf(DType::Float32, 1000)))), ts);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("for sm_test (source at "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("spills 16 bytes"), std::string::npos) << e.what();
  }
}

TEST_F(GpuCompileCheck, AKernelIsCheckedOnceAndASecondProcessFindsItChecked) {
  auto graph = softmax_graph();
  auto ts = recording_target("");
  check_gpu_compiles(schedule_of(graph), ts);
  EXPECT_GE(ts[0].kernels, 1);
  EXPECT_EQ(ts[0].compiled, ts[0].kernels);
  check_gpu_compiles(schedule_of(graph), ts); // the same process: nothing new
  EXPECT_EQ(ts[0].compiled, ts[0].kernels);
  auto again = recording_target(""); // another process: the markers on disk
  check_gpu_compiles(schedule_of(graph), again);
  EXPECT_EQ(again[0].kernels, ts[0].kernels);
  EXPECT_EQ(again[0].cached, again[0].kernels);
  EXPECT_EQ(again[0].compiled, 0);
}

TEST_F(GpuCompileCheck, EveryKernelOfASoftmaxCompilesForSm80AndSm90WithoutSpills) {
  std::string why;
  if (!have_nvrtc(&why)) GTEST_SKIP() << why;
  auto ts = nvrtc_targets();
  check_gpu_compiles(schedule_of(softmax_graph()), ts);
  for (const CompileCheckTarget& t : ts) {
    EXPECT_GE(t.kernels, 1) << t.arch;
    EXPECT_EQ(t.compiled, t.kernels) << t.arch;
  }
}

// NVRTC's own error, through the check: an OpenCL kernel is not CUDA C.
TEST_F(GpuCompileCheck, NvrtcRefusingAKernelFailsTheCheck) {
  std::string why;
  if (!have_nvrtc(&why)) GTEST_SKIP() << why;
  auto ts = nvrtc_targets();
  ts[0].target.dialect = Dialect::OpenCL;
  try {
    check_gpu_compiles(schedule_of(alu(Ops::EXP, buffer(buf(DType::Float32, 1000)))), ts);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("does not compile for sm_80"), std::string::npos) << what;
    EXPECT_NE(what.find("with NVRTC for sm_80 failed"), std::string::npos) << what;
  }
}

// A real cubin that keeps an array in local memory, read by cuobjdump: the check sees it.
TEST_F(GpuCompileCheck, CuobjdumpShowsAKernelUsingLocalMemory) {
  std::string why;
  if (!have_nvrtc(&why)) GTEST_SKIP() << why;
  if (std::string(TINY_TEST_CUOBJDUMP).empty()) GTEST_SKIP() << "cuobjdump is not found (the triton wheel ships one)";
  auto ts = nvrtc_targets();
  std::string bin = ts[1].make_compiler()->compile("extern \"C\" __global__ void on_stack(float* a, int i) {\n"
                                                   "  float t[256];\n"
                                                   "  for (int j = 0; j < 256; j++) t[j] = a[j] * j;\n"
                                                   "  a[0] = t[i];\n"
                                                   "}\n",
                                                   "on_stack");
  ASSERT_TRUE(ts[1].resource_problems);
  std::string problems = ts[1].resource_problems(bin, "");
  EXPECT_NE(problems.find("on_stack uses 1024 bytes of stack"), std::string::npos) << problems;
}

TEST(GpuCompileCheckUsage, CuobjdumpResourceLinesAreRead) {
  std::string ok = "Resource usage:\n Common:\n  GLOBAL:0\n Function E_4:\n  REG:16 STACK:0 SHARED:4096 LOCAL:0 "
                   "CONSTANT[0]:920 TEXTURE:0 SURFACE:0 SAMPLER:0\n";
  EXPECT_EQ(cubin_usage_problems(ok), "");
  std::string spill = "Function G_7:\n  REG:255 STACK:32 SHARED:0 LOCAL:32 CONSTANT[0]:920\n";
  EXPECT_NE(cubin_usage_problems(spill).find("G_7 spills 32 bytes to local memory"), std::string::npos);
  std::string trig = "Function E_9:\n  REG:32 STACK:32 SHARED:0 LOCAL:0\n";
  EXPECT_NE(cubin_usage_problems(trig).find("E_9 uses 32 bytes of stack"), std::string::npos);
  EXPECT_EQ(cubin_usage_problems(trig, cuda_allowed_stack("float v = sinf(x);")), "");
  EXPECT_EQ(cuda_allowed_stack("float v = asinf(x) + tiny_expf(y);"), 0);
  std::string shared = "Function G_8:\n  REG:40 STACK:0 SHARED:65536 LOCAL:0\n";
  EXPECT_NE(cubin_usage_problems(shared).find("65536 bytes of shared memory"), std::string::npos);
  EXPECT_NE(cubin_usage_problems("cuobjdump fatal   : Could not open input file").find("no resource usage"),
            std::string::npos);
}

TEST(GpuCompileCheckUsage, AmdgpuKernelMetadataIsRead) {
  std::string ok = "amdhsa.kernels:\n  - .agpr_count:     0\n    .group_segment_fixed_size: 1024\n"
                   "    .name:           E_4\n    .private_segment_fixed_size: 0\n    .sgpr_spill_count: 0\n"
                   "    .uses_dynamic_stack: false\n    .vgpr_count:     3\n    .vgpr_spill_count: 0\n";
  EXPECT_EQ(code_object_usage_problems(ok), "");
  std::string scratch = ok;
  scratch.replace(scratch.find("private_segment_fixed_size: 0"), 29, "private_segment_fixed_size: 272");
  scratch.replace(scratch.find("vgpr_spill_count: 0"), 19, "vgpr_spill_count: 12");
  std::string p = code_object_usage_problems(scratch);
  EXPECT_NE(p.find("272 bytes of scratch"), std::string::npos) << p;
  EXPECT_NE(p.find("12 vgpr spills"), std::string::npos) << p;
  EXPECT_NE(code_object_usage_problems("no notes").find("no AMDGPU kernel metadata"), std::string::npos);
}

TEST(GpuCompileCheckUsage, AnUnknownArchitectureNamesTheKnownOnes) {
  try {
    compile_check_targets("sm_90,sm_75");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'sm_75'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sm_80 sm_90"), std::string::npos) << e.what();
  }
}

TEST_F(GpuCompileCheck, EveryKernelOfASoftmaxCompilesForGfx942AndGfx1100WithoutScratch) {
  std::vector<CompileCheckTarget> ts;
  try {
    ts = compile_check_targets("gfx942,gfx1100");
    ts[0].make_compiler();
  } catch (const std::runtime_error& e) {
    GTEST_SKIP() << e.what();
  }
  if (!ts[0].resource_problems) GTEST_SKIP() << "llvm-readelf is not found";
  check_gpu_compiles(schedule_of(softmax_graph()), ts);
  for (const CompileCheckTarget& t : ts) {
    EXPECT_GE(t.kernels, 1) << t.arch;
    EXPECT_EQ(t.compiled, t.kernels) << t.arch;
  }
}

// A real code object that keeps an array in scratch memory, read by llvm-readelf: the check sees it.
TEST_F(GpuCompileCheck, LlvmReadelfShowsAKernelUsingScratch) {
  std::vector<CompileCheckTarget> ts;
  std::unique_ptr<Compiler> clang;
  try {
    ts = compile_check_targets("gfx942");
    clang = ts[0].make_compiler();
  } catch (const std::runtime_error& e) {
    GTEST_SKIP() << e.what();
  }
  if (!ts[0].resource_problems) GTEST_SKIP() << "llvm-readelf is not found";
  std::string bin = clang->compile("extern \"C\" __attribute__((global)) void on_stack(float* a, int i) {\n"
                                   "  float t[256];\n"
                                   "  for (int j = 0; j < 256; j++) t[j] = a[j] * j;\n"
                                   "  a[0] = t[i];\n"
                                   "}\n",
                                   "on_stack");
  std::string problems = ts[0].resource_problems(bin, "");
  EXPECT_NE(problems.find("bytes of scratch (private segment)"), std::string::npos) << problems;
}
