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


def laplace_kernel_pooling(q, k, v, w, kernel):
    """Pooling with weights proportional to kernel(q_i - k_j), normalised over the keys."""
    K = kernel(q[:, None] - k[None, :])
    return (K / K.sum(dim=1, keepdim=True)) @ v


def loo_by_loop(x, y, width, reduce=lambda errors: sum(errors) / len(errors)):
    """Leave-one-out error point by point, as a learner may write it."""
    errors = []
    for i in range(len(x)):
        others = torch.arange(len(x)) != i
        weights = torch.softmax(-((x[i] - x[others]) / width) ** 2 / 2, dim=0)
        errors.append(((weights * y[others]).sum() - y[i]) ** 2)
    return float(reduce(errors))


CHECKS = {
    "check_laplace_pooling": (laplace_pooling, {
        "Gaussian instead of Laplace": (
            lambda q, k, v, w: torch.softmax(-((q[:, None] - k) / w) ** 2, dim=1) @ v,
            "differ", "squares the distance"),
        "normalised over the queries": (
            lambda q, k, v, w: laplace_weights(q, k, w, dim=0) @ v, "differ",
            "normalised over the queries"),
        "normalised over the whole matrix": (
            lambda q, k, v, w: (lambda K: K / K.sum() @ v)(torch.exp(-(q[:, None] - k).abs() / w)),
            "differ", "whole matrix"),
        "not normalised": (
            lambda q, k, v, w: torch.exp(-(q[:, None] - k).abs() / w) @ v, "differ",
            "not normalised"),
        "width multiplies": (
            lambda q, k, v, w: laplace_kernel_pooling(q, k, v, w, lambda d: torch.exp(-d.abs() * w)),
            "differ", "multiplied by the width"),
        "minus sign forgotten": (
            lambda q, k, v, w: laplace_kernel_pooling(q, k, v, w, lambda d: torch.exp(d.abs() / w)),
            "differ", "minus sign"),
        "absolute value forgotten": (
            lambda q, k, v, w: laplace_kernel_pooling(q, k, v, w, lambda d: torch.exp(-d / w)),
            "differ", "signed distance"),
        "width ignored": (
            lambda q, k, v, w: laplace_kernel_pooling(q, k, v, w, lambda d: torch.exp(-d.abs())),
            "differ", "ignores the width"),
        "width squared": (
            lambda q, k, v, w: laplace_kernel_pooling(q, k, v, w,
                                                      lambda d: torch.exp(-d.abs() / w ** 2)),
            "differ", "width squared"),
        "pooled over the queries": (lambda q, k, v, w: (laplace_weights(q, k, w) * v).sum(0),
                                    "on input", "sum over the queries"),
        "the weights returned": (lambda q, k, v, w: laplace_weights(q, k, w), "expected shape",
                                 "return the weights"),
        "each row divided by the row sums without keepdim": (
            lambda q, k, v, w: (lambda K: (K / K.sum(dim=1)) @ v)(
                torch.exp(-(q[:, None] - k[None, :]).abs() / w)), "on input", "lost their axis"),
        "each value weighted by the query's distance to the mean key": (
            lambda q, k, v, w: torch.exp(-(q - k.mean()).abs() / w) * v.mean(), "on input", None),
    }),
    "check_loo_error": (loo_error, {
        "the point among its own keys": (
            lambda x, y, w: loo_error(x, y, w, leave_out=False), "expected", "among its own keys"),
        "its weight zeroed after the softmax": (
            lambda x, y, w: ((torch.softmax(-((x[:, None] - x) / w) ** 2 / 2, dim=1)
                              * (1 - torch.eye(len(x)))) @ y - y).pow(2).mean().item(),
            "expected", "without renormalising"),
        "width not squared": (lambda x, y, w: loo_error(x, y, w, square_width=False), "expected",
                              "not by the width squared"),
        "no 1/2": (lambda x, y, w: loo_error(x, y, w / 2 ** 0.5), "expected",
                   "factor 1/2"),
        "the Laplace kernel": (
            lambda x, y, w: ((torch.softmax((-(x[:, None] - x).abs() / w).fill_diagonal_(-math.inf),
                                            dim=1) @ y - y) ** 2).mean().item(),
            "expected", "Laplace kernel"),
        "softmax over the queries": (
            lambda x, y, w: ((torch.softmax((-((x[:, None] - x) / w) ** 2 / 2).fill_diagonal_(
                -math.inf), dim=0) @ y - y) ** 2).mean().item(), "expected", "over the queries"),
        "sum instead of mean": (lambda x, y, w: loo_error(x, y, w, reduce=torch.sum), "expected",
                                "a sum over the points"),
        "divided by n - 1": (lambda x, y, w: loo_by_loop(x, y, w, lambda e: sum(e) / (len(e) - 1)),
                             "expected", "n - 1"),
        "the mean error, not squared": (
            lambda x, y, w: (torch.softmax((-((x[:, None] - x) / w) ** 2 / 2).fill_diagonal_(
                -math.inf), dim=1) @ y - y).mean().item(), "expected", "not squared"),
        "the squared errors, not their mean": (
            lambda x, y, w: (torch.softmax((-((x[:, None] - x) / w) ** 2 / 2).fill_diagonal_(
                -math.inf), dim=1) @ y - y) ** 2, "expected", "one error per point"),
        "root mean squared error": (lambda x, y, w: loo_by_loop(x, y, w) ** 0.5, "expected",
                                    "root of the mean"),
        "the 2 inside the square": (
            lambda x, y, w: ((torch.softmax((-((x[:, None] - x) / (2 * w)) ** 2).fill_diagonal_(
                -math.inf), dim=1) @ y - y) ** 2).mean().item(), "expected", "another factor"),
        "mean absolute error": (
            lambda x, y, w: loo_by_loop(x, y, w, lambda e: sum(v.sqrt() for v in e) / len(e)),
            "expected", "mean absolute error"),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_nadaraya_watson


def test_reference_of_laplace_pooling_is_the_kernel_definition():
    # Laplace pooling: the softmax form equals the kernel definition
    exercises.check_laplace_pooling(laplace_pooling)


def test_the_loop_of_the_wrong_answers_is_right(capsys):
    exercises.check_loo_error(loo_by_loop)
    assert capsys.readouterr().out.startswith("Correct")
