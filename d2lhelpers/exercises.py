"""Exercises: automatic checks with helpful messages, student copies, and nbgrader metadata.

In a notebook, a coding exercise is a function the learner writes, with the solution between
nbgrader's markers, followed by a check cell that calls one of the checks below::

    def multiplicative_scores(queries, keys, W):
        ### BEGIN SOLUTION
        ...
        ### END SOLUTION

    d2lh.exercises.check_multiplicative_scores(multiplicative_scores)

A check builds its own inputs (seeded random shapes and edge cases), runs the learner's function on
each, and compares the result with a reference computed by the package (or a short formula). On
failure it says which input failed, what was expected, what came back, and gives a hint; on
success it prints one line. It raises :class:`ExerciseCheckFailed`, an ``AssertionError``, so that
nbgrader counts a failed check as a failed test. ``seed`` draws other random cases: the source
notebooks run each check a second time with ``seed=1`` between ``### BEGIN HIDDEN TESTS`` and
``### END HIDDEN TESTS``, which student copies leave out.

Student copies (solutions replaced by a stub, hidden tests removed, outputs cleared), and the
nbgrader cell metadata derived from the markers, written into the source notebooks::

    python -m d2lhelpers.exercises notebooks/03_attention_scoring.ipynb --out student/
    python -m d2lhelpers.exercises notebooks/*.ipynb --out student/ --answer-key answers/
    python -m d2lhelpers.exercises notebooks/*.ipynb --nbgrader-metadata
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

__all__ = [
    "ExerciseCheckFailed",
    "run_check",
    # notebook 01
    "check_self_attention", "check_max_weights",
    # notebook 02
    "check_laplace_pooling", "check_loo_error",
    # notebook 03
    "check_multiplicative_scores", "check_causal_lens",
    # notebook 04
    "check_per_head_weights", "check_to_torch_multihead",
    # notebook 05
    "check_sinusoidal_table", "check_shift_matrix",
    # notebook 06
    "check_layer_norm", "check_causal_additive_mask",
    # notebook 07
    "check_real_token_smoothing", "check_expand_beams",
    # student copies and nbgrader
    "BEGIN_SOLUTION", "END_SOLUTION", "BEGIN_HIDDEN_TESTS", "END_HIDDEN_TESTS",
    "student_source",
    "student_notebook",
    "write_copies",
    "nbgrader_role",
    "with_nbgrader_metadata",
    "apply_nbgrader_metadata",
]

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
ANSWER_STUB = "YOUR ANSWER HERE"


class ExerciseCheckFailed(AssertionError):
    """A learner's function gave a wrong answer (the message says where and why)."""


# ---------------------------------------------------------------------------------------------
# Running a check


def _describe(value) -> str:
    """A short, readable description of an input or output, with shapes for arrays."""
    if isinstance(value, torch.Tensor):
        text = f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
        if value.dim() == 0:
            return f"{text}: {value.item():.6g}"
        if value.numel() <= 24:
            shown = value.detach().cpu().numpy()
            text += f":\n{shown.round(4) if value.is_floating_point() else shown}"
        return text
    if isinstance(value, np.ndarray):
        text = f"array of shape {value.shape}, dtype {value.dtype}"
        shown = value.round(4) if np.issubdtype(value.dtype, np.floating) else value
        return text + (f":\n{shown}" if value.size <= 24 else "")
    if isinstance(value, torch.nn.Module):
        return f"a {type(value).__name__}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    if isinstance(value, (float, np.floating)):
        return f"{value:.6g}"
    return repr(value)


def _as_tensor(value) -> torch.Tensor | None:
    """A tensor, array or number as a tensor; None for anything else."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (np.ndarray, np.generic, int, float)) and not isinstance(value, bool):
        return torch.as_tensor(np.asarray(value))
    return None


def _compare(got, expected, atol: float, rtol: float) -> str | None:
    """None if ``got`` matches ``expected`` (a tensor, array, number or tuple of them);
    otherwise what differs. Values are compared in float64; a float64 expectation also requires
    a float64 result (the inputs' precision kept)."""
    if isinstance(expected, tuple):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"expected a tuple of {len(expected)} results, got {_describe(got)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            problem = _compare(g, e, atol, rtol)
            if problem is not None:
                return f"result {i} of the tuple: {problem}"
        return None
    want, have = _as_tensor(expected), _as_tensor(got)
    if have is None:
        wanted = "a tensor" if isinstance(expected, torch.Tensor) else "an array or a number"
        return f"expected {wanted}, got {type(got).__name__}"
    if have.shape != want.shape:
        return f"expected shape {tuple(want.shape)}, got shape {tuple(have.shape)}"
    if want.dtype == torch.float64 and have.is_floating_point() and have.dtype != torch.float64:
        return f"expected dtype float64 (the precision of the inputs), got {have.dtype}"
    have, want = have.cpu().double(), want.cpu().double()
    if not torch.isfinite(have).all() and torch.isfinite(want).all():
        return "the result holds NaN or infinite values"
    if not torch.allclose(have, want, atol=atol, rtol=rtol, equal_nan=True):
        if want.dim() == 0:
            return f"expected {want.item():.6g}, got {have.item():.6g}"
        # equal infinities (a -inf mask entry, say) count as no difference
        differences = (have - want).abs().masked_fill(have == want, 0)
        worst = differences.nan_to_num(math.inf).flatten().argmax().item()
        index = tuple(int(i) for i in np.unravel_index(worst, tuple(want.shape)))
        return (f"values differ: at index {index} expected {want[index].item():.6g}, "
                f"got {have[index].item():.6g}")
    return None


def _same(a, b) -> bool:
    """Whether an input argument is unchanged (tensors and arrays; anything else counts as same)."""
    if isinstance(a, torch.Tensor):
        if torch.equal(a, b):
            return True
        return (a.is_floating_point() and a.shape == b.shape and a.dtype == b.dtype
                and bool(((a == b) | (a.isnan() & b.isnan())).all()))  # NaN inputs stay NaN
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b, equal_nan=True)
    return True


