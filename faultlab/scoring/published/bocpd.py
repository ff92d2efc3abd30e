"""Bayesian online change-point detection (Adams & MacKay, "Bayesian Online
Changepoint Detection", arXiv:0710.3742, 2007) for one univariate series.

The model: the series is piecewise Gaussian with unknown mean and variance
(Normal-Gamma conjugate prior, so each run's predictive is a Student t); a change
point arrives with the constant hazard ``1 / hazard_lambda`` per observation. After
each observation :meth:`BOCPD.push` returns the run-length posterior ``P(r | x_1..t)``
(index ``r``: the last ``r`` observations belong to the current run). Work per
observation is linear in the run lengths kept (``max_run``; the posterior mass past
it is dropped).
"""

from __future__ import annotations

import math

import numpy as np


def logsumexp(a: np.ndarray) -> float:
    """log(sum(exp(a))) of a 1-D array, stable."""
    m = float(a.max())
    return m + float(np.log(np.exp(a - m).sum()))


class BOCPD:
    """Online run-length posterior of one series.

    Args:
        hazard_lambda: expected run length in observations (hazard = 1 / lambda), > 1.
        mu0, kappa0, alpha0, beta0: the Normal-Gamma prior of a new run (mean, its
            pseudo-count, shape, rate; the prior variance guess is beta0 / alpha0).
        max_run: run lengths kept (older ones are pruned), >= 2.
    """

    def __init__(self, hazard_lambda: float, mu0: float, kappa0: float, alpha0: float, beta0: float, max_run: int = 2000):
        self.log_h = np.log(1.0 / hazard_lambda)
        self.log_1mh = np.log1p(-1.0 / hazard_lambda)
        self.mu0, self.beta0 = float(mu0), float(beta0)
        self.max_run = int(max_run)
        # kappa and alpha of run length r depend on r only (kappa0 + r, alpha0 + r/2):
        # their terms of the Student-t density are computed once
        r = np.arange(self.max_run + 1, dtype=np.float64)
        self.kappa = kappa0 + r
        self.alpha = alpha0 + r / 2
        df = 2 * self.alpha
        self.df = df
        lgamma = np.vectorize(math.lgamma)
        self.const = lgamma((df + 1) / 2) - lgamma(df / 2) - 0.5 * np.log(np.pi * df)
        self.half_df1 = (df + 1) / 2
        self.scale_k = (self.kappa + 1.0) / (self.alpha * self.kappa)
        self.shrink = self.kappa / (self.kappa + 1.0)
        # the state of run lengths 0 .. n-1, in buffers sized once (no array per step)
        self.n = 1
        self.log_r = np.zeros(self.max_run + 1)
        self.mu = np.full(self.max_run + 1, self.mu0)
        self.beta = np.full(self.max_run + 1, self.beta0)

    def push(self, x: float) -> np.ndarray:
        """Observe ``x``; return the run-length posterior (probabilities, index = run
        length, summing to 1)."""
        x = float(x)
        n = self.n
        mu, beta = self.mu[:n], self.beta[:n]
        d2 = (x - mu) ** 2
        scale2 = beta * self.scale_k[:n]
        # log Student-t predictive of x under each run length's posterior, times P(r)
        lp = self.const[:n] - 0.5 * np.log(scale2) - self.half_df1[:n] * np.log1p(d2 / (scale2 * self.df[:n])) + self.log_r[:n]
        total = logsumexp(lp)
        m = min(n + 1, self.max_run)
        # normalized: a change (r = 0) takes h of the mass, growth (r + 1) the rest
        new_beta = beta + 0.5 * self.shrink[:n] * d2
        new_mu = mu + (x - mu) / (self.kappa[:n] + 1.0)
        self.log_r[0] = self.log_h
        self.log_r[1:m] = lp[: m - 1] + (self.log_1mh - total)
        self.mu[1:m], self.beta[1:m] = new_mu[: m - 1], new_beta[: m - 1]
        self.mu[0], self.beta[0] = self.mu0, self.beta0
        if m <= n:  # the longest run length dropped: renormalize what is kept
            self.log_r[:m] -= logsumexp(self.log_r[:m])
        self.n = m
        return np.exp(self.log_r[:m])
