// Random numbers drawn on the device: uniform_, normal_ (and torch.normal's tensor forms), random_ (with
// from/to), bernoulli_ (p a float or a tensor), exponential_, cauchy_, log_normal_, geometric_, randperm,
// multinomial, and native_dropout with its backward. rand, randn, randint, rand_like, randn_like,
// randint_like, bernoulli(t) and dropout are torch's compositions of these.
//
// The generator is counter-based: the 64 random bits of element i of a draw are splitmix64's output
// function applied to key + i * golden_gamma, where `key` is 64 bits the op draws once from the tiny
// generator (csrc/backend.h, random_key). Elements are independent of each other, so a draw is an
// elementwise UOp that fuses into its consumers, and the key is a runtime scalar: a new draw compiles
// nothing. Values differ from the CPU's (another generator); distributions, reproducibility under a seed,
// and the Generator argument behave as torch's.
//
// torch's argument checks and dtype rules come from its own templates (ATen/native/DistributionTemplates.h),
// which call the kernels below.

#include <ATen/ATen.h>
#include <ATen/native/DistributionTemplates.h>
#include <ATen/native/TensorFactories.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

#include "csrc/backend.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

struct TinyRNG {}; // the templates' RNG parameter: tiny kernels draw their key themselves

// ---- the counter-based generator ----

UOpPtr full(DType dt, int64_t v, const Shape& shape) {
  UOpPtr c = const_int(dt, v);
  return shape.empty() ? c : expand(reshape(c, Shape(shape.size(), 1)), shape);
}

UOpPtr var(DType dt, double v, const Shape& shape) {
  UOpPtr c = is_float(dt) ? var_float(dt, v) : var_int(dt, static_cast<int64_t>(v));
  return shape.empty() ? c : expand(reshape(c, Shape(shape.size(), 1)), shape);
}

UOpPtr fixed(DType dt, double v, const Shape& shape) {
  UOpPtr c = is_float(dt) ? const_float(dt, v) : const_int(dt, static_cast<int64_t>(v));
  return shape.empty() ? c : expand(reshape(c, Shape(shape.size(), 1)), shape);
}

// x >> k with zeros shifted in (int64 shifts are arithmetic).
UOpPtr shift_right(const UOpPtr& x, int k) {
  return alu(Ops::AND, alu(Ops::SHR, x, full(kIndex, k, x->shape)),
             full(kIndex, static_cast<int64_t>((~uint64_t{0}) >> k), x->shape));
}

UOpPtr mix(const UOpPtr& z, int k, uint64_t multiplier) {
  UOpPtr x = alu(Ops::XOR, z, shift_right(z, k));
  return multiplier ? alu(Ops::MUL, x, full(kIndex, static_cast<int64_t>(multiplier), z->shape)) : x;
}

UOpPtr broadcast(const UOpPtr& scalar, const Shape& shape) {
  return shape.empty() ? scalar : expand(reshape(scalar, Shape(shape.size(), 1)), shape);
}

// 64 random bits (int64) for each element of `shape`: word `word` of `words` per element, for the draw
// whose key is `key` (a runtime scalar).
UOpPtr random_bits(uint64_t key, const Shape& shape, int64_t words = 1, int64_t word = 0) {
  UOpPtr i = reshape(iota(std::max<int64_t>(prod(shape), 1), kIndex), shape);
  UOpPtr counter = alu(Ops::ADD, alu(Ops::MUL, i, full(kIndex, words, shape)), full(kIndex, word, shape));
  UOpPtr z = alu(Ops::ADD, alu(Ops::MUL, counter, full(kIndex, static_cast<int64_t>(0x9E3779B97F4A7C15ULL), shape)),
                 broadcast(var_int(kIndex, static_cast<int64_t>(key)), shape));
  z = mix(z, 30, 0xBF58476D1CE4E5B9ULL);
  z = mix(z, 27, 0x94D049BB133111EBULL);
  return mix(z, 31, 0);
}

// Significant bits of a dtype: how many random bits make a uniform value in [0, 1) exactly.
int digits(DType dt) {
  switch (dt) {
  case DType::Float64:
    return 53;
  case DType::Float16:
    return 11;
  case DType::BFloat16:
    return 8;
  default:
    return 24;
  }
}

// The dtype a distribution is computed in: float64 for float64, float32 otherwise.
DType compute_dtype(DType dt) { return dt == DType::Float64 ? dt : DType::Float32; }

