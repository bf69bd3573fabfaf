// Indexing by tensors: advanced indexing (index.Tensor) and index_put_, index_select, index_add,
// index_fill_, index_copy, take, put_, gather, the scatter family (scatter, scatter_add,
// scatter_reduce), masked_select, nonzero, and embedding's backward (embedding itself is torch's
// index_select).
//
// Reads are GATHERs: a data-dependent read of the source storage at positions computed from the index
// tensors, which fuses into whatever consumes the result. Writes are SCATTERs into the destination's
// storage (LazyBuffer::scatter): one ordered pass over the elements, so repeated indices replace or
// accumulate in the order torch's CPU kernels do.
//
// Syncs. torch's CPU kernels raise on an out-of-range index at the call, so tiny reads each index
// tensor's min and max to the host first: one small reduce kernel per index tensor, all realized in
// one sync (with everything else pending), then a 16-byte read. A CPU index tensor is checked on the
// CPU without a sync. Backward ops (embedding_dense_backward, index_put_ with unsafe=True as autograd
// calls it) skip the check: their indices were checked by the forward. Boolean masks (x[mask]),
// masked_select and nonzero have data-dependent result shapes: they read the mask to the host (a sync).
// x[mask] = v needs no sync when v does not vary along the masked elements (a `where`).

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/gather_meta_dispatch.h>
#include <ATen/ops/index_add_meta_dispatch.h>
#include <ATen/ops/index_copy_meta_dispatch.h>
#include <ATen/ops/index_meta_dispatch.h>
#include <ATen/ops/index_reduce_meta_dispatch.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/scatter_add_meta_dispatch.h>
#include <ATen/ops/scatter_meta_dispatch.h>
#include <ATen/ops/scatter_reduce_meta_dispatch.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aten_ops/builders.h"
#include "aten_ops/complex_math.h"
#include "aten_ops/read_on_host.h"
#include "csrc/fallback.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

using IndexList = c10::List<std::optional<at::Tensor>>;

// ---- index arithmetic (int64 UOps over a shape) ----

UOpPtr full(int64_t v, const Shape& shape) {
  UOpPtr c = const_int(kIndex, v);
  return shape.empty() ? c : expand(reshape(c, Shape(shape.size(), 1)), shape);
}

// The coordinate along `d` of every element of `shape`.
UOpPtr coordinate(const Shape& shape, size_t d) {
  Shape s(shape.size(), 1);
  s[d] = shape[d];
  return expand(reshape(iota(shape[d], kIndex), s), shape);
}

// x (rank r) as a UOp of `shape`: its dims become dims [at, at + r), broadcast along the others.
UOpPtr place(const UOpPtr& x, const Shape& shape, size_t at) {
  Shape s(shape.size(), 1);
  for (size_t i = 0; i < x->shape.size(); i++)
    s[at + i] = x->shape[i];
  return expand(reshape(x, s), shape);
}

// torch's broadcasting of x to `shape` (aligned at the trailing dims).
UOpPtr broadcast_to(const UOpPtr& x, const Shape& shape) { return place(x, shape, shape.size() - x->shape.size()); }

// Negative indices count from the end of a dim of `size`.
UOpPtr wrap_negative(const UOpPtr& i, int64_t size) {
  return where(alu(Ops::CMPLT, i, full(0, i->shape)), add(i, full(size, i->shape)), i);
}

UOpPtr read_index(const at::Tensor& index) { return cast(read(index), kIndex); }

DType dtype_of(const at::Tensor& t) { return to_tiny_dtype(t.scalar_type()); }

// ---- complex tensors ----
// A complex element is two storage slots, real then imaginary part (csrc/tensor_bridge.h): a complex
// tensor's values are (real, imaginary) pairs with one more axis, of 2, last, and an element's storage
// position p becomes the positions 2p and 2p + 1 of its parts. Gathers and scatters then move parts.

// (read_values, write_values, value_dtype, value_shape, conjugated: csrc/tensor_bridge.h)

// The whole storage of `t` as a flat array of the dtype of its values: what GATHER reads from.
UOpPtr storage_of(const at::Tensor& t) {
  DType dt = value_dtype(t.scalar_type());
  int64_t n = static_cast<int64_t>(t.storage().nbytes()) / static_cast<int64_t>(itemsize(dt));
  UOpPtr s = lazy_buffer(t).read(runtime::StridedView{{n}, {1}, 0, dt});
  return t.is_neg() ? alu(Ops::NEG, s) : s;
}

// torch's kernels treat a 0-dim tensor as one of shape (1,).
Shape nonempty_sizes(const at::Tensor& t) { return t.dim() == 0 ? Shape{1} : to_shape(t.sizes()); }
Shape nonempty_strides(const at::Tensor& t) { return t.dim() == 0 ? Shape{1} : to_shape(t.strides()); }

// Storage positions in `t` (rank of `shape`) of the elements at every coordinate of `shape`, except
// that the coordinate along `dim` is `along` (an int64 UOp of `shape`).
UOpPtr positions_along(const at::Tensor& t, const Shape& shape, int64_t dim, const UOpPtr& along) {
  Shape strides = nonempty_strides(t);
  UOpPtr pos = full(t.storage_offset(), shape);
  for (size_t d = 0; d < shape.size(); d++) {
    UOpPtr c = static_cast<int64_t>(d) == dim ? along : coordinate(shape, d);
    pos = add(pos, mul(c, full(strides[d], shape)));
  }
  return pos;
}

// The positions of the parts of the complex elements at `positions`: 2p and 2p + 1, along a new last axis.
UOpPtr pair_positions(const UOpPtr& positions) {
  Shape one = positions->shape, pairs = positions->shape;
  one.push_back(1);
  pairs.push_back(2);
  UOpPtr first = mul(expand(reshape(positions, one), pairs), full(2, pairs));
  return add(first, coordinate(pairs, pairs.size() - 1));
}

// Storage positions of t's elements (an int64 UOp) as positions in storage_of(t) of its values.
UOpPtr value_positions(const at::Tensor& t, const UOpPtr& positions) {
  return t.is_complex() ? pair_positions(positions) : positions;
}

// t's elements at flat row-major positions `flat` (an int64 UOp): pairs for a complex t.
UOpPtr flat_elements(const at::Tensor& t, const UOpPtr& flat) {
  int64_t n = t.numel();
  if (t.is_complex()) return gather(reshape(read_complex(t), {n * 2}), pair_positions(flat));
  return gather(reshape(read(t), {n}), flat);
}

// t's values at storage positions `positions` (pairs for a complex t, conjugate bit resolved).
UOpPtr gather_values(const at::Tensor& t, const UOpPtr& positions) {
  UOpPtr v = gather(storage_of(t), value_positions(t, positions));
  return t.is_complex() && t.is_conj() ? conjugated(v) : v;
}

// A SCATTER runs as one ordered pass on one thread and computes its index and value inline: a value
// with a reduction in it is computed first, in parallel.
UOpPtr computed_first_if_heavy(const UOpPtr& v) {
  for (const UOpPtr& n : toposort(v))
    if (n->op == Ops::REDUCE) return contiguous(v);
  return v;
}

