// The CPU device: C kernels compiled by the system's clang (a subprocess), cached in memory and on
// disk, loaded with dlopen and run on the thread pool.

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "compiler/render_c.h"
#include "runtime/debug.h"
#include "runtime/device.h"
#include "runtime/disk_cache.h"
#include "runtime/lazy_buffer.h"
#include "runtime/program_cache.h"
#include "runtime/queue.h"
#include "runtime/thread_pool.h"

namespace tiny::runtime {

namespace {

// Below this much work (Launch::work: outputs times the terms each sums) a kernel runs on the calling thread alone.
// ShuffleNet v2 x0.5's step runs ~1,450 kernels, most of a few microseconds: on two threads, its sync 12.2 -> 11.1-11.4
// ms (8192; 4096: 11.5-12.2, 16384: 12.2, 131072: 13.3, the larger kernels then one thread's).
constexpr int64_t kSerialWork = 8192;

namespace fs = std::filesystem;

std::atomic<bool> queues_on{false};

// Host memory, 64-byte aligned for vector loads; the base class caches freed blocks. A block of 2 MiB or more is
// mapped on its own and advised to use transparent huge pages (THP's "madvise" mode, a common default, gives them to
// no other memory): a kernel streaming through it misses the TLB once per 2 MiB instead of once per 4 KiB page, and
// the hardware prefetchers, which stop at a page's end, keep going (a sum of 16M float32, one Zen 4 core: 3.3-3.8 ->
// 2.0-2.1 ms). Where THP is off the advice is ignored and the block is plain memory.
// Each such block starts a different number of 4 KiB pages (its color, 0-31 in turn) past a 2 MiB boundary: within a
// huge page the physical address is the virtual one, so blocks that all started on a boundary put the elements a
// kernel reads and writes together (index i of each operand) in one L2 set (bits 6-16 of the address), and a kernel
// of several such streams evicted its own prefetched lines. Adam's one kernel over a 2.36M-float parameter (four
// streams read, three written, in place), two threads of a Sapphire Rapids-class core: 2.4-2.6 ms aligned, 0.89
// colored (a C harness over plain 4 KiB pages: 0.92-0.96).
// With queues on (set_cpu_queues), the host reads a block once the work queued that writes it has run, and writes one
// at once where nothing queued uses it, else behind that work (a block freed by a buffer whose kernels are still
// queued may be that buffer's); a block goes back to the system only when nothing queued can use it.
class CpuAllocator : public Allocator {
public:
  explicit CpuAllocator(Queue& queue) : queue_(queue) {}
  void copy_in(void* dst, const void* src, size_t n) override {
    if (!queues_on.load(std::memory_order_relaxed) || !queue_.uses(dst)) {
      std::memcpy(dst, src, n);
      return;
    }
    std::shared_ptr<char[]> staged(new char[n]); // src may change or die once this returns
    std::memcpy(staged.get(), src, n);
    void* const block[] = {dst};
    queue_.push([dst, staged, n] { std::memcpy(dst, staged.get(), n); }, block);
  }
  void copy_out(void* dst, const void* src, size_t offset, size_t n) override {
    queue_.wait_for_writes(src);
    std::memcpy(dst, static_cast<const char*>(src) + offset, n);
  }

protected:
  // nbytes: a multiple of 64, and of the 4 KiB page from 4 KiB on (Allocator's buckets)
  void* system_alloc(size_t nbytes) override {
    if (nbytes < kHugePage) return std::aligned_alloc(64, nbytes);
    // the block `color` pages past the first 2 MiB boundary of a mapping long enough; the rest unmapped again
    const size_t color = kColorStep * (next_color_++ % kColors), used = color + nbytes, span = used + kHugePage;
    void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    auto begin = reinterpret_cast<uintptr_t>(raw), start = (begin + kHugePage - 1) & ~(kHugePage - 1);
    if (start > begin) munmap(raw, start - begin);
    if (size_t tail = begin + span - (start + used)) munmap(reinterpret_cast<void*>(start + used), tail);
    madvise(reinterpret_cast<void*>(start), used, MADV_HUGEPAGE);
    return reinterpret_cast<void*>(start + color);
  }
  void system_free(void* ptr, size_t nbytes) override {
    queue_.wait(); // (the queue's tasks never take the allocator's lock, held here)
    if (nbytes < kHugePage) {
      std::free(ptr);
      return;
    }
    const size_t color = reinterpret_cast<uintptr_t>(ptr) & (kHugePage - 1);
    munmap(static_cast<char*>(ptr) - color, color + nbytes);
  }

private:
  static constexpr size_t kHugePage = size_t{2} << 20, kColorStep = 4096, kColors = 32;
  size_t next_color_ = 0; // (system_alloc runs under the base class's lock)
  Queue& queue_;
};

// Whether `name` is an executable file (not a directory) in a directory of PATH.
bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::error_code ec;
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (fs::path at = fs::path(dir) / name;
        !dir.empty() && fs::is_regular_file(at, ec) && access(at.c_str(), X_OK) == 0)
      return true;
  return false;
}

class ClangCompiler : public Compiler {
public:
  // TINY_CFLAGS: more flags, after tiny's (part of the cache key, as the compiler and flags are).
  ClangCompiler()
      : cc_(cpu_c_compiler()),
        flags_("-O2 -march=native -mprefer-vector-width=512 -fPIC -shared -fwrapv -fno-math-errno "
               "-ffp-contract=fast -fno-strict-aliasing") {
    const bool clang = cc_.find("clang") != std::string::npos;
#if defined(__x86_64__)
    // clang's x86 backend turns every conditional move with a memory operand inside a loop into a branch, which
    // data mispredicts: a max pool's gradient keeps a window's gradient where the index says, as its bits
    // masked (render_c's where(c, x, 0)); with its load folded into a cmov it branched (the demo's 14 x 14 pool
    // gradient, one thread on a Zen 3: 4.7 -> 0.9 ms; the step's other kernels unchanged).
    if (clang) flags_ += " -mllvm -x86-cmov-converter-force-mem-operand=false";
#endif
    // LLVM's machine scheduler, before register allocation, hoists the loads of a fully unrolled register block
    // (a convolution's 14 x 16 broadcasts) far ahead of their multiplies, and the registers they then hold spill:
    // the demo's 28 x 28 weight gradient, one Zen 4 thread, 20.8-30.2 ms with it, 16.6-16.8 without (clang-14
    // and clang-19 alike); the order render_c writes (each load beside its use) is kept.
    if (clang) flags_ += " -mllvm -enable-misched=false";
    if (const char* more = std::getenv("TINY_CFLAGS")) flags_ += std::string(" ") + more;
  }
  std::string key() const override { return cc_ + " " + flags_; }
  std::string compile(const std::string& src, const std::string& name) override {
    return compile_library(src, "kernel " + name, content_hash(key() + "\n" + src)).string();
  }
  fs::path so_path(const std::string& src) const { return cache_dir() / (content_hash(key() + "\n" + src) + ".so"); }

