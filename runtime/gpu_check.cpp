#include "runtime/gpu_check.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "compiler/render_gpu.h"
#include "runtime/cuda_device.h"
#include "runtime/disk_cache.h"
#include "runtime/hip_device.h"

namespace tiny::runtime {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kSharedLimit = 48 * 1024; // static __shared__ / LDS per work-group the lowering may use

// `env`'s value when set (empty: none), else the first of `names` on PATH; "" when none is found.
std::string find_tool(const char* env, std::initializer_list<const char*> names) {
  if (const char* v = std::getenv(env)) return v;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::vector<std::string> list;
  for (std::string d; std::getline(dirs, d, ':');)
    list.push_back(d);
  for (const char* n : names)
    for (const std::string& d : list)
      if (!d.empty() && access((fs::path(d) / n).c_str(), X_OK) == 0) return (fs::path(d) / n).string();
  return "";
}

// The command's standard output and error.
std::string run(const std::string& command) {
  std::string out;
  FILE* f = popen((command + " 2>&1").c_str(), "r");
  if (!f) throw std::runtime_error("tiny: cannot run " + command);
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f))
    out += buf;
  pclose(f);
  return out;
}

// The dialect and limits of the GPUs checked: 1024 threads per block, 48 KiB of static shared memory,
// CUDA's grid (HIP's is at least as large).
Target check_target(Dialect d) {
  Target t;
  t.dialect = d;
  t.max_local = 1024;
  t.local_mem = kSharedLimit;
  t.max_groups = {2147483647, 65535, 65535};
  t.fp64 = true;
  return t;
}

CompileCheckTarget cuda_check(int sm) {
  CompileCheckTarget c;
  c.arch = "sm_" + std::to_string(sm);
  c.target = check_target(Dialect::CUDA);
  c.make_compiler = [sm] { return nvrtc_compiler(sm); };
  c.tool = find_tool("TINY_CUOBJDUMP", {"cuobjdump"});
  if (!c.tool.empty())
    c.resource_problems = [tool = c.tool](const std::string& bin, const std::string& src) {
      return cubin_usage_problems(run(tool + " -res-usage " + bin), cuda_allowed_stack(src));
    };
  return c;
}

CompileCheckTarget hip_check(const std::string& gfx) {
  CompileCheckTarget c;
  c.arch = gfx;
  c.target = check_target(Dialect::HIP);
  c.make_compiler = [gfx] { return hip_compiler(gfx); };
  c.tool = find_tool("TINY_LLVM_READELF", {"llvm-readelf-19", "llvm-readelf"});
  if (!c.tool.empty())
    c.resource_problems = [tool = c.tool](const std::string& bin, const std::string&) {
      return code_object_usage_problems(run(tool + " --notes " + bin));
    };
  return c;
}

// Where a failing kernel's source is kept for the error message.
fs::path write_source(const CompileCheckTarget& t, const std::string& src, const std::string& name) {
  fs::path at = cache_dir() / "gpu_check" /
                (name + "_" + t.arch + "_" + content_hash(src) + (t.target.dialect == Dialect::HIP ? ".hip" : ".cu"));
  fs::create_directories(at.parent_path());
  std::ofstream(at) << src;
  return at;
}

// Checks one architecture's kernels; the first failure's message, or "".
std::string check_arch(CompileCheckTarget& t, const std::vector<Kernel>& kernels) {
  std::string name;
  try {
    for (const Kernel& k : kernels) {
      name = k.name;
      std::string src = render_gpu(k, k.name, t.target);
      if (!t.seen.insert(k.name + "\n" + src).second) continue;
      t.kernels++;
      if (!t.compiler) t.compiler = t.make_compiler();
      fs::path marker =
          cache_dir() / "gpu_check" / (content_hash(t.compiler->key() + "\n" + t.tool + "\n" + src) + ".ok");
      if (fs::exists(marker)) {
        t.cached++;
        continue;
      }
      std::string binary;
      try {
        binary = t.compiler->compile(src, k.name);
      } catch (const std::runtime_error& e) {
        return "tiny: GPU compile check: kernel " + k.name + " does not compile for " + t.arch + " (source at " +
               write_source(t, src, k.name).string() + "): " + e.what();
      }
      t.compiled++;
      if (t.resource_problems)
        if (std::string p = t.resource_problems(binary, src); !p.empty())
          return "tiny: GPU compile check: kernel " + k.name + " for " + t.arch + " (source at " +
                 write_source(t, src, k.name).string() + ", binary " + binary + "): " + p;
      fs::create_directories(marker.parent_path());
      std::ofstream(marker) << t.arch << " " << k.name << "\n";
    }
  } catch (const std::runtime_error& e) { // rendering, or making the compiler
    return "tiny: GPU compile check for " + t.arch + (name.empty() ? "" : " at kernel " + name) + ": " + e.what();
  }
  return "";
}

struct ProcessCheck {
  std::mutex mu;
  std::vector<CompileCheckTarget> targets;
};

ProcessCheck* process_check() {
  static ProcessCheck* check = [] {
    const char* spec = std::getenv("TINY_GPU_COMPILE_CHECK");
    if (!spec || !*spec || std::string(spec) == "0") return static_cast<ProcessCheck*>(nullptr);
    auto* c = new ProcessCheck(); // never destroyed: the report at exit reads it
    c->targets = compile_check_targets(spec);
    std::atexit([] {
      std::string line;
      for (const CompileCheckTarget& t : process_check()->targets)
        line += "  " + t.arch + " " + std::to_string(t.kernels) + " kernels (" + std::to_string(t.compiled) +
                " compiled, " + std::to_string(t.cached) + " checked before)";
      std::fprintf(stderr, "tiny: GPU compile check:%s\n", line.c_str());
    });
    return c;
  }();
  return check;
}

} // namespace