// (k + shift) / 2^b for the top b bits k: uniform in [0, 1) for shift 0, in (0, 1) for 0.5, (0, 1] for 1.
UOpPtr unit(const UOpPtr& bits, int b, DType ct, double shift = 0.0) {
  UOpPtr k = cast(shift_right(bits, 64 - b), ct);
  if (shift != 0.0) k = alu(Ops::ADD, k, fixed(ct, shift, bits->shape));
  return alu(Ops::MUL, k, fixed(ct, std::ldexp(1.0, -b), bits->shape));
}

// A standard normal per element (Box-Muller on two uniforms: for float32, both from one 64-bit word).
UOpPtr standard_normal(uint64_t key, const Shape& shape, DType ct) {
  int b = digits(ct);
  UOpPtr u1, u2;
  if (ct == DType::Float32) {
    UOpPtr bits = random_bits(key, shape);
    u1 = unit(bits, b, ct, 1.0);
    u2 = unit(alu(Ops::SHL, bits, full(kIndex, 32, shape)), b, ct);
  } else {
    u1 = unit(random_bits(key, shape, 2, 0), b, ct, 1.0);
    u2 = unit(random_bits(key, shape, 2, 1), b, ct);
  }
  UOpPtr radius = alu(Ops::SQRT, alu(Ops::MUL, fixed(ct, -2.0, shape), alu(Ops::LOG, u1)));
  return alu(Ops::MUL, radius, alu(Ops::COS, alu(Ops::MUL, fixed(ct, 2.0 * M_PI, shape), u2)));
}

DType dtype_of(const at::TensorBase& t) { return to_tiny_dtype(t.scalar_type()); }
Shape shape_of(const at::TensorBase& t) { return to_shape(t.sizes()); }

uint64_t key_for(const at::TensorBase& self, const std::optional<at::Generator>& gen) {
  return random_key(gen, self.device());
}

void store(const at::TensorBase& self, const UOpPtr& value) { write(at::Tensor(self), cast(value, dtype_of(self))); }

void check_float(const at::TensorBase& self, const char* kernel) {
  TORCH_CHECK_NOT_IMPLEMENTED(is_float(dtype_of(self)), "\"", kernel, "\" not implemented for '", self.scalar_type(),
                              "'");
}

// ---- the kernels torch's templates call ----

template <typename RNG> struct UniformKernel {
  void operator()(at::TensorIteratorBase& iter, double from, double to, std::optional<at::Generator> gen) {
    const at::TensorBase& self = iter.tensor_base(0);
    DType dt = dtype_of(self), ct = compute_dtype(dt);
    Shape shape = shape_of(self);
    UOpPtr u = unit(random_bits(key_for(self, gen), shape), digits(dt), ct);
    store(self, alu(Ops::ADD, alu(Ops::MUL, u, var(ct, to - from, shape)), var(ct, from, shape)));
  }
};

template <typename RNG> struct NormalKernel {
  void operator()(const at::TensorBase& self, double mean, double std, std::optional<at::Generator> gen) {
    check_float(self, "normal_kernel_cpu");
    DType ct = compute_dtype(dtype_of(self));
    Shape shape = shape_of(self);
    UOpPtr z = standard_normal(key_for(self, gen), shape, ct);
    store(self, alu(Ops::ADD, alu(Ops::MUL, z, var(ct, std, shape)), var(ct, mean, shape)));
  }
};

// x mod range for x and range read as unsigned 64-bit numbers, range > 2^63: x - range when x >= range.
UOpPtr unsigned_mod_large(const UOpPtr& x, uint64_t range) {
  const Shape& s = x->shape;
  UOpPtr r = broadcast(var_int(kIndex, static_cast<int64_t>(range)), s);
  UOpPtr flip = full(kIndex, std::numeric_limits<int64_t>::min(), s); // unsigned order = signed order of x ^ 2^63
  UOpPtr below = alu(Ops::CMPLT, alu(Ops::XOR, x, flip), alu(Ops::XOR, r, flip));
  return where(below, x, alu(Ops::SUB, x, r));
}