  // A kernel compiled into a library with others: where and by which names it is found.
  struct Entry {
    fs::path library;
    std::string symbol, errors;
  };
  // Where compile_bundle() leaves a kernel's entry (next to where compile() would put its library).
  fs::path entry_path(const std::string& src) const {
    return cache_dir() / (content_hash(key() + "\n" + src) + ".entry");
  }
  static std::optional<Entry> read_entry(const fs::path& at) {
    std::ifstream in(at);
    Entry e;
    std::string library;
    if (!std::getline(in, library) || !std::getline(in, e.symbol) || !std::getline(in, e.errors)) return std::nullopt;
    e.library = at.parent_path() / library;
    return e;
  }
  // The kernels (source, function name) as one library, and an entry for each (written after the
  // library is in place, so a reader never finds an entry without its library).
  void compile_bundle(const std::vector<std::pair<std::string, std::string>>& kernels) {
    std::vector<std::string> sources, names;
    for (const auto& [src, fn] : kernels) {
      sources.push_back(src);
      names.push_back(fn);
    }
    std::string src = render_c_bundle(sources, names);
    fs::path library = compile_library(src, "a library of " + std::to_string(kernels.size()) + " kernels",
                                       content_hash(key() + "\n" + src));
    std::string mine = "." + std::to_string(getpid());
    for (size_t i = 0; i < kernels.size(); i++) {
      fs::path at = entry_path(kernels[i].first), tmp = at.string() + mine;
      std::ofstream(tmp) << library.filename().string() << "\n"
                         << names[i] + bundle_suffix(i) << "\n"
                         << "tiny_errors" + bundle_suffix(i) << "\n";
      fs::rename(tmp, at);
    }
  }

private:
  fs::path compile_library(const std::string& src, const std::string& what, const std::string& base) {
    fs::path dir = cache_dir();
    fs::create_directories(dir);
    // Every file this process writes has its own name until renamed into place: processes sharing the
    // cache (the test runner's parallel jobs) compile the same kernel at once, and a source file
    // truncated by another writer compiled into a library without the kernel.
    std::string mine = "." + std::to_string(getpid());
    fs::path so = dir / (base + ".so"), c = dir / (base + ".c");
    fs::path c_tmp = dir / (base + mine + ".c"), so_tmp = dir / (base + ".so" + mine),
             log = dir / (base + mine + ".log");
    std::ofstream(c_tmp) << src;
    std::string cmd =
        cc_ + " " + flags_ + " -o '" + so_tmp.string() + "' '" + c_tmp.string() + "' -lm 2>'" + log.string() + "'";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream in(log);
      std::stringstream msg;
      msg << in.rdbuf();
      throw std::runtime_error("tiny: compiling " + what + " failed (source at " + c_tmp.string() + "):\n" + msg.str());
    }
    fs::rename(c_tmp, c);
    fs::rename(so_tmp, so);
    fs::remove(log);
    return so;
  }

