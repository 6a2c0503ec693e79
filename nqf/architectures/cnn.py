"""One-layer CNN with global sum pooling (Prop. 6, Eq. 15-16), single input channel, k outputs.

f_c(X) = sum_i V[c, i] sum_p phi(k_i . x_p), x_p the flattened patches (stride 1, no padding).
Unit i is w_i = [k_i (kh*kw, row-major kernel, as conv2d's weight.reshape); v_i (k)].
A_c = phi'(0)/2 [[0, x_sum e_c^T], [e_c x_sum^T, 0]], x_sum = sum_p x_p: the MLP's A with x -> x_sum.
"""
from __future__ import annotations

import math

import torch

from nqf.architectures.activations import activation
from nqf.architectures.base import MATRIX, UnitModule, gaussian, generator, orthonormal
from nqf.architectures.effective import two_block_matrix, two_block_teacher
from nqf.architectures.mode_designs import pair_modes, standard_normal, whitened
from nqf.theory.factored import BlockBilinearForm

Tensor = torch.Tensor


class OneLayerCNN(UnitModule):
    """conv2d(1 -> d channels, kernel kh x kw, no bias) -> phi -> sum over positions -> linear readout."""

    input_layout = MATRIX

    def __init__(self, image: tuple[int, int] = (4, 5), kernel: tuple[int, int] = (2, 3), width: int = 3,
                 n_outputs: int = 2, activation_name: str = "tanh", init_std: float = 1.0,
                 seed: int | None = 0, dtype: torch.dtype = torch.float64):
        super().__init__()
        gen = generator(seed)
        (H, Wd), (kh, kw) = image, kernel
        if kh > H or kw > Wd:
            raise ValueError(f"kernel {kernel} does not fit in image {image}.")
        self.image, self.kernel, self.n_outputs = tuple(image), tuple(kernel), n_outputs
        self.act = activation(activation_name)
        n_k = kh * kw
        self.K = torch.nn.Parameter(gaussian(gen, width, kh, kw, std=init_std / math.sqrt(n_k), dtype=dtype))
        self.V = torch.nn.Parameter(gaussian(gen, n_outputs, width, std=init_std / math.sqrt(width), dtype=dtype))
        rows = torch.arange(H - kh + 1)[:, None, None, None] + torch.arange(kh)[None, None, :, None]
        cols = torch.arange(Wd - kw + 1)[None, :, None, None] + torch.arange(kw)[None, None, None, :]
        # flat pixel index of every (patch, kernel entry): indexing with it is vmap-friendly
        self.register_buffer("patch_index", (rows * Wd + cols).reshape(-1, n_k), persistent=False)

    @property
    def p(self) -> int:
        return self.kernel[0] * self.kernel[1] + self.n_outputs

    @property
    def width(self) -> int:
        return self.K.shape[0]

    @property
    def z2(self) -> bool:
        return self.act.odd

    def blocks(self):
        return [("k", self.kernel[0] * self.kernel[1]), ("v", self.n_outputs)]

    def patches(self, x: Tensor) -> Tensor:
        """(..., H, W) images -> (..., P, kh*kw) patches."""
        return x.reshape(*x.shape[:-2], -1)[..., self.patch_index]

    def patch_sum(self, x: Tensor) -> Tensor:
        """x_sum = sum_p x_p for images (m, H, W) -> (m, kh*kw), from the integral image.

        Entry (a, b) of x_sum is the sum of the (H-kh+1) x (W-kw+1) window at offset (a, b), four
        look-ups in the cumulative sums: memory O(m H W) instead of the (m, P, kh*kw) patches.
        """
        (kh, kw), (H, Wd) = self.kernel, self.image
        hp, wp = H - kh + 1, Wd - kw + 1
        S = torch.nn.functional.pad(x.cumsum(-2).cumsum(-1), (1, 0, 1, 0))
        box = S[..., hp:hp + kh, wp:wp + kw] - S[..., :kh, wp:wp + kw] - S[..., hp:hp + kh, :kw] + S[..., :kh, :kw]
        return box.reshape(*x.shape[:-2], kh * kw)

    def forward(self, x: Tensor) -> Tensor:
        # The stride-1 valid convolution as one matmul over the (m, P, kh*kw) patches: the same
        # numbers as conv2d (tested), and about 1.6x faster when vmapped over weight replicas.
        z = self.patches(x) @ self.K.reshape(self.width, -1).T
        return self.act.fn(z).sum(dim=-2) @ self.V.T

    def forward_replicas(self, W: Tensor, x: Tensor) -> Tensor:
        """Outputs (R, m, k) at unit weights W (R, p, d) for images x (m, H, W): one conv2d whose
        output channels are every replica's kernels (the same numbers as ``forward_with``,
        tested), without the (m, P, kh*kw) patches that a vmapped matmul materialises per replica."""
        (kh, kw), n_k = self.kernel, self.kernel[0] * self.kernel[1]
        R, d = W.shape[0], W.shape[-1]
        kernels = W[:, :n_k].transpose(1, 2).reshape(R * d, 1, kh, kw)
        z = torch.nn.functional.conv2d(x.reshape(-1, 1, *x.shape[-2:]), kernels)  # (m, R d, H', W')
        h = self.act.fn(z).sum(dim=(-1, -2)).reshape(-1, R, d)
        return torch.einsum("mrd,rkd->rmk", h, W[:, n_k:])

    def unit(self, w: Tensor, x: Tensor) -> Tensor:
        n_k = self.kernel[0] * self.kernel[1]
        return w[n_k:] * self.act.fn(self.patches(x) @ w[:n_k]).sum()

    def structure(self, x: Tensor) -> BlockBilinearForm:
        self.act.require_nqf("OneLayerCNN.structure")
        n_k = self.kernel[0] * self.kernel[1]
        x_sum = self.patch_sum(x)
        left = self.act.slope0 * x_sum[:, None, None, :]
        right = torch.eye(self.n_outputs, dtype=x.dtype, device=x.device)[None, :, None, :]
        return BlockBilinearForm(self.p, (0, n_k), (n_k, self.p), left, right)

    def params_from_unit_weights(self, W: Tensor) -> dict[str, Tensor]:
        n_k = self.kernel[0] * self.kernel[1]
        return {"K": W[:n_k].T.reshape(-1, *self.kernel), "V": W[n_k:]}

    def unit_weights(self) -> Tensor:
        return torch.cat([self.K.reshape(self.width, -1).T, self.V], dim=0)

    def sample_inputs(self, m: int, gen: torch.Generator) -> Tensor:
        return torch.randn(m, *self.image, generator=gen, dtype=self.K.dtype)

    @property
    def unit_input_dim(self) -> int:
        return self.kernel[0] * self.kernel[1]  # a patch

    def unit_input_norm2(self, x: Tensor) -> Tensor:
        """Mean |x_p|^2 over images and positions: sum_p |x_p|^2 is the patch sum of x^2 summed over
        the kernel's offsets (memory O(m H W), not the (m, P, kh*kw) patches: 1.4 GB for 4000
        MNIST images and a 15x15 kernel in float64)."""
        (kh, kw), (H, Wd) = self.kernel, self.image
        return self.patch_sum(x.pow(2)).sum(-1).mean() / ((H - kh + 1) * (Wd - kw + 1))

    @staticmethod
    def image_size(image: tuple[int, int]) -> dict:
        return {"image": tuple(image)}

    def image_inputs(self, images: Tensor) -> Tensor:
        return images

    def effective_matrix(self, W: Tensor) -> Tensor:
        """Prop. 6: E = phi'(0) Z_v Z_k^T (k x kh*kw); f - f(0) = E x_sum, x_sum = sum_p x_p."""
        return two_block_matrix(W, self.kernel[0] * self.kernel[1], self.act.slope0)

    def effective_outputs(self, E: Tensor, x: Tensor) -> Tensor:
        return self.patch_sum(x) @ E.transpose(-1, -2)

    def teacher_units(self, root: Tensor, gen: torch.Generator) -> Tensor:
        return two_block_teacher(self.p, self.kernel[0] * self.kernel[1], self.act.slope0, root, gen)

    @classmethod
    def mode_design(cls, n_modes, width, gen, seed):
        """Images whose patch sums are whitened: the MLP's design with x -> x_sum."""
        K = n_modes
        build = dict(image=(4, 5), kernel=(2, 3), width=width, n_outputs=K, seed=seed)
        module = cls(**build)
        (H, W), n_k = build["image"], 6
        # x_sum = P vec(image) is linear: Gaussian images, corrected in the row space of P so that
        # their patch sums are exactly whitened (the correction leaves the null space of P alone).
        P = module.patch_sum(torch.eye(H * W, dtype=torch.float64).reshape(H * W, H, W)).T
        img = standard_normal(gen, 4 * n_k, H, W)
        s = module.patch_sum(img)
        img = img + ((whitened(s) - s) @ torch.linalg.pinv(P).T).reshape(img.shape)
        Q = pair_modes(n_k + K, 0, orthonormal(n_k, K, gen), n_k, orthonormal(K, K, gen))
        return build, (img,), Q, "images whose patch sums are whitened"