// Writes value[i] into t's storage at positions[i], in order, replacing or combining.
// `value` holds t's values (pairs for a complex t, which combine only by adding).
void scatter_into(const at::Tensor& t, UOpPtr positions, UOpPtr value, std::optional<Ops> combine) {
  if (prod(positions->shape) == 0) return;
  if (t.is_complex()) {
    if (combine && *combine != Ops::ADD) to_tiny_dtype(t.scalar_type()); // NotNativeDtype: the CPU multiplies
    positions = value_positions(t, positions);
    if (t.is_conj()) value = conjugated(value);
  }
  DType dt = value_dtype(t.scalar_type());
  // bool has no sum: torch's bool accumulation is a logical or
  if (dt == DType::Bool && combine == Ops::ADD) combine = Ops::MAX;
  if (t.is_neg()) {
    TORCH_CHECK(!combine || combine == Ops::ADD, "tiny: a combining scatter into a negative view is not supported");
    value = alu(Ops::NEG, value);
  }
  lazy_buffer(t).scatter(dt, computed_first_if_heavy(positions), computed_first_if_heavy(value), combine);
}

// ---- bounds of index tensors, read to the host ----

struct IndexRange {
  int64_t min = 0, max = 0;
  bool empty = true;
};

// The smallest and largest value of each index tensor. Tiny tensors: read from host memory where they are there
// (int_range_on_host: a batch of indices copied to the device), else one reduce kernel each (the max of [x; ~x]
// gives max(x) and ~min(x) without overflow), all realized by the first read (one sync).
std::vector<IndexRange> index_ranges(const std::vector<at::Tensor>& indices) {
  std::vector<IndexRange> out(indices.size());
  std::vector<at::Tensor> pending(indices.size());
  for (size_t k = 0; k < indices.size(); k++) {
    const at::Tensor& t = indices[k];
    if (!t.defined() || t.numel() == 0) continue;
    out[k].empty = false;
    if (t.is_cpu()) {
      auto [lo, hi] = at::aminmax(t.to(at::kLong));
      out[k].min = lo.item<int64_t>();
      out[k].max = hi.item<int64_t>();
      continue;
    }
    if (std::optional<IntRange> r = int_range_on_host(t)) {
      out[k].min = r->min, out[k].max = r->max;
      continue;
    }
    int64_t n = t.numel();
    UOpPtr x = expand(reshape(read_index(t), {1, n}), {2, n});
    UOpPtr both = where(alu(Ops::CMPEQ, coordinate({2, n}, 0), full(0, {2, n})), x, alu(Ops::BITNOT, x));
    pending[k] = empty_tiny({2}, at::kLong, t.device());
    write(pending[k], reshape(reduce(both, Ops::MAX, {1}), {2}));
  }
  for (size_t k = 0; k < indices.size(); k++) {
    if (!pending[k].defined()) continue;
    at::Tensor host = pending[k].cpu();
    out[k].max = host.data_ptr<int64_t>()[0];
    out[k].min = ~host.data_ptr<int64_t>()[1];
  }
  return out;
}

IndexRange index_range(const at::Tensor& index) { return index_ranges({index})[0]; }

int64_t offender(const IndexRange& r, int64_t lo, int64_t hi) { return r.min < lo ? r.min : r.max >= hi ? r.max : lo; }

// gather and the scatter family: RuntimeError, indices in [0, size).
void check_scatter_gather_range(const at::Tensor& index, int64_t dim, int64_t size) {
  IndexRange r = index_range(index);
  if (r.empty) return;
  TORCH_CHECK(r.min >= 0 && r.max < size, "index ", offender(r, 0, size), " is out of bounds for dimension ", dim,
              " with size ", size);
}

// index_select, index_add, embedding: indices in [0, size). torch's CPU kernels raise IndexError, or
// RuntimeError on their paths for index_select along dim 1 into a contiguous result and index_add
// into a tensor of 2 or more dims.
enum class SelectPath { Plain, Dim1, Slices };

void check_select_range(const at::Tensor& index, int64_t dim, int64_t size, SelectPath path) {
  IndexRange r = index_range(index);
  if (r.empty || (r.min >= 0 && r.max < size)) return;
  int64_t bad = offender(r, 0, size);
  TORCH_CHECK(path != SelectPath::Dim1, "INDICES element is out of DATA bounds, id=", bad, " axis_dim=", size);
  TORCH_CHECK(path != SelectPath::Slices, "index ", bad, " is out of bounds for dimension ", dim, " with size ", size);
  TORCH_CHECK_INDEX(false, "index out of range in self");
}

// ---- data-dependent shapes ----

// `t != 0` on the host: computed on the device, then read (a sync).
at::Tensor flags_on_host(const at::Tensor& t) {
  if (t.is_cpu() || t.scalar_type() == at::kBool) return t.cpu();
  at::Tensor flags = empty_tiny(t.sizes(), at::kBool, t.device());
  if (t.is_complex()) {
    write(flags, complex_math::nonzero(complex_math::parts_of(read_complex(t))));
  } else {
    UOpPtr x = read(t);
    write(flags, alu(Ops::CMPNE, x, broadcast_to(const_like(x, 0), x->shape)));
  }
  return flags.cpu();
}

// torch.nonzero of `t`, computed by torch on the host.
at::Tensor nonzero_on_host(const at::Tensor& t) { return at::nonzero(flags_on_host(t)); }

// ---- advanced indexing ----

// The indices of an advanced index, one per dim of self: undefined where the dim is taken whole; int or
// long tensors on self's device. Masks became the long indices of their nonzero elements.
struct AdvancedIndex {
  std::vector<at::Tensor> index;
  std::vector<bool> in_range;     // known to be in range (from a mask)
  std::vector<at::Tensor> given;  // the index tensors as given (a CPU one is range-checked on the CPU)
  Shape broadcast;                // the common shape of the index tensors
  std::vector<size_t> dims;       // the indexed dims of self
  size_t start = 0;               // where the broadcast dims sit in the result
  Shape result;                   // self[indices].shape
  std::vector<size_t> result_dim; // per dim of self that is not indexed: its dim in the result
};

std::string shapes_of(const std::vector<at::Tensor>& tensors) {
  std::ostringstream os;
  bool first = true;
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) continue;
    os << (first ? "" : ", ") << t.sizes();
    first = false;
  }
  return os.str();
}

