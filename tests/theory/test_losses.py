"""Loss conventions (nqf.theory.losses): the convention changes the clock and nothing else.

GD with step eta on c L_Eq26 is GD with step c eta on L_Eq26, exactly (the gradient is linear in
the loss), so every convention at lr eta / c gives the same iterates: equal to rounding (rtol
1e-12 over a few hundred float64 steps). The recorded loss is Eq. 26's and the time coordinate is
the Eq. 26 flow time c lr step, so Theorem 6's closed form predicts every reading with the same
O(lr) error (GD's logistic lags the flow by a relative lr r / 4 in ignition time).
"""
import math

import numpy as np
import pytest
import torch

import nqf
from nqf.architectures import ARCHITECTURES
from nqf.theory.losses import LOSS_CONVENTIONS, describe, flow_lr, loss_factor
from nqf.theory.lotka_volterra import logistic_solution
from nqf.training.approximation import ModuleReplicas


def test_factors():
    """c = L_convention / L_Eq26 for a batch of n samples: 1, 1/2, n, n/2."""
    assert [loss_factor(c, 64) for c in LOSS_CONVENTIONS] == [1.0, 0.5, 64.0, 32.0]
    assert flow_lr(0.02, "half_sum", 256) == pytest.approx(2.56, rel=1e-15)
    assert "t = 128 lr step" in describe("half_sum", 256)
    with pytest.raises(ValueError, match="one of"):
        loss_factor("median", 4)
    with pytest.raises(ValueError, match="at least one sample"):
        loss_factor("sum", 0)


def _diagonal_problem(m=4):
    """Theorem 6 data: diagonal A_mu = diag(column mu of an orthogonal Q), so C = (8/m) I and r =
    (8/m) Q y; y chosen so that r = (1, 0.5, 0.25, 0.125)."""
    Q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((m, m)))
    r = np.array([1.0, 0.5, 0.25, 0.125])
    y = m / 8 * Q.T @ r  # lam[mu, k] = Q[k, mu]
    return nqf.DiagonalForm(torch.as_tensor(Q.T)), y, r, np.full(m, 8.0 / m)


@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
def test_every_convention_is_the_same_flow(optimizer):
    """Quadratic model (analytic gradient): each convention at lr / c reproduces the mean loss at
    lr: identical recorded loss, M and time (rtol 1e-12)."""
    form, y, _, _ = _diagonal_problem()
    W0 = 1e-3 * torch.eye(4, dtype=torch.float64)[None]
    runs = {}
    for conv in LOSS_CONVENTIONS:
        c = loss_factor(conv, 4)
        model = nqf.QuadraticModel(form, W0, device="cpu")
        runs[conv] = nqf.train(model, y, lr=0.05 / c, steps=300, optimizer=optimizer, loss=conv, n_record=30)
        assert runs[conv].attrs["loss_convention"] == conv and runs[conv].attrs["loss_factor"] == c
    for conv, ds in runs.items():
        for key in ("loss", "M", "time"):
            # The loss falls towards 0 (here to 2e-8 from 0.08): rounding in the iterates is relative
            # to each quantity's largest value, not to each value, so atol = rtol * max |value| (atol=0
            # asked 1e-12 of 2e-8).
            ref = runs["mean"][key].values
            assert np.allclose(ds[key].values, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max()), (conv, key)


