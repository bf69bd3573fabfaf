#include "compiler/uop.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace tiny {

namespace {

constexpr const char* kOpNames[] = {"BUFFER", "CONST",  "DEFINE_VAR", "IOTA",     "VIEW",
                                    "NEG",    "NOT",    "BITNOT",     "ABS",      "SQRT",
                                    "EXP",    "EXP2",   "LOG",        "LOG2",     "SIN",
                                    "COS",    "TAN",    "TANH",       "ERF",      "FLOOR",
                                    "CEIL",   "RINT",   "TRUNC",      "RECIP",    "LOG1P",
                                    "EXPM1",  "ASIN",   "ACOS",       "ATAN",     "SINH",
                                    "COSH",   "ASINH",  "ACOSH",      "ATANH",    "ERFC",
                                    "LGAMMA", "ADD",    "SUB",        "MUL",      "FDIV",
                                    "IDIV",   "MOD",    "POW",        "ATAN2",    "MAX",
                                    "MIN",    "CMPLT",  "CMPLE",      "CMPEQ",    "CMPNE",
                                    "AND",    "OR",     "XOR",        "SHL",      "SHR",
                                    "WHERE",  "CAST",   "BITCAST",    "REDUCE",   "CONTIGUOUS",
                                    "ASSIGN", "GATHER", "SCATTER",    "WINOGRAD", "WINOGRAD_FILTER_GRAD",
                                    "PARAM",  "ARG",    "RANGE",      "LOAD",     "STORE",
                                    "STAGE",  "SINK"};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == static_cast<size_t>(Ops::SINK) + 1);

void mix(size_t& h, size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }

size_t arg_hash(const Arg& a) {
  return std::visit(
      [](const auto& v) -> size_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          return 0;
        else if constexpr (std::is_same_v<T, int64_t>)
          return std::hash<int64_t>{}(v);
        else if constexpr (std::is_same_v<T, double>)
          return std::hash<uint64_t>{}(std::bit_cast<uint64_t>(v));
        else if constexpr (std::is_same_v<T, BufferRef>)
          return std::hash<const void*>{}(v.get());
        else if constexpr (std::is_same_v<T, ReduceArg>) {
          size_t h = static_cast<size_t>(v.op);
          for (int64_t a : v.axes)
            mix(h, static_cast<size_t>(a));
          return h;
        } else
          return v.hash();
      },
      a);
}

bool arg_equal(const Arg& a, const Arg& b) {
  if (a.index() != b.index()) return false;
  if (auto* x = std::get_if<double>(&a))
    return std::bit_cast<uint64_t>(*x) == std::bit_cast<uint64_t>(std::get<double>(b));
  return a == b;
}

Shape infer_shape(Ops op, std::span<const UOpPtr> src, const Arg& arg) {
  switch (op) {
  case Ops::BUFFER:
    return {std::get<BufferRef>(arg)->numel};
  case Ops::IOTA:
    return {std::get<int64_t>(arg)};
  case Ops::VIEW:
    return std::get<ShapeTracker>(arg).shape();
  case Ops::ASSIGN:
  case Ops::SCATTER:
    return src[0]->shape;
  case Ops::GATHER:
    return src[1]->shape;
  case Ops::CONTIGUOUS:
    return src[0]->shape;
  case Ops::WINOGRAD:
  case Ops::WINOGRAD_FILTER_GRAD:
    return std::get<View>(arg).shape;
  case Ops::REDUCE: {
    if (src.size() > 1) return {}; // kernel-level: a scalar accumulator
    Shape s = src[0]->shape;
    for (int64_t a : std::get<ReduceArg>(arg).axes)
      s.at(a) = 1;
    return s;
  }
  case Ops::CAST:
  case Ops::BITCAST:
    return src[0]->shape;
  default:
    if (is_alu(op)) {
      for (const UOpPtr& s : src)
        if (s->shape != src[0]->shape) throw std::invalid_argument(std::string("shape mismatch in ") + op_name(op));
      return src[0]->shape;
    }
    return {};
  }
}

constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();

