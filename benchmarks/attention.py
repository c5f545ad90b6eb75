"""The course's attention layers against PyTorch's built-ins: forward + backward time.

    python benchmarks/attention.py                       # about a minute on a 2-core CPU
    python benchmarks/attention.py --min-run-time 1.0    # steadier numbers, slower

Compares, over sequence lengths 64 .. 1024 (self-attention: T_q = T_k = T):
1. ``d2lh.DotProductAttention`` against ``torch.nn.functional.scaled_dot_product_attention``,
   on queries, keys and values of shape (B, T, d);
2. ``d2lh.MultiHeadAttention`` against ``torch.nn.MultiheadAttention`` (``batch_first=True``,
   no bias, ``need_weights=False`` so that PyTorch may use its fused kernel), with the same weights,
   on inputs of shape (B, T, d_model).
The course's layers are timed on both of their paths: the readable one (``need_weights=True``,
which keeps the weights for plotting) and the fast one (``need_weights=False``, what the
Transformer trains with). Every side starts from the same padding lengths ``valid_lens``: the
course's layers take them as they are, PyTorch's side turns them into its boolean mask in the timed
call (and negates it for ``nn.MultiheadAttention``), and the outputs are checked to agree before
anything is timed. Each time is a median of ``torch.utils.benchmark.Timer.blocked_autorange`` measurements of
one forward pass and the backward pass of ``output.sum()`` to the inputs and weights; the sides
are measured in alternating rounds and each keeps its fastest round, which damps the noise of a
shared CPU. Prints a Markdown table of times and ratios (course / PyTorch) measured in one run.
"""

from __future__ import annotations

import argparse
import platform

import torch
import torch.nn.functional as F
from torch.utils import benchmark

import d2lhelpers as d2lh

LENGTHS = (64, 128, 256, 512, 1024)
SIZE = dict(batch_size=4, d=64, d_model=128, num_heads=4)


def padding(batch_size: int, T: int) -> torch.Tensor:
    """valid_lens (B,) from T/2 to T."""
    return torch.linspace(T // 2, T, batch_size).long()


def allowed(valid_lens: torch.Tensor, T: int) -> torch.Tensor:
    """The lengths as PyTorch's boolean mask (B, 1, T_k), True = seen, broadcast over the queries.
    PyTorch's side builds it inside the timed call: both sides start from the same lengths, as a
    caller holding a batch of lengths does."""
    return (torch.arange(T)[None, :] < valid_lens[:, None])[:, None, :]


def make_timer(forward, tensors, num_threads: int) -> benchmark.Timer:
    """A timer of forward() followed by backward of its sum to ``tensors`` (inputs, weights)."""

    def step():
        for t in tensors:
            t.grad = None
        forward().sum().backward()

    step()  # warm-up: allocations, lazy initialisation
    return benchmark.Timer(stmt="step()", globals={"step": step}, num_threads=num_threads)


def compare(sides, num_threads: int, min_run_time: float, rounds: int):
    """Seconds per call of each (forward, tensors) side. Rounds alternate between them so that a
    burst of load from other processes hits all alike; each side keeps its fastest round median."""
    timers = [make_timer(*side, num_threads) for side in sides]
    best = [float("inf")] * len(timers)
    for _ in range(rounds):
        for i, timer in enumerate(timers):
            median = timer.blocked_autorange(min_run_time=min_run_time / rounds).median
            best[i] = min(best[i], median)
    return best


def dot_product_cases(T: int, batch_size: int, d: int, **_):
    """Three (forward, tensors) sides computing the same masked attention, checked to agree: the
    course's readable path, its fast path, PyTorch's."""
    q, k, v = (torch.randn(batch_size, T, d, requires_grad=True) for _ in range(3))
    valid_lens = padding(batch_size, T)
    ours = d2lh.DotProductAttention()

    def readable():
        return ours(q, k, v, valid_lens)

    def fast():
        return ours(q, k, v, valid_lens, need_weights=False)

    def pytorch():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed(valid_lens, T))

    with torch.no_grad():
        for course in (readable, fast):
            torch.testing.assert_close(course(), pytorch(), rtol=1e-4, atol=1e-5)
    return [(side, [q, k, v]) for side in (readable, fast, pytorch)]


def multihead_cases(T: int, batch_size: int, d_model: int, num_heads: int, **_):
    """d2lh.MultiHeadAttention and torch.nn.MultiheadAttention, same weights, self-attention."""
    X = torch.randn(batch_size, T, d_model, requires_grad=True)
    valid_lens = padding(batch_size, T)
    ours = d2lh.MultiHeadAttention(d_model, num_heads)
    theirs = ours.to_torch()

    def readable():
        return ours(X, X, X, valid_lens)

    def fast():
        return ours(X, X, X, valid_lens, need_weights=False)

    def pytorch():
        # PyTorch's key_padding_mask is True where a key is ignored: (B, T_k)
        key_padding_mask = ~allowed(valid_lens, T)[:, 0, :]
        return theirs(X, X, X, key_padding_mask=key_padding_mask, need_weights=False)[0]

    with torch.no_grad():
        for course in (readable, fast):
            torch.testing.assert_close(course(), pytorch(), rtol=1e-4, atol=1e-5)
    return [(readable, [X, *ours.parameters()]), (fast, [X, *ours.parameters()]),
            (pytorch, [X, *theirs.parameters()])]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--min-run-time", type=float, default=1.0,
                        help="seconds of measurement per layer, side and length (default 1.0)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds per comparison; the fastest round counts")
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (default 1: steadiest on a shared CPU)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)

    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{args.threads} thread(s); forward + backward, per call (fastest of {args.rounds} "
          f"alternating round medians); "
          f"B={SIZE['batch_size']}, d={SIZE['d']} (dot product), d_model={SIZE['d_model']}, "
          f"h={SIZE['num_heads']} (multi-head); a padding mask of lengths T/2 .. T\n")
    for name, theirs_name, make_cases in (
            ("DotProductAttention", "scaled_dot_product_attention", dot_product_cases),
            ("MultiHeadAttention", "nn.MultiheadAttention", multihead_cases)):
        print(f"\n`{name}` against `{theirs_name}`:\n")
        print("| T | readable (ms) | fast (ms) | PyTorch (ms) | readable / PyTorch "
              "| fast / PyTorch |")
        print("|---:|---:|---:|---:|---:|---:|")
        for T in args.lengths:
            readable, fast, theirs = compare(make_cases(T, **SIZE), args.threads,
                                             args.min_run_time, args.rounds)
            print(f"| {T} | {1e3 * readable:.2f} | {1e3 * fast:.2f} | {1e3 * theirs:.2f} "
                  f"| {readable / theirs:.2f} | {fast / theirs:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