// from + (random mod range), as torch's random_(from, to) (range = to - from, up to 2^64).
UOpPtr random_in(uint64_t key, const Shape& shape, uint64_t range, int64_t from) {
  UOpPtr bits = random_bits(key, shape);
  UOpPtr offset;
  if (range == 0)
    offset = bits; // the whole 64-bit range
  else if (range <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    offset = alu(Ops::MOD, shift_right(bits, 1), broadcast(var_int(kIndex, static_cast<int64_t>(range)), shape));
  else
    offset = unsigned_mod_large(bits, range);
  return alu(Ops::ADD, broadcast(var_int(kIndex, from), shape), offset); // wraps as torch's uint64 arithmetic
}

template <typename RNG> struct RandomKernel {
  void operator()(at::TensorIteratorBase& iter, std::optional<at::Generator> gen) {
    const at::TensorBase& self = iter.tensor_base(0);
    DType dt = dtype_of(self);
    // torch: floats in [0, 2^digits], integers in [0, max], bools in {0, 1}
    uint64_t range;
    if (is_float(dt))
      range = (uint64_t{1} << digits(dt)) + 1;
    else if (dt == DType::Bool)
      range = 2;
    else if (!info(dt).is_signed)
      range = uint64_t{1} << (itemsize(dt) * 8);
    else
      range = uint64_t{1} << (itemsize(dt) * 8 - 1);
    store(self, random_in(key_for(self, gen), shape_of(self), range, 0));
  }
};

template <typename RNG> struct RandomFromToKernel {
  void operator()(at::TensorIteratorBase& iter, uint64_t range, int64_t base, std::optional<at::Generator> gen) {
    const at::TensorBase& self = iter.tensor_base(0);
    store(self, random_in(key_for(self, gen), shape_of(self), range, base));
  }
  void operator()(at::TensorIteratorBase& iter, std::optional<at::Generator> gen) {
    const at::TensorBase& self = iter.tensor_base(0);
    store(self, random_in(key_for(self, gen), shape_of(self), 0, 0));
  }
};

template <typename RNG> struct BernoulliScalarKernel {
  void operator()(const at::TensorBase& self, double p, std::optional<at::Generator> gen) {
    Shape shape = shape_of(self);
    UOpPtr u = unit(random_bits(key_for(self, gen), shape), 53, DType::Float64);
    store(self, alu(Ops::CMPLT, u, var(DType::Float64, p, shape)));
  }
};

template <typename RNG> struct BernoulliTensorKernel {
  void operator()(const at::TensorBase& self_base, const at::Tensor& p_in, std::optional<at::Generator> gen) {
    at::Tensor self(self_base);
    TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(p_in.scalar_type()),
                                "\"bernoulli_tensor_cpu_p_\" not implemented for '", p_in.scalar_type(), "'");
    at::Tensor p = p_in.device() == self.device() ? p_in : p_in.to(self.device());
    TORCH_CHECK(at::is_expandable_to(p.sizes(), self.sizes()), "The expanded size of the tensor (", self.sizes(),
                ") must match the existing size (", p.sizes(), ")");
    if (p.numel() > 0) {
      // torch's CPU kernel checks every p (a sync here: min and max read to the host)
      auto [lo, hi] = at::aminmax(p);
      double pmin = lo.item<double>(), pmax = hi.item<double>();
      TORCH_CHECK(pmin >= 0 && pmax <= 1,
                  "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error "
                  "message be improved?  If so, please report an enhancement request to PyTorch.)");
    }
    Shape shape = shape_of(self);
    UOpPtr pv = cast(read(p), DType::Float64);
    Shape padded(shape.size() - pv->shape.size(), 1);
    padded.insert(padded.end(), pv->shape.begin(), pv->shape.end());
    pv = expand(reshape(pv, padded), shape);
    UOpPtr u = unit(random_bits(key_for(self, gen), shape), 53, DType::Float64);
    store(self, alu(Ops::CMPLT, u, pv));
  }
};

template <typename RNG> struct ExponentialKernel {
  void operator()(at::TensorIteratorBase& iter, double lambda, std::optional<at::Generator> gen) {
    const at::TensorBase& self = iter.tensor_base(0);
    TORCH_CHECK(is_float(dtype_of(self)),
                "Exponential distribution is a continuous probability distribution. dtype "
                "must be a floating point but you specified ",
                self.scalar_type());
    DType ct = compute_dtype(dtype_of(self));
    Shape shape = shape_of(self);
    // -log(u) / lambda with u in (0, 1): never 0, never inf
    UOpPtr u = unit(random_bits(key_for(self, gen), shape), digits(ct), ct, 0.5);
    store(self, alu(Ops::FDIV, alu(Ops::NEG, alu(Ops::LOG, u)), var(ct, lambda, shape)));
  }
};