  std::string cc_, flags_;
};

using KernelFn = void (*)(void* const*, const int64_t*, const double*, int64_t, int64_t);

std::atomic<int64_t> live_programs{0};

class CpuProgram : public Program, public std::enable_shared_from_this<CpuProgram> {
public:
  // The kernel `symbol` of the library `so`, whose zero-division flag is `errors` (a library of
  // several kernels has one per kernel), launched on `queue` while queues are on.
  CpuProgram(Queue& queue, const std::string& so, const std::string& symbol, const std::string& errors = "tiny_errors")
      : queue_(queue) {
    handle_ = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw std::runtime_error(std::string("tiny: cannot load kernel: ") + dlerror());
    fn_ = reinterpret_cast<KernelFn>(dlsym(handle_, symbol.c_str()));
    if (!fn_) {
      dlclose(handle_);
      throw std::runtime_error("tiny: kernel " + symbol + " missing from " + so);
    }
    errors_ = static_cast<int*>(dlsym(handle_, errors.c_str()));
    live_programs++;
  }
  ~CpuProgram() override {
    dlclose(handle_);
    live_programs--;
  }
  void launch(std::span<void* const> bufs, std::span<const int64_t> ivars, std::span<const double> fvars,
              const Launch& launch) override {
    const int threads = ThreadPool::get().size(); // (torch.set_num_threads on this thread sizes it)
    if (!queues_on.load(std::memory_order_relaxed)) return run(bufs, ivars, fvars, launch, threads);
    // the arguments copied, the program held until the kernel ran
    const auto writes = static_cast<size_t>(launch.outputs);
    queue_.push([program = shared_from_this(), b = std::vector<void*>(bufs.begin(), bufs.end()),
                 iv = std::vector<int64_t>(ivars.begin(), ivars.end()),
                 fv = std::vector<double>(fvars.begin(), fvars.end()), launch,
                 threads] { program->run(b, iv, fv, launch, threads); },
                bufs.first(writes), bufs.subspan(writes));
  }

private:
  void run(std::span<void* const> bufs, std::span<const int64_t> ivars, std::span<const double> fvars,
           const Launch& launch, int threads) {
    int64_t global = launch.global[0];
    KernelFn fn = fn_;
    void* const* b = bufs.data();
    const int64_t* iv = ivars.data();
    const double* fv = fvars.data();
    // A kernel of little work runs on this thread alone: waking the pool and waiting for it cost more than
    // sharing such a kernel saves (see kSerialWork).
    if (launch.work > 0 && launch.work < kSerialWork)
      fn(b, iv, fv, 0, global);
    else
      ThreadPool::get().parallel_for(
          global, [&](int64_t begin, int64_t end) { fn(b, iv, fv, begin, end); }, threads);
    check_errors();
  }
  void check_errors() {
    if (errors_ && __atomic_exchange_n(errors_, 0, __ATOMIC_RELAXED)) report_zero_division();
  }
  Queue& queue_;
  int* errors_ = nullptr; // the kernel library's tiny_errors flag
  void* handle_ = nullptr;
  KernelFn fn_ = nullptr;
};

