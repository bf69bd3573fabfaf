"""torch.fft on tiny (issue #16): the primitives every torch.fft function decomposes into (_fft_c2c, _fft_r2c,
_fft_c2r and their out= forms) run natively as compiled kernels (a matrix product per small size, a four-step
plan for large ones), for complex64/complex128 and float32/float64 inputs, against PyTorch's CPU: values,
dtypes, shapes, strides, errors, gradients."""

import pytest
import torch
from conftest import DEVICE, assert_same, check, counting, with_grads

SIZES = (1, 2, 3, 5, 7, 8, 12, 16, 17, 64, 100, 128, 1000, 1024)
NORMS = (None, "backward", "ortho", "forward")
# A float32 transform of 1024 points sums 1024 products: its rounding differs from MKL's by a few ulps of
# the largest value.
F32 = {"rtol": 1e-4, "atol": 1e-4}


def crand(*shape, dtype=torch.complex64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


def rrand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g)


def tolerance(dtype):
    return F32 if dtype in (torch.float32, torch.complex64) else {}


# ---- every size ----


@pytest.mark.parametrize("n", SIZES)
def test_fft_and_ifft_of_every_size_match_cpu(n, native):
    x = crand(3, n)
    check(torch.fft.fft, x, **F32)
    check(torch.fft.ifft, x, **F32)


