"""nqf.training.fourier_training.rows_times: h (R, m, k) @ v (R, k) per replica, as the row v
times h transposed, equals the column product up to the dtype's rounding of a k-term sum."""
import pytest
import torch

from nqf.training.fourier_training import rows_times


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1, 1), (6, 129, 104), (4, 256, 256), (3, 5, 7)])
def test_rows_times_is_the_batched_matrix_vector_product(shape, dtype):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(*shape, dtype=dtype, generator=g)
    v = torch.randn(shape[0], shape[2], dtype=dtype, generator=g)
    column = torch.bmm(h, v[:, :, None])[:, :, 0]
    got = rows_times(h, v)
    assert got.shape == column.shape == shape[:2] and got.dtype == dtype
    # each entry is a k-term dot product summed in another order: within k * eps of the sum of
    # |terms| (the standard bound on a float sum's rounding error)
    bound = shape[2] * torch.finfo(dtype).eps * torch.bmm(h.abs(), v.abs()[:, :, None])[:, :, 0]
    assert bool(((got - column).abs() <= bound).all())
