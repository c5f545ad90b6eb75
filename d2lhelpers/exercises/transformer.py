"""The checks of notebook 06_transformer's coding exercises."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .cases import seeded_generator, randn, random_sizes, case_label
from .runner import run_check

__all__ = ['check_layer_norm', 'check_causal_additive_mask']


def check_layer_norm(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(X, eps=1e-5) -> X normalised over its last axis (each token's vector, of width d_model):
    (X - mean) / sqrt(var + eps), with the biased variance (dividing by d_model) and no learned
    scale or shift. X has any shape (..., d_model); the result has X's shape and dtype."""
    generator = seeded_generator(seed)
    fixed = [("the worked example [[1, 2], [2, 3]]", torch.tensor([[1.0, 2.0], [2.0, 3.0]]), 1e-5),
             ("a constant row and a nearly constant one (eps matters)",
              torch.tensor([[4.0, 4.0, 4.0], [0.001, 0.0, -0.001]]), 1e-5),
             ("a large eps", randn(generator, 3, 4), 1.0),
             ("3-D input (B, T, d_model)", randn(generator, 2, 3, 5), 1e-5),
             ("float64", randn(generator, 4, 6, dtype=torch.float64), 1e-5)]
    random = []
    for s in random_sizes(generator, 2, B=(1, 3), T=(1, 5), d_model=(2, 16)):
        X = 3 * randn(generator, s["B"], s["T"], s["d_model"]) + 2  # not already centred
        random.append(("", X, 1e-5))
    cases = [(case_label(what, f"X {tuple(X.shape)}, eps={eps:g}"), (X, eps))
             for what, X, eps in fixed + random]
    run_check("layer_norm", fn, cases,
              reference=lambda X, eps: torch.nn.functional.layer_norm(X, X.shape[-1:], eps=eps),
              hints=("Normalise each vector along its last axis. Which variance is it (divided by "
                     "d_model or by d_model - 1), and where does eps go?",
                     "take the mean and the variance over the last axis (dim=-1, keepdim=True), "
                     "the variance biased (unbiased=False: divide by d_model, not d_model - 1); "
                     "return (X - mean) / sqrt(var + eps), eps inside the square root."),
              hint=hint)


def check_causal_additive_mask(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(T) -> the additive causal mask M (T, T), float: 0 on and below the diagonal, -inf above
    it, so that softmax(Q K^T / sqrt(d) + M) lets query i see keys 0 .. i only."""
    generator = seeded_generator(seed)
    sizes = [("a single position", 1), ("", 2), ("", 5)]
    sizes += [("", s["T"]) for s in random_sizes(generator, 2, T=(3, 12))]
    cases = [(case_label(what, f"T={T}"), (T,)) for what, T in sizes]

    def as_float_mask(M, T):  # compared as it is: -inf must stay -inf, 0 stay 0
        if not isinstance(M, torch.Tensor) or not M.is_floating_point():
            raise TypeError("expected a float tensor of 0 and -inf, got "
                            + (f"dtype {M.dtype}" if isinstance(M, torch.Tensor)
                               else type(M).__name__))
        return M

    run_check("causal_additive_mask", fn, cases,
              reference=lambda T: torch.nn.Transformer.generate_square_subsequent_mask(T),
              compare_through=("added to the scores as a float mask", as_float_mask),
              hints=("The mask is added to the scores: what must be added where a key lies in the "
                     "future, and what elsewhere? Does a position see itself?",
                     "M[i, j] = -inf when key j is in the future of query i (j > i), 0 otherwise "
                     "(the diagonal included: a position sees itself); e.g. torch.full((T, T), "
                     "float('-inf')).triu(diagonal=1). A float mask, not a boolean one: it is "
                     "added to the scores."),
              hint=hint)
