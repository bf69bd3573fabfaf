#pragma once
// What the CUDA and HIP device tests share around the fake driver (tests/fake_cuda): its control
// functions, reached in the library the device loaded, and a compiler whose "binary" is the source.

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "runtime/device.h"

namespace tiny::fake_gpu {

// The fake driver's control function `name` in the library at `path` (dlopen hands back the handle of
// the library the device already loaded).
template <class F> F* fake_driver_function(const char* path, const char* name) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) throw std::runtime_error(std::string("the fake GPU driver cannot be loaded: ") + dlerror());
  return reinterpret_cast<F*>(dlsym(lib, name));
}

// A compiler whose "binary" is the source, written where the device's compiler would write its binary
// (binary_path: cuda_binary_path, hip_binary_path): the fake driver loads text modules and finds kernels
// by name. Each object has a key of its own, so no binary of an earlier run is found on disk.
class SourceAsBinaryCompiler : public runtime::Compiler {
public:
  using BinaryPath = std::filesystem::path (*)(const std::string& compiler_key, const std::string& src);
  explicit SourceAsBinaryCompiler(BinaryPath binary_path) : binary_path_(binary_path) {}
  std::string key() const override { return key_; }
  std::string compile(const std::string& src, const std::string&) override {
    compiles++;
    auto path = binary_path_(key(), src);
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << src;
    return path.string();
  }
  int compiles = 0;

private:
  BinaryPath binary_path_;
  // (the process id alone came round again in a later run, whose test then found the earlier run's binary)
  std::string key_ = "fake source-as-binary " + std::to_string(getpid()) + "-" +
                     std::to_string(std::chrono::system_clock::now().time_since_epoch().count()) + "-" +
                     std::to_string(next_id()++);
  static int& next_id() {
    static int n = 0;
    return n;
  }
};

} // namespace tiny::fake_gpu
