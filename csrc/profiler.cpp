#include "csrc/profiler.h"

// Kineto's headers come with torch (torch/include/kineto). torch's PrivateUse1ProfilerRegistry
// (torch/csrc/profiler/standalone/privateuse1_profiler.h) includes them as <IActivityProfiler.h>, which
// would need that folder on every file's include path (a rebuild of every torch file): this file registers
// with Kineto directly, which is what the registry does with the factory it is given.
#include <kineto/libkineto.h>

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "csrc/backend.h"
#include "runtime/device.h"
#include "runtime/realize.h"

namespace tiny {

namespace {

using libkineto::ActivityType;
using runtime::RealizeSpan;

// The ATen ops in progress on this thread, innermost last, as the profiler's correlation ids (Kineto hands
// every op's id to each session as the op begins and ends, on the op's thread).
std::vector<uint64_t>& ops_in_progress() {
  thread_local std::vector<uint64_t> ids;
  return ids;
}

// Kernel time this thread's syncs ran while a trace recorded (what the legacy profiler's events read).
int64_t& kernel_ns_on_this_thread() {
  thread_local int64_t ns = 0;
  return ns;
}

// A span of the realize engine with what it needs to become a Kineto activity later.
struct Recorded {
  RealizeSpan span;
  uint64_t op;       // correlation id of the innermost ATen op on the realizing thread (0: none)
  int32_t thread_id; // that thread, as Kineto names threads
};

// Collects the realize engine's spans while a trace records. One for the process, never destroyed: the
// engine may still hold it on another thread at the moment a session uninstalls it.
class SpanCollector : public runtime::RealizeTracer {
public:
  void start() {
    {
      std::lock_guard lock(mu_);
      spans_.clear();
    }
    ops_in_progress().clear();
    tracing_.store(true);
    runtime::set_realize_tracer(this);
  }
  std::vector<Recorded> stop() {
    runtime::set_realize_tracer(nullptr);
    tracing_.store(false);
    std::lock_guard lock(mu_);
    return std::move(spans_);
  }
  void record(const RealizeSpan& span) override {
    if (span.kind == RealizeSpan::Kind::Kernel) kernel_ns_on_this_thread() += span.end_ns - span.begin_ns;
    const std::vector<uint64_t>& ops = ops_in_progress();
    Recorded r{span, ops.empty() ? 0 : ops.back(), libkineto::systemThreadId()};
    std::lock_guard lock(mu_);
    spans_.push_back(std::move(r));
  }
  bool tracing() const { return tracing_.load(); }

private:
  std::mutex mu_;
  std::vector<Recorded> spans_;
  std::atomic<bool> tracing_{false};
};

SpanCollector& collector() {
  static auto* c = new SpanCollector();
  return *c;
}

int device_index(const runtime::Device* device) {
  for (int i = 0; i < runtime::device_count(); i++)
    if (&runtime::device(i) == device) return i;
  return 0;
}

// One trace's worth of tiny activity: kernels (CONCURRENT_KERNEL, which torch reports as device time of
// the PrivateUse1 device) when the trace asks for device activity, host spans (PRIVATEUSE1_RUNTIME, which
// torch counts as CPU time under the op they ran in) when it asks for those.
class TinySession : public libkineto::IActivityProfilerSession {
public:
  TinySession(bool kernels, bool host_spans) : kernels_(kernels), host_spans_(host_spans) {}

  void start() override {
    status_ = libkineto::TraceStatus::RECORDING;
    collector().start();
  }
  void stop() override {
    recorded_ = collector().stop();
    status_ = libkineto::TraceStatus::PROCESSING;
  }
  std::vector<std::string> errors() override { return {}; }
  void pushCorrelationId(uint64_t id) override { ops_in_progress().push_back(id); }
  void popCorrelationId() override {
    if (!ops_in_progress().empty()) ops_in_progress().pop_back();
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(
        logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }
  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_op,
                    int64_t /*start*/, int64_t /*end*/) override {
    trace_ = std::make_unique<libkineto::CpuTraceBuffer>();
    trace_->span = libkineto::TraceSpan(0, 0, "tiny");
    trace_->gpuOpCount = 0;
    int32_t next_id = 1;
    for (const Recorded& r : recorded_) {
      bool kernel = r.span.kind == RealizeSpan::Kind::Kernel;
      if (kernel ? !kernels_ : !host_spans_) continue;
      const libkineto::ITraceActivity* op = r.op ? linked_op(static_cast<int32_t>(r.op)) : nullptr;
      trace_->emplace_activity(trace_->span,
                               kernel ? ActivityType::CONCURRENT_KERNEL : ActivityType::PRIVATEUSE1_RUNTIME,
                               activity_name(r, op));
      libkineto::GenericTraceActivity& a = *trace_->activities.back();
      a.startTime = r.span.begin_ns;
      a.endTime = r.span.end_ns;
      a.id = next_id++;
      a.linked = op;
      a.threadId = r.thread_id;
      if (kernel) {
        a.device = device_index(r.span.device);
        a.resource = 0; // the device's one in-order queue (every stream of a device names it)
        a.addTypedMetadata("device", int64_t{a.device});
        a.addMetadataQuoted("schedule", r.span.cached ? "replayed" : "new");
        trace_->gpuOpCount++;
      } else {
        a.device = libkineto::processId();
        a.resource = r.thread_id;
        add_host_metadata(a, r, op);
      }
      a.log(logger); // the logger keeps a pointer to it (trace_ outlives it)
    }
    recorded_.clear();
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0, "tiny:0", "tiny"});
  }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {{0, 0, 0, "queue"}}; }
  // The activities live with the trace (Kineto keeps this buffer as long as the trace it returns).
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(trace_); }