AdvancedIndex advanced_index(const at::Tensor& self, const IndexList& indices) {
  for (const std::optional<at::Tensor>& i : indices)
    if (i.has_value()) check_same_device({self, *i});
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", indices.size(), ")");
  at::native::checkIndexTensorTypes(indices, /*allow_int=*/true);
  AdvancedIndex ai;
  for (const std::optional<at::Tensor>& opt : indices) {
    if (!opt.has_value() || !opt->defined()) {
      ai.index.emplace_back();
      ai.in_range.push_back(true);
      ai.given.emplace_back();
      continue;
    }
    const at::Tensor& idx = *opt;
    if (idx.scalar_type() == at::kByte || idx.scalar_type() == at::kBool) {
      if (idx.scalar_type() == at::kByte)
        TORCH_WARN("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.");
      for (const auto j : c10::irange(idx.dim())) {
        int64_t src = static_cast<int64_t>(ai.index.size()) + j;
        TORCH_CHECK_INDEX(idx.size(j) == self.size(src), "The shape of the mask ", idx.sizes(), " at index ", j,
                          " does not match the shape of the indexed tensor ", self.sizes(), " at index ", src);
      }
      at::Tensor nz = nonzero_on_host(idx).to(self.device());
      for (const auto j : c10::irange(idx.dim())) {
        ai.index.push_back(nz.select(1, j));
        ai.in_range.push_back(true);
        ai.given.emplace_back();
      }
    } else {
      ai.index.push_back(idx.device() == self.device() ? idx : idx.to(self.device()));
      ai.in_range.push_back(false);
      ai.given.push_back(idx);
    }
  }
  while (ai.index.size() < static_cast<size_t>(self.dim())) {
    ai.index.emplace_back();
    ai.in_range.push_back(true);
    ai.given.emplace_back();
  }
  std::optional<at::DimVector> common;
  for (size_t d = 0; d < ai.index.size(); d++) {
    if (!ai.index[d].defined()) continue;
    ai.dims.push_back(d);
    try {
      common = common ? at::infer_size_dimvector(*common, ai.index[d].sizes())
                      : at::DimVector(ai.index[d].sizes().begin(), ai.index[d].sizes().end());
    } catch (const c10::Error&) {
      TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together with shapes ",
                        shapes_of(ai.index));
    }
  }
  if (common) ai.broadcast.assign(common->begin(), common->end());
  // torch checks this before dtypes and values: no index is valid in an empty dim
  bool empty_dim = std::any_of(ai.dims.begin(), ai.dims.end(), [&](size_t d) { return self.size(d) == 0; });
  TORCH_CHECK_INDEX(!empty_dim || prod(ai.broadcast) == 0, "index is out of bounds for dimension with size 0");
  // Adjacent indexed dims keep their place; otherwise the broadcast dims go first (numpy's rule).
  bool adjacent = ai.dims.empty() || ai.dims.back() - ai.dims.front() + 1 == ai.dims.size();
  ai.start = adjacent && !ai.dims.empty() ? ai.dims.front() : 0;
  ai.result_dim.assign(self.dim(), 0);
  Shape before, after;
  for (size_t d = 0; d < static_cast<size_t>(self.dim()); d++) {
    if (ai.index[d].defined()) continue;
    (adjacent && !ai.dims.empty() && d < ai.dims.front() ? before : after).push_back(d);
  }
  for (int64_t d : before) {
    ai.result_dim[d] = ai.result.size();
    ai.result.push_back(self.size(d));
  }
  ai.result.insert(ai.result.end(), ai.broadcast.begin(), ai.broadcast.end());
  for (int64_t d : after) {
    ai.result_dim[d] = ai.result.size();
    ai.result.push_back(self.size(d));
  }
  return ai;
}

// Raises torch's IndexError for an index outside [-size, size) of its dim.
void check_advanced_index_range(const at::Tensor& self, const AdvancedIndex& ai) {
  std::vector<at::Tensor> unchecked;
  for (size_t d = 0; d < ai.index.size(); d++)
    unchecked.push_back(ai.in_range[d] ? at::Tensor() : ai.given[d]);
  std::vector<IndexRange> ranges = index_ranges(unchecked);
  for (size_t d = 0; d < ranges.size(); d++) {
    if (ranges[d].empty) continue;
    int64_t size = self.size(static_cast<int64_t>(d));
    TORCH_CHECK_INDEX(ranges[d].min >= -size && ranges[d].max < size, "index ", offender(ranges[d], -size, size),
                      " is out of bounds for dimension ", d, " with size ", size);
  }
}

// Storage positions in `t` (self, or a tensor of self's shape) of the elements of self[indices].
UOpPtr advanced_positions(const at::Tensor& t, const AdvancedIndex& ai) {
  const Shape& shape = ai.result;
  UOpPtr pos = full(t.storage_offset(), shape);
  for (size_t d = 0; d < static_cast<size_t>(t.dim()); d++) {
    UOpPtr c;
    if (ai.index[d].defined()) {
      UOpPtr i = wrap_negative(read_index(ai.index[d]), t.size(static_cast<int64_t>(d)));
      c = place(broadcast_to(i, ai.broadcast), shape, ai.start);
    } else {
      c = coordinate(shape, ai.result_dim[d]);
    }
    pos = add(pos, mul(c, full(t.stride(static_cast<int64_t>(d)), shape)));
  }
  return pos;
}

IndexList as_list(const std::vector<at::Tensor>& index) {
  IndexList list;
  for (const at::Tensor& t : index)
    list.push_back(t.defined() ? std::optional<at::Tensor>(t) : std::nullopt);
  return list;
}

void write_advanced_index(const at::Tensor& self, const AdvancedIndex& ai, const at::Tensor& out) {
  TORCH_CHECK(out.sizes().equals(c10::IntArrayRef(ai.result)), "tiny internal error: index result shape");
  check_advanced_index_range(self, ai);
  if (out.numel() == 0) return;
  write_values(out, gather_values(self, advanced_positions(self, ai)));
}

at::Tensor index(const at::Tensor& self, const IndexList& indices) {
  AdvancedIndex ai = advanced_index(self, indices);
  // torch's own checks, and the layout its CPU kernel gives the result
  at::Tensor meta = at::meta::index(self, as_list(ai.index));
  at::Tensor out = empty_tiny(meta.sizes(), meta.strides(), self.scalar_type(), self.device());
  write_advanced_index(self, ai, out);
  return out;
}

at::Tensor& index_out(const at::Tensor& self, const IndexList& indices, at::Tensor& out) {
  AdvancedIndex ai = advanced_index(self, indices);
  at::meta::index_outf(self, as_list(ai.index), out);
  write_advanced_index(self, ai, out);
  return out;
}

// x[mask] = v where v does not vary along the masked elements: a `where` over self, with no sync.
// Returns false when the general path must run.
bool put_through_mask(at::Tensor& self, const IndexList& indices, const at::Tensor& value, bool accumulate) {
  int64_t first = 0, defined = 0;
  at::Tensor mask;
  for (const std::optional<at::Tensor>& opt : indices) {
    if (!opt.has_value() || !opt->defined()) {
      if (!mask.defined()) first++;
      continue;
    }
    defined++;
    mask = *opt;
  }
  if (defined != 1 || (mask.scalar_type() != at::kBool && mask.scalar_type() != at::kByte)) return false;
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) return false;
  if (mask.scalar_type() == at::kByte)
    TORCH_WARN("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.");
  int64_t k = mask.dim();
  for (const auto j : c10::irange(k))
    TORCH_CHECK_INDEX(mask.size(j) == self.size(first + j), "The shape of the mask ", mask.sizes(), " at index ", j,
                      " does not match the shape of the indexed tensor ", self.sizes(), " at index ", first + j);
  // torch fills with a one-element value of any shape and dtype (masked_fill), unless accumulating
  bool one = value.numel() == 1;
  if (one && accumulate && value.scalar_type() != self.scalar_type()) return false;
  Shape spread(self.dim(), 1); // the value's shape within self's, where it does not vary along the mask
  if (!one) {
    // aligned with self[mask]'s shape, self.shape[:first] + (N,) + self.shape[first + k:]
    int64_t rank = self.dim() - k + 1;
    if (value.dim() > rank) return false;
    Shape v(rank - value.dim(), 1);
    for (int64_t s : value.sizes())
      v.push_back(s);
    if (v[first] != 1 || value.scalar_type() != self.scalar_type()) return false;
    spread.clear();
    for (int64_t d = 0; d < rank; d++) {
      if (d == first)
        spread.insert(spread.end(), k, 1);
      else
        spread.push_back(v[d]);
    }
    for (int64_t d = 0; d < self.dim(); d++)
      if (spread[d] != 1 && spread[d] != self.size(d)) return false;
  }
  Shape shape = to_shape(self.sizes()), full_shape = value_shape(self, shape);
  DType dt = value_dtype(self.scalar_type());
  at::Tensor m = mask.device() == self.device() ? mask : mask.to(self.device());
  UOpPtr mv = read(m);
  if (mv->dtype != DType::Bool) mv = alu(Ops::CMPNE, mv, broadcast_to(const_like(mv, 0), mv->shape));
  const at::Tensor& v = value.device() == self.device() ? value : value.to(self.device());
  UOpPtr val = cast(self.is_complex() ? read_complex(v) : read(v), dt); // a real value fills complex pairs (v, 0)
  val = expand(reshape(val, value_shape(self, spread)), full_shape);
  UOpPtr old = read_values(self);
  if (accumulate) val = dt == DType::Bool ? alu(Ops::OR, old, val) : alu(Ops::ADD, old, val);
  write_values(self, where(place(mv, full_shape, first), val, old));
  return true;
}

