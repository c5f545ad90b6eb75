"""The checks of notebook 02_nadaraya_watson's coding exercises: pooling with a Laplace kernel, and
the leave-one-out error of Gaussian kernel regression."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from .cases import labelled, randn, random_floats, random_sizes, seeded_generator
from .runner import Symptom, run_check

__all__ = ['check_laplace_pooling', 'check_loo_error']


def _regression_data(generator, n: int, dtype=torch.float32):
    """Sorted inputs in [0, 5) and random outputs, both of shape (n,)."""
    return (5 * torch.rand(n, generator=generator, dtype=dtype)).sort().values, \
        randn(generator, n, dtype=dtype)


# The classic mistakes, each as the function that makes it ----------------------------------------

def _kernel_scores(queries, keys, width, kernel="laplace"):
    """(n_q, n_k) scores whose softmax over the keys gives the kernel's weights; every kernel but
    "laplace" is a classic mistake."""
    distances = queries[:, None] - keys[None, :]  # (n_q, n_k)
    return {"laplace": lambda: -distances.abs() / width,
            "squared": lambda: -(distances / width) ** 2,
            "gaussian": lambda: -(distances / width) ** 2 / 2,
            "squared over width": lambda: -distances ** 2 / width,
            "squared over 2 width": lambda: -distances ** 2 / (2 * width),
            "times width": lambda: -distances.abs() * width,
            "no minus": lambda: distances.abs() / width,
            "signed": lambda: -distances / width,
            "signed the other way": lambda: distances / width,
            "width squared": lambda: -distances.abs() / width ** 2,
            "no width": lambda: -distances.abs(),
            "gaussian times width": lambda: -(distances * width) ** 2 / 2,
            "gaussian without width": lambda: -distances ** 2 / 2,
            "gaussian width squared": lambda: -(distances / width ** 2) ** 2 / 2,
            "gaussian half inside": lambda: -(distances / (2 * width)) ** 2}[kernel]()


def _wrong_laplace_pooling(queries, keys, values, width, kernel="laplace", normalise="keys",
                           pool=True):
    scores = _kernel_scores(queries, keys, width, kernel)
    weights = {"keys": lambda: torch.softmax(scores, dim=1),
               "queries": lambda: torch.softmax(scores, dim=0),
               "all": lambda: torch.softmax(scores.flatten(), dim=0).reshape(scores.shape),
               "none": lambda: torch.exp(scores),
               # each row's sum without keepdim: column j divided by row j's sum
               "row sums broadcast": lambda: torch.exp(scores) / torch.exp(scores).sum(dim=1)}[
        normalise]()
    if pool == "over the queries":  # each key's value weighted by every query, summed
        return (weights * values).sum(dim=0)
    return weights @ values if pool else weights


_LAPLACE_POOLING_MISTAKES = {
    "Your kernel squares the distance, as the Gaussian does: the Laplace kernel uses its absolute "
    "value.": tuple(partial(_wrong_laplace_pooling, kernel=k)
                    for k in ("squared", "gaussian", "squared over width",
                                                             "squared over 2 width")),
    "Your weights are normalised over the queries (each column sums to 1): each query's weights "
    "must sum to 1 over the keys.": partial(_wrong_laplace_pooling, normalise="queries"),
    "Your weights sum to 1 over the whole matrix: each query's weights must sum to 1 over the "
    "keys, on their own.": partial(_wrong_laplace_pooling, normalise="all"),
    "Your weights are not normalised: each query's weights must sum to 1 over the keys.":
        partial(_wrong_laplace_pooling, normalise="none"),
    "Your distances are multiplied by the width: the kernel divides them by it.":
        partial(_wrong_laplace_pooling, kernel="times width"),
    "Your kernel grows with the distance: the exponent needs its minus sign, so that nearer keys "
    "weigh more.": partial(_wrong_laplace_pooling, kernel="no minus"),
    "Your kernel uses the signed distance: the Laplace kernel uses its absolute value, so that a "
    "key on either side of the query weighs the same.": (
        partial(_wrong_laplace_pooling, kernel="signed"),
        partial(_wrong_laplace_pooling, kernel="signed the other way")),
    "Your distances are divided by the width squared: the Laplace kernel divides them by the width "
    "itself.": partial(_wrong_laplace_pooling, kernel="width squared"),
    "Your kernel ignores the width: the distances are divided by it, so that a wider kernel "
    "reaches further.": partial(_wrong_laplace_pooling, kernel="no width"),
    "Your predictions sum over the queries, one per key: each query's prediction is the weighted "
    "sum of the values over the keys.": partial(_wrong_laplace_pooling, pool="over the queries"),
    "You return the weights (n_q, n_k), not the predictions: each prediction is the weighted "
    "average of the values.": partial(_wrong_laplace_pooling, pool=False),
    "Your row sums lost their axis (a sum without keepdim): dividing by them divides column j by "
    "row j's sum; each row must be divided by its own sum.":
        partial(_wrong_laplace_pooling, normalise="row sums broadcast"),
}


def check_laplace_pooling(fn: Callable, seed: int = 0, hint: int = 1, *,
                          verbose: bool = False) -> None:
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

    run_check("laplace_pooling", fn, cases, reference, mistakes=_LAPLACE_POOLING_MISTAKES,
              verbose=verbose,
              hints=("Read the kernel's formula again: absolute value or square? And whose "
                     "weights must sum to 1, a query's or a key's?",
                     "distances queries[:, None] - keys[None, :] have shape (n_q, n_k); the "
                     "weights are exp(-|distance| / width) (absolute value, not squared), "
                     "normalised so that each query's weights (each row) sum to 1."),
              hint=hint)


def _wrong_loo_error(x, y, width, leave_out="mask", kernel="gaussian", axis=1, error="mean"):
    n = len(x)
    scores = _kernel_scores(x, x, width, kernel)  # (n, n): query i, key j
    itself = torch.eye(n, dtype=torch.bool)
    if leave_out == "mask":
        scores = scores.masked_fill(itself, -math.inf)
    weights = torch.softmax(scores, dim=axis)
    if leave_out == "zero the weight":  # after the softmax, without renormalising
        weights = weights.masked_fill(itself, 0.0)
    residuals = weights @ y - y
    return {"mean": lambda: (residuals ** 2).mean(), "sum": lambda: (residuals ** 2).sum(),
            "root": lambda: (residuals ** 2).mean().sqrt(),
            "absolute": lambda: residuals.abs().mean(),
            "n - 1": lambda: (residuals ** 2).sum() / (n - 1),
            "signed": lambda: residuals.mean(), "signed sum": lambda: residuals.sum()}[error]()


_LOO_ERROR_MISTAKES = {
    "You return one error per point: the exercise asks for one number, their mean.":
        Symptom(lambda result, x, y, width: tuple(torch.as_tensor(result).shape) == (len(x),)),
    "Your point i is among its own keys: leave-one-out predicts y_i from the other points only.":
        partial(_wrong_loo_error, leave_out="none"),
    "Your weights leave point i out after the softmax without renormalising: the other points' "
    "weights no longer sum to 1.": partial(_wrong_loo_error, leave_out="zero the weight"),
    "Your kernel divides the squared distance by the width, not by the width squared: the "
    "Gaussian kernel is -((x_i - x_j) / width)^2 / 2.": (
        partial(_wrong_loo_error, kernel="squared over width"),
        partial(_wrong_loo_error, kernel="squared over 2 width")),
    "Your kernel misses the factor 1/2 of the Gaussian: -((x_i - x_j) / width)^2 / 2.":
        partial(_wrong_loo_error, kernel="squared"),
    "Your kernel is the Laplace kernel (absolute distance): this exercise uses the Gaussian.":
        partial(_wrong_loo_error, kernel="laplace"),
    "Your weights are normalised over the queries (each column sums to 1): the weights that "
    "predict y_i must sum to 1 over the other points j.": partial(_wrong_loo_error, axis=0),
    "Your error is a sum over the points: the exercise asks for their mean.":
        partial(_wrong_loo_error, error="sum"),
    "Your error divides the sum by n - 1: the mean over the n points divides by n.":
        partial(_wrong_loo_error, error="n - 1"),
    "Your error is the root of the mean squared error: the exercise asks for the mean squared "
    "error itself.": partial(_wrong_loo_error, error="root"),
    "Your errors are not squared: positive and negative errors cancel out in a mean of signed "
    "errors.": (partial(_wrong_loo_error, error="signed"),
                partial(_wrong_loo_error, error="signed sum")),
    "Your error is the mean absolute error: the exercise asks for the mean of the squared "
    "errors.": partial(_wrong_loo_error, error="absolute"),
    "Your kernel scales the squared distance by another factor than 1 / (2 width^2): the "
    "Gaussian kernel is -((x_i - x_j) / width)^2 / 2.": tuple(
        partial(_wrong_loo_error, kernel=kernel)
        for kernel in ("gaussian times width", "gaussian without width", "gaussian width squared",
                       "gaussian half inside")),
}


def check_loo_error(fn: Callable, seed: int = 0, hint: int = 1, *,
                    verbose: bool = False) -> None:
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

    run_check("loo_error", fn, cases, reference, mistakes=_LOO_ERROR_MISTAKES, verbose=verbose,
              hints=("Leave-one-out means that point i never helps to predict itself: is that so "
                     "in your function? Is the error a mean or a sum?",
                     "query i must not be among its own keys (mask the diagonal, or use "
                     "keys_loo's trick); the kernel is -((x_i - x_j) / width)^2 / 2 before the "
                     "softmax; the error is the mean over the n points of (prediction - y_i)^2."),
              hint=hint)


MISTAKES = {"check_laplace_pooling": _LAPLACE_POOLING_MISTAKES,
            "check_loo_error": _LOO_ERROR_MISTAKES}  # the catalogues, for the tests