private:
  // A sync is named after the op that forced it ("tiny::sync (aten::_local_scalar_dense)" for .item()).
  static std::string activity_name(const Recorded& r, const libkineto::ITraceActivity* op) {
    if (r.span.kind == RealizeSpan::Kind::Sync && op) return r.span.name + " (" + op->name() + ")";
    return r.span.name;
  }
  static void add_host_metadata(libkineto::GenericTraceActivity& a, const Recorded& r,
                                const libkineto::ITraceActivity* op) {
    switch (r.span.kind) {
    case RealizeSpan::Kind::Sync:
      a.addTypedMetadata("kernels", r.span.count);
      a.addMetadataQuoted("schedule", r.span.cached ? "replayed" : "new");
      a.addMetadataQuoted("cause", op ? op->name() : std::string("no ATen op (torch.tiny.synchronize, an event)"));
      break;
    case RealizeSpan::Kind::Schedule:
      a.addTypedMetadata("kernels", r.span.count);
      break;
    case RealizeSpan::Kind::Compile:
      if (r.span.count > 0) a.addTypedMetadata("programs compiled", r.span.count);
      break;
    case RealizeSpan::Kind::Kernel:
      break;
    }
    a.addTypedMetadata("device", int64_t{device_index(r.span.device)});
  }

  bool kernels_, host_spans_;
  std::vector<Recorded> recorded_;
  std::unique_ptr<libkineto::CpuTraceBuffer> trace_;
};

class TinyActivityProfiler : public libkineto::IActivityProfiler {
public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config& /*config*/) override {
    bool kernels = activity_types.count(ActivityType::CONCURRENT_KERNEL) != 0;
    bool host_spans = activity_types.count(ActivityType::PRIVATEUSE1_RUNTIME) != 0;
    if (!kernels && !host_spans) return nullptr;
    return std::make_unique<TinySession>(kernels, host_spans);
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t /*ts_ms*/, int64_t /*duration_ms*/,
                                                                 const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

private:
  std::string name_ = "tiny";
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL, ActivityType::PRIVATEUSE1_RUNTIME};
};

// torch.autograd.profiler.profile(use_device="tiny") without Kineto's device activities (use_kineto=False,
// its default) asks these for an op's device time: an "event" marks the kernel time the calling thread's
// syncs have run so far, so two marks around an op measure the kernels its syncs ran (syncs run on the
// thread that forces them). Markers (NVTX's role) have nothing to mark on tiny.
class TinyProfilerStubs : public torch::profiler::impl::ProfilerStubs {
public:
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    if (device) *device = current_device();
    if (event) *event = std::make_shared<int64_t>(kernel_ns_on_this_thread());
    if (cpu_ns) *cpu_ns = c10::getTime();
  }
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* begin,
                const torch::profiler::impl::ProfilerVoidEventStub* end) const override {
    if (!begin || !end || !*begin || !*end) return 0;
    int64_t ns = *static_cast<const int64_t*>(end->get()) - *static_cast<const int64_t*>(begin->get());
    return static_cast<float>(ns) / 1000.0f; // microseconds, as torch's CUDA stubs report
  }
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    for (int i = 0; i < runtime::device_count(); i++)
      op(i);
  }
  // Waits for what the devices' queues hold (it realizes nothing: a profiler must not add sync points).
  void synchronize() const override {
    for (int i = 0; i < runtime::device_count(); i++)
      runtime::device(i).synchronize();
  }
};

const bool registered = [] {
  libkineto::api().registerProfilerFactory([] { return std::make_unique<TinyActivityProfiler>(); });
  static TinyProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

} // namespace

bool profiler_tracing() { return collector().tracing(); }

} // namespace tiny
