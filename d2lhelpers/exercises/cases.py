"""Inputs for the checks, and what several checks share to build them or to feed them to the
learner's code. A check module says only what is specific to its exercises.

Every check takes ``seed``: fixed edge cases come first, then random sizes, all drawn from one
generator seeded with it (the global random state is untouched, also by the constructors of
modules). The order of the draws is part of a check's behaviour: the same seed must keep giving
the same inputs, so a helper here draws exactly what its callers drew before it existed.

Sections: random draws; descriptions of cases; valid lengths (masks); modules with seeded
weights, and the learner's module given them; sequences fed in chunks through a cached step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from ..attention import KVCache, causal_valid_lens
from .runner import N_, _

__all__ = ["seeded_generator", "randn", "randint", "random_floats", "random_choice",
           "random_sizes", "random_head_sizes", "size_text", "case_label", "labelled",
           "random_lengths", "MASK_KINDS", "valid_lens_case", "seeded_module",
           "load_linear_weights", "feed_in_chunks", "mask_inverted"]


# Random draws ----------------------------------------------------------------------------------

def seeded_generator(seed: int) -> torch.Generator:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    return torch.Generator().manual_seed(seed)


def randn(generator, *shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=dtype)


def randint(generator, low: int, high: int, shape=()) -> torch.Tensor:
    """Integers drawn uniformly from low .. high (inclusive)."""
    return torch.randint(low, high + 1, shape, generator=generator)


def random_floats(generator, count: int, low: float = 0.0, scale: float = 1.0) -> list[float]:
    """``count`` numbers drawn uniformly from [low, low + scale) (a width, a factor, a top_p)."""
    return (low + scale * torch.rand(count, generator=generator)).tolist()


def random_choice(generator, options: Sequence):
    """One of ``options``, drawn uniformly (a draw is made even when there is one option)."""
    return options[int(randint(generator, 0, len(options) - 1))]


def random_sizes(generator, count: int, **ranges) -> list[dict]:
    """``count`` dicts of sizes, each drawn uniformly from its inclusive (low, high) range."""
    return [{name: int(randint(generator, low, high)) for name, (low, high) in ranges.items()}
            for _ in range(count)]


def random_head_sizes(generator, count: int, d_k: tuple[int, int], h: tuple[int, int],
                      **ranges) -> list[dict]:
    """Sizes of multi-head attention: d_model = d_k * h (so that h divides it), first, then h and
    the ``ranges``, in their order."""
    return [{"d_model": s.pop("d_k") * s["h"], **s}
            for s in random_sizes(generator, count, d_k=d_k, h=h, **ranges)]


# Descriptions of cases -------------------------------------------------------------------------

def size_text(sizes: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in sizes.items())


def case_label(what: str, details: str) -> str:
    """A case's description: what is special about it (if anything), then its sizes."""
    return _("{what}, {details}").format(what=_(what), details=details) if what else details


def labelled(entries: Sequence[tuple[str, tuple]],
             details: Callable[..., str]) -> list[tuple[str, tuple]]:
    """Cases (description, args) from (what, args) pairs: ``what`` says what is special about a
    case ("" if nothing), ``details(*args)`` describes its inputs."""
    return [(case_label(what, details(*args)), args) for what, args in entries]


# Valid lengths ---------------------------------------------------------------------------------

def random_lengths(generator, B: int, T_k: int, T_q: int | None = None,
                   zero: bool = False) -> torch.Tensor:
    """Valid lengths in 1 .. T_k, one per sequence (B,) or, given T_q, one per query (B, T_q);
    with ``zero``, sequence 0 gets 0 (a row with no valid key)."""
    lengths = randint(generator, 1, T_k, (B,) if T_q is None else (B, T_q))
    if zero:
        lengths[0] = 0
    return lengths


MASK_KINDS = (None, "per sequence", "per query")  # the kinds a random case is given


