#include "csrc/backend.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "csrc/allocator.h"
#include "csrc/stream.h"
#include "runtime/device.h"
#include "runtime/lazy_buffer.h"

namespace tiny {

namespace {

constexpr c10::DeviceType kTiny = c10::DeviceType::PrivateUse1;

thread_local c10::DeviceIndex current_index = 0;

// A CPU Mersenne-Twister generator that says it lives on tiny:index, as torch's reference backend does.
class TinyGenerator final : public at::CPUGeneratorImpl {
public:
  explicit TinyGenerator(c10::DeviceIndex index) {
    device_ = c10::Device(kTiny, index);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }
  static c10::DeviceType device_type() { return kTiny; }

private:
  // CPUGeneratorImpl's clone would say it lives on the CPU.
  TinyGenerator* clone_impl() const override {
    auto* copy = new TinyGenerator(device_.index());
    copy->set_state(*get_state());
    return copy;
  }
};

at::Generator new_generator(c10::DeviceIndex index) {
  if (index == -1) index = current_device();
  check_device_index(index);
  return at::make_generator<TinyGenerator>(index);
}

// Pinned host memory for DataLoader(pin_memory=True) and Tensor.pin_memory(). The CPU device reads host
// memory directly, so this is ordinary host memory that remembers it was asked for as pinned.
class PinnedHostAllocator final : public c10::Allocator {
public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (p) {
      std::lock_guard lock(mu());
      live().emplace(reinterpret_cast<uintptr_t>(p), nbytes);
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, size_t count) const override { default_copy_data(dest, src, count); }

  static bool contains(const void* p) {
    auto address = reinterpret_cast<uintptr_t>(p);
    std::lock_guard lock(mu());
    auto it = live().upper_bound(address);
    if (it == live().begin()) return false;
    --it;
    return address < it->first + it->second;
  }

private:
  static void release(void* p) {
    if (!p) return;
    {
      std::lock_guard lock(mu());
      live().erase(reinterpret_cast<uintptr_t>(p));
    }
    c10::free_cpu(p);
  }
  static std::mutex& mu() {
    static auto* m = new std::mutex();
    return *m;
  }
  static std::map<uintptr_t, size_t>& live() {
    static auto* m = new std::map<uintptr_t, size_t>();
    return *m;
  }
};

PinnedHostAllocator pinned_host_allocator;

struct TinyGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = kTiny;

  c10::DeviceType type() const override { return kTiny; }
  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTiny, "expected a tiny device, got ", d);
    c10::Device old(kTiny, current_device());
    if (d.index() != old.index()) set_device(d.index());
    return old;
  }
  c10::Device getDevice() const override { return {kTiny, current_device()}; }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTiny, "expected a tiny device, got ", d);
    set_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override { current_index = d.index(); }

  // Streams and events (csrc/stream.h): every stream of a device names its one in-order queue.
  // torch.Stream(device="tiny") asks with index -1: the current device's
  c10::Stream getStream(c10::Device d) const override { return current_stream(resolved(d)); }
  c10::Stream getDefaultStream(c10::Device d) const override { return default_stream(resolved(d)); }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override { return new_stream(resolved(d)); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return new_stream(resolved(d));
  }
  c10::Stream exchangeStream(c10::Stream s) const override { return exchange_stream(s); }
  bool queryStream(const c10::Stream& stream) const override { return query_stream(stream); }
  void synchronizeStream(const c10::Stream& stream) const override { synchronize_stream(stream); }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    synchronize_stream(default_stream(index == -1 ? current_device() : index));
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex /*index*/,
              const c10::EventFlag flag) const override {
    record_event(event, stream, flag);
  }
  // The device's queue is in order and a recorded event has run: a stream has nothing to wait for.
  void block(void* /*event*/, const c10::Stream& stream) const override { index_checked(stream); }
  bool queryEvent(void* event) const override { return query_event(event); }
  void synchronizeEvent(void* event) const override { synchronize_event(event); }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*index*/) const override {
    return elapsed_ms(start, end);
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*index*/) const noexcept override { destroy_event(event); }

  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

private:
  static void index_checked(const c10::Stream& stream) { check_device_index(stream.device_index()); }
  static c10::DeviceIndex resolved(c10::Device d) { return d.index() == -1 ? current_device() : d.index(); }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TinyGuardImpl);

struct TinyHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex /*index*/) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    c10::DeviceIndex old = current_device();
    if (index >= 0 && index != old) set_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override { return exchangeDevice(index); }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override { return default_generator(index); }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override { return new_generator(index); }

  at::Device getDeviceFromPtr(void* data) const override {
    auto index = device_of_address(data);
    TORCH_CHECK(index.has_value(), "tiny: the pointer ", data, " is not inside a live tiny allocation");
    return {kTiny, *index};
  }
  bool isPinnedPtr(const void* data) const override { return PinnedHostAllocator::contains(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &pinned_host_allocator; }

  // UntypedStorage.resize_ on a tiny storage.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(*storage.unsafeGetStorageImpl(), nbytes);
  }
};

// Registration when the extension loads: the backend's name (so C++ messages say "tiny") and its hooks.
[[maybe_unused]] const bool registered = [] {
  c10::register_privateuse1_backend("tiny");
  static TinyHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
  return true;
}();

} // namespace

c10::DeviceIndex device_count() noexcept {
  try {
    return static_cast<c10::DeviceIndex>(runtime::device_count());
  } catch (...) {
    return 0; // torch requires deviceCount not to throw: a broken device counts as none
  }
}

void check_device_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "tiny: invalid device index ", static_cast<int>(index), " (there ",
              device_count() == 1 ? "is 1 tiny device)" : "are " + std::to_string(device_count()) + " tiny devices)");
}

c10::DeviceIndex current_device() { return current_index; }

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  current_index = index;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  static const std::vector<at::Generator> generators = [] {
    std::vector<at::Generator> gens;
    for (c10::DeviceIndex i = 0; i < device_count(); ++i)
      gens.push_back(new_generator(i));
    return gens;
  }();
  if (index == -1) index = current_device();
  check_device_index(index);
  return generators[static_cast<size_t>(index)];
}

uint64_t random_key(const std::optional<at::Generator>& gen, c10::Device device) {
  at::Generator g = gen.has_value() && gen->defined() ? *gen : default_generator(device.index());
  TORCH_CHECK(g.device().type() == kTiny, "Expected a '", c10::DeviceType(kTiny),
              "' device type for generator but found '", g.device().type(), "'");
  std::lock_guard lock(g.mutex());
  return g.get<TinyGenerator>()->random64();
}

} // namespace tiny