// A marker of a queue that has run its work when the marker is recorded: the host clock then.
class HostEvent : public Event {
public:
  HostEvent(const Device& device, bool timing)
      : device_(device), timing_(timing), at_(std::chrono::steady_clock::now()) {}
  bool query() override { return true; }
  void synchronize() override {}
  double elapsed_ms(Event& end) override {
    auto* e = dynamic_cast<HostEvent*>(&end);
    if (!e || &e->device_ != &device_)
      throw std::runtime_error("tiny: elapsed time between events of two devices (" + device_.name() + " and another)");
    if (!timing_ || !e->timing_) throw std::runtime_error("tiny: elapsed time of an event recorded without timing");
    return std::chrono::duration<double, std::milli>(e->at_ - at_).count();
  }

private:
  const Device& device_;
  bool timing_;
  std::chrono::steady_clock::time_point at_;
};

// Whether kernels may use AMX-BF16 tiles: the CPU has them (CPUID leaf 7: EDX bit 24 AMX-TILE, bit 22
// AMX-BF16) and Linux grants this process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA, 18: once per process, for every thread; without it a tile instruction faults).
// TINY_AMX=0 keeps them off.
bool amx_tiles() {
#if defined(__x86_64__) && defined(__linux__)
  if (const char* v = std::getenv("TINY_AMX"); v && std::string(v) == "0") return false;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22))) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

#if defined(__x86_64__)
// Seconds per instruction of vdpbf16ps (`pair_dots`) or of vfmadd231ps: 16 independent chains of each (1.0 * 0.5 added
// 2048 times: no denormals, no overflow), in assembly (compiled, the chains went through memory).
__attribute__((target("avx512f"))) double seconds_per_instruction(bool pair_dots) {
  const __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(0.5f);
  constexpr int64_t kSteps = 2048;
  int64_t n = kSteps;
  auto start = std::chrono::steady_clock::now();
  const int dots = pair_dots ? 1 : 0;
  __asm__ volatile(".irp r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15\n vxorps %%xmm\\r, %%xmm\\r, %%xmm\\r\n .endr\n"
                   " test %[dots], %[dots]\n jz 2f\n"
                   "1:\n .irp r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15\n vdpbf16ps %[a], %[b], %%zmm\\r\n .endr\n"
                   " dec %[n]\n jnz 1b\n jmp 3f\n"
                   "2:\n .irp r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15\n vfmadd231ps %[a], %[b], %%zmm\\r\n .endr\n"
                   " dec %[n]\n jnz 2b\n"
                   "3:\n"
                   : [n] "+r"(n)
                   : [a] "v"(a), [b] "v"(b), [dots] "r"(dots)
                   : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
                     "xmm12", "xmm13", "xmm14", "xmm15", "cc");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / (kSteps * 16);
}
#endif

// Whether bfloat16 products step by AVX512_BF16 pair dot products (vdpbf16ps: 32 products an instruction) rather
// than widened float32 multiply-adds (16): the host has the instruction and it costs less than two multiply-adds,
// measured once (a Zen 4 runs it as fast as one; a Sapphire Rapids core without AMX at 3.6-4.1 times one's, where
// the widened path was faster at every bfloat16 shape of bench/matmul.py: 1024^3 x @ w 0.98 -> 1.07x eager's speed,
// the demo's conv2d 0.90 -> 1.00x, its backward 0.96 -> 1.07x). TINY_PAIR_DOTS=1 or 0 decides instead (where the
// host has the instruction).
bool pair_dots_pay() {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx512bf16")) return false;
  if (const char* v = std::getenv("TINY_PAIR_DOTS"); v && *v) return std::string(v) != "0";
  double dot = 1e9, fma = 1e9;
  for (int run = 0; run < 5; run++) { // the best of a few, alternated: the machine is shared
    dot = std::min(dot, seconds_per_instruction(true));
    fma = std::min(fma, seconds_per_instruction(false));
  }
  if (debug_level() >= 1)
    std::fprintf(stderr, "tiny: vdpbf16ps %.3f ns, vfmadd231ps %.3f ns: bfloat16 products by %s\n", dot * 1e9,
                 fma * 1e9, dot < 2 * fma ? "pair dots" : "widened multiply-adds");
  return dot < 2 * fma;
#else
  return false;
#endif
}