def run_check(name: str, learner_fn: Callable, cases: Sequence[tuple[str, tuple]],
              reference: Callable, hint: str = "", atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Run ``learner_fn`` on every case and compare with ``reference`` (both called with the same
    arguments). ``cases``: (description, args) pairs. Results may be tensors, NumPy arrays,
    numbers, or tuples of them. Raises :class:`ExerciseCheckFailed` with the failing input, the
    expected and the returned value and ``hint``; prints one line on success. Also fails if the
    learner's function modifies its inputs."""
    if not callable(learner_fn):
        raise ValueError(f"learner_fn must be a function, got {type(learner_fn).__name__}")
    with torch.random.fork_rng(devices=[]):  # the notebook's random stream stays as it was
        _run_cases(name, learner_fn, cases, reference, hint, atol, rtol)
    print(f"Correct: {name} passed all {len(cases)} checks.")


def _run_cases(name, learner_fn, cases, reference, hint, atol, rtol) -> None:
    for description, args in cases:
        expected = reference(*copy.deepcopy(args))
        learner_args = copy.deepcopy(args)
        try:
            got = learner_fn(*learner_args)
        except NotImplementedError:
            raise ExerciseCheckFailed(f"{name}: not implemented yet: write the function, then run "
                                      "this check again.") from None
        except Exception as error:  # the learner's code failed: say on which input
            raise ExerciseCheckFailed(
                f"{name} raised {type(error).__name__}: {error}\n  on input {description}: "
                f"{_describe(args)}\nHint: {hint}") from error
        problem = _compare(got, expected, atol, rtol)
        if problem is None:
            changed = [i for i, (a, b) in enumerate(zip(args, learner_args)) if not _same(a, b)]
            if changed:
                problem = f"the function modified its input argument(s) {changed} in place"
        if problem is not None:
            raise ExerciseCheckFailed(
                f"{name} is not right yet on input {description}: {problem}.\n"
                f"  input:    {_describe(args)}\n  expected: {_describe(expected)}\n"
                f"  got:      {_describe(got)}\nHint: {hint}")


# ---------------------------------------------------------------------------------------------
# Case generators shared by the checks. Every check takes ``seed``: fixed edge cases come first,
# then random sizes drawn from a generator seeded with it (the global random state is untouched).


def _generator(seed: int) -> torch.Generator:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    return torch.Generator().manual_seed(seed)


def _randn(generator, *shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=dtype)


def _randint(generator, low: int, high: int, shape=()) -> torch.Tensor:
    """Integers drawn uniformly from low .. high (inclusive)."""
    return torch.randint(low, high + 1, shape, generator=generator)


def _sizes(generator, count: int, **ranges) -> list[dict]:
    """``count`` dicts of sizes, each drawn uniformly from its inclusive (low, high) range."""
    return [{name: int(_randint(generator, low, high)) for name, (low, high) in ranges.items()}
            for _ in range(count)]


def _size_text(sizes: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in sizes.items())


def _label(what: str, details: str) -> str:
    """A case's description: what is special about it (if anything), then its sizes."""
    return f"{what}, {details}" if what else details


def _random_module(module: torch.nn.Module, generator) -> torch.nn.Module:
    """``module`` in eval mode with seeded parameters of scale 1/sqrt(fan-in) (biases included)."""
    with torch.no_grad():
        for parameter in module.parameters():
            fan_in = parameter.shape[-1] if parameter.dim() > 1 else parameter.shape[0]
            parameter.copy_(_randn(generator, *parameter.shape) / math.sqrt(fan_in))
    return module.eval()


def _random_lengths(generator, sizes: dict, per_query: bool, zero: bool = False) -> torch.Tensor:
    """Valid lengths in 1 .. T_k, of shape (B,) or (B, T_q); with ``zero``, sequence 0 gets 0."""
    shape = (sizes["B"], sizes["T_q"]) if per_query else (sizes["B"],)
    lengths = _randint(generator, 1, sizes["T_k"], shape)
    if zero:
        lengths[0] = 0
    return lengths


# ---------------------------------------------------------------------------------------------
# Notebook 01: queries, keys and values (NumPy)


def check_self_attention(fn: Callable, seed: int = 0) -> None:
    """fn(X, W_q, W_k, W_v) -> (Z, A), NumPy arrays: X (n, d_in), W_q and W_k (d_in, d),
    W_v (d_in, d_v); A = softmax(Q K^T / sqrt(d)) of shape (n, n), Z = A V of shape (n, d_v)."""
    from .attention import DotProductAttention

    generator = _generator(seed)
    sizes = ([dict(n=4, d_in=3, d=2, d_v=2), dict(n=1, d_in=5, d=3, d_v=4)]
             + _sizes(generator, 3, n=(2, 7), d_in=(1, 6), d=(1, 8), d_v=(1, 5)))
    cases = []
    for s in sizes:
        n, d_in, d, d_v = s["n"], s["d_in"], s["d"], s["d_v"]
        shapes = [(n, d_in), (d_in, d), (d_in, d), (d_in, d_v)]  # X, W_q, W_k, W_v
        arrays = tuple(_randn(generator, *shape, dtype=torch.float64).numpy() for shape in shapes)
        note = " (a single token)" if n == 1 else ""
        cases.append((f"X {shapes[0]}, W_q and W_k {shapes[1]}, W_v {shapes[3]}{note}", arrays))

    def reference(X, W_q, W_k, W_v):
        layer = DotProductAttention()
        Q, K, V = (torch.from_numpy(X @ W)[None] for W in (W_q, W_k, W_v))  # (1, n, ·)
        Z = layer(Q, K, V)[0]
        return Z.numpy(), layer.attention_weights[0].numpy()

    run_check("self_attention", fn, cases, reference,
              hint="Q, K, V = X @ W_q, X @ W_k, X @ W_v; divide Q @ K.T by sqrt(d), d being the "
                   "width of the queries (W_q.shape[1], not X's); take the softmax of each row "
                   "(axis=1); return (Z, A) in that order.")


def check_max_weights(fn: Callable, seed: int = 0) -> None:
    """fn(Q, K, c) -> (n,) NumPy array: for each query (row of Q (n, d)), its largest attention
    weight in softmax(c Q K^T / sqrt(d)), the keys K being (m, d)."""
    from .attention import masked_softmax

    generator = _generator(seed)
    fixed = [("c = 0", 4, 4, 2, 0.0), ("a single key", 3, 1, 2, 1.0),
             ("a single query", 1, 5, 3, 2.0), ("c = 10", 4, 6, 2, 10.0)]
    factors = (4 * torch.rand(3, generator=generator)).tolist()
    random = [(f"c = {c:.2f}", s["n"], s["m"], s["d"], c)
              for s, c in zip(_sizes(generator, 3, n=(1, 6), m=(1, 6), d=(1, 5)), factors)]
    cases = []
    for what, n, m, d, c in fixed + random:
        Q, K = (_randn(generator, rows, d, dtype=torch.float64).numpy() for rows in (n, m))
        cases.append((f"{what}, Q {(n, d)}, K {(m, d)}", (Q, K, c)))

    def reference(Q, K, c):
        scores = torch.from_numpy(c * Q @ K.T / math.sqrt(Q.shape[1]))[None]  # (1, n, m)
        return masked_softmax(scores)[0].max(dim=1).values.numpy()

    run_check("max_weights", fn, cases, reference,
              hint="multiply the scores Q @ K.T / sqrt(d) by c before the softmax, take the "
                   "softmax of each row, then the largest weight of each row (one per query).")


# ---------------------------------------------------------------------------------------------
# Notebook 02: Nadaraya-Watson attention pooling


def _regression_data(generator, n: int, dtype=torch.float32):
    """Sorted inputs in [0, 5) and random outputs, both of shape (n,)."""
    return (5 * torch.rand(n, generator=generator, dtype=dtype)).sort().values, \
        _randn(generator, n, dtype=dtype)


def check_laplace_pooling(fn: Callable, seed: int = 0) -> None:
    """fn(queries (n_q,), keys (n_k,), values (n_k,), width) -> predictions (n_q,), with weights
    proportional to exp(-|query - key| / width), normalised over the keys."""
    generator = _generator(seed)
    fixed = [("", 5, 7, 1.0, torch.float32), ("a single query", 1, 3, 0.1, torch.float32),
             ("a single key", 4, 1, 2.0, torch.float32), ("no queries", 0, 3, 1.0, torch.float32),
             ("float64", 6, 5, 0.5, torch.float64)]
    widths = (0.2 + 2 * torch.rand(2, generator=generator)).tolist()
    random = [("", s["n_q"], s["n_k"], w, torch.float32)
              for s, w in zip(_sizes(generator, 2, n_q=(1, 8), n_k=(1, 8)), widths)]
    cases = []
    for what, n_q, n_k, width, dtype in fixed + random:
        queries = 5 * torch.rand(n_q, generator=generator, dtype=dtype)
        keys, values = _regression_data(generator, n_k, dtype)
        cases.append((_label(what, f"{n_q} queries, {n_k} keys, width {width:.2f}"),
                      (queries, keys, values, width)))

    def reference(queries, keys, values, width):
        # (n_q, 1) - (1, n_k) -> (n_q, n_k): softmax over the keys is exp(-|.|/w) normalised
        return torch.softmax(-(queries[:, None] - keys[None, :]).abs() / width, dim=1) @ values

    run_check("laplace_pooling", fn, cases, reference,
              hint="distances queries[:, None] - keys[None, :] have shape (n_q, n_k); the weights "
                   "are exp(-|distance| / width) (absolute value, not squared), normalised so "
                   "that each query's weights (each row) sum to 1.")


def check_loo_error(fn: Callable, seed: int = 0) -> None:
    """fn(x (n,), y (n,), width) -> the mean squared leave-one-out error (a number) of Gaussian
    kernel regression: each y_i predicted from the other points with weights
    softmax over j != i of -((x_i - x_j) / width)^2 / 2."""
    generator = _generator(seed)
    fixed = [("two points, each predicted by the other", 2, 1.0, torch.float32),
             ("", 5, 1.0, torch.float32), ("a narrow kernel", 20, 0.2, torch.float32),
             ("a wide kernel, float64", 12, 3.0, torch.float64)]
    widths = (0.2 + 2 * torch.rand(2, generator=generator)).tolist()
    random = [("", s["n"], w, torch.float32)
              for s, w in zip(_sizes(generator, 2, n=(3, 30)), widths)]
    cases = []
    for what, n, width, dtype in fixed + random:
        x, y = _regression_data(generator, n, dtype)
        cases.append((_label(what, f"{n} points, width {width:.2f}"), (x, y, width)))

    def reference(x, y, width):
        scores = -((x[:, None] - x[None, :]) / width) ** 2 / 2  # (n, n): query i, key j
        scores = scores.masked_fill(torch.eye(len(x), dtype=torch.bool), -math.inf)  # j != i
        return ((torch.softmax(scores, dim=1) @ y - y) ** 2).mean()

    run_check("loo_error", fn, cases, reference,
              hint="query i must not be among its own keys (mask the diagonal, or use keys_loo's "
                   "trick); the kernel is -((x_i - x_j) / width)^2 / 2 before the softmax; the "
                   "error is the mean over the n points of (prediction - y_i)^2.")


# ---------------------------------------------------------------------------------------------
# Notebook 03: attention scoring functions


def check_multiplicative_scores(fn: Callable, seed: int = 0) -> None:
    """fn(queries (B, T_q, q_size), keys (B, T_k, k_size), W (q_size, k_size)) -> scores
    (B, T_q, T_k) with score[b, i, j] = queries[b, i] @ W @ keys[b, j]."""
    generator = _generator(seed)
    fixed = [(dict(B=2, T_q=3, T_k=4, q_size=5, k_size=6), torch.float32, ""),
             (dict(B=1, T_q=1, T_k=7, q_size=3, k_size=3), torch.float32, "a single query"),
             (dict(B=3, T_q=2, T_k=1, q_size=4, k_size=2), torch.float32, "a single key"),
             (dict(B=2, T_q=2, T_k=3, q_size=2, k_size=5), torch.float64, "float64")]
    random = [(s, torch.float32, "") for s in
              _sizes(generator, 2, B=(1, 3), T_q=(1, 5), T_k=(1, 5), q_size=(1, 6), k_size=(1, 6))]
    cases = []
    for s, dtype, what in fixed + random:
        args = (_randn(generator, s["B"], s["T_q"], s["q_size"], dtype=dtype),
                _randn(generator, s["B"], s["T_k"], s["k_size"], dtype=dtype),
                _randn(generator, s["q_size"], s["k_size"], dtype=dtype))
        shapes = ", ".join(f"{name} {tuple(a.shape)}"
                           for name, a in zip(("queries", "keys", "W"), args))
        cases.append((_label(what, shapes), args))
    run_check("multiplicative_scores", fn, cases,
              reference=lambda queries, keys, W: torch.einsum("bip,pq,bjq->bij", queries, W, keys),
              hint="score [b, i, j] is queries[b, i] @ W @ keys[b, j]; batched products (@) with "
                   "keys.transpose(1, 2) compute all of them at once, shape (B, T_q, T_k). W is "
                   "(q_size, k_size): it goes between the queries and the keys, untransposed.")


def check_causal_lens(fn: Callable, seed: int = 0) -> None:
    """fn(batch_size, num_queries) -> valid lengths (B, T_q) under which d2lh.masked_softmax lets
    query i see keys 0 .. i only. Compared through the weights masked_softmax gives equal scores."""
    from .attention import masked_softmax

    generator = _generator(seed)
    sizes = [(2, 5), (1, 1), (3, 4)]
    sizes += [(s["B"], s["T"]) for s in _sizes(generator, 2, B=(1, 4), T=(1, 9))]
    cases = [(f"B={B}, T_q={T}" + (" (a single query)" if T == 1 else ""), (B, T))
             for B, T in sizes]

    def weights(B, T):  # what d2lh.masked_softmax makes of the learner's lengths, equal scores
        return masked_softmax(torch.zeros(B, T, T), fn(B, T))

    def reference(B, T):
        allowed = torch.tril(torch.ones(T, T))  # query i sees keys 0..i
        return (allowed / allowed.sum(-1, keepdim=True)).expand(B, T, T)  # uniform over those

    run_check("causal_lens (through d2lh.masked_softmax)", weights, cases, reference,
              hint="query i sees keys 0..i, so its valid length is i + 1: lengths 1, 2, ..., T_q "
                   "for every sequence, shape (B, T_q).")


# ---------------------------------------------------------------------------------------------
# Notebook 04: multi-head attention


def _multihead_cases(generator, fixed: list[tuple[str, dict, str | None]], count: int,
                     bias: bool = False, masks: bool = True) -> list[tuple[str, tuple]]:
    """(description, (mha, queries, keys, valid_lens)) cases for a random d2lh.MultiHeadAttention.

    fixed: (what, sizes, lengths) with sizes d_model, h, B, T_q, T_k and lengths None, "per
    sequence", "per query" or "zero" (sequence 0 has no valid key); ``count`` random ones follow
    (without lengths unless ``masks``).
    """
    from .attention import MultiHeadAttention

    kinds = (None, "per sequence", "per query") if masks else (None,)
    fixed = list(fixed)
    for s in _sizes(generator, count, d_k=(1, 4), h=(1, 4), B=(1, 3), T_q=(1, 5), T_k=(1, 5)):
        d_model = s.pop("d_k") * s["h"]
        kind = kinds[int(_randint(generator, 0, len(kinds) - 1))]
        fixed.append(("", {"d_model": d_model, **s}, kind))
    cases = []
    for what, s, lengths in fixed:
        with torch.random.fork_rng(devices=[]):  # the constructor draws from the global stream
            mha = _random_module(MultiHeadAttention(s["d_model"], s["h"], bias=bias), generator)
        queries = _randn(generator, s["B"], s["T_q"], s["d_model"])
        keys = _randn(generator, s["B"], s["T_k"], s["d_model"])
        valid_lens = None if lengths is None else _random_lengths(
            generator, s, per_query=lengths == "per query", zero=lengths == "zero")
        mask = {None: "no valid_lens", "per sequence": "valid_lens (B,)",
                "per query": "valid_lens (B, T_q)",
                "zero": "a sequence with valid length 0"}[lengths]
        cases.append((_label(what, f"{_size_text(s)}, {mask}"), (mha, queries, keys, valid_lens)))
    return cases


def check_per_head_weights(fn: Callable, seed: int = 0) -> None:
    """fn(mha, queries (B, T_q, d_model), keys (B, T_k, d_model), valid_lens) -> the attention
    weights (B, h, T_q, T_k) of every head of the d2lh.MultiHeadAttention ``mha``, computed from
    its W_q and W_k without calling it. valid_lens: None, (B,) or (B, T_q)."""
    generator = _generator(seed)
    fixed = [("", dict(d_model=8, h=2, B=2, T_q=3, T_k=4), None),
             ("", dict(d_model=12, h=3, B=2, T_q=4, T_k=5), "per sequence"),
             ("a single query", dict(d_model=8, h=4, B=3, T_q=1, T_k=6), "per sequence"),
             ("", dict(d_model=6, h=2, B=2, T_q=4, T_k=4), "per query"),
             ("", dict(d_model=8, h=2, B=2, T_q=2, T_k=3), "zero")]
    cases = _multihead_cases(generator, fixed, count=2)

    def reference(mha, queries, keys, valid_lens):
        with torch.no_grad():
            mha(queries, keys, keys, valid_lens)  # the weights do not depend on the values
        return mha.attention_weights

    run_check("per_head_weights", fn, cases, reference,
              hint="project with mha.W_q and mha.W_k, split the features into h heads of width "
                   "d_k = d_model / h (reshape to (B, T, h, d_k), then move the head axis next to "
                   "the batch), divide the scores by sqrt(d_k) (not sqrt(d_model)), give every "
                   "head of sequence b the lengths of b, and use d2lh.masked_softmax, which keeps "
                   "a row with no valid key at zero.")


def check_to_torch_multihead(fn: Callable, seed: int = 0) -> None:
    """fn(mha) -> a torch.nn.MultiheadAttention (batch_first) computing the same function as the
    d2lh.MultiHeadAttention ``mha``, biases included when ``mha`` has them."""
    generator = _generator(seed)
    fixed = [("", dict(d_model=8, h=2, B=2, T_q=3, T_k=4), None),
             ("a single head", dict(d_model=6, h=1, B=3, T_q=2, T_k=5), None),
             ("a single key", dict(d_model=12, h=3, B=1, T_q=4, T_k=1), None)]
    cases = []
    for bias in (True, False):
        for what, args in _multihead_cases(generator, fixed, 1, bias, masks=False):
            mha, queries, keys, _ = args
            values = keys.flip(1)  # values that differ from the keys
            cases.append((f"bias={bias}, {what}", (mha, queries, keys, values)))

    def outputs(mha, queries, keys, values):
        layer = fn(mha)
        if not isinstance(layer, torch.nn.MultiheadAttention):
            raise TypeError(f"expected a torch.nn.MultiheadAttention, got {type(layer).__name__}")
        with torch.no_grad():
            return layer.eval()(queries, keys, values, need_weights=False)[0]

    def reference(mha, queries, keys, values):
        with torch.no_grad():
            return mha(queries, keys, values)

    run_check("to_torch_multihead", outputs, cases, reference,
              hint="nn.MultiheadAttention(d_model, h, bias=..., batch_first=True); copy "
                   "torch.cat([W_q, W_k, W_v] weights) into in_proj_weight (in that order), "
                   "W_o's weight into out_proj.weight, and when mha has biases, the three biases "
                   "into in_proj_bias and W_o's into out_proj.bias.")


# ---------------------------------------------------------------------------------------------
# Notebook 05: self-attention and positional encoding


def check_sinusoidal_table(fn: Callable, seed: int = 0) -> None:
    """fn(max_len, d) -> the sinusoidal table P (max_len, d), for any width d (odd included):
    P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(i / 10000^(2j/d))."""
    from .positional import PositionalEncoding

    generator = _generator(seed)
    fixed = [("the notebook's sizes", 60, 32), ("a single position", 1, 4),
             ("an odd width", 10, 7), ("d = 1", 5, 1), ("one column pair", 3, 2)]
    random = [("", s["max_len"], s["d"]) for s in _sizes(generator, 2, max_len=(1, 80), d=(1, 40))]
    cases = [(_label(what, f"max_len={max_len}, d={d}"), (max_len, d))
             for what, max_len, d in fixed + random]
    run_check("sinusoidal_table", fn, cases,
              reference=lambda max_len, d: PositionalEncoding(d, max_len=max_len).P[0],
              hint="column 2j holds sin(i * omega_j) and column 2j+1 cos(i * omega_j), with "
                   "omega_j = 1 / 10000^(2j / d): the exponent uses 2j, the column index of the "
                   "sine. Interleave them (P[:, 0::2], P[:, 1::2]); with an odd d the last sine "
                   "has no cosine partner.")


def _shift_matrix(delta: int, d: int) -> torch.Tensor:
    """M_delta (d, d), float64: block j rotates by delta * omega_j, so that p_{i+delta} = M p_i."""
    omega = 1 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    cos, sin = torch.cos(delta * omega), torch.sin(delta * omega)
    rows = (torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1))  # (d/2, 2) each
    blocks = torch.stack(rows, -2)  # (d/2, 2, 2): row 0 of block j, then row 1
    return torch.block_diag(*blocks)


