// embedding_bag (F.embedding_bag, nn.EmbeddingBag): the sum, mean or max of bags of embedding rows, and
// its backward ops (_embedding_bag_dense_backward, _embedding_bag_per_sample_weights_backward).
//
// Bag b holds indices[offsets[b] : end_b], end_b the next offset (or the number of indices for the last
// bag, unless include_last_offset), without the entries equal to padding_idx. A bag's value is a masked
// reduction over every index of a (bags, indices, dim) view of the gathered rows, so the forward is one
// kernel with no scatter: O(bags x indices x dim) work, sized for nn.EmbeddingBag's usual inputs. The
// weight gradient scatter-adds each index's share into its row. As torch's CPU kernel raises on an index
// out of range or a first offset that is not 0, both are read to the host first (one sync).

#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

enum Mode : int64_t { kSum = 0, kMean = 1, kMax = 2 };

UOpPtr filled(DType dt, double v, const Shape& shape) { return fixed(dt, v, shape); }

// Row b (of `shape`'s dim `axis`) of a 1-D UOp, broadcast to `shape`.
UOpPtr along(const UOpPtr& v, const Shape& shape, size_t axis) {
  Shape s(shape.size(), 1);
  s[axis] = v->shape.at(0);
  return expand(reshape(v, s), shape);
}

struct Bags {
  int64_t count, n, dim;
  UOpPtr index;  // (n,) int64
  UOpPtr member; // (count, n): index i is in bag b (and is not padding_idx)
  UOpPtr bag_of; // (n,) int64: the bag of index i, -1 before the first offset
};

