// FFTs: _fft_c2c, _fft_r2c, _fft_c2r (and their out= forms), the primitives every torch.fft function, stft
// and istft decompose into, and that their backward formulas call again.
//
// A transform is built from lazy ops, so it runs on every device and fuses like any graph: a DFT of size n
// along one axis is a matrix product with a (count, n) table of cos/sin twiddles computed from iotas; a
// larger size n = n1 * n2 is Cooley-Tukey's "four-step" plan (DFTs of size n1 down the columns, a twiddle
// multiply, DFTs of size n2 along the rows, a transpose), recursively, so the work is O(n * sum of factors).
// Values are the (real, imaginary) parts of complex_math; results have the sizes, dtypes and strides the
// CPU's (MKL) kernels give.

#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <vector>

#include "aten_ops/complex_math.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny {
namespace {

using complex_math::Cx;
using complex_math::like;

// Sizes up to this are one matrix product (at most 64 multiply-adds per output); larger ones are split.
constexpr int64_t kDirectMax = 64;
// The four-step plan's first factor: the largest divisor of n up to this.
constexpr int64_t kFactorMax = 32;

// cos and sign * sin of 2 pi m / n for m = (i * j) mod n, i < rows, j < cols, sign +1 for a forward
// transform (whose kernel is cos - i sin) and -1 for an inverse one. The integer product is reduced mod n,
// and then to (-n/2, n/2], before it becomes an angle, so the angle is at most pi and keeps dt's precision
// (float64 tables for float64 data). Each table is realized once per schedule.
Cx twiddles(int64_t rows, int64_t cols, int64_t n, bool forward, DType dt) {
  Shape shape{rows, cols};
  UOpPtr i = expand(reshape(iota(rows, DType::Int64), {rows, 1}), shape);
  UOpPtr j = expand(reshape(iota(cols, DType::Int64), {1, cols}), shape);
  UOpPtr m = alu(Ops::MOD, alu(Ops::MUL, i, j), like(i, static_cast<double>(n)));
  UOpPtr past_half = alu(Ops::CMPLT, like(m, static_cast<double>(n / 2)), m);
  m = where(past_half, alu(Ops::SUB, m, like(m, static_cast<double>(n))), m);
  UOpPtr angle = alu(Ops::MUL, cast(m, dt), like(cast(m, dt), 2.0 * std::numbers::pi / static_cast<double>(n)));
  UOpPtr sin = alu(Ops::SIN, angle);
  return {contiguous(alu(Ops::COS, angle)), contiguous(forward ? sin : alu(Ops::NEG, sin))};
}

Shape without_last(const Shape& s) { return Shape(s.begin(), s.end() - 1); }
Shape with(Shape s, std::initializer_list<int64_t> more) {
  s.insert(s.end(), more);
  return s;
}

Cx dft(const Cx& x, int64_t count, bool forward, bool real_only);

// The DFT along x's last axis as one product with the twiddle table: X[k] = sum_j x[j] (c[k, j] - i s[k, j])
// for k < count. x.im null: real input; real_only: the real part only (im left null).
Cx direct_dft(const Cx& x, int64_t count, bool forward, bool real_only) {
  Shape batch = without_last(x.re->shape);
  int64_t n = x.re->shape.back();
  Shape full = with(batch, {count, n}), result = with(batch, {count});
  Cx table = twiddles(count, n, n, forward, x.re->dtype);
  auto of_x = [&](const UOpPtr& v) { return expand(reshape(v, with(batch, {1, n})), full); };
  auto of_table = [&](const UOpPtr& v) { return expand(reshape(v, with(Shape(batch.size(), 1), {count, n})), full); };
  auto sum = [&](const UOpPtr& v) {
    return contiguous(reshape(reduce(v, Ops::ADD, {static_cast<int64_t>(full.size()) - 1}), result));
  };
  UOpPtr re = of_x(x.re), c = of_table(table.re), s = of_table(table.im);
  if (!x.im) return {sum(alu(Ops::MUL, re, c)), real_only ? nullptr : sum(alu(Ops::NEG, alu(Ops::MUL, re, s)))};
  UOpPtr im = of_x(x.im);
  UOpPtr out_re = sum(alu(Ops::ADD, alu(Ops::MUL, re, c), alu(Ops::MUL, im, s)));
  if (real_only) return {out_re, nullptr};
  return {out_re, sum(alu(Ops::SUB, alu(Ops::MUL, im, c), alu(Ops::MUL, re, s)))};
}

// Swaps the last two axes.
UOpPtr transpose_last(const UOpPtr& v) {
  std::vector<int64_t> order(v->shape.size());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[order.size() - 1], order[order.size() - 2]);
  return permute(v, order);
}