def check_shift_matrix(fn: Callable, seed: int = 0) -> None:
    """fn(delta, d) -> M_delta (d, d) for an even width d: the block-diagonal matrix of the 2x2
    rotations by delta * omega_j that maps every row p_i of the sinusoidal table to p_{i+delta}."""
    generator = _generator(seed)
    fixed = [("", 1, 4), ("delta = 0: the identity", 0, 6), ("a negative offset", -3, 8),
             ("the notebook's width", 25, 32), ("one column pair", 2, 2)]
    random = [("", s["delta"], 2 * s["half_d"])
              for s in _sizes(generator, 2, delta=(-20, 20), half_d=(1, 12))]
    cases = [(_label(what, f"delta={delta}, d={d}"), (delta, d))
             for what, delta, d in fixed + random]
    # float32 reference: a float32 answer is as right as a float64 one
    run_check("shift_matrix", fn, cases, reference=lambda delta, d: _shift_matrix(delta, d).float(),
              hint="block j is [[cos(delta w_j), sin(delta w_j)], [-sin(delta w_j), "
                   "cos(delta w_j)]] with w_j = 1 / 10000^(2j / d), placed on the diagonal "
                   "(torch.block_diag); "
                   "check that M @ p_i equals p_(i+delta) on the table of section 3.")