at::Tensor& index_put_impl(at::Tensor& self, const IndexList& indices, const at::Tensor& values, bool accumulate,
                           bool unsafe) {
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", indices.size(), ")");
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes)
    TORCH_WARN("Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor before performing "
               "this operation. This also applies to advanced indexing e.g. tensor[indices] = tensor");
  at::Tensor value = values;
  if (value.device() != self.device() && value.numel() == 1 && value.dim() == 0) value = value.to(self.device());
  TORCH_CHECK(value.device() == self.device(),
              "Expected all tensors to be on the same device, but found at least two "
              "devices, ",
              self.device(), " and ", value.device(), "!");
  // torch's CPU kernel fills through a single mask with value.item() (masked_fill) before it checks
  // overlap, so `x[mask] = x[i:i+1]` works there; the value is read before the write here too.
  if (!accumulate && value.numel() == 1 && put_through_mask(self, indices, value, accumulate)) return self;
  at::assert_no_overlap(self, value);
  for (const std::optional<at::Tensor>& index : indices)
    if (index.has_value() && index->defined()) at::assert_no_overlap(self, *index);
  if (put_through_mask(self, indices, value, accumulate)) return self;

  AdvancedIndex ai = advanced_index(self, indices);
  TORCH_CHECK(value.scalar_type() == self.scalar_type(),
              "Index put requires the source and destination dtypes match, "
              "got ",
              self.scalar_type(), " for the destination and ", value.scalar_type(), " for the source.");
  TORCH_CHECK(at::is_expandable_to(value.sizes(), c10::IntArrayRef(ai.result)),
              "shape mismatch: value tensor of shape ", value.sizes(),
              " cannot be broadcast to indexing result of shape ", c10::IntArrayRef(ai.result));
  if (!unsafe) check_advanced_index_range(self, ai);
  if (prod(ai.result) == 0) return self;
  scatter_into(self, advanced_positions(self, ai), broadcast_to(read_values(value), value_shape(self, ai.result)),
               accumulate ? std::optional<Ops>(Ops::ADD) : std::nullopt);
  return self;
}

// ---- index_select, index_add ----

void check_index_dtype(const at::Tensor& index, const char* op) {
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
              "(): Expected dtype int32 or int64 for index");
}

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
  check_same_device({self, index, out});
  dim = at::maybe_wrap_dim(dim, self.dim());
  int64_t n = index.numel();
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(!(self.dim() == 0 && n != 1), "index_select(): Index to scalar can have only 1 value, got ", n,
              " value(s)");
  check_index_dtype(index, "index_select");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(),
              "index_select(): self and result must have the same scalar type");
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, index);
  std::vector<int64_t> sizes = self.sizes().vec();
  if (self.dim() > 0) sizes[dim] = n;
  at::native::resize_output(out, sizes);
  const at::Tensor idx = index.device() == self.device() ? index : index.to(self.device());
  // torch's CPU kernel: its paths for 2 or more dims check differently
  SelectPath path = SelectPath::Plain;
  if (self.dim() > 1) {
    if (n == 0) return out;
    if (self.numel() == 0) TORCH_CHECK(self.size(dim) > 0, "index_select(): self indexing axis dim should be positive");
    if (self.numel() == 0 || (dim == 1 && out.is_contiguous())) path = SelectPath::Dim1;
  }
  check_select_range(index, dim, self.dim() == 0 ? 1 : self.size(dim), path);
  if (out.numel() == 0) return out;
  Shape shape = nonempty_sizes(out);
  UOpPtr along = place(reshape(read_index(idx), {n}), shape, dim);
  UOpPtr value = gather_values(self, positions_along(self, shape, dim, along));
  write_values(out, reshape(value, value_shape(out, to_shape(out.sizes()))));
  return out;
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  at::Tensor out = empty_tiny({0}, self.scalar_type(), self.device());
  return index_select_out(self, dim, index, out);
}

at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          const at::Scalar& alpha, at::Tensor& out) {
  at::meta::index_add_outf(self, dim, index, source, alpha, out);
  dim = at::maybe_wrap_dim(dim, self.dim());
  check_index_dtype(index, "index_add_");
  if (!out.is_same(self)) write_values(out, read_values(self));
  // torch's CPU kernel returns before checking indices when a tensor of 2+ dims is empty
  if (self.dim() > 1 && (index.numel() == 0 || self.numel() == 0)) return out;
  check_select_range(index, dim, self.dim() == 0 ? 1 : self.size(dim),
                     self.dim() > 1 ? SelectPath::Slices : SelectPath::Plain);
  if (index.numel() == 0 || source.numel() == 0) return out;
  Shape shape = nonempty_sizes(source);
  UOpPtr along = place(reshape(read_index(index), {index.numel()}), shape, dim);
  UOpPtr value = reshape(read_values(source), value_shape(out, shape));
  if (out.is_complex()) { // source * alpha, a complex product
    if (alpha.toComplexDouble() != c10::complex<double>(1.0))
      value = complex_math::pairs_of(complex_math::mul(
          complex_math::parts_of(value), complex_math::parts_of(scalar_value(alpha, out.scalar_type(), shape))));
  } else {
    DType dt = to_tiny_dtype(out.scalar_type());
    bool one = alpha.isBoolean()         ? alpha.toBool()
               : alpha.isIntegral(false) ? alpha.toLong() == 1
                                         : alpha.toDouble() == 1.0;
    if (!one) value = alu(dt == DType::Bool ? Ops::AND : Ops::MUL, value, scalar_constant(alpha, dt, shape));
  }
  scatter_into(out, positions_along(out, shape, dim, along), value, Ops::ADD);
  return out;
}

// ---- index_fill, index_copy ----

// Storage positions in `t` of the slices along `dim` that `index` (a vector or scalar) names.
UOpPtr slice_positions(const at::Tensor& t, int64_t dim, const at::Tensor& index, bool wrap) {
  Shape shape = nonempty_sizes(t);
  shape[dim] = index.numel();
  UOpPtr i = reshape(read_index(index), {index.numel()});
  if (wrap) i = wrap_negative(i, t.dim() == 0 ? 1 : t.size(dim));
  return positions_along(t, shape, dim, place(i, shape, dim));
}

at::Tensor& index_fill_with(at::Tensor& self, int64_t dim, const at::Tensor& index, const UOpPtr& scalar) {
  TORCH_CHECK_INDEX(index.scalar_type() == at::kLong, "index_fill_(): Expected dtype int64 for index.");
  at::assert_no_overlap(self, index);
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes)
    TORCH_WARN("Use of index_fill_ on expanded tensors is deprecated. Please clone() the tensor before performing "
               "this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar");
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  TORCH_CHECK(index.dim() <= 1, "Index has to be a vector/scalar");
  int64_t size = self.dim() == 0 ? 1 : self.size(dim);
  IndexRange r = index_range(index);
  TORCH_CHECK_INDEX(r.empty || (r.min >= -size && r.max < size), "index ", offender(r, -size, size),
                    " is out of bounds for dimension ", dim, " with size ", size);
  if (index.numel() == 0 || self.numel() == 0) return self;
  UOpPtr pos = slice_positions(self, dim, index, true);
  // `scalar`: one value of self (a complex self's pair, shape (2,))
  scatter_into(self, pos, broadcast_to(cast(scalar, value_dtype(self.scalar_type())), value_shape(self, pos->shape)),
               std::nullopt);
  return self;
}

