"""The checks of notebook 02_nadaraya_watson (d2lhelpers/exercises/checks_nadaraya_watson.py): right
and plausible wrong answers (see checks_common.py)."""

from __future__ import annotations

import math

import torch

from checks_common import CheckTests
from d2lhelpers import exercises
from d2lhelpers.exercises import checks_nadaraya_watson


def kernel_as_attention(queries, keys, width, root="D", power=2, key_term=-0.5):
    """(q, k) as a learner writes them; the arguments away from their defaults are mistakes."""
    D = queries.shape[1] + (key_term is not None)
    c = {"D": math.sqrt(D), "2": math.sqrt(2), "none": 1.0}[root] / width ** power
    if key_term is None:
        return queries, c * keys
    q = torch.cat([queries, torch.ones_like(queries[:, :1])], dim=1)
    k = torch.cat([keys, key_term * keys.pow(2).sum(dim=1, keepdim=True)], dim=1)
    return q, c * k


def kernel_as_attention_other_way(queries, keys, width):
    """Another right answer: the factor on the queries, the extra feature first, D = d + 1."""
    D = queries.shape[1] + 1
    q = torch.cat([torch.full_like(queries[:, :1], -0.5), queries], dim=1) * math.sqrt(D)
    k = torch.cat([(keys ** 2).sum(1, keepdim=True), keys], dim=1) / width ** 2
    return q, k


def gaussian_weights(queries, keys, width):
    return torch.softmax(-torch.cdist(queries, keys) ** 2 / (2 * width ** 2), dim=1)


def loo_error(x, y, width, leave_out=True, square_width=True, reduce=torch.mean):
    distances = x[:, None] - x[None, :]
    scores = -(distances / width) ** 2 / 2 if square_width else -distances ** 2 / (2 * width)
    if leave_out:
        scores = scores - torch.diag(torch.full_like(x, math.inf))
    return reduce((torch.softmax(scores, dim=1) @ y - y) ** 2).item()


def loo_by_loop(x, y, width, reduce=lambda errors: sum(errors) / len(errors)):
    """Leave-one-out error point by point, as a learner may write it."""
    errors = []
    for i in range(len(x)):
        others = torch.arange(len(x)) != i
        weights = torch.softmax(-((x[i] - x[others]) / width) ** 2 / 2, dim=0)
        errors.append(((weights * y[others]).sum() - y[i]) ** 2)
    return float(reduce(errors))


CHECKS = {
    "check_kernel_as_attention": (kernel_as_attention, {
        "the weights returned": (gaussian_weights, "raised", "return the weights themselves"),
        "sqrt(D) forgotten": (lambda q, k, w: kernel_as_attention(q, k, w, root="none"),
                              "does not give the expected result", "cancel the layer's division"),
        "sqrt(2) as in section 3": (lambda q, k, w: kernel_as_attention(q, k, w, root="2"),
                                    "does not give the expected result", "sqrt(2), as in"),
        "width ignored": (lambda q, k, w: kernel_as_attention(q, k, w, power=0),
                          "does not give the expected result", "ignore the width"),
        "width not squared": (lambda q, k, w: kernel_as_attention(q, k, w, power=1),
                              "does not give the expected result", "not by its square"),
        "plain dot product": (lambda q, k, w: kernel_as_attention(q, k, w, key_term=None),
                              "does not give the expected result", "favour long keys"),
        "the query's norm instead of the key's": (
            lambda q, k, w: (torch.cat([q, -0.5 * (q ** 2).sum(1, keepdim=True)], 1),
                             math.sqrt(q.shape[1] + 1) / w ** 2 * torch.cat(
                                 [k, torch.ones_like(k[:, :1])], 1)),
            "does not give the expected result", "favour long keys"),
        "+|x_i|^2 / 2": (lambda q, k, w: kernel_as_attention(q, k, w, key_term=0.5),
                         "does not give the expected result", "extra feature is +|x_i|^2 / 2"),
        "-|x_i|^2": (lambda q, k, w: kernel_as_attention(q, k, w, key_term=-1.0),
                     "does not give the expected result", "without the 1/2"),
        "q and k of different widths": (
            lambda q, k, w: (q, torch.cat([k, k], 1)), "raised", None),
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
        "mean absolute error": (
            lambda x, y, w: loo_by_loop(x, y, w, lambda e: sum(v.sqrt() for v in e) / len(e)),
            "expected", "mean absolute error"),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_nadaraya_watson


def test_the_reference_gives_the_gaussian_kernel_and_another_right_answer_passes(capsys):
    torch.manual_seed(0)
    queries = 5 * torch.rand(4, 3, dtype=torch.float64)
    keys = 5 * torch.rand(6, 3, dtype=torch.float64)
    expected = gaussian_weights(queries, keys, 0.7)
    reference = checks_nadaraya_watson._wrong_kernel_as_attention  # at its right values
    for answer in (reference, kernel_as_attention_other_way):
        weights = checks_nadaraya_watson._attention_weights(answer(queries, keys, 0.7), queries,
                                                            keys, 0.7)
        torch.testing.assert_close(weights, expected)
    exercises.check_kernel_as_attention(kernel_as_attention_other_way)
    assert capsys.readouterr().out.startswith("Correct")


def test_the_loop_of_the_wrong_answers_is_right(capsys):
    exercises.check_loo_error(loo_by_loop)
    assert capsys.readouterr().out.startswith("Correct")