def test_autograd_path_is_the_same_flow():
    """A real module (tanh MLP, vmapped replicas, autograd): half_sum at lr / (m/2) equals mean at lr."""
    mlp = ARCHITECTURES["mlp"].build(D=5, width=6, n_outputs=1)
    x = torch.randn(12, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y = torch.tanh(x[:, :1])
    W0 = 0.1 * torch.randn(2, mlp.p, mlp.width, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ref = nqf.train(ModuleReplicas(mlp, x, W0), y, lr=0.1, steps=50, n_record=10)
    other = nqf.train(ModuleReplicas(mlp, x, W0), y, lr=0.1 / 6, steps=50, n_record=10, loss="half_sum")
    assert np.allclose(other["loss"].values, ref["loss"].values, rtol=1e-12)
    assert np.allclose(other["time"].values, ref["time"].values, rtol=1e-12)


def test_theorem6_predicts_every_reading():
    """Under each convention, z_k = M_kk follows Theorem 6's logistic at the recorded (Eq. 26) time
    within GD's O(lr) error: ln z lags by about c lr r^2 t / 4, at most c lr r ln(r / (C z0)) / 4 near
    ignition; 1.2 x that bounds the relative error of every mode (same bound for every reading,
    because c lr is the same)."""
    form, y, r, C = _diagonal_problem()
    eps, flow = 1e-6, 0.05
    W0 = math.sqrt(eps) * torch.eye(4, dtype=torch.float64)[None]
    bound = 1.2 * flow * r * np.log(r / (C * eps)) / 4
    for conv in LOSS_CONVENTIONS:
        lr = flow / loss_factor(conv, 4)
        ds = nqf.train(nqf.QuadraticModel(form, W0, device="cpu"), y, lr=lr, steps=int(150 / flow), loss=conv,
                       n_record=200)
        t = ds["time"].values
        z = np.diagonal(ds["M"].values[0], axis1=-2, axis2=-1)
        exact = logistic_solution(r, C, np.full(4, eps), t)
        err = np.max(np.abs(z - exact) / exact, axis=0)
        assert np.all(err <= bound), (conv, err, bound)


# ---- vector outputs: one convention through every entry point ------------------------------
# Targets Y (n, n_out) in the form's sample-major order; L = (1/n) sum over samples and outputs
# (nqf.theory.losses). Before the fix predict / mflow / SecondMoment normalised by n * n_out while
# train used n: their trajectories ran n_out times slower (max relative error of M 0.59).

def _saxe_problem(n=12, n_in=3, n_out=2, seed=0):
    """A linear two-layer network (ARCHITECTURES['mlp_linear']) on whitened inputs, teacher targets
    Y (n, n_out): data matrices A_(mu,c) = 1/2 [[0, x_mu e_c^T], [e_c x_mu^T, 0]]."""
    rng = np.random.default_rng(seed)
    X, _ = np.linalg.qr(rng.standard_normal((n, n_in)))
    X = torch.as_tensor(X * np.sqrt(n))
    net = ARCHITECTURES["mlp_linear"].build(D=n_in, width=4, n_outputs=n_out)
    Y = (X @ torch.as_tensor(rng.standard_normal((n_out, n_in))).T).numpy()
    return net, net.structure(X), Y


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_vector_targets_same_loss_everywhere():
    """At the same M, every loss of the library is (1/n) sum over samples and outputs: train's
    recorded loss, QuadraticModel.loss_and_grad, training.mse_per_replica, SecondMoment.loss and
    LotkaVolterra.loss (to rounding, 1e-12); the exact GD recursion reproduces train (1e-10)."""
    from nqf.theory.mflow import SecondMoment
    from nqf.training.loop import mse_per_replica

    net, form, Y = _saxe_problem()
    W0 = 0.3 * torch.randn(2, net.p, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    model = nqf.QuadraticModel(form, W0, device="cpu")
    run = nqf.train(model, Y, lr=0.01, steps=200, n_record=20)
    n = Y.shape[0]
    Yt = torch.as_tensor(Y)
    f = model().detach()
    direct = ((f.reshape(2, n, -1) - Yt) ** 2).sum((1, 2)) / n
    loss, _ = model.loss_and_grad(Yt)
    assert torch.allclose(loss, direct, rtol=1e-12) and torch.allclose(mse_per_replica(f.reshape(2, n, -1), Yt), direct)
    stats = SecondMoment.from_form(form, Y)
    assert stats.m == n
    assert _rel(stats.loss(run["M"].values), run["loss"].values) < 1e-12
    ref = nqf.discrete_flow(form, W0=W0[0].numpy(), y=Y, lr=0.01, steps=200, record_steps=run["step"].values)
    assert _rel(ref["M"].values, run["M"].values[0]) < 1e-10
    assert _rel(ref["loss"].values, run["loss"].values[0]) < 1e-10


def test_vector_targets_train_predict_mflow_agree_to_the_gd_budget():
    """train vs predict vs mflow with 2-D targets, generic init (predict -> M-flow) and Corollary 4
    (balanced aligned init, closed form), and Theorem 6 (diagonal data, vector outputs).

    Budget: GD with step lr samples the flow at t = lr step with an O(lr) error, so the max
    relative error of M(t) over the run is first order in lr: halving lr must halve it (ratio in
    [1.8, 2.2]) and at lr = 0.01 it must stay below 0.05. predict and mflow agree with each
    other to the integrator's 1e-6. The old clock mismatch gives 0.59 at every lr."""
    from nqf.theory.closed_forms import corollary4_init, corollary4_modes

    net, form, Y = _saxe_problem()
    t_end = 6.0

    def errors(W0, method="auto"):
        out = []
        for lr in (0.01, 0.005):
            run = nqf.train(nqf.QuadraticModel(form, torch.as_tensor(W0)[None], device="cpu"), Y, lr=lr,
                            steps=int(round(t_end / lr)), n_record=40)
            t = run["time"].values
            sol = nqf.predict(form, Y, t, W0=W0, method=method)
            flow = nqf.mflow(form, W0=W0, y=Y, t=t, rtol=1e-12)
            assert _rel(sol.M, flow["M"].values) < 1e-6 and _rel(sol.loss, flow["loss"].values) < 1e-6
            out.append((sol.method, _rel(run["M"].values[0], sol.M), _rel(run["loss"].values[0], sol.loss)))
        return out

    generic = 0.1 * np.random.default_rng(3).standard_normal((net.p, 4))
    S = form.dense().numpy()[:, :net.D, net.D:] * 2  # A = 1/2 [[0, S], [S^T, 0]], S (n * n_out, n_in, n_out)
    modes = corollary4_modes(S, Y)
    balanced = corollary4_init(modes["u"], modes["v"], np.full(modes["tau"].size, 1e-3), d=4)
    for W0, method in ((generic, "mflow"), (balanced, "corollary4")):
        (m1, e1, l1), (m2, e2, l2) = errors(W0)
        assert m1 == m2 == method
        assert e1 < 0.05 and 1.8 < e1 / e2 < 2.2, (method, e1, e2)
        assert l1 < 0.05 and 1.8 < l1 / l2 < 2.2, (method, l1, l2)
    # Theorem 6 with vector outputs: orthogonal diagonal features, Y (n, 2) flattened sample-major
    Q, _ = np.linalg.qr(np.random.default_rng(5).standard_normal((8, 8)))
    diag = nqf.DiagonalForm(torch.as_tensor(Q.T))  # 8 data matrices = 4 samples x 2 outputs
    Yd = np.random.default_rng(6).uniform(0.5, 1.5, (4, 2))
    W0 = 1e-2 * np.eye(8)
    run = nqf.train(nqf.QuadraticModel(diag, torch.as_tensor(W0)[None], device="cpu"), Yd, lr=0.005,
                    steps=600, n_record=30)
    sol = nqf.predict(diag, Yd, run["time"].values, W0=W0)
    assert sol.method == "theorem6"
    assert _rel(run["M"].values[0], sol.M) < 0.02
    # Flattened targets are a different problem (every entry a sample): its own clock, also consistent
    flat = nqf.predict(diag, Yd.reshape(-1), run["time"].values, W0=W0)
    run_flat = nqf.train(nqf.QuadraticModel(diag, torch.as_tensor(W0)[None], device="cpu"), Yd.reshape(-1),
                         lr=0.005, steps=600, n_record=30)
    assert _rel(run_flat["M"].values[0], flat.M) < 0.02 and _rel(flat.M, sol.M) > 0.1


def test_every_loss_formula_has_a_mathtext_twin_that_matplotlib_parses():
    """Figure titles write the loss in mathtext; every convention has one, and it renders."""
    from matplotlib.mathtext import MathTextParser

    from nqf.theory.losses import FORMULAS, FORMULAS_MATH

    assert set(FORMULAS_MATH) == set(FORMULAS)
    parser = MathTextParser("path")
    for text in FORMULAS_MATH.values():
        math = text[text.index("$"):text.rindex("$") + 1]
        parser.parse(math)  # raises ValueError on bad mathtext