// n = n1 * n2, index j = a * n2 + b: DFTs of size n1 over a (for each b), times the twiddle W_n^(b k1),
// DFTs of size n2 over b (for each k1), and the result's index k = k1 + n1 * k2 read in order.
Cx four_step(const Cx& x, int64_t n1, bool forward, bool real_only) {
  Shape batch = without_last(x.re->shape);
  int64_t n = x.re->shape.back(), n2 = n / n1;
  auto columns = [&](const UOpPtr& v) { return v ? transpose_last(reshape(v, with(batch, {n1, n2}))) : nullptr; };
  Cx y = dft({columns(x.re), columns(x.im)}, n1, forward, false); // (batch, b, k1)
  Cx t = twiddles(n2, n1, n, forward, x.re->dtype);
  auto of_table = [&](const UOpPtr& v) {
    return expand(reshape(v, with(Shape(batch.size(), 1), {n2, n1})), y.re->shape);
  };
  Cx w{of_table(t.re), alu(Ops::NEG, of_table(t.im))};
  Cx twiddled = complex_math::mul(y, w);
  twiddled = {contiguous(transpose_last(twiddled.re)), contiguous(transpose_last(twiddled.im))}; // (batch, k1, b)
  Cx z = dft(twiddled, n2, forward, real_only);                                                  // (batch, k1, k2)
  auto in_order = [&](const UOpPtr& v) { return v ? reshape(transpose_last(v), with(batch, {n})) : nullptr; };
  return {in_order(z.re), in_order(z.im)};
}

// The four-step plan's first factor of n, or 1 where n is better done as one product: n up to kDirectMax,
// or a prime (a prime size takes the O(n^2) product).
int64_t first_factor(int64_t n) {
  if (n <= kDirectMax) return 1;
  for (int64_t d = kFactorMax; d >= 2; --d)
    if (n % d == 0) return d;
  for (int64_t p = kFactorMax + 1; p * p <= n; ++p)
    if (n % p == 0) return p;
  return 1;
}

// The DFT of x along its last axis (size n), outputs k < count.
Cx dft(const Cx& x, int64_t count, bool forward, bool real_only) {
  int64_t n = x.re->shape.back();
  int64_t factor = first_factor(n);
  if (factor == 1) return direct_dft(x, count, forward, real_only);
  Cx full = four_step(x, factor, forward, real_only);
  if (count == n) return full;
  std::vector<std::pair<int64_t, int64_t>> keep;
  for (int64_t size : full.re->shape)
    keep.emplace_back(0, size);
  keep.back() = {0, count};
  return {shrink(full.re, keep), full.im ? shrink(full.im, keep) : nullptr};
}

// f applied along `axis` of x: the axis moved last, transformed, moved back.
template <class F> Cx along(const Cx& x, int64_t axis, F f) {
  int64_t rank = static_cast<int64_t>(x.re->shape.size());
  std::vector<int64_t> order, back(rank);
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis) order.push_back(d);
  order.push_back(axis);
  for (int64_t d = 0; d < rank; ++d)
    back[order[d]] = d;
  auto moved = [&](const UOpPtr& v) { return v ? permute(v, order) : nullptr; };
  Cx r = f(Cx{moved(x.re), moved(x.im)});
  auto restored = [&](const UOpPtr& v) { return v ? permute(v, back) : nullptr; };
  return {restored(r.re), restored(r.im)};
}

