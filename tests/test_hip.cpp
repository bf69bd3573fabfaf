// The HIP device without an AMD GPU: the HIP dialect's kernels compiled by clang to code objects for
// gfx942 (MI300) and gfx1100 (RDNA3). What needs clang-19 skips, saying so, where it is not found.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "compiler/render_gpu.h"
#include "runtime/hip_device.h"
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
