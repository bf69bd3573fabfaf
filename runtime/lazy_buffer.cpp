#include "runtime/lazy_buffer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "runtime/debug.h"
#include "runtime/device.h"
#include "runtime/realize.h"

namespace tiny::runtime {

std::recursive_mutex& graph_mutex() {
  static std::recursive_mutex* mu = new std::recursive_mutex();
  return *mu;
}

Stats& stats() {
  static Stats* s = new Stats();
  return *s;
}

void reset_stats() {
  Stats& s = stats();
  for (auto* c : {&s.kernels, &s.compiles, &s.cache_hits, &s.disk_hits, &s.schedule_hits, &s.graph_launches, &s.syncs,
                  &s.fallbacks})
    *c = 0;
  s.peak_bytes = s.live_bytes.load();
}

namespace {
std::atomic<bool> zero_division{false};
} // namespace

void report_zero_division() { zero_division = true; }

void raise_kernel_errors() {
  if (zero_division.exchange(false))
    throw std::runtime_error("ZeroDivisionError (an integer division by zero in a value computed at this sync)");
}

int debug_level() {
  static int level = [] {
    const char* e = std::getenv("TINY_DEBUG");
    return e ? std::atoi(e) : 0;
  }();
  return level;
}

namespace {

// The pending list's ends (LazyBuffer::prev_pending_, next_pending_ link it).
struct PendingList {
  LazyBuffer* head = nullptr;
  LazyBuffer* tail = nullptr;
};
PendingList pending_list;

// Does `v` name every element of a storage of n elements exactly once?
bool covers_storage(const StridedView& v, int64_t n) {
  if (v.offset != 0 || prod(v.sizes) != n) return false;
  std::vector<size_t> dims;
  for (size_t d = 0; d < v.sizes.size(); d++)
    if (v.sizes[d] != 1) dims.push_back(d);
  std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return v.strides[a] < v.strides[b]; });
  int64_t expect = 1;
  for (size_t d : dims) {
    if (v.strides[d] != expect) return false;
    expect *= v.sizes[d];
  }
  return true;
}

// The flat storage-order arrangement of a value written through a view that covers the storage.
ShapeTracker storage_order(const StridedView& v) {
  std::vector<int64_t> order(v.sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    int64_t sa = v.sizes[a] == 1 ? 0 : v.strides[a], sb = v.sizes[b] == 1 ? 0 : v.strides[b];
    return sa > sb;
  });
  return ShapeTracker::from_shape(v.sizes).permute(order).reshape({prod(v.sizes)});
}

bool is_contiguous_window(const StridedView& v) {
  int64_t expect = 1;
  for (size_t d = v.sizes.size(); d-- > 0;) {
    if (v.sizes[d] != 1 && v.strides[d] != expect) return false;
    expect *= v.sizes[d];
  }
  return true;
}

// Is `v` the whole storage of n elements in row-major order (the common read and write)?
bool is_whole(const StridedView& v, int64_t n) {
  return v.offset == 0 && prod(v.sizes) == n && is_contiguous_window(v);
}

// A program that never syncs (a hand-written training loop without .item()) would grow one graph
// without end: past TINY_MAX_PENDING_UOPS graph nodes (default 100,000; a training step of the demo has a
// few thousand) built since the last sync and as many live, the write that ends an op realizes everything
// pending. Checked every 64 writes. At a write, not a read: an op realized between its reads would hold
// the old graph in the operands it had read already, and its result would be that whole graph again
// (computed anew at the next check, and so on, every 64 reads). Counting the nodes built since the last
// sync, not only the live ones: the caches' nodes (kernels of cached schedules) stay live after a sync.
size_t uops_made_at_last_sync = 0;

void realize_if_graphs_are_large() {
  static int64_t writes = 0;
  static const size_t limit = static_cast<size_t>(env_limit("TINY_MAX_PENDING_UOPS", 100000));
  if (++writes % 64 == 0 && pending_list.head && uops_made() - uops_made_at_last_sync > limit && live_uops() > limit)
    synchronize();
}