std::vector<CompileCheckTarget> compile_check_targets(const std::string& spec) {
  const std::vector<std::string> all = {"sm_80", "sm_90", "gfx942", "gfx1100"};
  std::vector<std::string> names;
  if (spec == "1" || spec == "all")
    names = all;
  else {
    std::stringstream s(spec);
    for (std::string n; std::getline(s, n, ',');)
      names.push_back(n);
  }
  std::vector<CompileCheckTarget> out;
  for (const std::string& n : names) {
    if (n == "sm_80" || n == "sm_90")
      out.push_back(cuda_check(std::stoi(n.substr(3))));
    else if (n == "gfx942" || n == "gfx1100")
      out.push_back(hip_check(n));
    else {
      std::string known;
      for (const std::string& a : all)
        known += " " + a;
      throw std::runtime_error("tiny: TINY_GPU_COMPILE_CHECK names '" + n +
                               "'; it takes 1 (all) or a list of:" + known);
    }
  }
  return out;
}

void check_gpu_compiles(const std::function<Schedule(const Target&)>& schedule_for,
                        std::span<CompileCheckTarget> targets) {
  // scheduled here, one target after another; compiled on a thread per target (a compiler is used by
  // one thread at a time)
  std::vector<std::vector<Kernel>> kernels;
  for (CompileCheckTarget& t : targets) {
    try {
      kernels.push_back(schedule_for(t.target).kernels);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("tiny: GPU compile check: scheduling for " + t.arch + " failed: " + e.what());
    }
  }
  std::vector<std::string> errors(targets.size());
  std::vector<std::thread> threads;
  for (size_t i = 1; i < targets.size(); i++)
    threads.emplace_back([&, i] { errors[i] = check_arch(targets[i], kernels[i]); });
  if (!targets.empty()) errors[0] = check_arch(targets[0], kernels[0]);
  for (std::thread& th : threads)
    th.join();
  for (const std::string& e : errors)
    if (!e.empty()) throw std::runtime_error(e);
}

bool gpu_compile_check_on() { return process_check() != nullptr; }

void check_gpu_compiles(const std::function<Schedule(const Target&)>& schedule_for) {
  ProcessCheck* c = process_check();
  if (!c) return;
  std::lock_guard lock(c->mu);
  check_gpu_compiles(schedule_for, c->targets);
}

int64_t cuda_allowed_stack(const std::string& src) {
  static const std::regex trig(R"(\b(sin|cos|tan)f?\()");
  return std::regex_search(src, trig) ? 64 : 0;
}

std::string cubin_usage_problems(const std::string& res_usage, int64_t allowed_stack) {
  static const std::regex function(R"(Function ([^\s:]+):\s*\n[^\n]*STACK:(\d+) SHARED:(\d+) LOCAL:(\d+))");
  std::string problems;
  int found = 0;
  for (std::sregex_iterator m(res_usage.begin(), res_usage.end(), function), end; m != end; ++m, ++found) {
    std::string fn = (*m)[1];
    if (std::stoll((*m)[2]) > allowed_stack)
      problems +=
          fn + " uses " + std::string((*m)[2]) + " bytes of stack (" + std::to_string(allowed_stack) + " allowed); ";
    if (std::stoll((*m)[4]) > 0) problems += fn + " spills " + std::string((*m)[4]) + " bytes to local memory; ";
    if (std::stoll((*m)[3]) > kSharedLimit)
      problems += fn + " uses " + std::string((*m)[3]) + " bytes of shared memory (over 48 KiB); ";
  }
  if (!found) return "cuobjdump -res-usage printed no resource usage:\n" + res_usage;
  return problems.empty() ? "" : problems + "cuobjdump -res-usage:\n" + res_usage;
}

std::string code_object_usage_problems(const std::string& notes) {
  static const std::regex field(R"(\.(private_segment_fixed_size|group_segment_fixed_size|sgpr_spill_count|)"
                                R"(vgpr_spill_count|uses_dynamic_stack):\s+(\S+))");
  std::string problems;
  int found = 0;
  for (std::sregex_iterator m(notes.begin(), notes.end(), field), end; m != end; ++m) {
    std::string key = (*m)[1], v = (*m)[2];
    found++;
    if (key == "uses_dynamic_stack" && v != "false")
      problems += "a dynamic stack; ";
    else if (key == "private_segment_fixed_size" && v != "0")
      problems += v + " bytes of scratch (private segment); ";
    else if ((key == "sgpr_spill_count" || key == "vgpr_spill_count") && v != "0")
      problems += v + " " + key.substr(0, 4) + " spills; ";
    else if (key == "group_segment_fixed_size" && std::stoll(v) > kSharedLimit)
      problems += v + " bytes of LDS (over 48 KiB); ";
  }
  if (!found) return "llvm-readelf --notes printed no AMDGPU kernel metadata:\n" + notes;
  return problems.empty() ? "" : problems + "llvm-readelf --notes:\n" + notes;
}

} // namespace tiny::runtime
