"""The checks of notebook 02_nadaraya_watson's coding exercises: pooling with a Laplace kernel, and
the leave-one-out error of Gaussian kernel regression."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .cases import labelled, randn, random_floats, random_sizes, seeded_generator
from .runner import run_check

__all__ = ['check_laplace_pooling', 'check_loo_error']


def _regression_data(generator, n: int, dtype=torch.float32):
    """Sorted inputs in [0, 5) and random outputs, both of shape (n,)."""
    return (5 * torch.rand(n, generator=generator, dtype=dtype)).sort().values, \
        randn(generator, n, dtype=dtype)


def check_laplace_pooling(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(queries (n_q,), keys (n_k,), values (n_k,), width) -> predictions (n_q,), with weights
    proportional to exp(-|query - key| / width), normalised over the keys."""
    generator = seeded_generator(seed)
    fixed = [("", 5, 7, 1.0, torch.float32), ("a single query", 1, 3, 0.1, torch.float32),
             ("a single key", 4, 1, 2.0, torch.float32), ("no queries", 0, 3, 1.0, torch.float32),
             ("float64", 6, 5, 0.5, torch.float64)]
    widths = random_floats(generator, 2, low=0.2, scale=2)
    random = [("", s["n_q"], s["n_k"], w, torch.float32)
              for s, w in zip(random_sizes(generator, 2, n_q=(1, 8), n_k=(1, 8)), widths)]
    entries = [(what, (5 * torch.rand(n_q, generator=generator, dtype=dtype),
                       *_regression_data(generator, n_k, dtype), width))
               for what, n_q, n_k, width, dtype in fixed + random]
    cases = labelled(entries, lambda queries, keys, values, width:
                     f"{len(queries)} queries, {len(keys)} keys, width {width:.2f}")

    def reference(queries, keys, values, width):
        # (n_q, 1) - (1, n_k) -> (n_q, n_k): softmax over the keys is exp(-|.|/w) normalised
        return torch.softmax(-(queries[:, None] - keys[None, :]).abs() / width, dim=1) @ values

    run_check("laplace_pooling", fn, cases, reference,
              hints=("Read the kernel's formula again: absolute value or square? And whose "
                     "weights must sum to 1, a query's or a key's?",
                     "distances queries[:, None] - keys[None, :] have shape (n_q, n_k); the "
                     "weights are exp(-|distance| / width) (absolute value, not squared), "
                     "normalised so that each query's weights (each row) sum to 1."),
              hint=hint)


def check_loo_error(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(x (n,), y (n,), width) -> the mean squared leave-one-out error (a number) of Gaussian
    kernel regression: each y_i predicted from the other points with weights
    softmax over j != i of -((x_i - x_j) / width)^2 / 2."""
    generator = seeded_generator(seed)
    fixed = [("two points, each predicted by the other", 2, 1.0, torch.float32),
             ("", 5, 1.0, torch.float32), ("a narrow kernel", 20, 0.2, torch.float32),
             ("a wide kernel, float64", 12, 3.0, torch.float64)]
    widths = random_floats(generator, 2, low=0.2, scale=2)
    random = [("", s["n"], w, torch.float32)
              for s, w in zip(random_sizes(generator, 2, n=(3, 30)), widths)]
    entries = [(what, (*_regression_data(generator, n, dtype), width))
               for what, n, width, dtype in fixed + random]
    cases = labelled(entries, lambda x, y, width: f"{len(x)} points, width {width:.2f}")

    def reference(x, y, width):
        scores = -((x[:, None] - x[None, :]) / width) ** 2 / 2  # (n, n): query i, key j
        scores = scores.masked_fill(torch.eye(len(x), dtype=torch.bool), -math.inf)  # j != i
        return ((torch.softmax(scores, dim=1) @ y - y) ** 2).mean()

    run_check("loo_error", fn, cases, reference,
              hints=("Leave-one-out means that point i never helps to predict itself: is that so "
                     "in your function? Is the error a mean or a sum?",
                     "query i must not be among its own keys (mask the diagonal, or use "
                     "keys_loo's trick); the kernel is -((x_i - x_j) / width)^2 / 2 before the "
                     "softmax; the error is the mean over the n points of (prediction - y_i)^2."),
              hint=hint)
