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
        self.scale_k = (self.kappa + 1.0) / (self.alpha * self.kappa)
        self.log_r = np.zeros(1)
        self.mu = np.array([self.mu0])
        self.beta = np.array([self.beta0])

    def _log_pred(self, x: float) -> np.ndarray:
        """log Student-t predictive density of ``x`` under each run length's posterior."""
        n = len(self.mu)
        df = self.df[:n]
        scale2 = self.beta * self.scale_k[:n]
        return self.const[:n] - 0.5 * np.log(scale2) - (df + 1) / 2 * np.log1p((x - self.mu) ** 2 / (scale2 * df))

    def push(self, x: float) -> np.ndarray:
        """Observe ``x``; return the run-length posterior (probabilities, index = run
        length, summing to 1)."""
        x = float(x)
        lp = self._log_pred(x) + self.log_r
        log_r = np.empty(len(lp) + 1)
        log_r[0] = logsumexp(lp + self.log_h)
        log_r[1:] = lp + self.log_1mh
        log_r -= logsumexp(log_r)
        k = self.kappa[: len(self.mu)]
        beta = self.beta + k * (x - self.mu) ** 2 / (2.0 * (k + 1.0))
        mu = (k * self.mu + x) / (k + 1.0)
        self.mu = np.concatenate([[self.mu0], mu])
        self.beta = np.concatenate([[self.beta0], beta])
        if len(log_r) > self.max_run:
            log_r = log_r[: self.max_run] - logsumexp(log_r[: self.max_run])
            self.mu, self.beta = self.mu[: self.max_run], self.beta[: self.max_run]
        self.log_r = log_r
        return np.exp(log_r)
