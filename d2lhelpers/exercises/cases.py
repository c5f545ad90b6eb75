"""Inputs for the checks. Every check takes ``seed``: fixed edge cases come first, then random
sizes drawn from a generator seeded with it (the global random state is untouched)."""

from __future__ import annotations

import math

import torch

__all__ = ["seeded_generator", "randn", "randint", "random_sizes", "size_text", "case_label",
           "random_module", "random_lengths"]


def seeded_generator(seed: int) -> torch.Generator:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    return torch.Generator().manual_seed(seed)


def randn(generator, *shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=dtype)


def randint(generator, low: int, high: int, shape=()) -> torch.Tensor:
    """Integers drawn uniformly from low .. high (inclusive)."""
    return torch.randint(low, high + 1, shape, generator=generator)


def random_sizes(generator, count: int, **ranges) -> list[dict]:
    """``count`` dicts of sizes, each drawn uniformly from its inclusive (low, high) range."""
    return [{name: int(randint(generator, low, high)) for name, (low, high) in ranges.items()}
            for _ in range(count)]


def size_text(sizes: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in sizes.items())


def case_label(what: str, details: str) -> str:
    """A case's description: what is special about it (if anything), then its sizes."""
    return f"{what}, {details}" if what else details


def random_module(module: torch.nn.Module, generator) -> torch.nn.Module:
    """``module`` in eval mode with seeded parameters of scale 1/sqrt(fan-in) (biases included)."""
    with torch.no_grad():
        for parameter in module.parameters():
            fan_in = parameter.shape[-1] if parameter.dim() > 1 else parameter.shape[0]
            parameter.copy_(randn(generator, *parameter.shape) / math.sqrt(fan_in))
    return module.eval()


def random_lengths(generator, sizes: dict, per_query: bool, zero: bool = False) -> torch.Tensor:
    """Valid lengths in 1 .. T_k, of shape (B,) or (B, T_q); with ``zero``, sequence 0 gets 0."""
    shape = (sizes["B"], sizes["T_q"]) if per_query else (sizes["B"],)
    lengths = randint(generator, 1, sizes["T_k"], shape)
    if zero:
        lengths[0] = 0
    return lengths