template <typename RNG> struct CauchyKernel {
  void operator()(at::TensorIteratorBase& iter, double median, double sigma, std::optional<at::Generator> gen) {
    const at::TensorBase& self = iter.tensor_base(0);
    DType ct = compute_dtype(dtype_of(self));
    Shape shape = shape_of(self);
    UOpPtr u = unit(random_bits(key_for(self, gen), shape), digits(ct), ct, 0.5);
    UOpPtr t = alu(Ops::TAN, alu(Ops::MUL, fixed(ct, M_PI, shape), alu(Ops::SUB, u, fixed(ct, 0.5, shape))));
    store(self, alu(Ops::ADD, var(ct, median, shape), alu(Ops::MUL, var(ct, sigma, shape), t)));
  }
};

template <typename RNG> struct LogNormalKernel {
  void operator()(at::TensorIteratorBase& iter, double mean, double std, std::optional<at::Generator> gen) {
    const at::TensorBase& self = iter.tensor_base(0);
    check_float(self, "log_normal_cpu");
    DType ct = compute_dtype(dtype_of(self));
    Shape shape = shape_of(self);
    UOpPtr z = standard_normal(key_for(self, gen), shape, ct);
    store(self, alu(Ops::EXP, alu(Ops::ADD, alu(Ops::MUL, z, var(ct, std, shape)), var(ct, mean, shape))));
  }
};

template <typename RNG> struct GeometricKernel {
  void operator()(at::TensorIteratorBase& iter, double p, std::optional<at::Generator> gen) {
    const at::TensorBase& self = iter.tensor_base(0);
    TORCH_CHECK_NOT_IMPLEMENTED(dtype_of(self) != DType::Bool, "\"geometric_cpu\" not implemented for 'Bool'");
    Shape shape = shape_of(self);
    // the number of trials to the first success: ceil(log(u) / log(1 - p)), u in (0, 1)
    UOpPtr u = unit(random_bits(key_for(self, gen), shape), 53, DType::Float64, 0.5);
    UOpPtr q = var(DType::Float64, std::log1p(-p), shape);
    store(self, alu(Ops::CEIL, alu(Ops::FDIV, alu(Ops::LOG, u), q)));
  }
};

// ---- the ops ----

using namespace at::native::templates;

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  return uniform_impl_<UniformKernel, TinyRNG>(self, from, to, gen);
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  return normal_impl_<NormalKernel, TinyRNG>(self, mean, std, gen);
}

at::Tensor normal_tensor_float(const at::Tensor& mean, double std, std::optional<at::Generator> gen) {
  return normal_impl<NormalKernel, TinyRNG>(mean, std, gen);
}
at::Tensor& normal_tensor_float_out(const at::Tensor& mean, double std, std::optional<at::Generator> gen,
                                    at::Tensor& out) {
  return normal_out_impl<NormalKernel, TinyRNG>(out, mean, std, gen);
}
at::Tensor normal_float_tensor(double mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  return normal_impl<NormalKernel, TinyRNG>(mean, std, gen);
}
at::Tensor& normal_float_tensor_out(double mean, const at::Tensor& std, std::optional<at::Generator> gen,
                                    at::Tensor& out) {
  return normal_out_impl<NormalKernel, TinyRNG>(out, mean, std, gen);
}
at::Tensor normal_tensor_tensor(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  return normal_impl<NormalKernel, TinyRNG>(mean, std, gen);
}
at::Tensor& normal_tensor_tensor_out(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen,
                                     at::Tensor& out) {
  return normal_out_impl<NormalKernel, TinyRNG>(out, mean, std, gen);
}

at::Tensor& random_(at::Tensor& self, std::optional<at::Generator> gen) {
  return random_impl<RandomKernel, TinyRNG>(self, gen);
}
at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, std::optional<at::Generator> gen) {
  return random_from_to_impl<RandomFromToKernel, TinyRNG>(self, from, to, gen);
}
at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return random_from_to_impl<RandomFromToKernel, TinyRNG>(self, 0, to, gen);
}

at::Tensor& bernoulli_tensor_(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
  return bernoulli_impl_<BernoulliTensorKernel, TinyRNG>(self, p, gen);
}
at::Tensor& bernoulli_float_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return bernoulli_impl_<BernoulliScalarKernel, TinyRNG>(self, p, gen);
}
at::Tensor& bernoulli_out(const at::Tensor& self, std::optional<at::Generator> gen, at::Tensor& out) {
  return bernoulli_out_impl<BernoulliTensorKernel, TinyRNG>(out, self, gen);
}