bool mul_fits(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

// Interval arithmetic over the integer nodes that index math is made of.
std::pair<int64_t, int64_t> infer_bounds(Ops op, DType dtype, std::span<const UOpPtr> src, const Arg& arg) {
  if (dtype == DType::Bool) return {0, 1};
  // int64 bounds cannot say what a uint64 holds (its values above INT64_MAX are negative int64_ts)
  if (!is_int(dtype) || dtype == DType::UInt64) return {kMin, kMax};
  auto full = std::pair<int64_t, int64_t>{kMin, kMax};
  switch (op) {
  case Ops::CONST: {
    int64_t v = std::holds_alternative<int64_t>(arg) ? std::get<int64_t>(arg) : 0;
    return {v, v};
  }
  case Ops::RANGE:
    return {0, src[0]->vmax - 1};
  case Ops::ADD: {
    int64_t lo, hi;
    if (__builtin_add_overflow(src[0]->vmin, src[1]->vmin, &lo) ||
        __builtin_add_overflow(src[0]->vmax, src[1]->vmax, &hi))
      return full;
    return {lo, hi};
  }
  case Ops::MUL: {
    int64_t c[4];
    const UOp &a = *src[0], &b = *src[1];
    if (!mul_fits(a.vmin, b.vmin, c[0]) || !mul_fits(a.vmin, b.vmax, c[1]) || !mul_fits(a.vmax, b.vmin, c[2]) ||
        !mul_fits(a.vmax, b.vmax, c[3]))
      return full;
    return {std::min({c[0], c[1], c[2], c[3]}), std::max({c[0], c[1], c[2], c[3]})};
  }
  case Ops::IDIV:
    if (src[1]->op == Ops::CONST && src[1]->vmin > 0 && src[0]->vmin >= 0)
      return {src[0]->vmin / src[1]->vmin, src[0]->vmax / src[1]->vmin};
    return full;
  case Ops::MOD:
    if (src[1]->op == Ops::CONST && src[1]->vmin > 0 && src[0]->vmin >= 0)
      return {0, std::min(src[0]->vmax, src[1]->vmin - 1)};
    return full;
  case Ops::MAX:
    return {std::max(src[0]->vmin, src[1]->vmin), std::max(src[0]->vmax, src[1]->vmax)};
  case Ops::MIN:
    return {std::min(src[0]->vmin, src[1]->vmin), std::min(src[0]->vmax, src[1]->vmax)};
  case Ops::WHERE:
    return {std::min(src[1]->vmin, src[2]->vmin), std::max(src[1]->vmax, src[2]->vmax)};
  default:
    return full;
  }
}

} // namespace

const char* op_name(Ops op) { return kOpNames[static_cast<size_t>(op)]; }
bool is_unary(Ops op) { return op >= Ops::NEG && op <= Ops::LGAMMA; }
bool is_binary(Ops op) { return op >= Ops::ADD && op <= Ops::SHR; }
bool is_alu(Ops op) { return is_unary(op) || is_binary(op) || op == Ops::WHERE; }
bool is_comparison(Ops op) { return op >= Ops::CMPLT && op <= Ops::CMPNE; }

// The intern table: every live node, found by content. Holds raw pointers; a node removes itself
// when it dies, and a lookup that finds a dying node (weak_from_this expired) builds a new one.
// Open addressing (linear probing) over slots that hold each node's hash beside it: interning a node
// allocates nothing beyond the node (a hash map's own entry was a measured part of recording an op), and
// a lookup reads a node only where the hashes agree (walking chains through the nodes missed the cache
// at every node: most of the time of interning, with a graph of thousands of nodes).
struct InternTable {
  struct Slot {
    size_t hash = 0;
    UOp* node = nullptr; // nullptr: empty
  };
  std::mutex mu;
  std::vector<Slot> slots = std::vector<Slot>(2048); // a power of two, at most half full
  size_t count = 0;
  size_t made = 0; // nodes inserted, ever
  static InternTable& get() {
    static InternTable* t = new InternTable(); // never destroyed: nodes may die during static teardown
    return *t;
  }
  size_t mask() const { return slots.size() - 1; }
  // Fibonacci hashing: the high bits of the product, which every bit of the hash reaches (a node's hash
  // mixes pointers, whose low bits are the same).
  size_t home(size_t h) const { return (h * 0x9e3779b97f4a7c15ULL) >> (64 - std::countr_zero(slots.size())); }
  void insert(UOp* n) {
    made++;
    if (2 * ++count > slots.size()) grow();
    place(n->hash_, n);
  }
  void place(size_t h, UOp* n) {
    size_t i = home(h);
    while (slots[i].node)
      i = (i + 1) & mask();
    slots[i] = {h, n};
  }
  void erase(UOp* n) {
    size_t i = home(n->hash_);
    while (slots[i].node != n) {
      if (!slots[i].node) return;
      i = (i + 1) & mask();
    }
    count--;
    // Backward shift: a later slot of the same run moves into the hole unless its home lies cyclically in
    // (hole, slot], so that every node stays reachable from its home without a gap.
    for (size_t j = (i + 1) & mask(); slots[j].node; j = (j + 1) & mask()) {
      size_t k = home(slots[j].hash);
      bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
      if (stays) continue;
      slots[i] = slots[j];
      i = j;
    }
    slots[i] = {};
  }
  void grow() {
    std::vector<Slot> old(slots.size() * 2);
    old.swap(slots);
    for (const Slot& s : old)
      if (s.node) place(s.hash, s.node);
  }
};