// Whether 3 x 3 convolutions may run as Winograd kernels (Target::winograd); TINY_WINOGRAD=0 keeps them off.
bool winograd_kernels() {
#if defined(__x86_64__)
  if (const char* v = std::getenv("TINY_WINOGRAD"); v && std::string(v) == "0") return false;
  return __builtin_cpu_supports("avx512f") != 0;
#else
  return false;
#endif
}

class CpuDevice : public Device {
public:
  CpuDevice() : queue_(*new Queue()), allocator_(queue_) {
    allocator_.set_device_name(name());
    static const bool tiles = amx_tiles();
    target_.amx_bf16 = tiles;
    static const bool pair_dots = pair_dots_pay();
    target_.bf16_pair_dots = pair_dots;
    static const bool winograd = winograd_kernels();
    target_.winograd = winograd;
    target_.threads = ThreadPool::get().size();
    if (long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE); l2 > 0) target_.l2_bytes = l2;
  }
  std::string name() const override { return "CPU (clang)"; }
  int64_t total_memory() const override {
    return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  }
  int compute_units() const override { return ThreadPool::get().size(); }
  std::optional<int64_t> free_memory() const override {
    return static_cast<int64_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  }
  const Target& target() const override { return target_; }
  Allocator& allocator() override { return allocator_; }
  Compiler& compiler() override { return compiler_; }
  std::shared_ptr<Program> program(const std::string& src, const std::string& fn_name) override {
    // A program dropped from the cache unloads when the last schedule holding it is gone.
    return programs_.get(fn_name + "\n" + src, [&] { return load_or_compile(src, fn_name); });
  }
  // The sources neither loaded nor on disk (a schedule's new kernels: the first training step has
  // about a hundred), compiled as one library per core, the cores at once: clang's start, the prelude
  // and the link are paid once per library instead of once per kernel (clang's CPU time per kernel
  // about 3x less). A library that does not compile leaves its kernels to program(), which compiles
  // each alone and reports the one that fails. TINY_COMPILE_LIBRARIES=0 compiles each kernel alone.
  void precompile(const std::vector<std::pair<std::string, std::string>>& sources) override {
    std::vector<std::pair<std::string, std::string>> todo;
    std::set<std::string> seen;
    for (const auto& [src, fn] : sources) {
      std::string so = compiler_.so_path(src).string();
      if (programs_.contains(fn + "\n" + src) || fs::exists(so) || fs::exists(compiler_.entry_path(src)) ||
          !seen.insert(so).second)
        continue;
      todo.emplace_back(src, fn);
    }
    if (todo.size() < 2) return;
    static const bool libraries = [] {
      const char* v = std::getenv("TINY_COMPILE_LIBRARIES");
      return !v || std::string(v) != "0";
    }();
    size_t cores = std::max(1u, std::thread::hardware_concurrency());
    // Each library a job: the largest sources first, each to the library with the least source so far.
    std::vector<std::vector<size_t>> jobs(libraries ? std::min(cores, todo.size()) : todo.size());
    if (libraries) {
      std::vector<size_t> order(todo.size()), size(jobs.size(), 0);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return todo[a].first.size() > todo[b].first.size(); });
      for (size_t i : order) {
        size_t j = static_cast<size_t>(std::min_element(size.begin(), size.end()) - size.begin());
        jobs[j].push_back(i);
        size[j] += todo[i].first.size();
      }
    } else {
      for (size_t i = 0; i < todo.size(); i++)
        jobs[i] = {i};
    }
    std::atomic<size_t> next{0};
    std::vector<char> done(todo.size(), 0);
    auto work = [&] {
      for (size_t j; (j = next++) < jobs.size();) {
        try {
          if (jobs[j].size() == 1) {
            compiler_.compile(todo[jobs[j][0]].first, todo[jobs[j][0]].second);
          } else {
            std::vector<std::pair<std::string, std::string>> kernels;
            for (size_t i : jobs[j])
              kernels.push_back(todo[i]);
            compiler_.compile_bundle(kernels);
          }
          for (size_t i : jobs[j])
            done[i] = 1;
        } catch (const std::runtime_error&) { // program() compiles each again and reports the error
        }
      }
    };
    std::vector<std::thread> threads;
    for (size_t t = 1; t < std::min(cores, jobs.size()); t++)
      threads.emplace_back(work);
    work();
    for (std::thread& t : threads)
      t.join();
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < todo.size(); i++)
      if (done[i]) {
        stats().compiles++;
        precompiled_.insert(compiler_.so_path(todo[i].first).string());
      }
  }
  void synchronize() override { queue_.wait(); }
  void wait_for_writes(const void* block) override { queue_.wait_for_writes(block); }

