// The fake GPU driver of fake_cuda.h: the calls the CUDA device resolves (cuda.h's names and signatures)
// and those the HIP device resolves (hip_runtime_api.h's), one implementation over host memory.

#include "tests/fake_cuda/fake_cuda.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

using CUresult = int;
constexpr CUresult CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2,
                   CUDA_ERROR_NOT_INITIALIZED = 3, CUDA_ERROR_INVALID_CONTEXT = 201, CUDA_ERROR_INVALID_IMAGE = 200,
                   CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101, CUDA_ERROR_NOT_FOUND = 500,
                   CUDA_ERROR_LAUNCH_FAILED = 719, CUDA_ERROR_INVALID_HANDLE = 400, CUDA_ERROR_NOT_READY = 600,
                   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900, CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910;

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
  const char* hip_name; // HIP's codes are CUDA's for these
};
constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error", "hipSuccess"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument", "hipErrorInvalidValue"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "hipErrorOutOfMemory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error", "hipErrorNotInitialized"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected", "hipErrorNoDevice"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal", "hipErrorInvalidDevice"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid", "hipErrorInvalidImage"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context", "hipErrorInvalidContext"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found", "hipErrorNotFound"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure", "hipErrorLaunchFailure"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle", "hipErrorInvalidHandle"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready", "hipErrorNotReady"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing", "hipErrorStreamCaptureUnsupported"},
    {CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
     "the graph update was not performed because it included changes which violated constraints specific to "
     "instantiated graph update",
     "hipErrorGraphExecUpdateFailure"},
};

// Work a stream runs, and the memory it reads or writes (device blocks and pinned host allocations, by
// their base addresses): freeing memory that queued work still uses is a misuse.
struct Work {
  std::function<void()> run;
  std::vector<uint64_t> touches;
};

// A captured graph, or an instantiated one: its nodes in capture order, each named ("launch NAME",
// "htod 64", ...) for cuGraphExecUpdate's check that the topology is the same.
struct Graph {
  std::vector<std::pair<std::string, Work>> nodes;
};

struct Stream {
  int device = 0;
  std::deque<Work> work;
  Graph* capture = nullptr; // capturing: work goes into this graph instead
};

// An event: done once the stream ran its record; `at` is the fake clock then (a launch takes 1 ms).
struct Event {
  unsigned flags = 0; // 2: CU_EVENT_DISABLE_TIMING, hipEventDisableTiming
  bool done = true;
  double at = 0;
  Stream* stream = nullptr;
};

struct Function {
  std::string name;
  int device = 0;
};

struct Module {
  int device = 0;
  std::string image;                                // its bytes: an ELF's up to its section headers, text up to the NUL
  std::vector<std::unique_ptr<Function>> functions; // handed out by cuModuleGetFunction, freed with it
};

struct State {
  std::recursive_mutex mu;
  bool initialized = false;
  // a process that loads the fake as its driver (torch_tests) sets the count with TINY_FAKE_GPU_DEVICES
  int devices = std::getenv("TINY_FAKE_GPU_DEVICES") ? std::atoi(std::getenv("TINY_FAKE_GPU_DEVICES")) : 1;
  size_t memory = size_t{1} << 30;
  std::map<std::string, int> fail_next, calls;
  std::map<uint64_t, std::vector<unsigned char>> blocks; // device address -> contents
  std::map<uint64_t, int> block_devices;                 // device address -> the device it is on
  uint64_t next_address = 0x100000000;
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<FakeCudaLaunch> launches;
  std::map<std::string, FakeCudaKernel> kernels;
  int misuses = 0;
  std::string log;
  std::array<int, 16> contexts{};                        // the primary contexts' identities: &contexts[device]
  std::map<uint64_t, std::vector<unsigned char>> pinned; // host address -> page-locked host memory
  std::vector<std::unique_ptr<Event>> events;            // never deleted: a queued record may name one destroyed
  std::vector<std::unique_ptr<Graph>> graphs;            // captured graphs and instantiated ones, alike
  double clock_ms = 0;
  int graph_launches = 0;
};

State& state() {
  static State s;
  return s;
}

std::unique_lock<std::recursive_mutex> locked() { return std::unique_lock(state().mu); }

thread_local std::vector<void*> current_contexts;
thread_local int hip_current_device = 0;

// The device calls act on: CUDA's current context's, HIP's thread's device.
int cuda_current_device() {
  if (current_contexts.empty()) return 0;
  return static_cast<int>(static_cast<int*>(current_contexts.back()) - state().contexts.data());
}