# ---------------------------------------------------------------------------------------------
# Notebook 06: the Transformer


def check_layer_norm(fn: Callable, seed: int = 0) -> None:
    """fn(X, eps=1e-5) -> X normalised over its last axis (each token's vector, of width d_model):
    (X - mean) / sqrt(var + eps), with the biased variance (dividing by d_model) and no learned
    scale or shift. X has any shape (..., d_model); the result has X's shape and dtype."""
    generator = _generator(seed)
    fixed = [("the worked example [[1, 2], [2, 3]]", torch.tensor([[1.0, 2.0], [2.0, 3.0]]), 1e-5),
             ("a constant row and a nearly constant one (eps matters)",
              torch.tensor([[4.0, 4.0, 4.0], [0.001, 0.0, -0.001]]), 1e-5),
             ("a large eps", _randn(generator, 3, 4), 1.0),
             ("3-D input (B, T, d_model)", _randn(generator, 2, 3, 5), 1e-5),
             ("float64", _randn(generator, 4, 6, dtype=torch.float64), 1e-5)]
    random = []
    for s in _sizes(generator, 2, B=(1, 3), T=(1, 5), d_model=(2, 16)):
        X = 3 * _randn(generator, s["B"], s["T"], s["d_model"]) + 2  # not already centred
        random.append(("", X, 1e-5))
    cases = [(_label(what, f"X {tuple(X.shape)}, eps={eps:g}"), (X, eps))
             for what, X, eps in fixed + random]
    run_check("layer_norm", fn, cases,
              reference=lambda X, eps: torch.nn.functional.layer_norm(X, X.shape[-1:], eps=eps),
              hint="take the mean and the variance over the last axis (dim=-1, keepdim=True), the "
                   "variance biased (unbiased=False: divide by d_model, not d_model - 1); return "
                   "(X - mean) / sqrt(var + eps), eps inside the square root.")