// The value a flat content or a whole write is the row-major flattening of: below a reshape, the reshaped value.
const UOpPtr& unreshaped(const UOpPtr& n) { return is_reshape(n) ? n->src[0] : n; }

} // namespace

LazyBuffer::LazyBuffer(Device& device, size_t nbytes) : device_(device), nbytes_(nbytes) {}

LazyBuffer::~LazyBuffer() {
  std::lock_guard lock(graph_mutex());
  leave_pending();
  recent_reads_ = {};
  content_.reset();
  whole_.reset();
}

void LazyBuffer::leave_pending() {
  if (!in_pending_) return;
  (prev_pending_ ? prev_pending_->next_pending_ : pending_list.head) = next_pending_;
  (next_pending_ ? next_pending_->prev_pending_ : pending_list.tail) = prev_pending_;
  prev_pending_ = next_pending_ = nullptr;
  in_pending_ = false;
}

void LazyBuffer::mark_pending() {
  if (!whole_ && content_->op == Ops::BUFFER) {
    leave_pending();
  } else if (!in_pending_) {
    prev_pending_ = pending_list.tail;
    (pending_list.tail ? pending_list.tail->next_pending_ : pending_list.head) = this;
    pending_list.tail = this;
    in_pending_ = true;
  }
}

bool LazyBuffer::pending() const {
  std::lock_guard lock(graph_mutex());
  return whole_ || (content_ && content_->op != Ops::BUFFER);
}

const UOpPtr& LazyBuffer::content() {
  if (!content_ && whole_) {
    // The value's row-major flattening: its tracker built as it is (a view below composes with it
    // instead). A value that is a reshape of another (a reduction's result without its reduced axes, a
    // matmul's) is that one flattened: one view node, not a reshape composed onto a reshape.
    const UOpPtr& flat = flattened();
    int64_t n = prod(flat->shape);
    content_ = flat_is_one_view()        ? view(flat, ShapeTracker::of(View{{n}, {1}, 0, std::nullopt}))
               : flat->shape.size() == 1 ? flat
                                         : reshape(flat, {n});
  }
  return content_;
}

const UOpPtr& LazyBuffer::flattened() const { return unreshaped(whole_); }

bool LazyBuffer::flat_is_one_view() const {
  const UOpPtr& flat = flattened();
  return flat->shape.size() != 1 && flat->op != Ops::VIEW && prod(flat->shape) != 1;
}

void LazyBuffer::set_whole(UOpPtr value) {
  if (value->shape.size() == 1) return set_content(std::move(value));
  set_content(nullptr);
  whole_ = std::move(value); // its flat content is built when needed (content())
}

void LazyBuffer::set_content(UOpPtr c) {
  content_ = std::move(c);
  whole_.reset();
  recent_reads_ = {};
}

UOpPtr LazyBuffer::content_locked(DType dtype) {
  if (!content()) {
    int64_t n = static_cast<int64_t>(nbytes_ / itemsize(dtype));
    content_ = buffer(std::make_shared<Buffer>(device_, dtype, n));
  }
  if (itemsize(content_->dtype) != itemsize(dtype)) {
    // A storage filled as bytes (torch.load with map_location="tiny") and now read as its tensors'
    // type: its bytes become a buffer of that type.
    if (nbytes_ % itemsize(dtype) != 0)
      throw std::runtime_error("tiny: reading a storage of " + std::string(name(content_->dtype)) + " as " +
                               std::string(name(dtype)) + " (a different element size) is not supported yet");
    std::vector<char> bytes(nbytes_);
    copy_out_bytes(bytes.data());
    // bytes read as bool stay bytes (a bool read of them sees nonzero as true; a write of some keeps the
    // others' bits)
    DType held = dtype == DType::Bool ? DType::UInt8 : dtype;
    auto buf = std::make_shared<Buffer>(device_, held, static_cast<int64_t>(nbytes_ / itemsize(dtype)));
    device_.allocator().copy_in(buf->ptr(), bytes.data(), buf->nbytes());
    set_content(buffer(buf));
    mark_pending();
  }
  return content_;
}