at::Tensor& index_fill_scalar(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  TORCH_CHECK(self.is_complex() || !value.isComplex(),
              "index_fill_(): Converting complex Scalar to non-complex type is not supported");
  return index_fill_with(self, dim, index, scalar_value(value, self.scalar_type(), {}));
}

at::Tensor& index_fill_tensor(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  const at::Tensor& v = value.device() == self.device() ? value : value.to(self.device());
  // a complex value for a real self: read() sends it to the CPU fallback, which raises torch's error
  return index_fill_with(self, dim, index, self.is_complex() ? reshape(read_complex(v), {2}) : read(v));
}

at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                           at::Tensor& out) {
  at::meta::index_copy_outf(self, dim, index, source, out);
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  if (!out.is_same(self)) write_values(out, read_values(self));
  int64_t size = self.dim() == 0 ? 1 : self.size(dim);
  IndexRange r = index_range(index);
  TORCH_CHECK_INDEX(r.empty || (r.min >= 0 && r.max < size), "index_copy_(): index ", offender(r, 0, size),
                    " is out of bounds for dimension ", dim, " with size ", size);
  if (index.numel() == 0 || out.numel() == 0) return out;
  UOpPtr pos = slice_positions(out, dim, index, false);
  scatter_into(out, pos, reshape(read_values(source), value_shape(out, pos->shape)), std::nullopt);
  return out;
}

// ---- take, put_ (self read as a flat row-major array) ----

void check_flat_range(const at::Tensor& index, int64_t numel) {
  IndexRange r = index_range(index);
  TORCH_CHECK_INDEX(r.empty || (r.min >= -numel && r.max < numel), "out of range: tried to access index ",
                    offender(r, -numel, numel), " on a tensor of ", numel, " elements.");
}

at::Tensor& take_out(const at::Tensor& self, const at::Tensor& index, at::Tensor& out) {
  if (self.scalar_type() == at::kComplexHalf) to_tiny_dtype(at::kComplexHalf); // NotNativeDtype: the CPU's error
  TORCH_CHECK(index.scalar_type() == at::kLong, "take(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(self.scalar_type() == out.scalar_type(),
              "take(): self and out expected to have the same dtype, but got "
              "self.dtype = ",
              self.scalar_type(), " and out.dtype = ", out.scalar_type());
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, index);
  at::assert_no_overlap(out, self);
  at::native::resize_output(out, index.sizes());
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0), "take(): tried to take from an empty tensor");
  check_flat_range(index, self.numel());
  if (index.numel() == 0) return out;
  UOpPtr i = wrap_negative(read_index(index), self.numel());
  write_values(out, flat_elements(self, i));
  return out;
}

at::Tensor take(const at::Tensor& self, const at::Tensor& index) {
  at::Tensor out = empty_tiny({0}, self.scalar_type(), self.device());
  return take_out(self, index, out);
}

at::Tensor& put_(at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate) {
  if (self.scalar_type() == at::kComplexHalf) to_tiny_dtype(at::kComplexHalf); // NotNativeDtype: the CPU's error
  TORCH_CHECK(index.scalar_type() == at::kLong, "put_(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "put_(): self and source expected to have the same dtype, "
              "but got self.dtype = ",
              self.scalar_type(), " and source.dtype = ", source.scalar_type());
  TORCH_CHECK_INDEX(source.numel() == index.numel(),
                    "put_(): Expected source and index to have the same number of "
                    "elements, but got source.numel() = ",
                    source.numel(), ", index.numel() = ", index.numel());
  at::assert_no_internal_overlap(self);
  at::assert_no_overlap(self, index);
  at::assert_no_overlap(self, source);
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0), "put_(): Tried to put elements into an empty tensor");
  check_flat_range(index, self.numel());
  if (index.numel() == 0) return self;
  int64_t n = index.numel();
  UOpPtr flat = wrap_negative(reshape(read_index(index), {n}), self.numel());
  // the flat row-major position as storage positions of self
  UOpPtr pos = full(self.storage_offset(), {n});
  int64_t suffix = 1;
  for (int64_t d = self.dim() - 1; d >= 0; d--) {
    UOpPtr c = alu(Ops::MOD, alu(Ops::IDIV, flat, full(suffix, {n})), full(self.size(d), {n}));
    pos = add(pos, mul(c, full(self.stride(d), {n})));
    suffix *= self.size(d);
  }
  scatter_into(self, pos, reshape(read_values(source), value_shape(self, {n})),
               accumulate ? std::optional<Ops>(Ops::ADD) : std::nullopt);
  return self;
}

// bincount: each value's count (or the sum of its weights), in input order as the CPU adds them (one ordered
// scatter pass). The result's length, max(input) + 1 or minlength, is read to the host (one small kernel).
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights_opt, int64_t minlength) {
  const at::Tensor weights = weights_opt.value_or(at::Tensor());
  check_same_device(weights.defined() ? std::vector<at::Tensor>{self, weights} : std::vector<at::Tensor>{self});
  check_cpu_accepts<at::_ops::bincount>(self, weights_opt, minlength); // the CPU's dtype errors
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  TORCH_CHECK(self.dim() == 1, "bincount only supports 1-d non-negative integral inputs.");
  TORCH_CHECK(!weights.defined() || (weights.dim() == 1 && weights.size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  at::ScalarType dt = !weights.defined() ? at::kLong : weights.scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  int64_t n = self.numel(), size = minlength;
  if (n > 0) {
    IntRange r = int_range(self);
    TORCH_CHECK(r.min >= 0, "bincount only supports 1-d non-negative integral inputs.");
    size = std::max(size, r.max + 1);
  }
  at::Tensor out = empty_tiny({size}, dt, self.device());
  if (size > 0) write(out, fixed(to_tiny_dtype(dt), 0, {size}));
  if (n == 0) return out;
  UOpPtr value = weights.defined() ? cast(read(weights), to_tiny_dtype(dt)) : fixed(DType::Int64, 1, {n});
  scatter_into(out, read_index(self), value, Ops::ADD);
  return out;
}

// ---- gather and the scatter family ----

at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad,
                       at::Tensor& out) {
  if (self.scalar_type() == at::kComplexHalf) to_tiny_dtype(at::kComplexHalf); // NotNativeDtype: the CPU's error
  check_same_device({self, index, out});
  at::meta::gather_outf(self, dim, index, sparse_grad, out);
  dim = at::maybe_wrap_dim(dim, self.dim());
  check_scatter_gather_range(index, dim, self.dim() == 0 ? 1 : self.size(dim));
  if (index.numel() == 0) return out;
  Shape shape = nonempty_sizes(index);
  UOpPtr value = gather_values(self, positions_along(self, shape, dim, reshape(read_index(index), shape)));
  write_values(out, reshape(value, value_shape(out, to_shape(out.sizes()))));
  return out;
}

// out = self, then src's elements (a value UOp of index's shape) scattered along dim at `index`.
void scatter_along(const at::Tensor& self, int64_t dim, const at::Tensor& index, const UOpPtr& value,
                   std::optional<Ops> combine, const at::Tensor& out, bool check = true) {
  if (out.scalar_type() == at::kComplexHalf) to_tiny_dtype(at::kComplexHalf); // NotNativeDtype: the CPU's error
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (out.is_complex() && combine && *combine != Ops::ADD) to_tiny_dtype(out.scalar_type()); // before any write
  if (!out.is_same(self)) write_values(out, read_values(self));
  if (check) check_scatter_gather_range(index, dim, self.dim() == 0 ? 1 : self.size(dim));
  if (index.numel() == 0) return;
  Shape shape = nonempty_sizes(index);
  scatter_into(out, positions_along(out, shape, dim, reshape(read_index(index), shape)),
               reshape(value, value_shape(out, shape)), combine);
}

// src's elements at index's coordinates (src may be larger than index).
// (pairs for a complex src, whose dtype is the result's)
UOpPtr source_of(const at::Tensor& src, const at::Tensor& index, DType dt) {
  UOpPtr s = cast(read_values(src), dt);
  if (index.numel() == 0) return s;
  std::vector<std::pair<int64_t, int64_t>> box;
  for (int64_t d = 0; d < index.dim(); d++)
    box.emplace_back(0, index.size(d));
  if (src.is_complex()) box.emplace_back(0, 2);
  return index.dim() == 0 ? reshape(s, value_shape(src, {})) : shrink(s, box);
}

// scatter's value= at index's shape; the CPU converts it (and raises on overflow) only when there is
// something to scatter.
UOpPtr scatter_scalar(const at::Scalar& value, const at::Tensor& out, const at::Tensor& index) {
  at::Scalar v = index.numel() == 0 ? at::Scalar(0) : value;
  Shape shape = to_shape(index.sizes());
  return scalar_value(v, out.scalar_type(), shape);
}

std::optional<Ops> legacy_reduce(std::string_view reduce) {
  if (reduce == "add") return Ops::ADD;
  if (reduce == "multiply") return Ops::MUL;
  TORCH_CHECK(false, "reduce argument must be either add or multiply.");
}

at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
  at::meta::scatter_outf(self, dim, index, src, out);
  scatter_along(self, dim, index, source_of(src, index, value_dtype(out.scalar_type())), std::nullopt, out);
  return out;
}