def check_causal_additive_mask(fn: Callable, seed: int = 0) -> None:
    """fn(T) -> the additive causal mask M (T, T), float: 0 on and below the diagonal, -inf above
    it, so that softmax(Q K^T / sqrt(d) + M) lets query i see keys 0 .. i only."""
    generator = _generator(seed)
    sizes = [("a single position", 1), ("", 2), ("", 5)]
    sizes += [("", s["T"]) for s in _sizes(generator, 2, T=(3, 12))]
    cases = [(_label(what, f"T={T}"), (T,)) for what, T in sizes]

    def mask(T):  # the learner's mask as a float tensor: -inf must stay -inf, 0 stay 0
        M = fn(T)
        if not isinstance(M, torch.Tensor) or not M.is_floating_point():
            raise TypeError("expected a float tensor of 0 and -inf, got "
                            + (f"dtype {M.dtype}" if isinstance(M, torch.Tensor)
                               else type(M).__name__))
        return M

    run_check("causal_additive_mask", mask, cases,
              reference=lambda T: torch.nn.Transformer.generate_square_subsequent_mask(T),
              hint="M[i, j] = -inf when key j is in the future of query i (j > i), 0 otherwise "
                   "(the diagonal included: a position sees itself); e.g. "
                   "torch.full((T, T), float('-inf')).triu(diagonal=1). A float mask, not a "
                   "boolean one: it is added to the scores.")