UOp::UOp(Ops op_, DType dtype_, std::span<const UOpPtr> src_, Arg arg_, Shape shape_, size_t hash,
         std::pair<int64_t, int64_t> bounds)
    : op(op_), dtype(dtype_), src(src_.begin(), src_.end()), arg(std::move(arg_)), shape(std::move(shape_)),
      vmin(bounds.first), vmax(bounds.second), hash_(hash) {}

UOp::~UOp() {
  if (!interned_) return;
  InternTable& t = InternTable::get();
  std::lock_guard lock(t.mu);
  t.erase(this);
}

UOpPtr UOp::make(Ops op, DType dtype, std::initializer_list<UOpPtr> src, Arg arg) {
  return intern(op, dtype, std::span<const UOpPtr>(src.begin(), src.size()), std::move(arg));
}
UOpPtr UOp::make(Ops op, DType dtype, const std::vector<UOpPtr>& src, Arg arg) {
  return intern(op, dtype, std::span<const UOpPtr>(src), std::move(arg));
}
UOpPtr UOp::make(Ops op, DType dtype, const SmallVector<UOpPtr, 3>& src, Arg arg) {
  return intern(op, dtype, std::span<const UOpPtr>(src.data(), src.size()), std::move(arg));
}

UOpPtr UOp::intern(Ops op, DType dtype, std::span<const UOpPtr> src, Arg&& arg) {
  size_t h = static_cast<size_t>(op) * 131 + static_cast<size_t>(dtype);
  for (const UOpPtr& s : src)
    mix(h, std::hash<const void*>{}(s.get()));
  mix(h, arg_hash(arg));
  InternTable& t = InternTable::get();
  // One lookup under the lock, and the node built under it when none is found (a lookup misses the cache
  // more often than not, in a table of every live node: twice per new node was a measured part of the
  // cost of recording an op). Building destroys no node, so ~UOp never waits on the lock held here; `arg`,
  // when a node is found, dies after it is released (`src` is the caller's).
  std::lock_guard lock(t.mu);
  for (size_t i = t.home(h); t.slots[i].node; i = (i + 1) & t.mask()) {
    if (t.slots[i].hash != h) continue;
    UOp* n = t.slots[i].node;
    if (n->op != op || n->dtype != dtype || n->src.size() != src.size()) continue;
    bool same = true;
    for (size_t i = 0; i < src.size() && same; i++)
      same = n->src[i] == src[i];
    if (!same || !arg_equal(n->arg, arg)) continue;
    if (UOpPtr alive = n->weak_from_this().lock()) return alive;
  }
  Shape shape = infer_shape(op, src, arg);
  auto bounds = infer_bounds(op, dtype, src, arg);
  auto node = std::make_shared<UOp>(op, dtype, src, std::move(arg), std::move(shape), h, bounds);
  node->interned_ = true;
  t.insert(node.get());
  return node;
}

size_t live_uops() {
  InternTable& t = InternTable::get();
  std::lock_guard lock(t.mu);
  return t.count;
}