namespace {
// The elements that the view names of a flat content of n elements, in its dtype. The content is mostly the
// row-major flattening of a value `flat` (a whole write makes it VIEW(value)), else `flat` is the content
// itself; `content()` gives the content, built only where a view cannot be composed onto `flat` directly.
template <class Content> UOpPtr elements(const UOpPtr& flat, int64_t n, const StridedView& v, const Content& content) {
  if (v.sizes.size() == 1 && v.sizes[0] == n && v.offset == 0 && (n == 1 || v.strides[0] == 1)) return content();
  // A window of the content read inside it is that window of the value's row-major elements, the view that
  // view() would compose (ShapeTracker::on_top_of) built directly.
  if (is_whole(v, n)) {
    if (n == 0) return reshape(content(), v.sizes);
    if (flat->shape == v.sizes) return flat; // the value written whole, read whole
    // The row-major reshape of the flat content, built as the one view it is (ShapeTracker::reshape's
    // strides for it: each dim's the product of the sizes after it) rather than by reshaping a tracker.
    Shape strides(v.sizes.size());
    int64_t after = 1;
    for (size_t d = v.sizes.size(); d-- > 0;) {
      strides[d] = after;
      after *= v.sizes[d];
    }
    return view(flat, ShapeTracker::of(View{v.sizes, std::move(strides), 0, std::nullopt}));
  }
  // A window whose every dim walks inside the content is the one view ShapeTracker::as_strided composes
  // onto the flat content (a stride of 0 where a dim has size 1), built as it is.
  bool inside = n > 1 && v.offset >= 0 && v.offset < n && prod(v.sizes) > 0;
  Shape strides(v.sizes.size(), 0);
  for (size_t d = 0; d < v.sizes.size() && inside; d++) {
    if (v.sizes[d] == 1 || v.strides[d] == 0) continue;
    int64_t last = v.offset + v.strides[d] * (v.sizes[d] - 1);
    inside = std::llabs(v.strides[d]) < n && last >= 0 && last < n;
    strides[d] = v.strides[d];
  }
  if (inside) return view(flat, ShapeTracker::of(View{v.sizes, std::move(strides), v.offset, std::nullopt}));
  const UOpPtr& c = content();
  return view(c, ShapeTracker::from_shape(c->shape).as_strided(v.sizes, v.strides, v.offset));
}

// The elements of the flat content c that the view names, in c's dtype.
UOpPtr elements(const UOpPtr& c, const StridedView& v) {
  return elements(unreshaped(c), c->shape[0], v, [&]() -> const UOpPtr& { return c; });
}

// Calls f(i, e) for each element i of the view, row-major, e its element in the storage.
template <class F> void for_each_element(const StridedView& v, F&& f) {
  std::vector<int64_t> at(v.sizes.size(), 0);
  int64_t e = v.offset;
  for (int64_t i = 0, n = prod(v.sizes); i < n; i++) {
    f(i, e);
    for (size_t d = at.size(); d-- > 0;) {
      e += v.strides[d];
      if (++at[d] < v.sizes[d]) break;
      e -= v.strides[d] * v.sizes[d];
      at[d] = 0;
    }
  }
}

} // namespace

UOpPtr LazyBuffer::read(const StridedView& v) {
  std::lock_guard lock(graph_mutex());
  // An op's result read whole, as it was written (the next op's operand): the value itself.
  if (whole_ && v.offset == 0 && v.sizes == whole_->shape && itemsize(whole_->dtype) == itemsize(v.dtype) &&
      is_contiguous_window(v))
    return bitcast(whole_, v.dtype);
  if (recent_reads_[0] && recent_views_[0] == v) return recent_reads_[0];
  if (recent_reads_[1] && recent_views_[1] == v) {
    std::swap(recent_reads_[0], recent_reads_[1]);
    std::swap(recent_views_[0], recent_views_[1]);
    return recent_reads_[0];
  }
  UOpPtr r;
  if (whole_ && !content_ && itemsize(whole_->dtype) == itemsize(v.dtype) && flat_is_one_view()) {
    // a window of an op's result (y[0]) whose content would be one view of the value: a view of the value,
    // without that flattening
    r = bitcast(elements(flattened(), prod(whole_->shape), v, [&]() -> const UOpPtr& { return content(); }), v.dtype);
  } else {
    r = bitcast(elements(content_locked(v.dtype), v), v.dtype);
  }
  recent_reads_[1] = std::move(recent_reads_[0]);
  recent_views_[1] = std::move(recent_views_[0]);
  recent_reads_[0] = r;
  recent_views_[0] = v;
  return r;
}