# ---------------------------------------------------------------------------------------------
# Notebook 07: the Transformer in practice


def _real_token_smoothing(logits, targets, valid_lens, eps, real_tokens):
    """The reference: label smoothing that spreads eps over the real tokens only."""
    T = logits.shape[1]
    valid = torch.arange(T)[None, :] < valid_lens[:, None]  # (B, T)
    log_p = torch.log_softmax(logits[valid], dim=-1)  # (N_valid, V): padding never enters
    nll = -log_p.gather(1, targets[valid][:, None]).squeeze(1)  # (N_valid,)
    uniform = -log_p[:, real_tokens].mean(dim=-1)  # (N_valid,): -(1/|real|) sum over real tokens
    return ((1 - eps) * nll + eps * uniform).mean()


def check_real_token_smoothing(fn: Callable, seed: int = 0) -> None:
    """fn(logits, targets, valid_lens, eps, real_tokens) -> the label-smoothed cross-entropy whose
    uniform part covers the real tokens only: the target distribution at a position is
    (1 - eps) on the target plus eps / R on each of the R tokens where ``real_tokens`` (V,) is
    True, 0 on the others (<pad>, <bos>). logits (B, T, V), targets (B, T), valid_lens (B,);
    returns the mean over the valid positions, a scalar."""
    generator = _generator(seed)

    def case(B, T, V, eps, num_special=2, valid_lens=None):
        logits = _randn(generator, B, T, V)
        real = torch.ones(V, dtype=torch.bool)
        real[:num_special] = False  # tokens 0 .. num_special - 1 play <pad>, <bos>
        targets = _randint(generator, num_special, V - 1, (B, T))  # valid targets are real tokens
        if valid_lens is None:
            valid_lens = _randint(generator, 1, T, (B,))
            valid_lens[0] = T
        targets[torch.arange(T)[None, :] >= valid_lens[:, None]] = 0  # <pad> in the padding
        return logits, targets, valid_lens, eps, real

    fixed = []
    logits, targets, valid_lens, _, real = case(3, 5, 9, 0.1, valid_lens=torch.tensor([5, 3, 4]))
    fixed.append(("every token real (the notebook's smoothing)",
                  (logits, targets, valid_lens, 0.1, torch.ones(9, dtype=torch.bool))))
    fixed.append(("eps = 0 (plain cross-entropy)", (logits, targets, valid_lens, 0.0, real)))
    fixed.append(("<pad> and <bos> not real", (logits, targets, valid_lens, 0.1, real)))
    confident = torch.zeros(1, 1, 9)
    confident[0, 0, 4] = 200.0  # softmax underflows to 0 on every other token
    fixed.append(("a logit 200 above the others",
                  (confident, torch.tensor([[4]]), torch.tensor([1]), 0.1, real)))
    never = logits.clone()
    never[..., ~real] = float("-inf")  # a model that can never output <pad> or <bos>
    fixed.append(("the logits of <pad> and <bos> are -inf", (never, targets, valid_lens, 0.1, real)))
    garbage = logits.clone()
    garbage[1, 3:] = float("nan")  # padding positions holding garbage
    fixed.append(("NaN logits in the padding", (garbage, targets, valid_lens, 0.1, real)))
    random = [("", case(s["B"], s["T"], s["V"], 0.2, num_special=3))
              for s in _sizes(generator, 2, B=(1, 4), T=(2, 7), V=(5, 20))]
    cases = [(_label(what, f"logits {tuple(args[0].shape)}, valid_lens {args[2].tolist()}, "
                           f"eps={args[3]:g}, {int(args[4].sum())} real tokens of {len(args[4])}"), args)
             for what, args in fixed + random]
    run_check("real_token_smoothing", fn, cases, reference=_real_token_smoothing,
              hint="log_p = torch.log_softmax(logits, dim=-1) (never log(softmax): it underflows to "
                   "-inf); the uniform part is the mean of -log_p over the real tokens only "
                   "(log_p[..., real_tokens].mean(-1): divide by their number, not by V), so the "
                   "-inf of a token that is not real never enters; keep the valid positions by "
                   "selecting them (torch.where or indexing), never by multiplying with a 0/1 mask, "
                   "since 0 * NaN is NaN.")