at::Tensor& exponential_(at::Tensor& self, double lambda, std::optional<at::Generator> gen) {
  return exponential_impl_<ExponentialKernel, TinyRNG>(self, lambda, gen);
}
at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, std::optional<at::Generator> gen) {
  return cauchy_impl_<CauchyKernel, TinyRNG>(self, median, sigma, gen);
}
at::Tensor& log_normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  return log_normal_impl_<LogNormalKernel, TinyRNG>(self, mean, std, gen);
}
at::Tensor& geometric_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return geometric_impl_<GeometricKernel, TinyRNG>(self, p, gen);
}

// randperm: the positions of n random keys in sorted order are a uniformly random permutation (ties,
// with probability about n^2 / 2^64, keep their order).
at::Tensor& randperm_out(int64_t n, std::optional<at::Generator> gen, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  TORCH_CHECK(!gen.has_value() || !gen->defined() || out.device() == gen->device(), "Expected a '", out.device(),
              "' generator device but found '", gen->device(), "'");
  at::native::check_supported_max_int_with_precision(n, out);
  TORCH_CHECK_NOT_IMPLEMENTED(out.scalar_type() != at::kBool && out.scalar_type() != at::kBFloat16,
                              "\"randperm\" not implemented for '", out.scalar_type(), "'");
  out.resize_({n});
  if (n == 0) return out;
  at::Tensor keys = empty_tiny({n}, at::kLong, out.device());
  write(keys, shift_right(random_bits(key_for(out, gen), {n}), 1));
  at::Tensor positions = std::get<1>(at::sort(keys, /*stable=*/true, 0, false));
  store(out, read(positions));
  return out;
}

// torch's checks of a probability tensor: it raises on a negative, infinite or NaN entry, and on a row
// summing to 0. Two reductions on the device, read in one sync.
void check_probabilities(const at::Tensor& self, bool with_replacement) {
  int64_t rows = self.dim() == 1 ? 1 : self.size(0), n = self.size(-1);
  Shape s{rows, n};
  UOpPtr x = reshape(cast(read(self), DType::Float64), s), zero = fixed(DType::Float64, 0, s);
  // x - x is 0 exactly for finite x
  UOpPtr bad = alu(Ops::OR, alu(Ops::CMPNE, alu(Ops::SUB, x, x), zero), alu(Ops::CMPLT, x, zero));
  at::Tensor any_bad = empty_tiny({}, at::kDouble, self.device()), min_sum = empty_tiny({}, at::kDouble, self.device());
  write(any_bad, reshape(reduce(cast(bad, DType::Float64), Ops::MAX, {0, 1}), {}));
  write(min_sum, reshape(reduce(reduce(x, Ops::ADD, {1}), Ops::MIN, {0}), {}));
  bool invalid = any_bad.item<double>() != 0; // this read realizes both
  double smallest = min_sum.item<double>();
  if (with_replacement) {
    TORCH_CHECK(!invalid, "invalid multinomial distribution (encountering probability entry < 0, infinity or NaN)");
    TORCH_CHECK(smallest > 0, "invalid multinomial distribution (sum of probabilities <= 0)");
  } else {
    TORCH_CHECK(!invalid, "probability tensor contains either `inf`, `nan` or element < 0");
    TORCH_CHECK(smallest != 0, "invalid multinomial distribution (sum of probabilities <= 0)");
  }
}

