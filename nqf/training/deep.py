"""Deep networks and their multi-layer NQFs (paper App. B.4, Definition 2; Figure 8).

A deep network is read as a stack of blocks, each a layer of interchangeable units to which
Theorem 1 applies on its own, with the block's input h^(l-1) held fixed:

    h^(l)_k(x) = Tr[M^(l) A_k^(l)(h^(l-1)(x))] + O(|W^(l)|^4),   M^(l) = W^(l) W^(l)^T,

which is Definition 2 with C = g = B = 0 (every block below has ZGZ and a per-unit Z2 symmetry,
hence the O(|W|^4)). Replacing every block by its NQF, and evaluating block l on the NQF output of
block l-1, gives the **L-block NQF** of the network (the "2-layer NQF" of Fig. 8 for two blocks).

4-layer MLP  f = W4 tanh(W3 tanh(W2 tanh(W1 x)))  (no biases, dims n0 -> n1 -> n2 -> n3 -> 1):
    block 1 = (W1, W2): units are the n1 hidden neurons of layer 1, w_i = [W1[i, :]; W2[:, i]],
    h^(1) = W2 tanh(W1 x) (the pre-activation of layer 2); Prop. 1 gives A_c(x) = phi'(0)/2
    [[0, x e_c^T], [e_c x^T, 0]], i.e. h^(1)_NQF = phi'(0) W2 W1 x.
    block 2 = (W3, W4) on the input tanh(h^(1)): f_NQF = phi'(0) W4 W3 tanh(h^(1)_NQF).
    2-block NQF:  f_2 = W4 W3 tanh(W2 W1 x)   (tanh'(0) = 1); the nonlinearity between the
    blocks is kept, the one inside each block is expanded.
2-layer single-head attention (hidden dim D_h, length N, output k): layer l maps a sequence
    H (D x N) with (W^Q, W^K, W^V, W^O) to W^O^T W^V H softmax(H^T W^K^T W^Q q / sqrt(d_k)); layer 1
    is self-attention (query q = every token), the last layer reads the last token as its query.
    Prop. 2: softmax(L) = 1/N + O(|W^Q| |W^K|), so the block's NQF is W^O^T W^V h_avg with
    h_avg = H 1_N / N, the same for every query. The 2-block NQF is
    f_2 = W^O_2^T W^V_2 W^O_1^T W^V_1 x_avg (Q and K drop out: they enter at quartic order).

**1-block NQF** ("1-layer NQF" of Fig. 8): the NQF of one two-layer block from the input to the
output, f_1 = v U x (MLP) or v U x_avg (attention), a separately parametrised model. It is
initialised to match the original at step zero by collapsing each half of the network into one
factor: U = W2 W1, v = W4 W3 (MLP); U = W^O_1^T W^V_1, v = W^O_2^T W^V_2 (attention). Then f_1 = f_2
+ O(|W|^8) at W -> 0 (equal for attention), but its gradient flow differs: f_1 has two factors
where the network has four, so the same initial function escapes the small-weight plateau on a
different clock.

Exactness limit (Eq. 3 applied per block): scaling a block's inner weights by s and its
readout by 1/s (MLP: W1 -> s W1, W2 -> W2 / s; attention: W^Q, W^K, W^V -> s, W^O -> 1/s) leaves
every block NQF, hence f_2 and f_1, unchanged, while the network converges to f_2 with an error
O(s^2) (the tanh cubic term, or the first-order softmax term L = O(s^2)). Scaling all weights by s
instead gives f = O(s^4) and f - f_2 = -(s^6/3) W4 W3 W2 (W1 x)^3 + O(s^8) for the MLP.

All functions take weights with a leading replica axis R (seeds x init scales as one tensor
program) and inputs shared by all replicas; outputs are (R, samples, outputs).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

Tensor = torch.Tensor


def _gaussian(shape, std: float, gen: torch.Generator, dtype) -> Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype) * std


class DeepMLP:
    """Bias-free tanh MLP with an even number L of weight layers, dims (n0, n1, ..., nL).

    Weights are a list [W1, ..., WL] with W_l of shape (R, n_l, n_{l-1}); block b pairs layers
    (2b-1, 2b). ``forward``, ``nqf`` (the L/2-block NQF) and ``nqf_one`` (the 1-block NQF) give
    (R, m, n_L) for inputs x (m, n0).
    """

    kind = "mlp"

    def __init__(self, dims: Sequence[int] = (8, 16, 16, 16, 1)):
        self.dims = tuple(int(n) for n in dims)
        if len(self.dims) < 3 or (len(self.dims) - 1) % 2:
            raise ValueError(f"DeepMLP needs an even number of weight layers (dims of odd length >= 3); "
                             f"got dims {self.dims}.")
        self.n_layers = len(self.dims) - 1

    @property
    def shapes(self) -> list[tuple[int, int]]:
        return [(self.dims[l + 1], self.dims[l]) for l in range(self.n_layers)]

    def init(self, R: int, std: float | Sequence[float], gen: torch.Generator, *, fan_in: bool = False,
             dtype=torch.float64) -> list[Tensor]:
        """Gaussian weights, std per replica (``std`` a float or R values); divided by sqrt(fan-in)
        when ``fan_in``. One generator draw per layer, so replicas with equal seeds differ by scale only."""
        s = torch.as_tensor(std, dtype=dtype).reshape(-1, 1, 1).expand(R, 1, 1)
        return [s * _gaussian((R, o, i), 1.0 / math.sqrt(i) if fan_in else 1.0, gen, dtype)
                for o, i in self.shapes]

    def forward(self, W: Sequence[Tensor], x: Tensor) -> Tensor:
        h = x.expand(W[0].shape[0], *x.shape)
        for l, Wl in enumerate(W):
            h = torch.einsum("roi,rmi->rmo", Wl, h)
            if l < self.n_layers - 1:
                h = torch.tanh(h)
        return h

    def nqf(self, W: Sequence[Tensor], x: Tensor) -> Tensor:
        """Every block (W_{2b-1}, W_{2b}) replaced by its NQF tanh'(0) W_{2b} W_{2b-1} h, with tanh
        kept between blocks (Definition 2 with the blocks' Prop. 1 structure matrices)."""
        h = x.expand(W[0].shape[0], *x.shape)
        for b in range(self.n_layers // 2):
            h = torch.einsum("roi,rmi->rmo", W[2 * b + 1] @ W[2 * b], h)
            if b < self.n_layers // 2 - 1:
                h = torch.tanh(h)
        return h

    def collapse(self, W: Sequence[Tensor]) -> list[Tensor]:
        """[U, v] of the 1-block NQF matching the network at step zero: the products of the first
        and of the second half of the layers."""
        half = self.n_layers // 2
        U, v = W[half - 1], W[-1]
        for Wl in reversed(W[:half - 1]):
            U = U @ Wl
        for Wl in reversed(W[half:-1]):
            v = v @ Wl
        return [U.clone(), v.clone()]

    def nqf_one(self, V: Sequence[Tensor], x: Tensor) -> Tensor:
        """f_1 = v U x, the NQF of one tanh block from input to output (tanh'(0) = 1)."""
        U, v = V
        return torch.einsum("roi,rmi->rmo", v @ U, x.expand(U.shape[0], *x.shape))

    def block_rescale(self, W: Sequence[Tensor], s: float) -> list[Tensor]:
        """Eq. 3 per block: inner layer times s, readout layer divided by s (block NQFs unchanged)."""
        return [Wl * (s if l % 2 == 0 else 1.0 / s) for l, Wl in enumerate(W)]

    def sample_inputs(self, m: int, gen: torch.Generator, dtype=torch.float64) -> Tensor:
        return torch.randn(m, self.dims[0], generator=gen, dtype=dtype)


class DeepAttention:
    """L layers of single-head attention (D -> hidden ... -> n_out), sequences of length N.

    Layer l has weights (W^Q, W^K, W^V, W^O) of shapes (R, d_k, D_in), (R, d_k, D_in),
    (R, d_v, D_in), (R, d_v, D_out); the weight list is flat, four tensors per layer. Inputs are
    X (m, D, N); layers before the last are self-attention (every token queries), the last
    reads the last token as its query and returns (R, m, n_out).
    """

    kind = "attention"

    def __init__(self, D: int = 8, hidden: int = 8, n_out: int = 1, seq_len: int = 10,
                 n_layers: int = 2, d_k: int | None = None, d_v: int | None = None):
        if n_layers < 2:
            raise ValueError(f"DeepAttention needs at least 2 layers; got {n_layers}.")
        self.D, self.hidden, self.n_out, self.seq_len, self.n_layers = D, hidden, n_out, seq_len, n_layers
        self.d_k, self.d_v = d_k or hidden, d_v or hidden

    @property
    def shapes(self) -> list[tuple[int, int]]:
        out = []
        for l in range(self.n_layers):
            d_in = self.D if l == 0 else self.hidden
            d_out = self.n_out if l == self.n_layers - 1 else self.hidden
            out += [(self.d_k, d_in), (self.d_k, d_in), (self.d_v, d_in), (self.d_v, d_out)]
        return out

    def init(self, R: int, std, gen: torch.Generator, *, fan_in: bool = False,
             dtype=torch.float64) -> list[Tensor]:
        """As :meth:`DeepMLP.init`; the fan-in of W^O is d_v (its first axis)."""
        s = torch.as_tensor(std, dtype=dtype).reshape(-1, 1, 1).expand(R, 1, 1)
        return [s * _gaussian((R, a, b), 1.0 / math.sqrt(b if k % 4 != 3 else a) if fan_in else 1.0,
                              gen, dtype) for k, (a, b) in enumerate(self.shapes)]

    def _layer(self, Wq, Wk, Wv, Wo, H: Tensor, last: bool) -> Tensor:
        """H (R, m, D_in, N) -> (R, m, D_out, N), or (R, m, D_out) for the last layer."""
        keys = torch.einsum("rkd,rmdn->rmkn", Wk, H)
        queries = H[..., -1:] if last else H
        q = torch.einsum("rkd,rmdn->rmkn", Wq, queries)
        attn = torch.softmax(torch.einsum("rmkn,rmkq->rmnq", keys, q) / math.sqrt(self.d_k), dim=-2)
        context = torch.einsum("rmdn,rmnq->rmdq", H, attn)
        out = torch.einsum("rvo,rvd,rmdq->rmoq", Wo, Wv, context)
        return out[..., 0] if last else out

    def forward(self, W: Sequence[Tensor], X: Tensor) -> Tensor:
        H = X.expand(W[0].shape[0], *X.shape)
        for l in range(self.n_layers):
            H = self._layer(*W[4 * l:4 * l + 4], H, last=l == self.n_layers - 1)
        return H

    def nqf(self, W: Sequence[Tensor], X: Tensor) -> Tensor:
        """Every layer replaced by its NQF W^O^T W^V h_avg (Prop. 2): the token average passes
        through the value-output maps; Q and K do not enter."""
        h = X.mean(-1).expand(W[0].shape[0], X.shape[0], X.shape[1])
        for l in range(self.n_layers):
            h = torch.einsum("rvo,rvd,rmd->rmo", W[4 * l + 3], W[4 * l + 2], h)
        return h

    def _value_map(self, W: Sequence[Tensor], l: int) -> Tensor:
        return W[4 * l + 3].transpose(-1, -2) @ W[4 * l + 2]

    def collapse(self, W: Sequence[Tensor]) -> list[Tensor]:
        """[U, v]: the value-output maps of the first and of the second half of the layers."""
        half = self.n_layers // 2
        U = self._value_map(W, 0)
        for l in range(1, half):
            U = self._value_map(W, l) @ U
        v = self._value_map(W, half)
        for l in range(half + 1, self.n_layers):
            v = self._value_map(W, l) @ v
        return [U.clone(), v.clone()]

    def nqf_one(self, V: Sequence[Tensor], X: Tensor) -> Tensor:
        """f_1 = v U x_avg, the NQF of one attention block from input to output."""
        U, v = V
        return torch.einsum("roi,rmi->rmo", v @ U, X.mean(-1).expand(U.shape[0], X.shape[0], X.shape[1]))

    def block_rescale(self, W: Sequence[Tensor], s: float) -> list[Tensor]:
        """Eq. 3 per layer: W^Q, W^K, W^V times s, W^O divided by s (layer NQFs unchanged)."""
        return [Wl * (1.0 / s if k % 4 == 3 else s) for k, Wl in enumerate(W)]

    def sample_inputs(self, m: int, gen: torch.Generator, dtype=torch.float64) -> Tensor:
        return torch.randn(m, self.D, self.seq_len, generator=gen, dtype=dtype)


DEEP_MODELS = {"mlp": DeepMLP, "attention": DeepAttention}


def build_deep(arch: str, size: dict):
    """A deep model by name ('mlp' or 'attention') with its size keywords."""
    try:
        cls = DEEP_MODELS[arch]
    except KeyError:
        raise ValueError(f"Unknown deep architecture {arch!r}; known: {', '.join(DEEP_MODELS)}.") from None
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in size.items()}
    return cls(**kwargs)


def mse(f: Tensor, y: Tensor) -> Tensor:
    """(1/m) sum over samples and outputs of (f - y)^2 per replica: f (R, m, k), y (m, k)."""
    return (f - y).pow(2).flatten(1).sum(1) / y.shape[0]


def truncation(model, W: Sequence[Tensor], x: Tensor) -> Tensor:
    """The network's relative distance from its L-block NQF at its own weights W, per replica.

    Eq. 3 per block: the block rescaling (``block_rescale``: inner weights times s, readout
    divided by s) leaves every block NQF, hence f_NQF, unchanged, and the network converges to
    it as g(s) = f_NQF + s^2 R + O(s^4). Richardson's elimination from s = 1 and 1/2 gives
    f_NQF ~ (4 g(1/2) - g(1)) / 3 and R ~ (4/3)(g(1) - g(1/2)); the result is RMS(R) / RMS(f_NQF),
    the O(|W|^2) relative remainder, estimated from the network alone (not from the NQF it is
    compared with, so a wrong NQF cannot widen its own budget).
    """
    g1, gh = model.forward(W, x), model.forward(model.block_rescale(W, 0.5), x)
    rest, limit = (4.0 / 3.0) * (g1 - gh), (4.0 * gh - g1) / 3.0
    return rest.pow(2).flatten(1).mean(1).sqrt() / limit.pow(2).flatten(1).mean(1).sqrt().clamp_min(1e-300)


def train_deep_trio(model, W0: Sequence[Tensor], x_train, y_train, x_test, y_test, *, lr: float,
                    steps: int, optimizer: str, record_steps, momentum: float = 0.9,
                    loss: str = "mean", progress_seconds: float = 10.0) -> dict:
    """Train the network, its L-block NQF and its 1-block NQF from the shared init W0.

    The network and the L-block NQF start from copies of W0; the 1-block NQF from
    ``model.collapse(W0)``. All three use the same optimizer and learning rate on the full batch,
    in one optimizer over independent parameters (replicas and models never mix; Adam is
    elementwise). ``loss`` is the convention the optimizer minimises (nqf.theory.losses, n = the training
    samples): the gradient of the Eq. 26 loss times its factor c, so GD and momentum run the Eq. 26
    dynamics with step c lr (Adam: only its eps term changes). Returns numpy arrays
    ``train_<name>``, ``test_<name>`` (Eq. 26 units) of shape (R, n_record) for name in (deep,
    nqf2, nqf1), ``truncation`` (R, n_record), the network's relative O(|W|^2) distance from its
    L-block NQF at its own weights on the training inputs (:func:`truncation`), ``step`` and
    ``loss_factor`` c.
    """
    import logging
    import time

    import numpy as np

    from nqf import validate
    from nqf.errors import TrainingDiverged
    from nqf.theory.losses import loss_factor
    from nqf.theory.step_grid import record_grid
    from nqf.training.loop import make_optimizer, progress_message

    lr = validate.scalar("lr", lr, low=0.0, low_open=True)
    steps = validate.integer("steps", steps, minimum=1)
    momentum = validate.scalar("momentum", momentum, low=0.0, high=1.0, high_open=True)
    for name, value in (("x_train", x_train), ("y_train", y_train), ("x_test", x_test), ("y_test", y_test),
                        *((f"W0[{i}]", w) for i, w in enumerate(W0))):
        validate.array(name, value)  # finite: a NaN would read as divergence
    if y_train.shape[0] != x_train.shape[0] or y_test.shape[0] != x_test.shape[0]:
        raise ValueError(f"y_train and y_test must have one target per input; got {y_train.shape[0]} targets for "
                         f"{x_train.shape[0]} training inputs and {y_test.shape[0]} for {x_test.shape[0]} test inputs.")
    log = logging.getLogger("nqf.train")
    factor = loss_factor(loss, y_train.shape[0])
    params = {"deep": [w.clone().requires_grad_() for w in W0],
              "nqf2": [w.clone().requires_grad_() for w in W0],
              "nqf1": [w.detach().requires_grad_() for w in model.collapse(W0)]}
    fns = {"deep": model.forward, "nqf2": model.nqf, "nqf1": model.nqf_one}
    opt = make_optimizer(optimizer, [p for ps in params.values() for p in ps], lr, momentum)
    grid = record_grid(record_steps, steps)
    out = {f"{s}_{n}": [] for s in ("train", "test") for n in fns}
    out["truncation"] = []
    nxt, t0, last = 0, time.perf_counter(), time.perf_counter()
    for step in range(steps + 1):
        opt.zero_grad(set_to_none=True)
        losses = {n: mse(fns[n](params[n], x_train), y_train) for n in fns}
        if nxt < grid.size and step == grid[nxt]:
            with torch.no_grad():
                for n in fns:
                    tr = losses[n].cpu().numpy()
                    te = mse(fns[n](params[n], x_test), y_test).cpu().numpy()
                    out[f"train_{n}"].append(np.where(np.isfinite(tr), tr, np.nan))
                    out[f"test_{n}"].append(np.where(np.isfinite(te), te, np.nan))
                tr = truncation(model, params["deep"], x_train).cpu().numpy()
                out["truncation"].append(np.where(np.isfinite(tr), tr, np.nan))
            nxt += 1
        if step == steps:
            break
        # a replica whose loss is no longer finite has diverged: it is recorded as NaN from then
        # on and drops out of the sum (replicas never mix, so the others train on unchanged)
        finite = {n: torch.isfinite(l) for n, l in losses.items()}
        if not any(bool(f.any()) for f in finite.values()):
            raise TrainingDiverged(step, np.array([float(l.detach().sum()) for l in losses.values()]), lr,
                                   f" of the deep {model.kind} with {optimizer}")
        total = sum(torch.where(finite[n], l, 0.0).sum() for n, l in losses.items())
        (total * factor if factor != 1.0 else total).backward()
        for n, ps in params.items():
            for p in ps:
                if p.grad is not None:  # (W^Q, W^K do not enter an attention NQF)
                    p.grad = torch.nan_to_num(p.grad, nan=0.0, posinf=0.0, neginf=0.0)
        opt.step()
        now = time.perf_counter()
        if now - last >= progress_seconds:
            last = now
            log.info("%s, train loss deep %.4g, 2-layer NQF %.4g", progress_message(step + 1, steps, now - t0),
                     float(losses["deep"].detach().mean()), float(losses["nqf2"].detach().mean()))
    log.info("trained the deep %s and its NQFs for %d steps in %.2f s", model.kind, steps,
             time.perf_counter() - t0)
    res = {k: np.stack(v, axis=1) for k, v in out.items()}
    res["step"] = grid
    res["loss_factor"] = factor
    return res