def check_expand_beams(fn: Callable, seed: int = 0) -> None:
    """fn(beam_log_probs, next_log_probs) -> (log_probs, parents, tokens), each (B, k): for every
    sentence, the k best of its k * V continuations (beam j extended by token v, with total
    log-probability beam_log_probs[b, j] + next_log_probs[b, j, v]), best first; parents[b, i]
    is the beam j that candidate i extends and tokens[b, i] the token v.
    beam_log_probs (B, k) (-inf for a beam not yet started), next_log_probs (B, k, V)."""
    generator = _generator(seed)

    def next_log_probs(B, k, V):
        return torch.log_softmax(2 * _randn(generator, B, k, V), dim=-1)

    fixed = []
    fixed.append(("k = 1 (greedy decoding)", (_randn(generator, 2, 1).abs().neg(),
                                              next_log_probs(2, 1, 6))))
    first = torch.full((2, 3), float("-inf"))
    first[:, 0] = 0.0  # only beam 0 is live: the first step of a search
    fixed.append(("the first step: beams 1 and 2 not started (-inf)", (first, next_log_probs(2, 3, 7))))
    one_parent = next_log_probs(1, 3, 5)
    fixed.append(("one beam far ahead: all survivors extend it",
                  (torch.tensor([[-0.5, -9.0, -10.0]]), one_parent)))
    behind = next_log_probs(1, 2, 6)
    behind[0, 0] = torch.log_softmax(0.01 * torch.arange(6.0), dim=-1)  # beam 0: none stands out
    behind[0, 1, 3] = -0.01  # beam 1: one almost certain token
    fixed.append(("a beam behind with one sure token overtakes", (torch.tensor([[-1.0, -1.5]]), behind)))
    random = []
    for s in _sizes(generator, 2, B=(2, 4), k=(2, 5), V=(5, 12)):
        beams = -_randn(generator, s["B"], s["k"]).abs() * 3
        random.append(("", (beams, next_log_probs(s["B"], s["k"], s["V"]))))
    cases = [(_label(what, f"B={args[1].shape[0]}, k={args[1].shape[1]}, V={args[1].shape[2]}"), args)
             for what, args in fixed + random]
    from .training import _top_k_candidates  # the step of d2lh.beam_search

    run_check("expand_beams", fn, cases,
              reference=lambda beams, next_log_probs: _top_k_candidates(beams[..., None]
                                                                        + next_log_probs),
              hint="add each beam's log-probability to its next-token log-probabilities, "
                   "(B, k, 1) + (B, k, V); flatten each sentence's candidates to (B, k * V) and take "
                   "topk(k, dim=-1) (largest first); candidate index c is beam c // V extended by "
                   "token c % V.")


# ---------------------------------------------------------------------------------------------
# Student copies

_REGION = re.compile(r"^([ \t]*)### BEGIN SOLUTION[^\n]*\n.*?^[ \t]*### END SOLUTION[^\n]*$",
                     re.MULTILINE | re.DOTALL)
_HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?",
                     re.MULTILINE | re.DOTALL)


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def student_source(source: str, cell_type: str = "code") -> str:
    """A cell's source with each solution replaced by a stub and hidden tests removed.

    In a code cell the stub raises NotImplementedError, indented like the solution it replaces; in
    a markdown cell (a model answer to a question) it is the line "YOUR ANSWER HERE", as in nbgrader.
    """
    for marker, name in ((BEGIN_SOLUTION, END_SOLUTION), (BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS)):
        if source.count(marker) != source.count(name):
            raise ValueError(f"unbalanced markers: {source.count(marker)} {marker!r} but "
                             f"{source.count(name)} {name!r} in cell:\n{source}")
    stub = STUB if cell_type == "code" else ANSWER_STUB
    source = _REGION.sub(lambda m: "\n".join(m.group(1) + line for line in stub.splitlines()), source)
    return _HIDDEN.sub("", source).rstrip("\n")


def student_notebook(notebook: dict, keep_solutions: bool = False) -> dict:
    """A copy of a notebook (nbformat JSON as a dict) for students: outputs and execution counts
    cleared, and unless ``keep_solutions`` (an answer key), solutions (code, and model answers in
    markdown) stubbed and hidden tests removed."""
    notebook = copy.deepcopy(notebook)
    for cell in notebook["cells"]:
        if not keep_solutions and cell["cell_type"] in ("code", "markdown"):
            cell["source"] = student_source(_source(cell), cell["cell_type"])
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return notebook