at::Tensor& scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                              at::Tensor& out) {
  at::meta::scatter_outf(self, dim, index, value, out);
  scatter_along(self, dim, index, scatter_scalar(value, out, index), std::nullopt, out);
  return out;
}

at::Tensor& scatter_reduce_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                                   c10::string_view reduce, at::Tensor& out) {
  at::meta::scatter_outf(self, dim, index, src, reduce, out);
  scatter_along(self, dim, index, source_of(src, index, value_dtype(out.scalar_type())), legacy_reduce(reduce), out);
  return out;
}

at::Tensor& scatter_reduce_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                     const at::Scalar& value, c10::string_view reduce, at::Tensor& out) {
  at::meta::scatter_outf(self, dim, index, value, reduce, out);
  scatter_along(self, dim, index, scatter_scalar(value, out, index), legacy_reduce(reduce), out);
  return out;
}

at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
  at::meta::scatter_add_outf(self, dim, index, src, out);
  scatter_along(self, dim, index, source_of(src, index, value_dtype(out.scalar_type())), Ops::ADD, out);
  return out;
}

// A constant of dtype dt broadcast to `shape`: the identities of the reductions.
UOpPtr fixed(DType dt, double v, const Shape& shape) {
  UOpPtr c = is_float(dt) ? const_float(dt, v) : const_int(dt, static_cast<int64_t>(v));
  return shape.empty() ? c : expand(reshape(c, Shape(shape.size(), 1)), shape);
}

// The identity of a reduction in dtype dt (torch's initial value for include_self=False).
UOpPtr identity(Ops op, DType dt, const Shape& shape) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (op == Ops::ADD) return fixed(dt, 0, shape);
  if (op == Ops::MUL) return fixed(dt, 1, shape);
  if (is_float(dt)) return fixed(dt, op == Ops::MAX ? -inf : inf, shape);
  if (dt == DType::Bool) return fixed(dt, op == Ops::MAX ? 0 : 1, shape);
  int64_t bits = static_cast<int64_t>(itemsize(dt) * 8);
  bool is_signed = info(dt).is_signed;
  int64_t lo = is_signed ? (bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1))) : 0;
  int64_t hi = is_signed ? (bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1)
                         : static_cast<int64_t>(UINT64_MAX >> (64 - bits)); // uint64's bit pattern: -1
  UOpPtr c = const_int(dt, op == Ops::MAX ? lo : hi);
  return shape.empty() ? c : expand(reshape(c, Shape(shape.size(), 1)), shape);
}

at::Tensor& scatter_reduce_two_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                                   c10::string_view reduce, bool include_self, at::Tensor& out) {
  at::meta::scatter_reduce_outf(self, dim, index, src, reduce, include_self, out);
  std::string_view r(reduce.data(), reduce.size());
  Ops op = r == "sum" || r == "mean" ? Ops::ADD : r == "prod" ? Ops::MUL : r == "amax" ? Ops::MAX : Ops::MIN;
  DType dt = dtype_of(out);
  TORCH_CHECK_NOT_IMPLEMENTED(!(r == "mean" && dt == DType::Bool),
                              "\"scatter_gather_tensor_cpu_reduce_mean\" not implemented for 'Bool'");
  Shape ishape = to_shape(index.sizes());
  if (!out.is_same(self)) write(out, read(self));
  check_scatter_gather_range(index, at::maybe_wrap_dim(dim, self.dim()), self.dim() == 0 ? 1 : self.size(dim));
  if (index.numel() == 0) return out;
  // torch: without self, the scattered-to elements start from the reduction's identity
  if (!include_self) scatter_along(out, dim, index, identity(op, dt, ishape), std::nullopt, out, false);
  scatter_along(out, dim, index, source_of(src, index, dt), op, out, false);
  if (r != "mean") return out;
  // mean: divide by how many values each element holds (1 for one that received none)
  Shape oshape = nonempty_sizes(out);
  int64_t d = at::maybe_wrap_dim(dim, self.dim());
  Shape shape = nonempty_sizes(index);
  at::Tensor counts = empty_tiny(c10::IntArrayRef(oshape), out.scalar_type(), out.device());
  write(counts, fixed(dt, include_self ? 1 : 0, oshape));
  scatter_into(counts, positions_along(counts, shape, d, reshape(read_index(index), shape)), fixed(dt, 1, shape),
               Ops::ADD);
  UOpPtr c = read(counts);
  c = where(alu(Ops::CMPEQ, c, fixed(dt, 0, oshape)), fixed(dt, 1, oshape), c);
  UOpPtr sum = reshape(read(out), oshape);
  UOpPtr mean;
  if (is_float(dt)) {
    DType ct = dt == DType::Float64 ? dt : DType::Float32;
    mean = cast(alu(Ops::FDIV, cast(sum, ct), cast(c, ct)), dt);
  } else {
    // torch divides integers with rounding mode "floor" (counts are positive)
    UOpPtr q = alu(Ops::IDIV, sum, c);
    UOpPtr inexact = alu(Ops::CMPNE, alu(Ops::MOD, sum, c), fixed(dt, 0, oshape));
    mean = where(alu(Ops::AND, inexact, alu(Ops::CMPLT, sum, fixed(dt, 0, oshape))),
                 alu(Ops::SUB, q, fixed(dt, 1, oshape)), q);
  }
  write(out, reshape(mean, to_shape(out.sizes())));
  return out;
}