size_t uops_made() {
  InternTable& t = InternTable::get();
  std::lock_guard lock(t.mu);
  return t.made;
}

double UOp::const_f() const {
  if (auto* d = std::get_if<double>(&arg)) return *d;
  return static_cast<double>(std::get<int64_t>(arg));
}

int64_t UOp::const_i() const {
  if (auto* i = std::get_if<int64_t>(&arg)) return *i;
  return static_cast<int64_t>(std::get<double>(arg));
}

std::string UOp::str() const {
  std::ostringstream os;
  os << op_name(op) << ":" << name(dtype);
  if (!shape.empty()) {
    os << "[";
    for (size_t i = 0; i < shape.size(); i++)
      os << (i ? "," : "") << shape[i];
    os << "]";
  }
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>)
          os << " " << v;
        else if constexpr (std::is_same_v<T, BufferRef>)
          os << " buf@" << v.get();
        else if constexpr (std::is_same_v<T, ShapeTracker> || std::is_same_v<T, View>)
          os << " " << v.str();
        else if constexpr (std::is_same_v<T, ReduceArg>) {
          os << " " << op_name(v.op) << " axes=(";
          for (int64_t a : v.axes)
            os << a << ",";
          os << ")";
        }
      },
      arg);
  return os.str();
}

std::string UOp::tree_str() const {
  std::ostringstream os;
  std::unordered_map<const UOp*, int> ids;
  for (const UOpPtr& n : toposort(shared_from_this())) {
    int id = static_cast<int>(ids.size());
    ids[n.get()] = id;
    os << "%" << id << " = " << n->str();
    for (const UOpPtr& s : n->src)
      os << " %" << ids[s.get()];
    os << "\n";
  }
  return os.str();
}

std::vector<UOpPtr> toposort(const UOpPtr& root) {
  NodeSet seen;
  return toposort(root, seen);
}

std::vector<UOpPtr> toposort(const UOpPtr& root, NodeSet& seen) {
  std::vector<UOpPtr> order;
  if (!seen.insert(root.get())) return order;
  // Iterative DFS: graphs can be deep chains. The stack points at the owners' references (root, or a source
  // of a node below root, alive while root is): no reference count moves but the one a node's place in order takes.
  std::vector<std::pair<const UOpPtr*, size_t>> stack{{&root, 0}};
  while (!stack.empty()) {
    auto& [n, i] = stack.back();
    if (i < (*n)->src.size()) {
      const UOpPtr& s = (*n)->src[i++];
      if (seen.insert(s.get())) stack.emplace_back(&s, 0);
    } else {
      order.push_back(*n);
      stack.pop_back();
    }
  }
  return order;
}

// ---- builders ----

UOpPtr const_int(DType dt, int64_t v) { return UOp::make(Ops::CONST, dt, {}, v); }
UOpPtr const_float(DType dt, double v) { return UOp::make(Ops::CONST, dt, {}, v); }
UOpPtr const_like(const UOpPtr& x, double v) {
  return is_float(x->dtype) ? const_float(x->dtype, v) : const_int(x->dtype, static_cast<int64_t>(v));
}
UOpPtr iota(int64_t n, DType dt) { return UOp::make(Ops::IOTA, dt, {}, n); }
UOpPtr var_int(DType dt, int64_t v) { return UOp::make(Ops::DEFINE_VAR, dt, {}, v); }
UOpPtr var_float(DType dt, double v) { return UOp::make(Ops::DEFINE_VAR, dt, {}, v); }
UOpPtr buffer(const BufferRef& buf) { return UOp::make(Ops::BUFFER, buf->dtype, {}, buf); }

UOpPtr view(const UOpPtr& x, ShapeTracker st) {
  if (st.views.size() == 1 && st.views[0].is_contiguous() && st.shape() == x->shape) return x;
  // A view of a view composes into one tracker over the inner source.
  if (x->op == Ops::VIEW) return view(x->src[0], st.on_top_of(x->st()));
  return UOp::make(Ops::VIEW, x->dtype, {x}, std::move(st));
}

UOpPtr reshape(const UOpPtr& x, const Shape& shape) {
  if (x->shape == shape) return x;
  return view(x, ShapeTracker::from_shape(x->shape).reshape(shape));
}