void LazyBuffer::write(const StridedView& v, const UOpPtr& value) {
  if (value->shape != v.sizes) throw std::logic_error("LazyBuffer::write: value shape differs from the view");
  std::lock_guard lock(graph_mutex());
  // A fresh storage written whole (every op's new result) takes the value as its content, without the
  // empty buffer content_locked would make for it first: recording cost.
  size_t item = itemsize(v.dtype);
  if (!content_ && !whole_ && nbytes_ > 0 && nbytes_ % item == 0 && is_whole(v, static_cast<int64_t>(nbytes_ / item))) {
    set_whole(value);
    mark_pending();
    realize_if_graphs_are_large();
    return;
  }
  UOpPtr c = content_locked(v.dtype);
  if (prod(v.sizes) == 0) return;
  // A bool storage written through a view of another 1-byte type (`b.view(torch.uint8)[0] = 5`) holds
  // bytes a bool cannot: its content becomes that type, and bool reads of it see nonzero as true.
  if (c->dtype == DType::Bool && v.dtype != DType::Bool) set_content(c = bitcast(c, v.dtype));
  UOpPtr val = bitcast(value, c->dtype);
  // A bool write that keeps the old element where a mask says so (masked_fill_, x[mask] = v) into bytes
  // of another type keeps those bytes: its bool read of them would make a byte other than 0 or 1 a 1.
  if (v.dtype == DType::Bool && c->dtype != DType::Bool && value->op == Ops::WHERE) {
    UOpPtr raw = elements(c, v), old = bitcast(raw, DType::Bool);
    const UOpPtr &cond = value->src[0], &a = value->src[1], &b = value->src[2];
    if (b == old) val = where(cond, bitcast(a, c->dtype), raw);
    if (a == old) val = where(cond, raw, bitcast(b, c->dtype));
  }
  if (is_whole(v, c->shape[0])) {
    set_whole(val); // written whole in place (an optimizer's update of a parameter), as a fresh result is
  } else if (covers_storage(v, c->shape[0])) {
    set_content(view(val, storage_order(v)));
  } else {
    set_content(assign(c, val, View{v.sizes, v.strides, v.offset, std::nullopt}));
  }
  mark_pending();
  realize_if_graphs_are_large();
}

void LazyBuffer::scatter(DType dtype, const UOpPtr& index, const UOpPtr& value, std::optional<Ops> combine) {
  if (index->shape != value->shape || value->dtype != dtype)
    throw std::logic_error("LazyBuffer::scatter: value shape or dtype differs from the index");
  std::lock_guard lock(graph_mutex());
  UOpPtr c = content_locked(dtype);
  if (prod(index->shape) == 0) return;
  // As write: a bool storage scattered into through a view of another 1-byte type holds that type's bytes (put_,
  // index_put_, scatter_ into `b.view(torch.int8)`; fuzzer seed 22699)
  if (c->dtype == DType::Bool && dtype != DType::Bool) set_content(c = bitcast(c, dtype));
  // Combining needs the elements as `dtype`: a storage first written as another type of the same size
  // is viewed as `dtype` for the scatter.
  if (c->dtype == dtype) {
    set_content(tiny::scatter(c, index, value, combine));
  } else if (dtype == DType::Bool && !combine) {
    // bools placed into bytes: the bytes not written keep their bits
    set_content(tiny::scatter(c, index, bitcast(value, c->dtype), combine));
  } else if (dtype == DType::Bool) {
    // combined as bools where written (0 or 1 there, as torch stores), the other bytes unchanged
    UOpPtr combined = bitcast(tiny::scatter(bitcast(c, dtype), index, value, combine), c->dtype);
    UOpPtr none = expand(reshape(const_int(c->dtype, 0), {1}), c->shape);
    UOpPtr written =
        tiny::scatter(none, index, expand(reshape(const_int(c->dtype, 1), {1}), index->shape), std::nullopt);
    set_content(where(bitcast(written, DType::Bool), combined, c));
  } else {
    set_content(bitcast(tiny::scatter(bitcast(c, dtype), index, value, combine), c->dtype));
  }
  mark_pending();
  realize_if_graphs_are_large();
}