// Work on a stream (or a function) of another device than the current one is a misuse the device must
// not make (its guard makes its device current around each call).
void check_device(int used, int current) {
  if (used != current) state().misuses++;
}

// Counts the call; a failure asked for is returned instead of doing it.
CUresult enter(const char* call, bool needs_context = true) {
  State& s = state();
  s.calls[call]++;
  if (auto it = s.fail_next.find(call); it != s.fail_next.end()) {
    CUresult r = it->second;
    s.fail_next.erase(it);
    return r;
  }
  if (needs_context && current_contexts.empty()) s.misuses++;
  return CUDA_SUCCESS;
}

unsigned char* host(uint64_t address) {
  State& s = state();
  auto it = s.blocks.upper_bound(address);
  if (it == s.blocks.begin()) return nullptr;
  --it;
  if (address >= it->first + it->second.size()) return nullptr;
  return it->second.data() + (address - it->first);
}

// Bytes allocated on `device` (-1: on every device).
// The base address of the device block or pinned allocation holding `address`, or 0.
uint64_t base_of(uint64_t address) {
  for (auto* m : {&state().blocks, &state().pinned}) {
    auto it = m->upper_bound(address);
    if (it == m->begin()) continue;
    --it;
    if (address < it->first + it->second.size()) return it->first;
  }
  return 0;
}

// Whether queued stream work still uses the memory at `base`.
bool in_use(uint64_t base) {
  for (const auto& st : state().streams)
    for (const Work& w : st->work)
      for (uint64_t t : w.touches)
        if (t == base) return true;
  return false;
}

void enqueue(Stream* stream, const std::string& what, Work w) {
  if (stream->capture)
    stream->capture->nodes.emplace_back(what, std::move(w));
  else
    stream->work.push_back(std::move(w));
}

void run_one(Stream* stream) {
  Work w = std::move(stream->work.front());
  stream->work.pop_front();
  w.run();
}

size_t live_bytes(int device = -1) {
  size_t n = 0;
  for (const auto& [a, b] : state().blocks)
    if (device < 0 || state().block_devices[a] == device) n += b.size();
  return n;
}

void run_streams() {
  for (auto& st : state().streams)
    while (!st->work.empty())
      run_one(st.get());
}

size_t elf_size(const char* image) {
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0;
  std::memcpy(&shoff, image + 0x28, 8);
  std::memcpy(&shentsize, image + 0x3a, 2);
  std::memcpy(&shnum, image + 0x3c, 2);
  return shoff + size_t{shentsize} * shnum;
}

// ---- one implementation of each call, on `device` (the current one) ----

