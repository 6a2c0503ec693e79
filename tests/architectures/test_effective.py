"""Effective matrices: the NQF output is exactly the linear/bilinear form of E(W), and the
teacher's E has the prescribed singular values.

Tolerances: 1e-12 relative to the output scale in float64 (both sides are exact formulas; a
wrong index, block or factor fails by O(1)).
"""
import pytest
import torch

from nqf.architectures import ARCHITECTURES, UnitModule, selection
from nqf.architectures.effective import effective_matrix, effective_outputs, singular_values, teacher_weights

F64 = torch.float64
SMALL = {
    "mlp": dict(D=6, width=5, n_outputs=3),
    "cnn": dict(image=(4, 5), kernel=(2, 3), width=4, n_outputs=3),
    "mha": dict(D=5, d_k=2, d_v=3, width=3, n_outputs=3, seq_len=4),
    "qk_head": dict(D=5, d_k=3, width=2, n_outputs=3, seq_len=4),
    "moe": dict(D=5, width=4, n_outputs=3),
}
SHAPES = {"mlp": (3, 6), "cnn": (3, 6), "mha": (3, 5), "qk_head": (5, 5), "moe": (15, 5)}
WITH_E = selection("effective_matrix")  # an architecture not sized above is tested at its defaults


def small(name):
    return ARCHITECTURES[name].build(**SMALL.get(name, {}))


def gen(seed):
    return torch.Generator().manual_seed(seed)


def test_every_architecture_with_an_effective_matrix_is_tested_and_defines_it():
    assert set(SMALL) <= set(WITH_E)
    for name in WITH_E:
        cls = ARCHITECTURES[name].module_class
        for method in ("effective_matrix", "effective_outputs", "teacher_units"):
            assert getattr(cls, method) is not getattr(UnitModule, method), (name, method)


@pytest.mark.parametrize("name", WITH_E)
def test_nqf_output_is_the_form_of_the_effective_matrix(name):
    module = small(name)
    x = module.sample_inputs(7, gen(1))
    W = torch.randn(2, module.p, module.width, generator=gen(2), dtype=F64)
    E = effective_matrix(module, W)
    assert E.shape[0] == 2 and E.shape[1:] == SHAPES.get(name, E.shape[1:])
    f_form = effective_outputs(module, E, x)
    f_nqf = module.structure(x).outputs(W).reshape(2, 7, module.n_outputs)
    assert float((f_form - f_nqf).abs().max()) <= 1e-12 * float(f_nqf.abs().max())
    assert float(f_nqf.abs().max()) > 0.1  # a test that cannot fail on zeros


@pytest.mark.parametrize("name", WITH_E)
def test_teacher_has_the_prescribed_spectrum_and_its_outputs(name):
    module = small(name)
    s = torch.tensor([1.0, 0.5, 0.25] if name in SMALL else [1.0, 0.5], dtype=F64)
    r = len(s)
    W = teacher_weights(module, s, gen(3))
    assert W.shape == (module.p, r)
    assert torch.allclose(singular_values(module, W, r), s, rtol=0, atol=1e-13)
    E = effective_matrix(module, W)
    sv = torch.linalg.svdvals(E)
    assert torch.allclose(sv[r:], torch.zeros_like(sv[r:]), atol=1e-13)  # rank exactly r
    if name == "moe":  # every per-output block is symmetric: the data identify E exactly
        Ec = E.reshape(module.n_outputs, module.D, module.D)
        assert torch.allclose(Ec, Ec.transpose(-1, -2), atol=1e-14)
    x = module.sample_inputs(5, gen(4))
    assert torch.allclose(effective_outputs(module, E, x),
                          module.structure(x).outputs(W).reshape(5, -1), rtol=1e-12, atol=1e-13)


def test_teachers_with_another_seed_have_other_singular_vectors():
    module = ARCHITECTURES["mlp"].build(**SMALL["mlp"])
    E1, E2 = (effective_matrix(module, teacher_weights(module, [1.0, 0.5], gen(s))) for s in (5, 6))
    assert float((E1 - E2).abs().max()) > 0.1


def test_unsupported_modules_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="A = 0"):
        effective_matrix(ARCHITECTURES["moe_tanh_expert"].build(), torch.zeros(1))
    with pytest.raises(TypeError, match="No effective matrix"):
        effective_matrix(ARCHITECTURES["phase_retrieval"].build(), torch.zeros(1))
    with pytest.raises(ValueError, match="at most"):
        teacher_weights(ARCHITECTURES["mlp"].build(**SMALL["mlp"]), [1, 1, 1, 1], gen(0))
