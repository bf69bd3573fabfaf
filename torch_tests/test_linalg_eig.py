"""The general eigenproblem (linalg.eig, linalg.eigvals) and the complex matrix exponential on tiny against CPU
torch, natively (no CPU fallback). Eigenvalues come in LAPACK's order and eigenvectors with its normalization
(unit 2-norm, the largest component real), so values and vectors are compared as they are; gradients too.
"""

import pytest
import torch
from conftest import check

COMPLEX = (torch.complex64, torch.complex128)
ALL = (torch.float32, torch.float64) + COMPLEX


def sample(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def tolerance(dtype):
    single = dtype in (torch.float32, torch.complex64)
    return {"rtol": 1e-4, "atol": 1e-4} if single else {"rtol": 1e-9, "atol": 1e-9}


# ---------------------------------------------------------------------------------------------
# matrix_exp of complex matrices


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_matrix_exp_matches_cpu(native, dtype):
    for shape, scale in (((3, 3), 1.0), ((2, 4, 4), 0.1), ((5, 5), 6.0), ((3, 1, 1), 1.0), ((0, 2, 2), 1.0)):
        check(torch.linalg.matrix_exp, sample(*shape, dtype=dtype) * scale, **tolerance(dtype))
    check(lambda a: torch.linalg.matrix_exp(a.mT), sample(2, 3, 3, dtype=dtype), **tolerance(dtype))
    check(lambda a: torch.linalg.matrix_exp(a.conj()), sample(3, 3, dtype=dtype), **tolerance(dtype))


def test_complex_matrix_exp_of_a_skew_hermitian_matrix_is_unitary_as_on_cpu(native):
    x = sample(4, 4, dtype=torch.complex128)
    check(lambda a: torch.linalg.matrix_exp(a - a.mH), x, rtol=1e-9, atol=1e-9)


def test_complex_matrix_exp_gradient_matches_cpu(native):
    x = sample(3, 3, dtype=torch.complex128)

    def grad(a):
        a = a.clone().requires_grad_()
        return torch.autograd.grad(torch.linalg.matrix_exp(a).abs().sum(), a)[0]

    check(grad, x, rtol=1e-8, atol=1e-8)