@pytest.mark.parametrize("n", SIZES)
def test_rfft_irfft_hfft_ihfft_of_every_size_match_cpu(n, native):
    r, c = rrand(2, n), crand(2, n // 2 + 1)
    check(torch.fft.rfft, r, **F32)
    check(torch.fft.ihfft, r, **F32)
    check(lambda c: torch.fft.irfft(c, n=n), c, **F32)
    check(lambda c: torch.fft.hfft(c, n=n), c, **F32)


@pytest.mark.parametrize("n", (5, 64, 1000, 1024))
def test_float64_transforms_match_cpu_to_float64_precision(n, native):
    x, r = crand(2, n, dtype=torch.complex128), rrand(2, n, dtype=torch.float64)
    check(torch.fft.fft, x)
    check(torch.fft.ifft, x)
    check(torch.fft.fft, r)
    check(torch.fft.rfft, r)
    check(lambda x, n=n: torch.fft.irfft(x, n=n), x)


def test_a_real_input_to_fft_gives_the_full_spectrum(native):
    check(torch.fft.fft, rrand(4, 12), **F32)
    check(lambda x: torch.fft.fft2(x), rrand(3, 6, 5), **F32)


# ---- norms, dims, shapes ----


@pytest.mark.parametrize("norm", NORMS)
def test_every_norm_matches_cpu(norm, native):
    x, r = crand(3, 10), rrand(3, 10)
    check(lambda x: torch.fft.fft(x, norm=norm), x, **F32)
    check(lambda x: torch.fft.ifft(x, norm=norm), x, **F32)
    check(lambda r: torch.fft.rfft(r, norm=norm), r, **F32)
    check(lambda x: torch.fft.irfft(x, norm=norm), x, **F32)
    check(lambda x: torch.fft.hfft(x, norm=norm), x, **F32)
    check(lambda r: torch.fft.ihfft(r, norm=norm), r, **F32)
    check(lambda x: torch.fft.fftn(x, norm=norm), crand(3, 4, 5), **F32)
    check(lambda x: torch.fft.irfftn(x, norm=norm), crand(3, 4, 5), **F32)


def test_dims_other_than_the_last_give_the_cpus_strides(native):
    x, r = crand(4, 6, 5), rrand(4, 6, 5)
    for dim in (0, 1, -2):
        check(lambda x, dim=dim: torch.fft.fft(x, dim=dim), x, **F32)
        check(lambda r, dim=dim: torch.fft.rfft(r, dim=dim), r, **F32)
        check(lambda x, dim=dim: torch.fft.irfft(x, dim=dim), x, **F32)
    for dims in ((0, 2), (2, 0), (1, 0), (0, 1, 2)):
        check(lambda x, dims=dims: torch.fft.fftn(x, dim=dims), x, **F32)
        check(lambda r, dims=dims: torch.fft.rfftn(r, dim=dims), r, **F32)
        check(lambda x, dims=dims: torch.fft.irfftn(x, dim=dims), x, **F32)


def test_2d_and_3d_transforms_match_cpu(native):
    check(torch.fft.fft2, crand(2, 8, 12), **F32)
    check(torch.fft.ifft2, crand(2, 8, 12), **F32)
    check(torch.fft.fftn, crand(4, 6, 10), **F32)
    check(torch.fft.ifftn, crand(4, 6, 10), **F32)
    check(torch.fft.rfft2, rrand(3, 16, 9), **F32)
    check(torch.fft.rfftn, rrand(4, 6, 10), **F32)
    check(lambda x: torch.fft.irfft2(x, s=(16, 9)), crand(3, 16, 5), **F32)
    check(torch.fft.irfftn, crand(4, 6, 10), **F32)
    check(torch.fft.hfft2, crand(4, 6, 10), **F32)
    check(torch.fft.ihfft2, rrand(4, 6, 10), **F32)


def test_a_large_2d_transform_uses_the_four_step_plan_and_matches_cpu(native):
    check(torch.fft.fft2, crand(128, 100), **F32)
    check(torch.fft.rfft2, rrand(64, 1000), **F32)


def test_non_contiguous_inputs_match_cpu(native):
    x = crand(6, 8)
    check(lambda x: torch.fft.fft(x.t()), x, **F32)
    check(lambda x: torch.fft.fft(x[:, ::2], dim=0), x, **F32)
    check(lambda x: torch.fft.fftn(x.t()), x, **F32)
    check(lambda r: torch.fft.rfft(r.t()), rrand(6, 8), **F32)
    check(lambda r: torch.fft.rfftn(r.permute(2, 0, 1)), rrand(3, 4, 5), **F32)
    check(lambda x: torch.fft.irfft(x[1:, 1:].t()), x, **F32)
    check(lambda x: torch.fft.ifft(x.conj()), x, **F32)


def test_the_primitives_called_directly_give_the_cpus_layouts(native):
    x, r = crand(4, 6, 5), rrand(4, 6, 5)
    for dims in ([0], [1], [2], [0, 2], [1, 0], [2, 0, 1]):
        for forward in (True, False):
            check(lambda x, d=dims, f=forward: torch.ops.aten._fft_c2c(x, d, 1, f), x, **F32)
        for onesided in (True, False):
            check(lambda r, d=dims, o=onesided: torch.ops.aten._fft_r2c(r, d, 2, o), r, **F32)
        last = r.shape[dims[-1]]
        check(lambda x, d=dims: torch.ops.aten._fft_c2r(x[..., :3] if d[-1] == 2 else x, d, 0, 5), x, **F32)
        check(lambda x, d=dims, n=last: torch.ops.aten._fft_c2r(x.narrow(d[-1], 0, n // 2 + 1), d, 0, n), x, **F32)
    check(lambda x: torch.ops.aten._fft_c2c(x, [], 0, True), x)


def test_c2r_ignores_the_imaginary_parts_of_the_zero_and_nyquist_bins_as_the_cpu_does(native):
    check(lambda x: torch.fft.irfft(x, n=8), crand(5))
    check(lambda x: torch.fft.irfft(x, n=9), crand(5))
    check(lambda x: torch.fft.irfft2(x, s=(3, 8)), crand(3, 5), **F32)


def test_n_pads_or_trims_the_signal_as_on_cpu(native):
    # the padding and trimming are torch's own ops before the transform (constant_pad_nd, native for
    # complex tensors too)
    x = crand(3, 10)
    for n in (4, 10, 16):
        check(lambda x, n=n: torch.fft.fft(x, n=n), x, **F32)
        check(lambda r, n=n: torch.fft.rfft(r, n=n), rrand(3, 10), **F32)
        check(lambda x, n=n: torch.fft.irfft(x, n=n), x, **F32)


def test_empty_batches_raise_as_the_cpus_mkl_kernel_does(native):
    check(torch.fft.fft, crand(0, 8))
    check(torch.fft.rfft, rrand(0, 8))
    check(torch.fft.irfft, crand(0, 5))


# ---- out= ----


def test_out_matches_cpu_including_resizing_and_its_strides(native):
    x, r = crand(4, 6), rrand(4, 6)
    check(lambda x, o: torch.fft.fft(x, dim=0, out=o), x, torch.empty(0, dtype=torch.complex64), **F32)
    check(lambda x, o: torch.fft.fft(x, out=o), x, torch.empty(6, 4, dtype=torch.complex64).t(), **F32)
    check(lambda r, o: torch.fft.rfft(r, out=o), r, torch.empty(0, dtype=torch.complex64), **F32)
    check(lambda x, o: torch.fft.irfft(x, out=o), x, torch.empty(0), **F32)
    check(lambda x, o: torch.fft.fftn(x, out=o), x, torch.empty(4, 6, dtype=torch.complex128), **F32)
    check(lambda x, o: torch.ops.aten._fft_c2c.out(x, [0], 1, True, out=o), x, torch.empty(0, dtype=torch.complex64))
    check(lambda r, o: torch.ops.aten._fft_r2c.out(r, [1], 2, False, out=o), r, torch.empty(0, dtype=torch.complex64))
    check(lambda x, o: torch.ops.aten._fft_c2r.out(x, [0, 1], 0, 10, out=o), x, torch.empty(0), **F32)


# ---- what builds on them ----


def test_fftshift_and_ifftshift_of_a_spectrum_match_cpu(native):
    # fftshift is a roll of the complex spectrum
    x = crand(6, 7)
    check(lambda x: torch.fft.fftshift(torch.fft.fft2(x)), x, **F32)
    check(lambda x: torch.fft.ifftshift(torch.fft.fft(x), dim=0), x, **F32)
    check(lambda x: torch.fft.fftshift(torch.fft.rfftfreq(x.shape[-1], device=x.device)), x)


@pytest.mark.parametrize("onesided", (True, False))
def test_stft_with_a_window_matches_cpu(onesided):
    x, w = rrand(2, 400), torch.hann_window(64)
    check(
        lambda x, w: torch.stft(x, 64, hop_length=16, window=w, return_complex=True, onesided=onesided),
        x,
        w,
        allow_fallback=True,
        **F32,
    )


def test_istft_inverts_stft_as_on_cpu():
    x, w = rrand(2, 400), torch.hann_window(64)

    def round_trip(x, w):
        spec = torch.stft(x, 64, hop_length=16, window=w, return_complex=True)
        return torch.istft(spec, 64, hop_length=16, window=w, length=400)

    check(round_trip, x, w, allow_fallback=True, **F32)


def test_the_stft_transform_itself_runs_natively():
    x, w = rrand(2, 400).to(DEVICE), torch.hann_window(64).to(DEVICE)
    with counting() as c:
        torch.stft(x, 64, hop_length=16, window=w, return_complex=True).cpu()
    assert not any(op.startswith("aten::_fft") for op in c["fallback_ops"]), c["fallback_ops"]


# ---- native, fused ----


def test_ffts_run_natively_as_compiled_kernels(native):
    x = crand(8, 1024).to(DEVICE)
    with counting() as c:
        y = torch.fft.ifft(torch.fft.fft(x)).cpu()
    assert c["fallbacks"] == 0 and c["kernels"] > 0
    torch.testing.assert_close(y, crand(8, 1024), **F32)


def test_complex32_and_half_inputs_raise_the_cpus_errors():
    check(lambda x: torch.ops.aten._fft_r2c(x, [0], 0, True), rrand(8).half(), allow_fallback=True)
    check(lambda x: torch.ops.aten._fft_c2c(x, [0], 0, True), crand(8).to(torch.complex32), allow_fallback=True)


# ---- errors ----


def test_bad_arguments_raise_the_cpus_errors(native):
    x, r = crand(4, 6), rrand(4, 6)
    check(lambda x: torch.fft.fft(x, dim=2), x)
    check(lambda x: torch.fft.fft(x, n=0), x)
    check(lambda x: torch.fft.fft(x, norm="bad"), x)
    check(lambda x: torch.fft.fftn(x, dim=(0, 0)), x)
    check(lambda r: torch.fft.irfft(r, n=-1), r)
    check(lambda r: torch.ops.aten._fft_c2c(r, [0], 0, True), r)
    check(lambda x: torch.ops.aten._fft_r2c(x, [0], 0, True), x)
    check(lambda r: torch.ops.aten._fft_c2r(r, [0], 0, 6), r)


# ---- gradients ----


@pytest.mark.parametrize(
    "fn",
    (
        lambda x: torch.view_as_real(torch.fft.fft(x)),
        lambda x: torch.view_as_real(torch.fft.rfft(x, norm="ortho")),
        lambda x: torch.fft.irfft(torch.fft.rfft(x) * 2, n=x.shape[-1]),
        lambda x: torch.fft.hfft(torch.fft.ihfft(x), n=x.shape[-1]),
        lambda x: torch.view_as_real(torch.fft.fft2(x)),
        lambda x: torch.view_as_real(torch.fft.rfftn(x, norm="forward")),
    ),
    ids=("fft", "rfft", "irfft", "hfft", "fft2", "rfftn"),
)
def test_gradients_flow_through_torchs_own_backward_formulas(fn):
    # the backward of a real-input transform narrows and scales complex tensors (ops that may run on the CPU)
    (cpu, cpu_grads), (tiny, tiny_grads) = with_grads(fn, rrand(4, 12))
    assert_same(tiny, cpu, **F32)
    assert_same(tiny_grads, cpu_grads, **F32)


def test_complex_gradients_match_cpu():
    def fn(x):
        return torch.fft.ifft(torch.fft.fft(x, norm="ortho") * 3).abs()

    results = []
    for dev in ("cpu", DEVICE):
        x = crand(3, 16).to(dev).requires_grad_()
        fn(x).sum().backward()
        results.append(x.grad)
    assert_same(results[1], results[0], **F32)