void LazyBuffer::write_host(const StridedView& v, const void* src) {
  std::lock_guard lock(graph_mutex());
  int64_t n = prod(v.sizes);
  if (n == 0) return;
  if (content() && itemsize(content_->dtype) != itemsize(v.dtype)) return write_host_bytes(v, src);
  UOpPtr c = content_locked(v.dtype);
  auto staging = std::make_shared<Buffer>(device_, c->dtype, n);
  device_.allocator().copy_in(staging->ptr(), src, staging->nbytes());
  UOpPtr b = buffer(staging);
  if (v.offset == 0 && n == c->shape[0] && is_contiguous_window(v)) {
    set_content(b);
    mark_pending();
    return;
  }
  write(v, bitcast(reshape(b, v.sizes), v.dtype));
}

// Storage-level copies (torch.save, UntypedStorage.copy_) see the storage as bytes, and so does a host value written
// through a view of another element size (a strided slice of an int32 storage viewed as uint8, filled): the view's
// elements are placed among the storage's bytes, copied into a new buffer of the content's type.
void LazyBuffer::write_host_bytes(const StridedView& v, const void* src) {
  const size_t item = itemsize(v.dtype);
  int64_t last = v.offset; // the view's last element (strides are not negative)
  for (size_t d = 0; d < v.sizes.size(); d++)
    last += (v.sizes[d] - 1) * v.strides[d];
  if (static_cast<size_t>(last + 1) * item > nbytes_)
    throw std::out_of_range("tiny: write past the end of the storage");
  const bool window = is_contiguous_window(v);
  size_t begin = static_cast<size_t>(v.offset) * item, len = prod(v.sizes) * item;
  std::vector<char> bytes(nbytes_);
  if (!window || begin > 0 || len < nbytes_) copy_out_bytes(bytes.data());
  if (window) {
    std::memcpy(bytes.data() + begin, src, len);
  } else {
    // row-major over the view: element i of src goes to its strided place
    for_each_element(v, [&](int64_t i, int64_t e) {
      std::memcpy(bytes.data() + static_cast<size_t>(e) * item, static_cast<const char*>(src) + i * item, item);
    });
  }
  auto buf = std::make_shared<Buffer>(device_, content_->dtype, content_->shape[0]);
  device_.allocator().copy_in(buf->ptr(), bytes.data(), buf->nbytes());
  set_content(buffer(buf));
  mark_pending();
}

void LazyBuffer::copy_out_bytes(void* dst) {
  flush();
  auto buf = std::static_pointer_cast<Buffer>(content_->buffer());
  copy_to_host(device_, *buf, 0, buf->nbytes(), dst);
}

void LazyBuffer::read_host(const StridedView& v, void* dst) {
  std::lock_guard lock(graph_mutex());
  if (prod(v.sizes) == 0) return;
  // A strided view of a storage filled as bytes (torch.load without map_location) reads after its bytes
  // become its type; a contiguous window of another element size is copied out as bytes.
  if (content() && itemsize(content_->dtype) != itemsize(v.dtype) && !is_contiguous_window(v)) content_locked(v.dtype);
  if (content_ && itemsize(content_->dtype) != itemsize(v.dtype)) {
    size_t begin = static_cast<size_t>(v.offset) * itemsize(v.dtype), len = prod(v.sizes) * itemsize(v.dtype);
    if (begin + len > nbytes_) throw std::out_of_range("tiny: read past the end of the storage");
    std::vector<char> bytes(nbytes_);
    copy_out_bytes(bytes.data());
    std::memcpy(dst, bytes.data() + begin, len);
    return;
  }
  flush();
  UOpPtr r = read(v);
  if (r->op == Ops::BITCAST) r = r->src[0];
  size_t nbytes = static_cast<size_t>(prod(v.sizes)) * itemsize(v.dtype);
  // A contiguous window of a realized buffer copies out directly.
  if (r->op == Ops::BUFFER) return copy_to_host(device_, static_cast<Buffer&>(*r->buffer()), 0, nbytes, dst);
  if (r->op == Ops::VIEW && r->src[0]->op == Ops::BUFFER && r->st().views.size() == 1) {
    const View& w = r->st().views[0];
    if (!w.mask && View{w.shape, w.strides, 0, std::nullopt}.is_contiguous()) {
      auto& buf = static_cast<Buffer&>(*r->src[0]->buffer());
      return copy_to_host(device_, buf, w.offset * itemsize(buf.dtype), nbytes, dst);
    }
  }
  copy_to_host(device_, static_cast<Buffer&>(*realize_value(r, &device_)), 0, nbytes, dst);
}