// index_reduce: scatter_reduce with the 1-D index spread over source's shape (index[i] for every element
// of slice i along dim), after torch's own checks (its meta function) and its IndexError for a bad index.
at::Tensor& index_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                             c10::string_view reduce, bool include_self, at::Tensor& out) {
  at::meta::index_reduce_outf(self, dim, index, source, reduce, include_self, out);
  int64_t d = at::maybe_wrap_dim(dim, self.dim());
  IndexRange r = index_range(index);
  TORCH_CHECK_INDEX(r.empty || (r.min >= 0 && r.max < (self.dim() == 0 ? 1 : self.size(d))), "index out of bounds");
  std::vector<int64_t> spread(std::max<int64_t>(source.dim(), 1), 1);
  spread[d] = index.numel();
  at::Tensor along =
      index.to(at::kLong).reshape(spread).expand(source.dim() == 0 ? c10::IntArrayRef{1} : source.sizes());
  if (source.dim() == 0) along = along.reshape({});
  return scatter_reduce_two_out(self, dim, along, source, reduce, include_self, out);
}

// ---- max_unpool2d, max_unpool3d ----

// The output (batch, channels, *size) is zero except where the indices (flat within each plane of
// `size`) point; those get the input's values, in order (a repeated index, whose winner torch leaves
// undefined, keeps the last). The indices are checked against the plane on the host (a sync), as the CPU
// kernel raises.
at::Tensor& max_unpool_out(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef size, at::Tensor& out) {
  const int64_t spatial = static_cast<int64_t>(size.size());
  const char* name = spatial == 2 ? "max_unpooling2d" : "max_unpooling3d";
  TORCH_CHECK(indices.scalar_type() == at::kLong,
              "elements in indices should be type int64 but got: ", indices.scalar_type());
  TORCH_CHECK(self.dim() == spatial + 1 || self.dim() == spatial + 2, "Input to ", name, " should be a ", spatial + 1,
              "d or ", spatial + 2, "d Tensor, but got a tensor with ", self.dim(), " dimensions.");
  TORCH_CHECK(self.sizes() == indices.sizes(), "Expected shape of indices to be same as that of the input tensor (",
              self.sizes(), ") but got indices tensor with shape: ", indices.sizes());
  for (int64_t i = 1; i < self.dim(); i++)
    TORCH_CHECK(self.size(i) > 0, name, "(): Expected input to have non-zero size for non-batch dimensions, but got ",
                self.sizes(), " with dimension ", i, " being empty.");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "Expected out tensor to have dtype ", self.scalar_type(),
              ", but got ", out.scalar_type(), " instead");
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end() - spatial);
  sizes.insert(sizes.end(), size.begin(), size.end());
  at::native::resize_output(out, sizes);
  int64_t plane = 1;
  std::string plane_str;
  for (int64_t s : size) {
    plane *= s;
    plane_str += (plane_str.empty() ? "" : "x") + std::to_string(s);
  }
  IndexRange r = index_range(indices);
  TORCH_CHECK(r.empty || (r.min >= 0 && r.max < plane), "Found an invalid max index: ", offender(r, 0, plane),
              " (output volumes are of size ", plane_str, ")");
  DType dt = dtype_of(out);
  at::Tensor result = out.is_contiguous() ? out : empty_tiny(sizes, out.scalar_type(), out.device());
  write(result, fixed(dt, 0, to_shape(result.sizes())));
  if (self.numel() > 0 && plane > 0) {
    int64_t inner = 1;
    for (int64_t i = self.dim() - spatial; i < self.dim(); i++)
      inner *= self.size(i);
    Shape flat = {self.numel() / inner, inner};
    UOpPtr pos = add(add(mul(coordinate(flat, 0), full(plane, flat)), reshape(read_index(indices), flat)),
                     full(result.storage_offset(), flat));
    scatter_into(result, pos, reshape(read(self), flat), std::nullopt);
  }
  if (!result.is_same(out)) write(out, read(result));
  return out;
}

at::Tensor& max_unpool2d_out(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size,
                             at::Tensor& out) {
  TORCH_CHECK(output_size.size() == 2, "There should be exactly two elements (height, width) in output_size, but got ",
              output_size.size(), " elements.");
  return max_unpool_out(self, indices, C10_AS_INTARRAYREF_SLOW(output_size), out);
}

at::Tensor max_unpool2d(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size) {
  at::Tensor out = empty_tiny({0}, self.scalar_type(), self.device());
  return max_unpool2d_out(self, indices, output_size, out);
}

at::Tensor& max_unpool3d_out(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::Tensor& out) {
  TORCH_CHECK(output_size.size() == 3,
              "There should be exactly three elements (depth, height, width) in output_size, "
              "but got: ",
              output_size.size(), " elements.");
  TORCH_CHECK(stride.size() == 3,
              "There should be exactly three elements (depth, height, width) in stride, but got: ", stride.size(),
              " elements.");
  TORCH_CHECK(padding.size() == 3,
              "There should be exactly three elements (depth, height, width) in padding, but "
              "got: ",
              padding.size(), " elements.");
  TORCH_CHECK(stride[0] > 0 && stride[1] > 0 && stride[2] > 0,
              "strides should be greater than zero, but got stride: ", stride);
  return max_unpool_out(self, indices, C10_AS_INTARRAYREF_SLOW(output_size), out);
}

at::Tensor max_unpool3d(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size,
                        at::IntArrayRef stride, at::IntArrayRef padding) {
  at::Tensor out = empty_tiny({0}, self.scalar_type(), self.device());
  return max_unpool3d_out(self, indices, output_size, stride, padding, out);
}

// ---- masked_select, nonzero ----

at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(),
              "masked_select(): self and result must have the same scalar type");
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, mask);
  at::Tensor m = mask.device() == self.device() ? mask : mask.to(self.device());
  auto [bm, bs] = at::expand_outplace(m, self);
  int64_t n = bs->numel();
  // the flat positions of the selected elements, found on the host (a sync)
  at::Tensor picked = nonzero_on_host(bm->reshape({n})).reshape({-1}).to(self.device());
  at::native::resize_output(out, {picked.numel()});
  if (picked.numel() == 0) return out;
  write_values(out, flat_elements(*bs, read_index(picked)));
  return out;
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  at::Tensor out = empty_tiny({0}, self.scalar_type(), self.device());
  return masked_select_out(self, mask, out);
}

// self's masked elements take source's elements in order. Each one's rank among the masked elements
// comes from the mask read to the host (a sync, as for masked_select), which also checks that
// source has enough elements, as torch does at the call.
at::Tensor& masked_scatter_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
  if (self.scalar_type() == at::kComplexHalf) to_tiny_dtype(at::kComplexHalf); // NotNativeDtype: the CPU's error
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "masked_scatter: expected self and source to have same dtypes but got", self.scalar_type(), " and ",
              source.scalar_type());
  at::assert_no_internal_overlap(self);
  at::Tensor m = mask.device() == self.device() ? mask : mask.to(self.device());
  c10::MaybeOwned<at::Tensor> bm = at::expand_inplace(self, m); // torch's error for shapes that do not broadcast
  int64_t n = self.numel();
  if (n == 0) return self;
  at::Tensor ranks = flags_on_host(*bm).reshape({n}).to(at::kLong).cumsum(0);
  int64_t ones = ranks[n - 1].item<int64_t>();
  TORCH_CHECK(source.numel() >= ones, "Number of elements of source < number of ones in mask");
  if (ones == 0) return self;
  at::Tensor index = ranks.sub_(1).clamp_min_(0).reshape(self.sizes()).to(self.device());
  // source's values as a flat array, read at the value positions of the ranks
  int64_t slots = static_cast<int64_t>(prod(value_shape(source, {source.numel()})));
  UOpPtr rank = read_index(index), selected = read(*bm);
  UOpPtr taken = gather(reshape(read_values(source), {slots}), self.is_complex() ? pair_positions(rank) : rank);
  if (self.is_complex()) {
    Shape one = selected->shape;
    one.push_back(1);
    selected = expand(reshape(selected, one), taken->shape);
  }
  write_values(self, where(selected, taken, read_values(self)));
  return self;
}