Cx c2c_along(Cx x, c10::IntArrayRef dims, bool forward) {
  for (int64_t d : dims)
    x = along(x, d, [&](const Cx& v) { return dft(v, v.re->shape.back(), forward, false); });
  return x;
}

// torch's normalization modes (SpectralOps.cpp's fft_norm_mode): 0 none, 1 by 1/sqrt(n), 2 by 1/n, n the
// product of the signal's sizes.
UOpPtr normalized(const UOpPtr& v, int64_t mode, int64_t signal_numel) {
  if (!v || (mode != 1 && mode != 2) || signal_numel == 1) return v;
  double n = static_cast<double>(signal_numel);
  return alu(Ops::MUL, v, like(v, mode == 1 ? 1.0 / std::sqrt(n) : 1.0 / n));
}

std::vector<int64_t> wrapped(c10::IntArrayRef dims, int64_t rank) {
  std::vector<int64_t> r;
  for (int64_t d : dims)
    r.push_back(at::maybe_wrap_dim(d, rank));
  return r;
}

// The strides the CPU's MKL kernel (_exec_fft) gives its result: the batch dims first, in the order of the
// input's strides (largest first), then the transformed dims in the order given, laid out contiguously.
std::vector<int64_t> mkl_layout(c10::IntArrayRef in_strides, c10::IntArrayRef out_sizes,
                                const std::vector<int64_t>& dims) {
  int64_t rank = static_cast<int64_t>(out_sizes.size());
  std::vector<bool> transformed(rank, false);
  for (int64_t d : dims)
    transformed[d] = true;
  std::vector<int64_t> order;
  for (int64_t d = 0; d < rank; ++d)
    if (!transformed[d]) order.push_back(d);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return in_strides[a] > in_strides[b]; });
  size_t batch_dims = order.size();
  order.insert(order.end(), dims.begin(), dims.end());
  std::vector<int64_t> strides(rank);
  int64_t step = 1;
  for (size_t i = order.size(); i-- > batch_dims;) {
    strides[order[i]] = step;
    step *= std::max<int64_t>(out_sizes[order[i]], 1);
  }
  // the batch, one flattened dim of the contiguous (batch, signal...) buffer
  int64_t batch_stride = step;
  for (size_t i = batch_dims; i-- > 0;) {
    strides[order[i]] = batch_stride;
    batch_stride *= out_sizes[order[i]];
  }
  return strides;
}

// dims sorted by the input's strides, largest first (the order the CPU transforms in), the last one kept
// last where keep_last.
std::vector<int64_t> sorted_dims(const at::Tensor& self, std::vector<int64_t> dims, bool keep_last) {
  auto end = keep_last ? dims.end() - 1 : dims.end();
  std::stable_sort(dims.begin(), end, [&](int64_t a, int64_t b) { return self.stride(a) > self.stride(b); });
  return dims;
}

DType part_dtype(const at::Tensor& self) {
  if (self.scalar_type() == at::kComplexHalf) to_tiny_dtype(self.scalar_type()); // NotNativeDtype: the CPU's error
  return element_dtype(self.scalar_type());
}

Cx read_parts(const at::Tensor& self) { return complex_math::parts_of(read_complex(self)); }

at::Tensor complex_result(const at::Tensor& self, c10::IntArrayRef sizes, c10::IntArrayRef strides, const Cx& v,
                          at::ScalarType dtype) {
  at::Tensor out = empty_tiny(sizes, strides, dtype, self.device());
  write_complex(out, complex_math::pairs_of(v));
  return out;
}

int64_t signal_numel(c10::IntArrayRef sizes, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= sizes[d];
  return n;
}

void check_dims(c10::IntArrayRef dims, const char* op) {
  TORCH_CHECK(!dims.empty(), op, ": expected at least one dim to transform");
}