bool LazyBuffer::read_host_if_realized(const StridedView& v, void* dst) {
  std::lock_guard lock(graph_mutex());
  if (device_.target().gpu() || whole_ || !content_ || content_->op != Ops::BUFFER ||
      itemsize(content_->dtype) != itemsize(v.dtype))
    return false;
  if (prod(v.sizes) == 0) return true;
  const auto* src = static_cast<const char*>(std::static_pointer_cast<Buffer>(content_->buffer())->ptr());
  device_.wait_for_writes(src); // the kernel that wrote it may still be on the device's queue
  const size_t size = itemsize(v.dtype);
  for_each_element(v, [&](int64_t i, int64_t e) {
    std::memcpy(static_cast<char*>(dst) + static_cast<size_t>(i) * size, src + static_cast<size_t>(e) * size, size);
  });
  return true;
}

namespace {
// The devices whose queues flush() left running: the next synchronize() waits for them too.
std::vector<Device*> unwaited;
} // namespace

void LazyBuffer::realize_pending(Device* only, bool wait) {
  std::lock_guard lock(graph_mutex());
  // One graph never mixes devices (a copy between devices goes through the host): each device's pending
  // storages realize together, as one schedule on that device.
  std::vector<Device*> devices;
  for (LazyBuffer* lb = pending_list.head; lb; lb = lb->next_pending_)
    if ((!only || &lb->device_ == only) && std::find(devices.begin(), devices.end(), &lb->device_) == devices.end())
      devices.push_back(&lb->device_);
  for (Device* d : devices) {
    std::vector<LazyBuffer*> list;
    std::vector<UOpPtr> roots;
    std::vector<const UOp*> held; // every node they hold, dropped with them (set_content)
    for (LazyBuffer* lb = pending_list.head; lb; lb = lb->next_pending_) {
      if (&lb->device_ != d) continue;
      list.push_back(lb);
      roots.push_back(lb->content());
      for (const UOpPtr* n : {&lb->content_, &lb->whole_, &lb->recent_reads_[0], &lb->recent_reads_[1]})
        if (*n) held.push_back(n->get());
    }
    std::vector<UOpPtr> results = realize_all(roots, d, held);
    for (size_t i = 0; i < list.size(); i++) {
      list[i]->set_content(results[i]);
      list[i]->leave_pending();
    }
  }
  uops_made_at_last_sync = uops_made();
  // A sync point waits for what it enqueued (GPU launches and the CPU devices' queues are asynchronous), and for
  // what flushes before it left running; a flush waits for nothing (its kernels' errors reach a later sync).
  for (Device* d : devices)
    if (std::find(unwaited.begin(), unwaited.end(), d) == unwaited.end()) unwaited.push_back(d);
  if (!wait) return;
  for (Device* d : unwaited)
    if (!only || d == only) d->synchronize();
  std::erase_if(unwaited, [&](Device* d) { return !only || d == only; });
  raise_kernel_errors();
}

void synchronize() { LazyBuffer::realize_pending(nullptr); }

void flush() { LazyBuffer::realize_pending(nullptr, false); }

void synchronize(Device& device) {
  LazyBuffer::realize_pending(&device);
  device.synchronize(); // what earlier syncs enqueued on it
}

} // namespace tiny::runtime