at::Tensor nonzero(const at::Tensor& self) { return nonzero_on_host(self).to(self.device()); }

at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kLong,
              "nonzero: Expected out tensor to have scalar type Long but got scalar type", out.scalar_type());
  // torch's CPU kernel decides the out tensor's layout (it keeps one of the right shape, else makes a
  // column-major one) and warns about resizing: it runs on a host tensor laid out like `out`.
  at::Tensor host = at::empty_strided(out.sizes(), out.strides(), out.options().device(at::kCPU));
  at::nonzero_out(host, flags_on_host(self));
  if (!out.sizes().equals(host.sizes()) || !out.strides().equals(host.strides())) {
    out.resize_(host.sizes());
    out.as_strided_(host.sizes(), host.strides());
  }
  out.copy_(host);
  return out;
}

// ---- embedding ----

at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices, int64_t num_weights,
                                    int64_t padding_idx, bool scale_grad_by_freq) {
  at::checkScalarTypes("embedding_backward", at::TensorArg(indices, "indices", 2), {at::kLong, at::kInt});
  int64_t width = grad_output.size(-1), n = indices.numel();
  at::Tensor grad_weight = empty_tiny({num_weights, width}, grad_output.scalar_type(), grad_output.device());
  DType dt = dtype_of(grad_output);
  write(grad_weight, fixed(dt, 0, {num_weights, width}));
  if (n == 0 || width == 0) return grad_weight;
  Shape shape{n, width};
  UOpPtr rows = reshape(read_index(indices), {n});
  UOpPtr grad = reshape(read(grad_output), shape);
  if (scale_grad_by_freq) {
    // torch scales each row's gradient by 1 / (how often its index occurs)
    UOpPtr counts = scatter(fixed(kIndex, 0, {num_weights}), rows, full(1, {n}), Ops::ADD);
    DType ct = dt == DType::Float64 ? dt : DType::Float32;
    UOpPtr scale = alu(Ops::FDIV, fixed(DType::Float64, 1, {n}), cast(gather(counts, rows), DType::Float64));
    grad = cast(alu(Ops::MUL, cast(grad, ct), place(cast(scale, ct), shape, 0)), dt);
  }
  // rows at padding_idx get no gradient: their positions are out of range, so the scatter skips them
  UOpPtr r = place(rows, shape, 0);
  UOpPtr pos = add(mul(r, full(width, shape)), coordinate(shape, 1));
  pos = where(alu(Ops::CMPEQ, r, full(padding_idx, shape)), full(-1, shape), pos);
  scatter_into(grad_weight, pos, grad, Ops::ADD);
  return grad_weight;
}

// embedding's max_norm: each row that indices name and whose norm exceeds max_norm is scaled by
// max_norm / (norm + 1e-7), as torch does (the scale in double, rounded to the weight's dtype). The
// named rows are counted by a scatter on the device (no sync).
at::Tensor& embedding_renorm_(at::Tensor& self, const at::Tensor& indices, double max_norm, double norm_type) {
  at::checkDim("embedding_renorm_", at::TensorArg(self, "self", 1), 2);
  at::checkScalarTypes("embedding_renorm_", at::TensorArg(indices, "indices", 2), {at::kLong, at::kInt});
  int64_t rows = self.size(0), width = self.size(1), n = indices.numel();
  if (n == 0 || self.numel() == 0) return self;
  Shape shape{rows, width}, column{rows, 1};
  DType dt = dtype_of(self), compute = opmath(dt);
  UOpPtr counts = scatter(full(0, {rows}), reshape(read_index(indices), {n}), full(1, {n}), Ops::ADD);
  UOpPtr named = reshape(alu(Ops::CMPNE, counts, full(0, {rows})), column);
  UOpPtr norm =
      cast(read(at::linalg_vector_norm(self, norm_type, at::IntArrayRef{1}, /*keepdim=*/true)), DType::Float64);
  UOpPtr cap = scalar_constant(max_norm, DType::Float64, column);
  UOpPtr scale = alu(Ops::FDIV, cap, alu(Ops::ADD, norm, fixed(DType::Float64, 1e-7, column)));
  scale = where(alu(Ops::AND, named, alu(Ops::CMPLT, cap, norm)), scale, fixed(DType::Float64, 1, column));
  UOpPtr factor = cast(cast(expand(scale, shape), dt), compute);
  write(self, cast(alu(Ops::MUL, cast(read(self), compute), factor), dt));
  return self;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("embedding_renorm_", TORCH_FN(embedding_renorm_));
  m.impl("index.Tensor", TORCH_FN(index), UnsignedPolicy::Native);
  m.impl("index.Tensor_out", TORCH_FN(index_out), UnsignedPolicy::Native);
  m.impl("_index_put_impl_", TORCH_FN(index_put_impl));
  m.impl("index_select", TORCH_FN(index_select), UnsignedPolicy::Native);
  m.impl("index_select.out", TORCH_FN(index_select_out), UnsignedPolicy::Native);
  m.impl("index_add.out", TORCH_FN(index_add_out)); // the CPU computes uint16/32/64 on some paths only
  m.impl("index_fill_.int_Scalar", TORCH_FN(index_fill_scalar));
  m.impl("index_fill_.int_Tensor", TORCH_FN(index_fill_tensor));
  m.impl("index_copy.out", TORCH_FN(index_copy_out));
  m.impl("take", TORCH_FN(take));
  m.impl("take.out", TORCH_FN(take_out));
  m.impl("put_", TORCH_FN(put_));
  m.impl("bincount", TORCH_FN(bincount));
  m.impl("gather.out", TORCH_FN(gather_out), UnsignedPolicy::Native);
  m.impl("scatter.src_out", TORCH_FN(scatter_src_out), UnsignedPolicy::Native);
  m.impl("scatter.value_out", TORCH_FN(scatter_value_out), UnsignedPolicy::Native);
  m.impl("scatter.reduce_out", TORCH_FN(scatter_reduce_src_out), UnsignedPolicy::Native);
  m.impl("scatter.value_reduce_out", TORCH_FN(scatter_reduce_value_out), UnsignedPolicy::Native);
  m.impl("scatter_add.out", TORCH_FN(scatter_add_out), UnsignedPolicy::Native);
  m.impl("scatter_reduce.two_out", TORCH_FN(scatter_reduce_two_out));
  m.impl("index_reduce.out", TORCH_FN(index_reduce_out));
  m.impl("max_unpool2d", TORCH_FN(max_unpool2d));
  m.impl("max_unpool2d.out", TORCH_FN(max_unpool2d_out));
  m.impl("max_unpool3d", TORCH_FN(max_unpool3d));
  m.impl("max_unpool3d.out", TORCH_FN(max_unpool3d_out));
  m.impl("masked_scatter_", TORCH_FN(masked_scatter_));
  m.impl("masked_select", TORCH_FN(masked_select));
  m.impl("masked_select.out", TORCH_FN(masked_select_out));
  m.impl("nonzero", TORCH_FN(nonzero));
  m.impl("nonzero.out", TORCH_FN(nonzero_out));
  m.impl("embedding_dense_backward", TORCH_FN(embedding_dense_backward));
}

} // namespace tiny::aten_ops