// The CPU's MKL kernel refuses a transform with no elements (an empty batch), so tiny does too.
void check_not_empty(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "MKL FFT error: Intel oneMKL DFTI ERROR: Inconsistent configuration parameters ",
              "(the CPU's FFT refuses a tensor with no elements)");
}

// ---- kernels ----

at::Tensor fft_c2c(const at::Tensor& self, c10::SymIntArrayRef dim_in, int64_t normalization, bool forward) {
  TORCH_CHECK(self.is_complex(), "Only supports complex dtypes, but found: ", self.scalar_type());
  DType dt = part_dtype(self);
  std::vector<int64_t> dims = wrapped(C10_AS_INTARRAYREF_SLOW(dim_in), self.dim());
  if (dims.empty()) return self.clone();
  check_not_empty(self);
  std::vector<int64_t> strides = mkl_layout(self.strides(), self.sizes(), sorted_dims(self, dims, false));
  Cx v = c2c_along(read_parts(self), dims, forward);
  int64_t n = signal_numel(self.sizes(), dims);
  v = {cast(normalized(v.re, normalization, n), dt), cast(normalized(v.im, normalization, n), dt)};
  return complex_result(self, self.sizes(), strides, v, self.scalar_type());
}

at::Tensor fft_r2c(const at::Tensor& self, c10::IntArrayRef dim_in, int64_t normalization, bool onesided) {
  TORCH_CHECK_TYPE(self.is_floating_point(), "Only supports floating-point dtypes, but found: ", self.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble,
                              "MKL FFT doesn't support tensors of type: ", c10::toString(self.scalar_type()));
  check_dims(dim_in, "_fft_r2c");
  std::vector<int64_t> dims = wrapped(dim_in, self.dim());
  int64_t last = dims.back();
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  if (onesided) sizes[last] = sizes[last] / 2 + 1;
  std::vector<int64_t> strides = mkl_layout(self.strides(), sizes, sorted_dims(self, dims, true));
  at::ScalarType dtype = c10::toComplexType(self.scalar_type());
  check_not_empty(self);
  // the real transform along the last dim first (one-sided: only the outputs kept), then the others
  Cx v = along({read(self), nullptr}, last, [&](const Cx& x) { return dft(x, sizes[last], true, false); });
  v = c2c_along(v, c10::IntArrayRef(dims).slice(0, dims.size() - 1), true);
  int64_t n = signal_numel(self.sizes(), dims);
  return complex_result(self, sizes, strides, {normalized(v.re, normalization, n), normalized(v.im, normalization, n)},
                        dtype);
}

// The last dim's inverse transform to `size` real outputs, from the first size / 2 + 1 of its complex inputs
// extended by Hermitian symmetry (X[size - k] = conj(X[k])); the imaginary parts of X[0] and, for an even
// size, X[size / 2] are ignored, as pocketfft and MKL ignore them.
Cx hermitian_inverse(const Cx& x, int64_t size) {
  Shape batch = without_last(x.re->shape);
  int64_t half = size / 2 + 1, mirrored = size - half;
  std::vector<std::pair<int64_t, int64_t>> range;
  for (int64_t s : batch)
    range.emplace_back(0, s);
  auto part = [&](const UOpPtr& v, int64_t from, int64_t to) {
    auto r = range;
    r.emplace_back(from, to);
    return shrink(v, r);
  };
  auto padded = [&](const UOpPtr& v, int64_t before, int64_t after) {
    std::vector<std::pair<int64_t, int64_t>> p(batch.size(), {0, 0});
    p.emplace_back(before, after);
    return pad(v, p);
  };
  UOpPtr re = padded(part(x.re, 0, half), 0, mirrored), im = padded(part(x.im, 0, half), 0, mirrored);
  if (mirrored > 0) {
    std::vector<bool> last(batch.size() + 1, false);
    last.back() = true;
    re = alu(Ops::ADD, re, padded(flip(part(x.re, 1, mirrored + 1), last), half, 0));
    im = alu(Ops::SUB, im, padded(flip(part(x.im, 1, mirrored + 1), last), half, 0));
  }
  UOpPtr k = expand(reshape(iota(size, DType::Int64), with(Shape(batch.size(), 1), {size})), re->shape);
  UOpPtr real_bin = alu(Ops::CMPEQ, k, like(k, 0.0));
  if (size % 2 == 0) real_bin = alu(Ops::OR, real_bin, alu(Ops::CMPEQ, k, like(k, static_cast<double>(size / 2))));
  im = where(real_bin, like(im, 0.0), im);
  return dft({re, im}, size, false, true);
}