bool is_reshape(const UOpPtr& n) {
  return n->op == Ops::VIEW && n->st().is_contiguous() && prod(n->shape) == prod(n->src[0]->shape);
}

UOpPtr expand(const UOpPtr& x, const Shape& shape) {
  if (x->shape == shape) return x;
  return view(x, ShapeTracker::from_shape(x->shape).expand(shape));
}

UOpPtr permute(const UOpPtr& x, const std::vector<int64_t>& order) {
  return view(x, ShapeTracker::from_shape(x->shape).permute(order));
}

UOpPtr pad(const UOpPtr& x, const std::vector<std::pair<int64_t, int64_t>>& pads) {
  return view(x, ShapeTracker::from_shape(x->shape).pad(pads));
}

UOpPtr shrink(const UOpPtr& x, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  return view(x, ShapeTracker::from_shape(x->shape).shrink(ranges));
}

UOpPtr flip(const UOpPtr& x, const std::vector<bool>& axes) {
  return view(x, ShapeTracker::from_shape(x->shape).flip(axes));
}

UOpPtr reduce(const UOpPtr& x, Ops op, const std::vector<int64_t>& axes) {
  if (op != Ops::ADD && op != Ops::MUL && op != Ops::MAX && op != Ops::MIN && op != Ops::XOR)
    throw std::invalid_argument(std::string("reduce: ") + op_name(op) + " is not a reduction");
  if (op == Ops::XOR && (is_float(x->dtype) || x->dtype == DType::Bool))
    throw std::invalid_argument("reduce: XOR folds integers only");
  std::vector<int64_t> kept;
  for (int64_t a : axes) {
    if (a < 0 || a >= static_cast<int64_t>(x->shape.size())) throw std::invalid_argument("reduce: axis out of range");
    if (x->shape[a] != 1) kept.push_back(a);
  }
  std::sort(kept.begin(), kept.end());
  kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
  // A sum of one element is 0 + x, as torch's sums start from 0: -0 sums to +0.
  if (kept.empty()) {
    if (op != Ops::ADD || !is_float(x->dtype)) return x;
    return alu(Ops::ADD, x, expand(reshape(const_like(x, 0), Shape(x->shape.size(), 1)), x->shape));
  }
  return UOp::make(Ops::REDUCE, x->dtype, {x}, ReduceArg{op, std::move(kept)});
}

UOpPtr contiguous(const UOpPtr& x) { return UOp::make(Ops::CONTIGUOUS, x->dtype, {x}); }

UOpPtr alu(Ops op, const UOpPtr& a) {
  if (!is_unary(op)) throw std::invalid_argument(std::string(op_name(op)) + " is not unary");
  return UOp::make(op, op == Ops::NOT ? DType::Bool : a->dtype, {a});
}

UOpPtr alu(Ops op, const UOpPtr& a, const UOpPtr& b) {
  if (!is_binary(op)) throw std::invalid_argument(std::string(op_name(op)) + " is not binary");
  if (a->dtype != b->dtype)
    throw std::invalid_argument(std::string(op_name(op)) + ": dtypes differ (" + std::string(name(a->dtype)) + ", " +
                                std::string(name(b->dtype)) + ")");
  return UOp::make(op, is_comparison(op) ? DType::Bool : a->dtype, {a, b});
}

UOpPtr checked_division(Ops op, const UOpPtr& a, const UOpPtr& b) {
  UOpPtr n = alu(op, a, b);
  if ((op != Ops::IDIV && op != Ops::MOD) || is_float(n->dtype) || n->dtype == DType::Bool) return n;
  return UOp::make(op, n->dtype, {a, b}, int64_t{1});
}

bool is_checked_division(const UOpPtr& n) {
  return (n->op == Ops::IDIV || n->op == Ops::MOD) && std::holds_alternative<int64_t>(n->arg) &&
         std::get<int64_t>(n->arg) == 1;
}

UOpPtr where(const UOpPtr& c, const UOpPtr& a, const UOpPtr& b) {
  if (c->dtype != DType::Bool || a->dtype != b->dtype) throw std::invalid_argument("WHERE: bad dtypes");
  return UOp::make(Ops::WHERE, a->dtype, {c, a, b});
}

