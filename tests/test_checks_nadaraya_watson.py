"""The checks of notebook 02_nadaraya_watson (d2lhelpers/exercises/checks_nadaraya_watson.py): right
and plausible wrong answers (see checks_common.py)."""

from __future__ import annotations

import math

import torch

from checks_common import CheckTests
from d2lhelpers import exercises
from d2lhelpers.exercises import checks_nadaraya_watson


def laplace_pooling(queries, keys, values, width):
    kernel = torch.exp(-(queries[:, None] - keys[None, :]).abs() / width)  # (n_q, n_k)
    return kernel / kernel.sum(dim=1, keepdim=True) @ values


def loo_error(x, y, width, leave_out=True, square_width=True, reduce=torch.mean):
    distances = x[:, None] - x[None, :]
    scores = -(distances / width) ** 2 / 2 if square_width else -distances ** 2 / (2 * width)
    if leave_out:
        scores = scores - torch.diag(torch.full_like(x, math.inf))
    return reduce((torch.softmax(scores, dim=1) @ y - y) ** 2).item()


def laplace_weights(q, k, w, dim=1):
    return torch.softmax(-(q[:, None] - k).abs() / w, dim=dim)


CHECKS = {
    "check_laplace_pooling": (laplace_pooling, {
        "Gaussian instead of Laplace": (
            lambda q, k, v, w: torch.softmax(-((q[:, None] - k) / w) ** 2, dim=1) @ v,
            "values differ"),
        "normalised over the queries": (
            lambda q, k, v, w: laplace_weights(q, k, w, dim=0) @ v, "values differ"),
        "not normalised": (
            lambda q, k, v, w: torch.exp(-(q[:, None] - k).abs() / w) @ v, "values differ"),
    }),
    "check_loo_error": (loo_error, {
        "the point among its own keys": (
            lambda x, y, w: loo_error(x, y, w, leave_out=False), "expected"),
        "width not squared": (lambda x, y, w: loo_error(x, y, w, square_width=False), "expected"),
        "sum instead of mean": (lambda x, y, w: loo_error(x, y, w, reduce=torch.sum), "expected"),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_nadaraya_watson


def test_reference_of_laplace_pooling_is_the_kernel_definition():
    # Laplace pooling: the softmax form equals the kernel definition
    exercises.check_laplace_pooling(laplace_pooling)
