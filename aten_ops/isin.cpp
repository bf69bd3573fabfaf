// isin (Tensor, Tensor) and its out= form: whether each element equals some test element, in the two
// tensors' common dtype, as the CPU's direct kernel compares them (its sorting path for many test elements
// gives the same answer; NaN equals nothing). One reduction (any) over the test elements per element, the
// comparisons fused into it.

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten_ops/builders.h"
#include "csrc/kernel_library.h"
#include "csrc/tensor_bridge.h"

namespace tiny::aten_ops {

namespace {

void check_isin_dtype(at::ScalarType st) {
  TORCH_CHECK(st != at::kBool && st != at::kComplexFloat && st != at::kComplexDouble,
              "Unsupported input type encountered for isin(): ", st);
}

at::Tensor& isin_out(const at::Tensor& elements, const at::Tensor& test_elements, bool /*assume_unique*/, bool invert,
                     at::Tensor& out) {
  check_isin_dtype(elements.scalar_type());
  check_isin_dtype(test_elements.scalar_type());
  check_same_device({elements, test_elements, out});
  TORCH_CHECK(out.scalar_type() == at::kBool, "Expected out tensor to have dtype bool, but got ", out.scalar_type(),
              " instead");
  at::native::resize_output(out, elements.sizes());
  if (elements.numel() == 0) return out;
  const int64_t n = elements.numel(), k = test_elements.numel();
  if (k == 0) {
    write(out, fixed(DType::Bool, invert ? 1 : 0, to_shape(out.sizes())));
    return out;
  }
  DType common = to_tiny_dtype(at::result_type(elements, test_elements));
  Shape space{n, k};
  UOpPtr e = expand(reshape(cast(read(elements), common), {n, 1}), space);
  UOpPtr t = expand(reshape(cast(read(test_elements), common), {1, k}), space);
  UOpPtr found = reduce(cast(alu(Ops::CMPEQ, e, t), DType::Int32), Ops::MAX, {1});
  UOpPtr hit = alu(Ops::CMPNE, found, fixed(DType::Int32, invert ? 1 : 0, {n, 1}));
  write(out, reshape(hit, to_shape(out.sizes())));
  return out;
}

at::Tensor isin(const at::Tensor& elements, const at::Tensor& test_elements, bool assume_unique, bool invert) {
  at::Tensor out = empty_tiny(elements.sizes(), at::kBool, elements.device());
  return isin_out(elements, test_elements, assume_unique, invert, out);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, library) {
  tiny::KernelLibrary m(library);
  m.impl("isin.Tensor_Tensor", TORCH_FN(isin));
  m.impl("isin.Tensor_Tensor_out", TORCH_FN(isin_out));
}

} // namespace tiny::aten_ops