def valid_lens_case(generator, kind: str | None, B: int, T_q: int,
                    T_k: int | None = None) -> tuple[torch.Tensor | None, str]:
    """valid_lens of a kind, and the words that describe it in a case's label.

    kind: None (no mask), "per sequence" (B,), "per query" (B, T_q), "zero" (per sequence,
    sequence 0 with no valid key) or, for self-attention, "causal" (query i sees keys 0 .. i).
    T_k None means self-attention: T_q = T_k = T, and the words say T.
    """
    self_attention = T_k is None
    if kind == "causal":
        return causal_valid_lens(B, T_q), "valid_lens (B, T) = 1..T"
    if kind is None:
        return None, _("no valid_lens")
    lengths = random_lengths(generator, B, T_q if self_attention else T_k,
                             T_q if kind == "per query" else None, zero=kind == "zero")
    words = {"per sequence": "valid_lens (B,)",
             "per query": "valid_lens (B, T)" if self_attention else "valid_lens (B, T_q)",
             "zero": N_("a sequence with valid length 0")}[kind]
    return lengths, _(words)


# Symptoms several checks share ---------------------------------------------------------------

def mask_inverted(weights, allowed) -> bool:
    """Whether weights (..., T_k) give no weight to the keys ``allowed`` marks valid (0, or NaN
    where a row has no padded key to go to) and sum to 1 over the padded keys of every row that
    has some: the mask inverted. (Without any padding, such a mask leaves no key at all.)"""
    padded = ~allowed.all(-1)
    on_valid = torch.where(allowed, weights, 0.0)
    on_padding = torch.where(allowed, 0.0, weights).sum(-1)
    return (bool(((on_valid.abs() < 1e-6) | on_valid.isnan()).all())
            and bool(((on_padding[padded] - 1).abs() < 1e-4).all()))


# Modules ---------------------------------------------------------------------------------------

def seeded_module(generator, cls: type, *args, **kwargs) -> nn.Module:
    """``cls(*args, **kwargs)`` in eval mode with seeded parameters of scale 1/sqrt(fan-in)
    (biases included). The constructor's own draws come from the global stream, forked here so
    that it stays as it was."""
    with torch.random.fork_rng(devices=[]):
        module = cls(*args, **kwargs)
    with torch.no_grad():
        for parameter in module.parameters():
            fan_in = parameter.shape[-1] if parameter.dim() > 1 else parameter.shape[0]
            parameter.copy_(randn(generator, *parameter.shape) / math.sqrt(fan_in))
    return module.eval()


def load_linear_weights(module: nn.Module, weights: dict[str, torch.Tensor],
                        note: str = "") -> None:
    """Copy each of ``weights`` (name -> weight) into the learner's ``module.<name>``, which must be
    an ``nn.Linear`` with a weight of that shape; otherwise raise a TypeError saying what the
    exercise asks for (``note`` adds to it, e.g. how a width is made), before anything is copied."""
    for name, weight in weights.items():
        layer, shape = getattr(module, name, None), tuple(weight.shape)
        if not isinstance(layer, nn.Linear) or tuple(layer.weight.shape) != shape:
            raise TypeError(_("the module needs {name} = nn.Linear with weight of shape {shape}"
                              "{note}, got {layer}").format(name=name, shape=shape, note=note,
                                                            layer=repr(layer)))
    with torch.no_grad():
        for name, weight in weights.items():
            getattr(module, name).weight.copy_(weight)


# Sequences fed in chunks -----------------------------------------------------------------------

def feed_in_chunks(step: Callable, X: torch.Tensor,
                   chunk_sizes: Sequence[int]) -> tuple[torch.Tensor, KVCache]:
    """Feed X (B, T, d_model) to ``step(x, cache)`` in consecutive chunks of the given sizes, with
    one KVCache, empty at first; return the outputs of all steps side by side (B, T, d_model), and
    the cache. A step that does not keep the cache right gives wrong outputs at the steps after
    it."""
    cache, outputs, start = KVCache(), [], 0
    for size in chunk_sizes:
        outputs.append(step(X[:, start:start + size], cache))  # (B, size, d_model)
        start += size
    return torch.cat(outputs, dim=1), cache