Bags bags_of(const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets, bool include_last_offset,
             int64_t padding_idx) {
  TORCH_CHECK(indices.dim() == 1, "input has to be a 1D or 2D Tensor, but got Tensor of dimension ", indices.dim());
  TORCH_CHECK(offsets.dim() == 1, "offsets has to be a 1D Tensor, but got Tensor of dimension ", offsets.dim());
  TORCH_CHECK(weight.dim() == 2, "weight has to be a 2D Tensor, but got Tensor of dimension ", weight.dim());
  TORCH_CHECK(
      indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
      "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got ",
      indices.scalar_type(), " instead");
  TORCH_CHECK(offsets.scalar_type() == indices.scalar_type(), "Expected tensor for argument #1 'offsets' to have ",
              "the same scalar type as 'indices' (", indices.scalar_type(), "), but got ", offsets.scalar_type());
  int64_t n = indices.numel(), m = offsets.numel(), rows = weight.size(0);
  TORCH_CHECK(!include_last_offset || m >= 1, "include_last_offset: number of offset should be at least 1");
  int64_t count = include_last_offset ? m - 1 : m;
  // the CPU kernel's checks of the data: a sync reading both ends of the indices and the first offset
  if (n > 0 || m > 0) {
    at::Tensor probe = empty_tiny({3}, at::kLong, indices.device());
    UOpPtr lo = n > 0 ? reduce(cast(read(indices), DType::Int64), Ops::MIN, {0}) : fixed(DType::Int64, 0, {1});
    UOpPtr hi = n > 0 ? reduce(cast(read(indices), DType::Int64), Ops::MAX, {0}) : fixed(DType::Int64, 0, {1});
    UOpPtr first = m > 0 ? shrink(cast(read(offsets), DType::Int64), {{0, 1}}) : fixed(DType::Int64, 0, {1});
    UOpPtr parts = add(add(pad(lo, {{0, 2}}), pad(hi, {{1, 1}})), pad(first, {{2, 0}}));
    write(probe, parts);
    at::Tensor host = probe.cpu();
    const int64_t* p = host.data_ptr<int64_t>();
    TORCH_CHECK(m == 0 || p[2] == 0, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start ",
                "from position 0. However, got ", p[2]);
    TORCH_CHECK(n == 0 || (p[0] >= 0 && p[1] < rows), "embedding_bag: index out of range (", p[0] < 0 ? p[0] : p[1],
                " for an embedding of ", rows, " rows)");
  }
  Bags b{count, n, weight.size(1), nullptr, nullptr, nullptr};
  if (n == 0) return b;
  b.index = reshape(cast(read(indices), DType::Int64), {n});
  if (count == 0) { // no bags: every index lies outside them
    b.bag_of = filled(DType::Int64, -1, {n});
    return b;
  }
  Shape grid{count, n};
  UOpPtr off = reshape(cast(read(offsets), DType::Int64), {m});
  UOpPtr start = shrink(off, {{0, count}});
  UOpPtr end = include_last_offset ? shrink(off, {{1, m}})
                                   : add(pad(shrink(off, {{1, m}}), {{0, 1}}),
                                         pad(fixed(DType::Int64, static_cast<double>(n), {1}), {{m - 1, 0}}));
  UOpPtr i = along(iota(n, DType::Int64), grid, 1);
  UOpPtr member = alu(Ops::AND, le(along(start, grid, 0), i), lt(i, along(end, grid, 0)));
  if (padding_idx >= 0)
    member =
        alu(Ops::AND, member,
            alu(Ops::CMPNE, along(b.index, grid, 1), filled(DType::Int64, static_cast<double>(padding_idx), grid)));
  b.member = member;
  // #{b : offsets[b] <= i} - 1 (the CPU's offset2bag)
  UOpPtr started = cast(le(along(start, grid, 0), i), DType::Int64);
  b.bag_of = sub(reshape(reduce(started, Ops::ADD, {0}), {n}), filled(DType::Int64, 1, {n}));
  return b;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
embedding_bag(const at::Tensor& weight, const at::Tensor& indices_in, const at::Tensor& offsets,
              bool /*scale_grad_by_freq*/, int64_t mode, bool sparse,
              const std::optional<at::Tensor>& per_sample_weights, bool include_last_offset, int64_t padding_idx) {
  TORCH_CHECK(mode == kSum || mode == kMean || mode == kMax,
              "embedding_bag: mode must be 0 (sum), 1 (mean) or 2 (max)");
  bool weighted = per_sample_weights && per_sample_weights->defined();
  TORCH_CHECK(!weighted || mode == kSum, "embedding_bag: per_sample_weights was not None. per_sample_weights is only ",
              "supported for mode='sum' (got mode='", mode == kMean ? "mean" : "max", "'). Please open a feature ",
              "request on GitHub.");
  TORCH_CHECK(!sparse || mode != kMax, "embedding_bag: sparse gradients are not supported with mode='max'");
  at::Tensor indices = indices_in.dim() == 2 ? indices_in.reshape({-1}) : indices_in;
  Bags b = bags_of(weight, indices, offsets, include_last_offset, padding_idx);
  if (weighted)
    TORCH_CHECK(per_sample_weights->dim() == 1 && per_sample_weights->numel() == b.n,
                "embedding_bag: per_sample_weights must be 1D with as many elements as indices");
  DType dt = to_tiny_dtype(weight.scalar_type()), ct = opmath(dt);
  at::ScalarType it = indices.scalar_type();
  at::Tensor out = empty_tiny({b.count, b.dim}, weight.scalar_type(), weight.device());
  at::Tensor offset2bag = empty_tiny({b.n}, it, weight.device());
  at::Tensor bag_size = empty_tiny({b.count}, it, weight.device());
  at::Tensor max_indices = empty_tiny(
      mode == kMax ? std::vector<int64_t>{b.count, b.dim} : std::vector<int64_t>{b.count}, it, weight.device());
  DType idt = to_tiny_dtype(it);
  if (b.n > 0) write(offset2bag, cast(b.bag_of, idt));
  if (b.count == 0) return {out, offset2bag, bag_size, max_indices};

  Shape cube{b.count, b.n, b.dim}, grid{b.count, b.n};
  UOpPtr sizes = b.n > 0 ? reshape(reduce(cast(b.member, DType::Int64), Ops::ADD, {1}), {b.count})
                         : filled(DType::Int64, 0, {b.count});
  write(bag_size, cast(mode == kSum ? filled(DType::Int64, 0, {b.count}) : sizes, idt));
  if (mode != kMax) write(max_indices, cast(mode == kSum ? filled(DType::Int64, 0, {b.count}) : sizes, idt));
  if (b.n == 0) {
    write(out, filled(dt, 0, {b.count, b.dim}));
    if (mode == kMax) write(max_indices, filled(idt, 0, {b.count, b.dim}));
    return {out, offset2bag, bag_size, max_indices};
  }
  Shape rows{b.n, b.dim};
  UOpPtr pos = add(mul(along(b.index, rows, 0), filled(DType::Int64, static_cast<double>(b.dim), rows)),
                   along(iota(b.dim, DType::Int64), rows, 1));
  UOpPtr values = cast(gather(reshape(read(weight.contiguous()), {weight.numel()}), pos), ct); // (n, dim)
  if (weighted) values = mul(values, along(cast(read(*per_sample_weights), ct), rows, 0));
  UOpPtr vs = expand(reshape(values, {1, b.n, b.dim}), cube);
  UOpPtr in = expand(reshape(b.member, {b.count, b.n, 1}), cube);
  UOpPtr result;
  if (mode == kMax) {
    UOpPtr m = reduce(where(in, vs, filled(ct, -INFINITY, cube)), Ops::MAX, {1}); // (count, 1, dim)
    // the first index of the bag holding the max (the CPU replaces only on a strictly greater value)
    UOpPtr hit = alu(Ops::AND, in, alu(Ops::CMPEQ, vs, expand(m, cube)));
    int64_t rows_n = weight.size(0);
    UOpPtr key =
        add(mul(along(iota(b.n, DType::Int64), cube, 1), filled(DType::Int64, static_cast<double>(rows_n), cube)),
            along(b.index, cube, 1));
    UOpPtr none = filled(DType::Int64, static_cast<double>(b.n * rows_n), cube);
    UOpPtr first = reshape(reduce(where(hit, key, none), Ops::MIN, {1}), {b.count, b.dim});
    UOpPtr empty = lt(along(sizes, {b.count, b.dim}, 0), filled(DType::Int64, 1, {b.count, b.dim}));
    write(max_indices,
          cast(where(empty, filled(DType::Int64, 0, {b.count, b.dim}),
                     alu(Ops::MOD, first, filled(DType::Int64, static_cast<double>(rows_n), {b.count, b.dim}))),
               idt));
    result = where(empty, filled(ct, 0, {b.count, b.dim}), reshape(m, {b.count, b.dim}));
  } else {
    result = reshape(reduce(where(in, vs, filled(ct, 0, cube)), Ops::ADD, {1}), {b.count, b.dim});
    if (mode == kMean) {
      UOpPtr n = cast(along(sizes, {b.count, b.dim}, 0), ct);
      result = where(lt(n, filled(ct, 1, n->shape)), filled(ct, 0, n->shape), div(result, n));
    }
  }
  (void)grid;
  write(out, cast(result, dt));
  return {out, offset2bag, bag_size, max_indices};
}

// The weight gradient: index i of bag b adds grad[b] (times its per-sample weight, over the bag's size for
// mean, over the index's count with scale_grad_by_freq) to its row; max adds grad[b, d] to the row that held
// the max. Padding entries and empty bags add nothing.
at::Tensor embedding_bag_dense_backward(const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& offset2bag,
                                        const at::Tensor& bag_size, const at::Tensor& maximum_indices,
                                        int64_t num_weights, bool scale_grad_by_freq, int64_t mode,
                                        const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx) {
  DType dt = to_tiny_dtype(grad.scalar_type()), ct = opmath(dt);
  int64_t dim = grad.size(1), count = grad.size(0), n = indices.numel();
  at::Tensor acc = empty_tiny({num_weights, dim}, to_scalar_type(ct), grad.device());
  write(acc, filled(ct, 0, {num_weights, dim}));
  at::Tensor result = empty_tiny({num_weights, dim}, grad.scalar_type(), grad.device());
  UOpPtr g = reshape(cast(read(grad.contiguous()), ct), {count * dim});
  UOpPtr skip = filled(DType::Int64, static_cast<double>(num_weights * dim), {1}); // out of range: skipped
  if (mode == kMax) {
    Shape bd{count, dim};
    if (count > 0 && dim > 0) {
      UOpPtr row = cast(read(maximum_indices), DType::Int64);
      UOpPtr pos =
          add(mul(row, filled(DType::Int64, static_cast<double>(dim), bd)), along(iota(dim, DType::Int64), bd, 1));
      UOpPtr empty = lt(along(cast(read(bag_size), DType::Int64), bd, 0), filled(DType::Int64, 1, bd));
      pos = where(empty, expand(reshape(skip, {1, 1}), bd), pos);
      lazy_buffer(acc).scatter(ct, pos, reshape(g, bd), Ops::ADD);
    }
  } else if (n > 0 && dim > 0) {
    Shape rows{n, dim};
    UOpPtr index = reshape(cast(read(indices), DType::Int64), {n});
    UOpPtr bag = reshape(cast(read(offset2bag), DType::Int64), {n});
    UOpPtr share = gather(g, add(mul(along(bag, rows, 0), filled(DType::Int64, static_cast<double>(dim), rows)),
                                 along(iota(dim, DType::Int64), rows, 1)));
    if (per_sample_weights && per_sample_weights->defined())
      share = mul(share, along(cast(read(*per_sample_weights), ct), rows, 0));
    if (mode == kMean) {
      UOpPtr size = gather(cast(read(bag_size), DType::Int64), bag);
      share = div(share, along(cast(size, ct), rows, 0));
    }
    if (scale_grad_by_freq) {
      Shape pair{n, n};
      UOpPtr same = alu(Ops::CMPEQ, along(index, pair, 0), along(index, pair, 1));
      UOpPtr freq = reshape(reduce(cast(same, DType::Int64), Ops::ADD, {1}), {n});
      share = div(share, along(cast(freq, ct), rows, 0));
    }
    UOpPtr pos = add(mul(along(index, rows, 0), filled(DType::Int64, static_cast<double>(dim), rows)),
                     along(iota(dim, DType::Int64), rows, 1));
    UOpPtr dropped = alu(Ops::CMPLT, along(bag, rows, 0), filled(DType::Int64, 0, rows));
    if (padding_idx >= 0)
      dropped =
          alu(Ops::OR, dropped,
              alu(Ops::CMPEQ, along(index, rows, 0), filled(DType::Int64, static_cast<double>(padding_idx), rows)));
    pos = where(dropped, expand(reshape(skip, {1, 1}), rows), pos);
    lazy_buffer(acc).scatter(ct, contiguous(pos), contiguous(share), Ops::ADD);
  }
  write(result, cast(read(acc), dt));
  return result;
}

// d out[bag(i)] / d per_sample_weights[i] = weight[indices[i]]: the dot product with the bag's gradient.
at::Tensor embedding_bag_per_sample_weights_backward(const at::Tensor& grad, const at::Tensor& weight,
                                                     const at::Tensor& indices, const at::Tensor& /*offsets*/,
                                                     const at::Tensor& offset2bag, int64_t mode, int64_t padding_idx) {
  TORCH_CHECK(mode == kSum, "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  DType dt = to_tiny_dtype(grad.scalar_type()), ct = opmath(dt);
  int64_t n = indices.numel(), dim = grad.size(1);
  at::Tensor result = empty_tiny({n}, grad.scalar_type(), grad.device());
  if (n == 0) return result;
  Shape rows{n, dim};
  UOpPtr index = reshape(cast(read(indices), DType::Int64), {n});
  UOpPtr bag = reshape(cast(read(offset2bag), DType::Int64), {n});
  UOpPtr cols = along(iota(dim, DType::Int64), rows, 1), d = filled(DType::Int64, static_cast<double>(dim), rows);
  UOpPtr gb =
      gather(reshape(cast(read(grad.contiguous()), ct), {grad.numel()}), add(mul(along(bag, rows, 0), d), cols));
  UOpPtr w =
      gather(reshape(cast(read(weight.contiguous()), ct), {weight.numel()}), add(mul(along(index, rows, 0), d), cols));
  UOpPtr dot = dim > 0 ? reshape(reduce(mul(gb, w), Ops::ADD, {1}), {n}) : filled(ct, 0, {n});
  if (padding_idx >= 0)
    dot = where(alu(Ops::CMPEQ, index, filled(DType::Int64, static_cast<double>(padding_idx), {n})), filled(ct, 0, {n}),
                dot);
  write(result, cast(dot, dt));
  return result;
}

// The backward torch's autograd calls: the dense gradient (a sparse one is not built).
at::Tensor embedding_bag_backward(const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& /*offsets*/,
                                  const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                  const at::Tensor& maximum_indices, int64_t num_weights, bool scale_grad_by_freq,
                                  int64_t mode, bool sparse, const std::optional<at::Tensor>& per_sample_weights,
                                  int64_t padding_idx) {
  TORCH_CHECK(!sparse, "embedding_bag on tiny: sparse=True gradients are not supported yet (use sparse=False)");
  at::Tensor flat = indices.dim() == 2 ? indices.reshape({-1}) : indices;
  return embedding_bag_dense_backward(grad, flat, offset2bag, bag_size, maximum_indices, num_weights,
                                      scale_grad_by_freq, mode, per_sample_weights, padding_idx);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("_embedding_bag", TORCH_FN(embedding_bag));
  m.impl("_embedding_bag_forward_only", TORCH_FN(embedding_bag));
  m.impl("_embedding_bag_backward", TORCH_FN(embedding_bag_backward));
  m.impl("_embedding_bag_dense_backward", TORCH_FN(embedding_bag_dense_backward));
  m.impl("_embedding_bag_per_sample_weights_backward", TORCH_FN(embedding_bag_per_sample_weights_backward));
}

} // namespace tiny::aten_ops