at::Tensor fft_c2r(const at::Tensor& self, c10::IntArrayRef dim_in, int64_t normalization, c10::SymInt last_size) {
  TORCH_CHECK(self.is_complex(), "Only supports complex dtypes, but found: ", self.scalar_type());
  DType dt = part_dtype(self);
  check_dims(dim_in, "_fft_c2r");
  std::vector<int64_t> dims = wrapped(dim_in, self.dim());
  int64_t last = dims.back(), size = last_size.guard_int(__FILE__, __LINE__);
  TORCH_CHECK(size >= 1, "Invalid number of data points (", size, ") specified");
  int64_t in_size = self.size(last);
  TORCH_CHECK(in_size == size / 2 + 1 || in_size == size, "_fft_c2r: the last dim's size ", in_size,
              " must be last_dim_size / 2 + 1 (", size / 2 + 1, ") or last_dim_size (", size, ")");
  std::vector<int64_t> c2c_dims(dims.begin(), dims.end() - 1);
  // the CPU transforms the other dims first (a c2c whose result's layout the last step keeps)
  std::vector<int64_t> mid_strides(self.strides().begin(), self.strides().end());
  if (!c2c_dims.empty()) mid_strides = mkl_layout(self.strides(), self.sizes(), sorted_dims(self, c2c_dims, false));
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  sizes[last] = size;
  std::vector<int64_t> strides = mkl_layout(mid_strides, sizes, {last});
  check_not_empty(self);
  at::Tensor out = empty_tiny(sizes, strides, c10::toRealValueType(self.scalar_type()), self.device());
  Cx v = c2c_along(read_parts(self), c2c_dims, false);
  v = along(v, last, [&](const Cx& x) { return hermitian_inverse(x, size); });
  write(out, cast(normalized(v.re, normalization, signal_numel(sizes, dims)), dt));
  return out;
}

// out= as the CPU's: the result computed, out resized like any out= and the result copied in (copy_'s casts).
at::Tensor& into(at::Tensor& out, const at::Tensor& result) {
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

at::Tensor& fft_c2c_out(const at::Tensor& self, c10::SymIntArrayRef dim, int64_t normalization, bool forward,
                        at::Tensor& out) {
  return into(out, fft_c2c(self, dim, normalization, forward));
}

at::Tensor& fft_r2c_out(const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization, bool onesided,
                        at::Tensor& out) {
  return into(out, fft_r2c(self, dim, normalization, onesided));
}

at::Tensor& fft_c2r_out(const at::Tensor& self, c10::IntArrayRef dim, int64_t normalization, c10::SymInt last_size,
                        at::Tensor& out) {
  return into(out, fft_c2r(self, dim, normalization, std::move(last_size)));
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("_fft_c2c", TORCH_FN(fft_c2c));
  m.impl("_fft_c2c.out", TORCH_FN(fft_c2c_out));
  m.impl("_fft_r2c", TORCH_FN(fft_r2c));
  m.impl("_fft_r2c.out", TORCH_FN(fft_r2c_out));
  m.impl("_fft_c2r", TORCH_FN(fft_c2r));
  m.impl("_fft_c2r.out", TORCH_FN(fft_c2r_out));
}

} // namespace tiny
