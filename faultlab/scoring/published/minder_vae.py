"""Minder's per-metric denoiser: a small LSTM variational autoencoder (torch) that
reconstructs a node's window of one normalized metric; trained on the train split's
windows only (:meth:`faultlab.scoring.published.minder.MinderDetector.fit`).

Encoder: an LSTM over the window's samples, its last hidden state to a Gaussian
latent (mean, log-variance); decoder: the latent repeated over the window through an
LSTM and a linear layer to one value per sample. Loss: squared reconstruction
error plus the KL term (the ELBO), Adam, full-batch. At detection the
reconstruction is the latent mean's (no sampling), so a window's denoised form is
deterministic.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch import nn


class LstmVae(nn.Module):
    """LSTM-VAE over windows of shape (batch, window) -> the same shape."""

    def __init__(self, hidden: int, latent: int):
        super().__init__()
        self.enc = nn.LSTM(1, hidden, batch_first=True)
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec = nn.LSTM(latent, hidden, batch_first=True)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor, sample: bool = True):
        _, (h, _) = self.enc(x.unsqueeze(-1))
        mu, logvar = self.mu(h[-1]), self.logvar(h[-1])
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar) if sample else mu
        y, _ = self.dec(z.unsqueeze(1).repeat(1, x.shape[1], 1))
        return self.out(y).squeeze(-1), mu, logvar

    def denoise(self, w: np.ndarray) -> np.ndarray:
        """(n, nodes, window) normalized windows -> their reconstructions, same shape."""
        flat = torch.as_tensor(w.reshape(-1, w.shape[-1]), dtype=torch.float32)
        with one_thread(), torch.no_grad():
            rec, _, _ = self(flat, sample=False)
        return rec.numpy().astype(np.float64).reshape(w.shape)


def train_vaes(data: dict[str, np.ndarray], *, latent: int, hidden: int, epochs: int, seed: int) -> dict[str, LstmVae]:
    """One trained :class:`LstmVae` per metric of ``data`` (metric -> (n, window)
    normalized windows), trained on one thread (:func:`one_thread`)."""
    torch.manual_seed(seed)
    with one_thread():
        return {m: _train(x, latent, hidden, epochs) for m, x in data.items()}


@contextlib.contextmanager
def one_thread():
    """torch on one thread inside the block: these models are tiny, and more threads
    only contend for the cores (thread start-up and synchronization outweigh the
    work of a few thousand short windows)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _train(x: np.ndarray, latent: int, hidden: int, epochs: int) -> LstmVae:
    """One :class:`LstmVae` fitted to ``x`` ((n, window) windows)."""
    model = LstmVae(hidden, latent)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    xt = torch.as_tensor(x, dtype=torch.float32)
    for _ in range(epochs):
        opt.zero_grad()
        rec, mu, logvar = model(xt)
        kl = -0.5 * torch.mean(1 + logvar - mu.pow(2) - logvar.exp())
        loss = torch.mean((rec - xt) ** 2) + 1e-3 * kl
        loss.backward()
        opt.step()
    model.eval()
    return model
