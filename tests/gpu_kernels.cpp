#include "tests/gpu_kernels.h"

#include "runtime/device.h"

namespace tiny {

std::vector<SampleKernel> sample_gpu_kernels(const Target& t) {
  auto buf = [](DType dt, int64_t n) { return std::make_shared<runtime::Buffer>(runtime::cpu_device(), dt, n); };
  std::vector<SampleKernel> ks;
  auto add = [&](const std::string& what, const UOpPtr& v) {
    ks.push_back({what, lower_kernel(buf(v->dtype, prod(v->shape)), View::contiguous(v->shape), v, t)});
  };
  auto x = reshape(buffer(buf(DType::Float32, 64 * 500)), {64, 500});
  add("elementwise with the prelude's and libm's functions",
      alu(Ops::ADD, alu(Ops::TANH, alu(Ops::EXP, x)), alu(Ops::ERF, alu(Ops::LOG, alu(Ops::ABS, x)))));
  // every libm function the renderers call, in float32 and float64 (on AMD some reach ocml only through
  // the HIP compiler's prelude)
  for (DType dt : {DType::Float32, DType::Float64}) {
    UOpPtr v = cast(x, dt), sum = v;
    for (Ops op :
         {Ops::SQRT, Ops::EXP,  Ops::EXP2,  Ops::LOG,  Ops::LOG2,  Ops::SIN,   Ops::COS,   Ops::TAN,   Ops::TANH,
          Ops::ERF,  Ops::ERFC, Ops::FLOOR, Ops::CEIL, Ops::RINT,  Ops::TRUNC, Ops::LOG1P, Ops::EXPM1, Ops::ASIN,
          Ops::ACOS, Ops::ATAN, Ops::SINH,  Ops::COSH, Ops::ASINH, Ops::ACOSH, Ops::ATANH, Ops::LGAMMA})
      sum = alu(Ops::ADD, sum, alu(op, v));
    sum = alu(Ops::ADD, sum, alu(Ops::POW, v, alu(Ops::ATAN2, v, alu(Ops::MOD, v, alu(Ops::NEG, v)))));
    add("every math function, " + std::string(name(dt)), sum);
  }
  for (DType dt : {DType::Bool, DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::UInt8, DType::Float16,
                   DType::BFloat16, DType::Float32, DType::Float64, DType::UInt16, DType::UInt32, DType::UInt64}) {
    UOpPtr a = cast(x, dt), b = cast(alu(Ops::NEG, x), dt);
    if (dt == DType::Bool) {
      add("elementwise bool", alu(Ops::XOR, alu(Ops::OR, a, b), alu(Ops::CMPLT, x, alu(Ops::NEG, x))));
      continue;
    }
    UOpPtr v = alu(Ops::ADD, alu(Ops::MUL, a, b), alu(Ops::MAX, a, b));
    v = alu(Ops::SUB, v, is_float(dt) ? alu(Ops::FDIV, a, b) : alu(Ops::IDIV, a, b));
    add("elementwise " + std::string(name(dt)), where(alu(Ops::CMPLT, a, b), v, alu(Ops::MIN, a, alu(Ops::NEG, b))));
  }
  // lanes: each thread 16 bytes of adjacent outputs, read and written as vectors (every dtype class);
  // an aligned row, a broadcast column, a read at an odd offset (OpenCL: a vector; CUDA and HIP: one
  // element at a time), a strided read
  auto y = reshape(buffer(buf(DType::Float32, 64 * 512 + 1)), {64 * 512 + 1});
  auto aligned = reshape(shrink(y, {{0, 64 * 512}}), {64, 512}),
       odd = reshape(shrink(y, {{1, 64 * 512 + 1}}), {64, 512});
  auto column = expand(reshape(shrink(y, {{0, 64}}), {64, 1}), {64, 512});
  auto strided = permute(reshape(shrink(y, {{0, 64 * 512}}), {512, 64}), {1, 0});
  for (DType dt :
       {DType::Bool, DType::UInt8, DType::Float16, DType::BFloat16, DType::Float32, DType::Int64, DType::Float64}) {
    UOpPtr v = alu(Ops::ADD, alu(Ops::MUL, aligned, column), alu(Ops::SUB, odd, strided));
    add("elementwise lanes, " + std::string(name(dt)), cast(alu(Ops::ADD, cast(cast(v, dt), DType::Float32), v), dt));
  }
  // grouped reductions, one inside another
  auto e = alu(Ops::EXP, alu(Ops::SUB, x, expand(reduce(x, Ops::MAX, {1}), {64, 500})));
  add("softmax: grouped reduces", alu(Ops::FDIV, e, expand(reduce(e, Ops::ADD, {1}), {64, 500})));
  // a float32 matmul: tiles of both operands staged in local memory
  const int64_t M = 128, K = 96, N = 64;
  auto xa = expand(reshape(buffer(buf(DType::Float32, M * K)), {M, K, 1}), {M, K, N});
  auto wb = expand(reshape(buffer(buf(DType::Float32, K * N)), {1, K, N}), {M, K, N});
  add("float32 matmul with tiles in local memory", reshape(reduce(alu(Ops::MUL, xa, wb), Ops::ADD, {1}), {M, N}));
  // per-thread reduction (a matmul), float16 in and out
  auto h = reshape(buffer(buf(DType::Float16, 300 * 40)), {300, 40});
  add("float16 matmul", reduce(alu(Ops::MUL, expand(reshape(h, {1, 300, 40}), {40, 300, 40}),
                                   expand(reshape(permute(h, {1, 0}), {40, 300, 1}), {40, 300, 40})),
                               Ops::ADD, {1}));
  auto i16 = bitcast(cast(x, DType::BFloat16), DType::Int16);
  add("bfloat16 and float16 bitcasts",
      alu(Ops::ADD, cast(i16, DType::Int64), cast(bitcast(i16, DType::Float16), DType::Int64)));
  // masked views, int64 and float64 scalars
  auto d = reshape(buffer(buf(DType::Float64, 30 * 40)), {30, 40});
  auto scaled = alu(Ops::MUL, pad(flip(d, {true, false}), {{1, 2}, {3, 0}}),
                    expand(reshape(var_float(DType::Float64, 0.5), {1, 1}), {33, 43}));
  add("float64 masked views and scalars",
      alu(Ops::ADD, scaled, cast(expand(reshape(var_int(DType::Int64, 3), {1, 1}), {33, 43}), DType::Float64)));
  add("gather", gather(buffer(buf(DType::Float32, 1000)), reshape(buffer(buf(DType::Int64, 8)), {2, 4})));
  auto idx = buffer(buf(DType::Int64, 40));
  ks.push_back({"scatter", lower_scatter(buf(DType::Float32, 50), idx, buffer(buf(DType::Float32, 40)),
                                         static_cast<int64_t>(Ops::ADD), t)});
  return ks;
}

} // namespace tiny