private:
  // A program not loaded yet: from the disk cache (its own library, or its entry in a library of
  // several), else compiled (a damaged cache entry, an older tiny's race, is compiled again).
  std::shared_ptr<Program> load_or_compile(const std::string& src, const std::string& fn_name) {
    fs::path so = compiler_.so_path(src), entry_at = compiler_.entry_path(src);
    std::optional<ClangCompiler::Entry> entry;
    if (!fs::exists(so)) entry = ClangCompiler::read_entry(entry_at);
    if (fs::exists(so) || entry) {
      bool counted = false; // precompile() counted it as compiled
      {
        std::lock_guard lock(mu_);
        counted = precompiled_.erase(so.string()) != 0;
      }
      if (!counted) {
        stats().cache_hits++;
        stats().disk_hits++;
      }
      try {
        if (entry) return std::make_shared<CpuProgram>(queue_, entry->library.string(), entry->symbol, entry->errors);
        return std::make_shared<CpuProgram>(queue_, so.string(), fn_name);
      } catch (const std::runtime_error&) {
        fs::remove(entry ? entry_at : so);
      }
    }
    so = compiler_.compile(src, fn_name);
    stats().compiles++;
    return std::make_shared<CpuProgram>(queue_, so.string(), fn_name);
  }

  Target target_; // C
  Queue& queue_;  // never destroyed: its thread runs until the process ends
  CpuAllocator allocator_;
  ClangCompiler compiler_;
  ProgramCache programs_;
  std::mutex mu_;                     // guards precompiled_
  std::set<std::string> precompiled_; // kernels (by so_path) precompile() compiled, not yet loaded
};

} // namespace

// The default marker: the queue is drained first (the CPU device's, see Queue), so the host clock is when it
// passed the marker.
std::unique_ptr<Event> Device::record_event(bool timing) {
  synchronize();
  return std::make_unique<HostEvent>(*this, timing);
}

// The newest clang installed (clang-19 builds the demo's first-step kernels in 1.0-2.2 s a library where
// clang-14, Debian 12's `clang`, takes 3.5-3.7 s, and its kernels run as fast or faster), else plain clang,
// else the system's C compiler.
std::string cpu_c_compiler() {
  if (const char* cc = std::getenv("TINY_CC")) return cc;
  for (int version = 30; version >= 14; version--)
    if (std::string c = "clang-" + std::to_string(version); on_path(c)) return c;
  for (const char* c : {"clang", "cc", "gcc"})
    if (on_path(c)) return c;
  throw std::runtime_error("tiny: no C compiler found (install clang, or set TINY_CC)");
}

int cpu_device_count() {
  static const int count = static_cast<int>(env_limit("TINY_CPU_DEVICES", 1));
  return count;
}

Device& cpu_device(int index) {
  // never destroyed (the list neither, so the devices stay reachable): buffers may be freed during
  // static teardown
  static const std::vector<CpuDevice*>& devices = *[] {
    auto* all = new std::vector<CpuDevice*>();
    for (int i = 0; i < cpu_device_count(); ++i)
      all->push_back(new CpuDevice());
    return all;
  }();
  if (index < 0 || index >= cpu_device_count())
    throw std::out_of_range("tiny: CPU device index " + std::to_string(index) + " out of range (" +
                            std::to_string(cpu_device_count()) + " CPU devices, TINY_CPU_DEVICES)");
  return *devices[static_cast<size_t>(index)];
}

void set_cpu_queues(bool on) {
  if (!on) // what the queues hold runs first
    for (int i = 0; i < cpu_device_count(); i++)
      cpu_device(i).synchronize();
  queues_on.store(on);
}

int64_t loaded_programs() { return live_programs.load(); }

int64_t env_limit(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  int64_t n = v ? std::atoll(v) : 0;
  return n > 0 ? n : fallback;
}

} // namespace tiny::runtime