at::Tensor& multinomial_out(const at::Tensor& self, int64_t n_sample, bool with_replacement,
                            std::optional<at::Generator> gen, at::Tensor& result) {
  TORCH_CHECK(result.device() == self.device(), "multinomial arguments must have the same device");
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "multinomial only supports floating-point dtypes for input, got: ", self.scalar_type());
  TORCH_CHECK(result.scalar_type() == at::kLong, "multinomial expects Long tensor out, got: ", result.scalar_type());
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  int64_t n = self.size(-1);
  TORCH_CHECK(with_replacement || (n_sample <= n), "cannot sample n_sample > prob_dist.size(-1) samples without "
                                                   "replacement");
  TORCH_CHECK(n <= (int64_t{1} << 24), "number of categories cannot exceed 2^24");
  if (self.dim() == 1)
    result.resize_({n_sample});
  else
    result.resize_({self.size(0), n_sample});
  if (result.numel() == 0) return result;
  bool single = !with_replacement || n_sample == 1;
  check_probabilities(self, !single);
  if (single) {
    // torch's way (Gumbel-max in exponential form): the top n_sample of p / q with q ~ Exp(1)
    at::Tensor q = at::empty_like(self).exponential_(1, gen);
    at::div_out(q, self, q);
    if (n_sample == 1)
      at::argmax_out(result, q, /*dim=*/-1, /*keepdim=*/true);
    else {
      at::Tensor vals = at::empty(result.sizes(), self.options());
      at::topk_out(vals, result, q, n_sample);
    }
    return result;
  }
  // With replacement: the first category whose cumulative probability exceeds u * total.
  int64_t rows = self.dim() == 1 ? 1 : self.size(0);
  UOpPtr p = reshape(cast(read(self), DType::Float64), {rows, n});
  Shape sq{rows, n, n}; // [row, j, k]: cdf[row, j] = sum of p[row, k] for k <= j
  UOpPtr upto =
      alu(Ops::CMPLE, expand(reshape(iota(n, kIndex), {1, 1, n}), sq), expand(reshape(iota(n, kIndex), {1, n, 1}), sq));
  UOpPtr spread = expand(reshape(p, {rows, 1, n}), sq);
  UOpPtr cdf = contiguous(reshape(reduce(where(upto, spread, fixed(DType::Float64, 0, sq)), Ops::ADD, {2}), {rows, n}));
  UOpPtr total = shrink(cdf, {{0, rows}, {n - 1, n}}); // (rows, 1)
  Shape s{rows, n_sample};
  UOpPtr u = alu(Ops::MUL, unit(random_bits(key_for(self, gen), s), 53, DType::Float64), expand(total, s));
  Shape cube{rows, n_sample, n};
  UOpPtr below =
      alu(Ops::CMPLE, expand(reshape(cdf, {rows, 1, n}), cube), expand(reshape(u, {rows, n_sample, 1}), cube));
  UOpPtr k = reshape(reduce(cast(below, kIndex), Ops::ADD, {2}), s);
  k = alu(Ops::MIN, k, full(kIndex, n - 1, s));
  write(result, reshape(k, to_shape(result.sizes())));
  return result;
}

at::Tensor multinomial(const at::Tensor& self, int64_t n_sample, bool with_replacement,
                       std::optional<at::Generator> gen) {
  at::Tensor result = empty_tiny({0}, at::kLong, self.device());
  return multinomial_out(self, n_sample, with_replacement, gen, result);
}

// torch's CPU dropout: mask ~ Bernoulli(1 - p) (bool), output = input * mask * 1/(1 - p).
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input, input.options())};
  if (train.has_value() && !*train) return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  double p1m = 1. - p;
  double scale = p1m == 0 ? 0. : 1. / p1m;
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  mask.bernoulli_(p1m);
  return {input.mul(mask).mul_(scale), mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  return grad * mask * scale;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("uniform_", TORCH_FN(uniform_));
  m.impl("normal_", TORCH_FN(normal_));
  m.impl("normal.Tensor_float", TORCH_FN(normal_tensor_float));
  m.impl("normal.Tensor_float_out", TORCH_FN(normal_tensor_float_out));
  m.impl("normal.float_Tensor", TORCH_FN(normal_float_tensor));
  m.impl("normal.float_Tensor_out", TORCH_FN(normal_float_tensor_out));
  m.impl("normal.Tensor_Tensor", TORCH_FN(normal_tensor_tensor));
  m.impl("normal.Tensor_Tensor_out", TORCH_FN(normal_tensor_tensor_out));
  m.impl("random_", TORCH_FN(random_));
  m.impl("random_.from", TORCH_FN(random_from));
  m.impl("random_.to", TORCH_FN(random_to));
  m.impl("bernoulli_.Tensor", TORCH_FN(bernoulli_tensor_));
  m.impl("bernoulli_.float", TORCH_FN(bernoulli_float_));
  m.impl("bernoulli.out", TORCH_FN(bernoulli_out));
  m.impl("exponential_", TORCH_FN(exponential_));
  m.impl("cauchy_", TORCH_FN(cauchy_));
  m.impl("log_normal_", TORCH_FN(log_normal_));
  m.impl("geometric_", TORCH_FN(geometric_));
  m.impl("randperm.generator_out", TORCH_FN(randperm_out));
  m.impl("multinomial", TORCH_FN(multinomial));
  m.impl("multinomial.out", TORCH_FN(multinomial_out));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
}

} // namespace tiny::aten_ops