CUresult device_count(int* n) {
  if (!state().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *n = state().devices;
  return CUDA_SUCCESS;
}
CUresult device_get(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= state().devices) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}
CUresult stream_create(Stream** stream, int device) {
  state().streams.push_back(std::make_unique<Stream>());
  state().streams.back()->device = device;
  *stream = state().streams.back().get();
  return CUDA_SUCCESS;
}
CUresult stream_destroy(Stream* stream) {
  auto& ss = state().streams;
  for (auto it = ss.begin(); it != ss.end(); ++it)
    if (it->get() == stream) {
      if (!stream->work.empty()) state().misuses++;
      ss.erase(it);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult stream_synchronize(Stream* stream) {
  if (stream->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  while (!stream->work.empty())
    run_one(stream);
  return CUDA_SUCCESS;
}
CUresult mem_get_info(size_t* free, size_t* total, int device) {
  *total = state().memory;
  *free = state().memory - live_bytes(device);
  return CUDA_SUCCESS;
}
CUresult mem_alloc(uint64_t* ptr, size_t n, int device) {
  State& s = state();
  if (n == 0) return CUDA_ERROR_INVALID_VALUE;
  if (live_bytes(device) + n > s.memory) return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = s.next_address;
  s.next_address += (n + 0xffff) / 0x10000 * 0x10000;
  s.blocks[*ptr].assign(n, 0xcd); // not zeroed, as the driver's memory is not
  s.block_devices[*ptr] = device;
  return CUDA_SUCCESS;
}
CUresult mem_free(uint64_t ptr) {
  if (in_use(ptr)) {
    state().misuses++;
    run_streams();
  }
  state().block_devices.erase(ptr);
  return state().blocks.erase(ptr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult memcpy_htod(uint64_t dst, const void* src, size_t n, Stream* stream, int device) {
  if (!host(dst) || !host(dst + n - 1)) return CUDA_ERROR_INVALID_VALUE;
  check_device(stream->device, device);
  std::string what = "htod " + std::to_string(n);
  if (uint64_t pinned = base_of(reinterpret_cast<uint64_t>(src)); pinned && state().pinned.count(pinned)) {
    // page-locked host memory is read when the stream runs the copy
    enqueue(stream, what,
            {[dst, src, n, what] {
               std::memcpy(host(dst), src, n);
               state().log += what + " pinned;";
             },
             {base_of(dst), pinned}});
    return CUDA_SUCCESS;
  }
  // pageable host memory is staged before the call returns
  std::vector<unsigned char> staged(static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + n);
  enqueue(stream, what,
          {[dst, staged = std::move(staged), what] {
             std::memcpy(host(dst), staged.data(), staged.size());
             state().log += what + ";";
           },
           {base_of(dst)}});
  return CUDA_SUCCESS;
}
CUresult memcpy_dtoh(void* dst, uint64_t src, size_t n, Stream* stream, int device) {
  if (!host(src) || !host(src + n - 1)) return CUDA_ERROR_INVALID_VALUE;
  check_device(stream->device, device);
  uint64_t pinned = base_of(reinterpret_cast<uint64_t>(dst));
  std::string what = "dtoh " + std::to_string(n) + (pinned ? " pinned" : "");
  enqueue(stream, what,
          {[dst, src, n, what] {
             std::memcpy(dst, host(src), n);
             state().log += what + ";";
           },
           {base_of(src), pinned}});
  return CUDA_SUCCESS;
}
CUresult memset_d8(uint64_t dst, unsigned char value, size_t n, Stream* stream, int device) {
  if (!host(dst) || !host(dst + n - 1)) return CUDA_ERROR_INVALID_VALUE;
  check_device(stream->device, device);
  std::string what = "memset " + std::to_string(n);
  enqueue(stream, what,
          {[dst, value, n, what] {
             std::memset(host(dst), value, n);
             state().log += what + ";";
           },
           {base_of(dst)}});
  return CUDA_SUCCESS;
}
CUresult module_load(Module** module, const void* image, int device) {
  const char* bytes = static_cast<const char*>(image);
  size_t n = std::memcmp(bytes,
                         "\x7f"
                         "ELF",
                         4) == 0
                 ? elf_size(bytes)
                 : std::strlen(bytes);
  *module = new Module{device, std::string(bytes, n), {}};
  return CUDA_SUCCESS;
}
CUresult module_get_function(Function** f, Module* module, const char* name) {
  if (module->image.find(name) == std::string::npos) return CUDA_ERROR_NOT_FOUND;
  *f = module->functions.emplace_back(std::make_unique<Function>(Function{name, module->device})).get();
  return CUDA_SUCCESS;
}
// Arguments come packed: extra is {BUFFER_POINTER (1), args, BUFFER_SIZE (2), &size, `end`}.
CUresult launch(Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared, Stream* stream, void** params, void** extra, void* end, int device) {
  if (params || !extra || extra[0] != reinterpret_cast<void*>(1) || extra[2] != reinterpret_cast<void*>(2) ||
      extra[4] != end)
    return CUDA_ERROR_INVALID_VALUE;
  check_device(stream->device, device);
  check_device(f->device, device);
  FakeCudaLaunch l{};
  std::snprintf(l.name, sizeof l.name, "%s", f->name.c_str());
  l.grid[0] = gx, l.grid[1] = gy, l.grid[2] = gz;
  l.block[0] = bx, l.block[1] = by, l.block[2] = bz;
  l.shared_bytes = shared;
  l.arg_size = *static_cast<size_t*>(extra[3]);
  if (l.arg_size > sizeof l.args) return CUDA_ERROR_INVALID_VALUE;
  if (l.arg_size) std::memcpy(l.args, extra[1], l.arg_size); // a kernel without arguments packs none
  state().launches.push_back(l);
  // the host stand-in registered when the work runs (a graph's launches run the kernel of their name)
  Work w{[l] {
           auto it = state().kernels.find(l.name);
           if (it != state().kernels.end() && it->second) it->second(l.args, l.arg_size);
           state().log += std::string("launch ") + l.name + ";";
           state().clock_ms += 1;
         },
         {}};
  // the memory it may use: every 8-byte argument that points into a block
  for (size_t at = 0; at + 8 <= l.arg_size; at += 8) {
    uint64_t word;
    std::memcpy(&word, l.args + at, 8);
    if (uint64_t base = base_of(word)) w.touches.push_back(base);
  }
  enqueue(stream, std::string("launch ") + l.name, std::move(w));
  return CUDA_SUCCESS;
}
CUresult host_alloc(void** p, size_t n) {
  if (n == 0) return CUDA_ERROR_INVALID_VALUE;
  std::vector<unsigned char> mem(n);
  *p = mem.data();
  state().pinned[reinterpret_cast<uint64_t>(*p)] = std::move(mem);
  return CUDA_SUCCESS;
}
CUresult host_free(void* p) {
  uint64_t at = reinterpret_cast<uint64_t>(p);
  if (!state().pinned.count(at)) return CUDA_ERROR_INVALID_VALUE;
  if (in_use(at)) {
    state().misuses++;
    run_streams();
  }
  state().pinned.erase(at);
  return CUDA_SUCCESS;
}
CUresult event_create(Event** e, unsigned flags) {
  state().events.push_back(std::make_unique<Event>());
  state().events.back()->flags = flags;
  *e = state().events.back().get();
  return CUDA_SUCCESS;
}
CUresult event_record(Event* e, Stream* stream, int device) {
  check_device(stream->device, device);
  e->done = false;
  e->stream = stream;
  enqueue(stream, "event",
          {[e] {
             e->done = true;
             e->at = state().clock_ms;
           },
           {}});
  return CUDA_SUCCESS;
}
CUresult event_query(Event* e) { return e->done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY; }
CUresult event_synchronize(Event* e) {
  while (!e->done && !e->stream->work.empty())
    run_one(e->stream);
  state().calls["event waited"]++;
  return CUDA_SUCCESS;
}
CUresult event_elapsed(float* ms, Event* start, Event* end) {
  if ((start->flags | end->flags) & 2) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->done || !end->done) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>(end->at - start->at);
  return CUDA_SUCCESS;
}
CUresult begin_capture(Stream* stream) {
  if (stream->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  state().graphs.push_back(std::make_unique<Graph>());
  stream->capture = state().graphs.back().get();
  return CUDA_SUCCESS;
}
CUresult end_capture(Stream* stream, Graph** graph) {
  if (!stream->capture) return CUDA_ERROR_INVALID_VALUE;
  *graph = stream->capture;
  stream->capture = nullptr;
  return CUDA_SUCCESS;
}
CUresult graph_instantiate(Graph** exec, Graph* graph) {
  state().graphs.push_back(std::make_unique<Graph>(*graph));
  *exec = state().graphs.back().get();
  return CUDA_SUCCESS;
}
// The same nodes in the same order (their arguments may differ): the instantiated graph takes the new one's.
CUresult graph_exec_update(Graph* exec, Graph* graph) {
  bool same = exec->nodes.size() == graph->nodes.size();
  for (size_t i = 0; same && i < exec->nodes.size(); i++)
    same = exec->nodes[i].first == graph->nodes[i].first;
  if (!same) return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  exec->nodes = graph->nodes;
  return CUDA_SUCCESS;
}
CUresult graph_launch(Graph* exec, Stream* stream, int device) {
  check_device(stream->device, device);
  if (stream->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  state().graph_launches++;
  stream->work.push_back({[] { state().log += "graph;"; }, {}});
  for (const auto& [what, w] : exec->nodes)
    stream->work.push_back(w);
  return CUDA_SUCCESS;
}

const ErrorText* error_of(CUresult code) {
  for (const ErrorText& e : kErrors)
    if (e.code == code) return &e;
  return nullptr;
}

} // namespace

extern "C" {

// ---- the control API ----

void fake_cuda_reset(int devices, size_t memory) {
  auto lock = locked();
  State& s = state();
  s.devices = devices;
  s.memory = memory;
  s.fail_next.clear();
  s.calls.clear();
  s.launches.clear();
  s.kernels.clear();
  s.misuses = 0;
  s.log.clear();
  s.graph_launches = 0;
}
void fake_cuda_fail_next(const char* call, int result) {
  auto lock = locked();
  state().fail_next[call] = result;
}
int fake_cuda_calls(const char* call) {
  auto lock = locked();
  return state().calls[call];
}
int fake_cuda_launch_count() {
  auto lock = locked();
  return static_cast<int>(state().launches.size());
}
const FakeCudaLaunch* fake_cuda_launch(int i) {
  auto lock = locked();
  return &state().launches.at(static_cast<size_t>(i));
}
void fake_cuda_set_kernel(const char* name, FakeCudaKernel fn) {
  auto lock = locked();
  state().kernels[name] = fn;
}
void* fake_cuda_host_pointer(uint64_t device_ptr) {
  auto lock = locked();
  return host(device_ptr);
}
size_t fake_cuda_pending() {
  auto lock = locked();
  size_t n = 0;
  for (const auto& st : state().streams)
    n += st->work.size();
  return n;
}
size_t fake_cuda_live_bytes() {
  auto lock = locked();
  return live_bytes();
}
int fake_cuda_misuses() {
  auto lock = locked();
  return state().misuses;
}
int fake_cuda_block_device(uint64_t device_ptr) {
  auto lock = locked();
  auto it = state().blocks.upper_bound(device_ptr);
  if (it == state().blocks.begin()) return -1;
  --it;
  if (device_ptr >= it->first + it->second.size()) return -1;
  return state().block_devices[it->first];
}
size_t fake_cuda_pinned_bytes() {
  auto lock = locked();
  size_t n = 0;
  for (const auto& [a, m] : state().pinned)
    n += m.size();
  return n;
}
int fake_cuda_graph_launches() {
  auto lock = locked();
  return state().graph_launches;
}
const char* fake_cuda_log() {
  auto lock = locked();
  return state().log.c_str();
}

// ---- the CUDA driver ----

CUresult cuInit(unsigned) {
  auto lock = locked();
  if (CUresult r = enter("cuInit", false)) return r;
  state().initialized = true;
  return CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int* v) {
  auto lock = locked();
  *v = 13000;
  return enter("cuDriverGetVersion", false);
}
CUresult cuDeviceGetCount(int* n) {
  auto lock = locked();
  if (CUresult r = enter("cuDeviceGetCount", false)) return r;
  return device_count(n);
}
CUresult cuDeviceGet(int* dev, int ordinal) {
  auto lock = locked();
  if (CUresult r = enter("cuDeviceGet", false)) return r;
  return device_get(dev, ordinal);
}
CUresult cuDeviceGetName(char* name, int len, int) {
  auto lock = locked();
  std::snprintf(name, static_cast<size_t>(len), "Fake GPU");
  return enter("cuDeviceGetName", false);
}
CUresult cuDeviceGetAttribute(int* v, int attribute, int) {
  auto lock = locked();
  if (CUresult r = enter("cuDeviceGetAttribute", false)) return r;
  const std::map<int, int> values = {{1, 1024},  {2, 1024},  {3, 1024}, {4, 64}, {5, 2147483647}, {6, 65535},
                                     {7, 65535}, {8, 49152}, {16, 132}, {75, 9}, {76, 0}};
  auto it = values.find(attribute);
  if (it == values.end()) return CUDA_ERROR_INVALID_VALUE;
  *v = it->second;
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, int) {
  auto lock = locked();
  *bytes = state().memory;
  return enter("cuDeviceTotalMem_v2", false);
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  auto lock = locked();
  *ctx = &state().contexts.at(static_cast<size_t>(dev));
  return enter("cuDevicePrimaryCtxRetain", false);
}
CUresult cuDevicePrimaryCtxRelease_v2(int) {
  auto lock = locked();
  return enter("cuDevicePrimaryCtxRelease_v2", false);
}
CUresult cuCtxPushCurrent_v2(void* ctx) {
  auto lock = locked();
  if (CUresult r = enter("cuCtxPushCurrent_v2", false)) return r;
  current_contexts.push_back(ctx);
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent_v2(void** ctx) {
  auto lock = locked();
  if (CUresult r = enter("cuCtxPopCurrent_v2", false)) return r;
  if (current_contexts.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  *ctx = current_contexts.back();
  current_contexts.pop_back();
  return CUDA_SUCCESS;
}
CUresult cuStreamCreate(Stream** stream, unsigned) {
  auto lock = locked();
  if (CUresult r = enter("cuStreamCreate")) return r;
  return stream_create(stream, cuda_current_device());
}
CUresult cuStreamDestroy_v2(Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("cuStreamDestroy_v2")) return r;
  return stream_destroy(stream);
}
CUresult cuStreamSynchronize(Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("cuStreamSynchronize")) return r;
  return stream_synchronize(stream);
}
CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  auto lock = locked();
  if (CUresult r = enter("cuMemGetInfo_v2")) return r;
  return mem_get_info(free, total, cuda_current_device());
}
CUresult cuMemAlloc_v2(uint64_t* ptr, size_t n) {
  auto lock = locked();
  if (CUresult r = enter("cuMemAlloc_v2")) return r;
  return mem_alloc(ptr, n, cuda_current_device());
}
CUresult cuMemFree_v2(uint64_t ptr) {
  auto lock = locked();
  if (CUresult r = enter("cuMemFree_v2")) return r;
  return mem_free(ptr);
}
CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void* src, size_t n, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("cuMemcpyHtoDAsync_v2")) return r;
  return memcpy_htod(dst, src, n, stream, cuda_current_device());
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, uint64_t src, size_t n, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("cuMemcpyDtoHAsync_v2")) return r;
  return memcpy_dtoh(dst, src, n, stream, cuda_current_device());
}
CUresult cuMemsetD8Async(uint64_t dst, unsigned char value, size_t n, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("cuMemsetD8Async")) return r;
  return memset_d8(dst, value, n, stream, cuda_current_device());
}
CUresult cuModuleLoadData(Module** module, const void* image) {
  auto lock = locked();
  if (CUresult r = enter("cuModuleLoadData")) return r;
  return module_load(module, image, cuda_current_device());
}
CUresult cuModuleGetFunction(Function** f, Module* module, const char* name) {
  auto lock = locked();
  if (CUresult r = enter("cuModuleGetFunction")) return r;
  return module_get_function(f, module, name);
}
CUresult cuModuleUnload(Module* module) {
  auto lock = locked();
  if (CUresult r = enter("cuModuleUnload")) return r;
  delete module;
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, Stream* stream, void** params, void** extra) {
  auto lock = locked();
  if (CUresult r = enter("cuLaunchKernel")) return r;
  return launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra, nullptr, cuda_current_device());
}
CUresult cuMemHostAlloc(void** p, size_t n, unsigned) {
  auto lock = locked();
  if (CUresult r = enter("cuMemHostAlloc")) return r;
  return host_alloc(p, n);
}
CUresult cuMemFreeHost(void* p) {
  auto lock = locked();
  if (CUresult r = enter("cuMemFreeHost")) return r;
  return host_free(p);
}
CUresult cuEventCreate(Event** e, unsigned flags) {
  auto lock = locked();
  if (CUresult r = enter("cuEventCreate")) return r;
  return event_create(e, flags);
}
CUresult cuEventRecord(Event* e, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("cuEventRecord")) return r;
  return event_record(e, stream, cuda_current_device());
}
CUresult cuEventQuery(Event* e) {
  auto lock = locked();
  if (CUresult r = enter("cuEventQuery")) return r;
  return event_query(e);
}
CUresult cuEventSynchronize(Event* e) {
  auto lock = locked();
  if (CUresult r = enter("cuEventSynchronize")) return r;
  return event_synchronize(e);
}
CUresult cuEventElapsedTime(float* ms, Event* start, Event* end) {
  auto lock = locked();
  if (CUresult r = enter("cuEventElapsedTime")) return r;
  return event_elapsed(ms, start, end);
}
CUresult cuEventDestroy_v2(Event*) {
  auto lock = locked();
  return enter("cuEventDestroy_v2");
}
CUresult cuStreamBeginCapture_v2(Stream* stream, int) {
  auto lock = locked();
  if (CUresult r = enter("cuStreamBeginCapture_v2")) return r;
  return begin_capture(stream);
}
CUresult cuStreamEndCapture(Stream* stream, Graph** graph) {
  auto lock = locked();
  if (CUresult r = enter("cuStreamEndCapture")) {
    stream->capture = nullptr; // a failed capture ends it all the same
    return r;
  }
  return end_capture(stream, graph);
}
CUresult cuGraphInstantiateWithFlags(Graph** exec, Graph* graph, unsigned long long) {
  auto lock = locked();
  if (CUresult r = enter("cuGraphInstantiateWithFlags")) return r;
  return graph_instantiate(exec, graph);
}
// CUgraphExecUpdateResultInfo: {result, errorNode, errorFromNode}
CUresult cuGraphExecUpdate_v2(Graph* exec, Graph* graph, void* info) {
  auto lock = locked();
  if (CUresult r = enter("cuGraphExecUpdate_v2")) return r;
  CUresult r = graph_exec_update(exec, graph);
  int result = r == CUDA_SUCCESS ? 0 : 2; // CU_GRAPH_EXEC_UPDATE_SUCCESS, _ERROR_TOPOLOGY_CHANGED
  std::memcpy(info, &result, sizeof result);
  return r;
}
CUresult cuGraphLaunch(Graph* exec, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("cuGraphLaunch")) return r;
  return graph_launch(exec, stream, cuda_current_device());
}
CUresult cuGraphExecDestroy(Graph*) {
  auto lock = locked();
  return enter("cuGraphExecDestroy");
}
CUresult cuGraphDestroy(Graph*) {
  auto lock = locked();
  return enter("cuGraphDestroy");
}
CUresult cuGetErrorName(CUresult code, const char** name) {
  const ErrorText* e = error_of(code);
  *name = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult code, const char** text) {
  const ErrorText* e = error_of(code);
  *text = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- the HIP runtime: a device current per thread (0 until set), no contexts ----

CUresult hipInit(unsigned) {
  auto lock = locked();
  if (CUresult r = enter("hipInit", false)) return r;
  state().initialized = true;
  return CUDA_SUCCESS;
}
CUresult hipGetDeviceCount(int* n) {
  auto lock = locked();
  if (CUresult r = enter("hipGetDeviceCount", false)) return r;
  return device_count(n);
}
CUresult hipDeviceGet(int* dev, int ordinal) {
  auto lock = locked();
  if (CUresult r = enter("hipDeviceGet", false)) return r;
  return device_get(dev, ordinal);
}
CUresult hipDeviceGetName(char* name, int len, int) {
  auto lock = locked();
  std::snprintf(name, static_cast<size_t>(len), "Fake GPU");
  return enter("hipDeviceGetName", false);
}
// hipDeviceAttribute_t: MaxThreadsPerBlock 56, MaxBlockDimX/Y/Z 26-28, MaxGridDimX/Y/Z 29-31,
// MaxSharedMemoryPerBlock 74, MultiprocessorCount 63 (an MI300X's)
CUresult hipDeviceGetAttribute(int* v, int attribute, int) {
  auto lock = locked();
  if (CUresult r = enter("hipDeviceGetAttribute", false)) return r;
  const std::map<int, int> values = {{56, 1024},  {26, 1024},  {27, 1024},  {28, 1024}, {29, 2147483647},
                                     {30, 65536}, {31, 65536}, {74, 65536}, {63, 304}};
  auto it = values.find(attribute);
  if (it == values.end()) return CUDA_ERROR_INVALID_VALUE;
  *v = it->second;
  return CUDA_SUCCESS;
}
CUresult hipDeviceTotalMem(size_t* bytes, int) {
  auto lock = locked();
  *bytes = state().memory;
  return enter("hipDeviceTotalMem", false);
}
// hipDeviceProp_t: the name first, gcnArchName further on (where depends on the ROCm release)
CUresult hipGetDeviceProperties(char* props, int) {
  auto lock = locked();
  if (CUresult r = enter("hipGetDeviceProperties", false)) return r;
  std::snprintf(props, 256, "Fake GPU");
  std::snprintf(props + 1160, 256, "gfx942:sramecc+:xnack-");
  return CUDA_SUCCESS;
}
CUresult hipGetDevice(int* dev) {
  auto lock = locked();
  *dev = hip_current_device;
  return enter("hipGetDevice", false);
}
CUresult hipSetDevice(int dev) {
  auto lock = locked();
  if (CUresult r = enter("hipSetDevice", false)) return r;
  if (dev < 0 || dev >= state().devices) return CUDA_ERROR_INVALID_DEVICE;
  hip_current_device = dev;
  return CUDA_SUCCESS;
}
CUresult hipStreamCreateWithFlags(Stream** stream, unsigned) {
  auto lock = locked();
  if (CUresult r = enter("hipStreamCreateWithFlags", false)) return r;
  return stream_create(stream, hip_current_device);
}
CUresult hipStreamDestroy(Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("hipStreamDestroy", false)) return r;
  return stream_destroy(stream);
}
CUresult hipStreamSynchronize(Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("hipStreamSynchronize", false)) return r;
  return stream_synchronize(stream);
}
CUresult hipMemGetInfo(size_t* free, size_t* total) {
  auto lock = locked();
  if (CUresult r = enter("hipMemGetInfo", false)) return r;
  return mem_get_info(free, total, hip_current_device);
}
CUresult hipMalloc(void** ptr, size_t n) {
  auto lock = locked();
  if (CUresult r = enter("hipMalloc", false)) return r;
  uint64_t p = 0;
  CUresult r = mem_alloc(&p, n, hip_current_device);
  *ptr = reinterpret_cast<void*>(p);
  return r;
}
CUresult hipFree(void* ptr) {
  auto lock = locked();
  if (CUresult r = enter("hipFree", false)) return r;
  return mem_free(reinterpret_cast<uint64_t>(ptr));
}
CUresult hipMemcpyHtoDAsync(void* dst, const void* src, size_t n, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("hipMemcpyHtoDAsync", false)) return r;
  return memcpy_htod(reinterpret_cast<uint64_t>(dst), src, n, stream, hip_current_device);
}
CUresult hipMemcpyDtoHAsync(void* dst, void* src, size_t n, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("hipMemcpyDtoHAsync", false)) return r;
  return memcpy_dtoh(dst, reinterpret_cast<uint64_t>(src), n, stream, hip_current_device);
}
CUresult hipMemsetD8Async(void* dst, unsigned char value, size_t n, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("hipMemsetD8Async", false)) return r;
  return memset_d8(reinterpret_cast<uint64_t>(dst), value, n, stream, hip_current_device);
}
CUresult hipModuleLoadData(Module** module, const void* image) {
  auto lock = locked();
  if (CUresult r = enter("hipModuleLoadData", false)) return r;
  return module_load(module, image, hip_current_device);
}
CUresult hipModuleGetFunction(Function** f, Module* module, const char* name) {
  auto lock = locked();
  if (CUresult r = enter("hipModuleGetFunction", false)) return r;
  return module_get_function(f, module, name);
}
CUresult hipModuleUnload(Module* module) {
  auto lock = locked();
  if (CUresult r = enter("hipModuleUnload", false)) return r;
  delete module;
  return CUDA_SUCCESS;
}
CUresult hipModuleLaunchKernel(Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, Stream* stream, void** params, void** extra) {
  auto lock = locked();
  if (CUresult r = enter("hipModuleLaunchKernel", false)) return r;
  return launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra, reinterpret_cast<void*>(3),
                hip_current_device);
}
CUresult hipHostMalloc(void** p, size_t n, unsigned) {
  auto lock = locked();
  if (CUresult r = enter("hipHostMalloc", false)) return r;
  return host_alloc(p, n);
}
CUresult hipHostFree(void* p) {
  auto lock = locked();
  if (CUresult r = enter("hipHostFree", false)) return r;
  return host_free(p);
}
CUresult hipEventCreateWithFlags(Event** e, unsigned flags) {
  auto lock = locked();
  if (CUresult r = enter("hipEventCreateWithFlags", false)) return r;
  return event_create(e, flags);
}
CUresult hipEventRecord(Event* e, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("hipEventRecord", false)) return r;
  return event_record(e, stream, hip_current_device);
}
CUresult hipEventQuery(Event* e) {
  auto lock = locked();
  if (CUresult r = enter("hipEventQuery", false)) return r;
  return event_query(e);
}
CUresult hipEventSynchronize(Event* e) {
  auto lock = locked();
  if (CUresult r = enter("hipEventSynchronize", false)) return r;
  return event_synchronize(e);
}
CUresult hipEventElapsedTime(float* ms, Event* start, Event* end) {
  auto lock = locked();
  if (CUresult r = enter("hipEventElapsedTime", false)) return r;
  return event_elapsed(ms, start, end);
}
CUresult hipEventDestroy(Event*) {
  auto lock = locked();
  return enter("hipEventDestroy", false);
}
CUresult hipStreamBeginCapture(Stream* stream, int) {
  auto lock = locked();
  if (CUresult r = enter("hipStreamBeginCapture", false)) return r;
  return begin_capture(stream);
}
CUresult hipStreamEndCapture(Stream* stream, Graph** graph) {
  auto lock = locked();
  if (CUresult r = enter("hipStreamEndCapture", false)) {
    stream->capture = nullptr;
    return r;
  }
  return end_capture(stream, graph);
}
CUresult hipGraphInstantiateWithFlags(Graph** exec, Graph* graph, unsigned long long) {
  auto lock = locked();
  if (CUresult r = enter("hipGraphInstantiateWithFlags", false)) return r;
  return graph_instantiate(exec, graph);
}
CUresult hipGraphExecUpdate(Graph* exec, Graph* graph, void** error_node, int* result) {
  auto lock = locked();
  if (CUresult r = enter("hipGraphExecUpdate", false)) return r;
  CUresult r = graph_exec_update(exec, graph);
  *error_node = nullptr;
  *result = r == CUDA_SUCCESS ? 0 : 2; // hipGraphExecUpdateSuccess, hipGraphExecUpdateErrorTopologyChanged
  return r;
}
CUresult hipGraphLaunch(Graph* exec, Stream* stream) {
  auto lock = locked();
  if (CUresult r = enter("hipGraphLaunch", false)) return r;
  return graph_launch(exec, stream, hip_current_device);
}
CUresult hipGraphExecDestroy(Graph*) {
  auto lock = locked();
  return enter("hipGraphExecDestroy", false);
}
CUresult hipGraphDestroy(Graph*) {
  auto lock = locked();
  return enter("hipGraphDestroy", false);
}
const char* hipGetErrorName(CUresult code) {
  const ErrorText* e = error_of(code);
  return e ? e->hip_name : "hipErrorUnknown";
}
const char* hipGetErrorString(CUresult code) {
  const ErrorText* e = error_of(code);
  return e ? e->text : "unknown error";
}

} // extern "C"