UOpPtr cast(const UOpPtr& x, DType dt) {
  if (x->dtype == dt) return x;
  return UOp::make(Ops::CAST, dt, {x});
}

UOpPtr bitcast(const UOpPtr& x, DType dt) {
  if (x->dtype == dt) return x;
  if (itemsize(x->dtype) != itemsize(dt)) throw std::invalid_argument("BITCAST: item sizes differ");
  return UOp::make(Ops::BITCAST, dt, {x});
}

UOpPtr assign(const UOpPtr& base, const UOpPtr& value, const View& region) {
  if (base->shape.size() != 1 || value->shape != region.shape || base->dtype != value->dtype)
    throw std::invalid_argument("ASSIGN: value does not match the region");
  return UOp::make(Ops::ASSIGN, base->dtype, {base, value}, region);
}

UOpPtr gather(const UOpPtr& data, const UOpPtr& index) {
  if (data->shape.size() != 1 || index->dtype != DType::Int64) throw std::invalid_argument("GATHER: bad operands");
  return UOp::make(Ops::GATHER, data->dtype, {data, index});
}

UOpPtr winograd(const UOpPtr& x, const UOpPtr& u, int64_t height, int64_t width) {
  const Shape &xs = x->shape, &us = u->shape;
  if (xs.size() != 4 || us.size() != 3 || x->dtype != DType::Float32 || u->dtype != DType::Float32 || us[0] != 16 ||
      us[1] != xs[3] || xs[1] % 2 != 0 || xs[2] % 2 != 0 || height < 1 || width < 1 || height > xs[1] - 2 ||
      width > xs[2] - 2 || height <= xs[1] - 4 || width <= xs[2] - 4)
    throw std::invalid_argument("WINOGRAD: bad operands");
  return UOp::make(Ops::WINOGRAD, DType::Float32, {x, u}, View::contiguous({xs[0], us[2], height, width}));
}

UOpPtr winograd_filter_grad(const UOpPtr& x, const UOpPtr& g, int64_t chunks) {
  const Shape &xs = x->shape, &gs = g->shape;
  if (xs.size() != 4 || gs.size() != 4 || x->dtype != DType::Float32 || g->dtype != DType::Float32 || gs[0] != xs[0] ||
      gs[1] < xs[1] - 2 || gs[2] < xs[2] - 2 || gs[1] % 2 != 0 || gs[2] % 2 != 0 || xs[1] % 2 != 0 || xs[2] % 2 != 0 ||
      chunks < 1 || chunks > xs[0])
    throw std::invalid_argument("WINOGRAD_FILTER_GRAD: bad operands");
  return UOp::make(Ops::WINOGRAD_FILTER_GRAD, DType::Float32, {x, g}, View::contiguous({chunks, 16, gs[3], xs[3]}));
}

UOpPtr scatter(const UOpPtr& base, const UOpPtr& index, const UOpPtr& value, std::optional<Ops> combine) {
  if (base->shape.size() != 1 || index->dtype != DType::Int64 || index->shape != value->shape ||
      base->dtype != value->dtype)
    throw std::invalid_argument("SCATTER: bad operands");
  return UOp::make(Ops::SCATTER, base->dtype, {base, index, value},
                   int64_t{combine ? static_cast<int64_t>(*combine) : -1});
}

UOpPtr idx_const(int64_t v) { return const_int(kIndex, v); }

UOpPtr operator+(const UOpPtr& a, const UOpPtr& b) {
  if (a->is_const() && b->is_const()) return idx_const(a->const_i() + b->const_i());
  if (a->is_const() && a->const_i() == 0) return b;
  if (b->is_const() && b->const_i() == 0) return a;
  return alu(Ops::ADD, a, b);
}

UOpPtr operator*(const UOpPtr& a, const UOpPtr& b) {
  if (a->is_const() && b->is_const()) return idx_const(a->const_i() * b->const_i());
  if ((a->is_const() && a->const_i() == 0) || (b->is_const() && b->const_i() == 0)) return idx_const(0);
  if (a->is_const() && a->const_i() == 1) return b;
  if (b->is_const() && b->const_i() == 1) return a;
  return alu(Ops::MUL, a, b);
}

} // namespace tiny