def write_copies(paths: Sequence[Path], out_dir: Path, answer_key_dir: Path | None = None) -> list[Path]:
    """Write a student copy (and optionally an answer key) of each notebook; return the paths."""
    written = []
    for path in map(Path, paths):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        if not any(BEGIN_SOLUTION in _source(c) for c in notebook["cells"] if c["cell_type"] == "code"):
            raise ValueError(f"{path} has no exercise solution ({BEGIN_SOLUTION!r}) to remove")
        targets = [(out_dir, False)] + ([(answer_key_dir, True)] if answer_key_dir else [])
        for directory, keep in targets:
            directory.mkdir(parents=True, exist_ok=True)
            target = directory / path.name
            target.write_text(json.dumps(student_notebook(notebook, keep), indent=1,
                                         ensure_ascii=False) + "\n", encoding="utf-8")
            written.append(target)
    return written


# ---------------------------------------------------------------------------------------------
# nbgrader cell metadata, derived from the markers (schema version 3, that of nbgrader 0.9)

NBGRADER_SCHEMA_VERSION = 3
_CHECK_CALL = re.compile(r"\bexercises\.(check_\w+)\(")
_DEFINITION = re.compile(r"^(?:def|class)\s+(\w+)", re.MULTILINE)


def nbgrader_role(cell: dict) -> tuple[str, str] | None:
    """The nbgrader role of a cell and the name its grade id is made from, or None.

    ("solution", name): a code cell with a solution region, named after the function it defines
    ("autograded answer"). ("check", name): a code cell that calls ``d2lh.exercises.check_...`` or
    holds hidden tests, named after the check ("autograder tests"). ("answer", ""): a markdown
    cell with a model answer between the solution markers ("manually graded answer"; nbgrader
    requires markdown solution cells to be graded).
    """
    source = _source(cell)
    has_solution, has_hidden = BEGIN_SOLUTION in source, BEGIN_HIDDEN_TESTS in source
    if cell["cell_type"] == "markdown":
        if has_hidden:
            raise ValueError(f"hidden tests belong in a code cell, found in markdown:\n{source}")
        return ("answer", "") if has_solution else None
    if cell["cell_type"] != "code":
        return None
    check = _CHECK_CALL.search(source)
    if has_solution and (check or has_hidden):
        raise ValueError(f"a cell holds both a solution and a check; split it:\n{source}")
    if has_solution:
        definition = _DEFINITION.search(source)
        return ("solution", definition.group(1) if definition else "")
    if check or has_hidden:
        return ("check", check.group(1) if check else "")
    return None


def with_nbgrader_metadata(notebook: dict, points: float = 1) -> dict:
    """A copy of ``notebook`` whose exercise cells carry nbgrader's cell metadata, derived from
    the markers and check calls (see :func:`nbgrader_role`); other cells lose any stale
    ``nbgrader`` entry. Grade ids come from the functions' and checks' names (answers are
    numbered: answer_1, answer_2, ...); graded cells are worth ``points`` each. Raises ValueError
    if two cells would share a grade id."""
    notebook = copy.deepcopy(notebook)
    seen: dict[str, int] = {}
    counters = {"solution": 0, "check": 0, "answer": 0}
    for index, cell in enumerate(notebook["cells"]):
        role = nbgrader_role(cell)
        if role is None:
            cell.get("metadata", {}).pop("nbgrader", None)
            continue
        kind, name = role
        counters[kind] += 1
        grade_id = name or f"{kind}_{counters[kind]}"
        if grade_id in seen:
            raise ValueError(f"two exercise cells (indices {seen[grade_id]} and {index}) would "
                             f"share the nbgrader grade_id {grade_id!r}: rename one")
        seen[grade_id] = index
        meta = {"grade": kind != "solution", "grade_id": grade_id, "locked": kind == "check",
                "schema_version": NBGRADER_SCHEMA_VERSION, "solution": kind != "check"}
        if meta["grade"]:
            meta["points"] = points
        cell.setdefault("metadata", {})["nbgrader"] = meta
    return notebook


def apply_nbgrader_metadata(paths: Sequence[Path]) -> list[tuple[Path, bool]]:
    """Write nbgrader metadata into source notebooks in place (with nbformat, so the files keep
    their layout); return (path, changed) pairs."""
    import nbformat  # installed wherever notebooks run; only this command needs it

    results = []
    for path in map(Path, paths):
        notebook = nbformat.read(path, as_version=4)
        updated = nbformat.from_dict(with_nbgrader_metadata(notebook))
        changed = updated != notebook
        if changed:
            nbformat.write(updated, path)
        results.append((path, changed))
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m d2lhelpers.exercises",
        description="Write student copies of notebooks: solutions replaced by a stub that raises "
                    "NotImplementedError, hidden tests removed, outputs cleared. With "
                    "--nbgrader-metadata, write nbgrader's cell metadata into the notebooks "
                    "instead.")
    parser.add_argument("notebooks", nargs="+", type=Path, help="source notebooks")
    parser.add_argument("--out", type=Path, default=Path("student"), help="folder for the copies")
    parser.add_argument("--answer-key", type=Path, default=None,
                        help="also write copies that keep the solutions (outputs cleared) here")
    parser.add_argument("--nbgrader-metadata", action="store_true",
                        help="derive nbgrader cell metadata from the markers and write it into "
                             "the given notebooks in place (no copies are written)")
    args = parser.parse_args(argv)
    if args.nbgrader_metadata:
        for path, changed in apply_nbgrader_metadata(args.notebooks):
            print(f"{'updated' if changed else 'unchanged'} {path}")
        return 0
    for path in write_copies(args.notebooks, args.out, args.answer_key):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
