"""Unit tests of d2lhelpers.positional: the sinusoidal positional encoding and rotary position
embeddings (RoPE), the latter checked against complex multiplication in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import d2lhelpers as d2lh


def numpy_table(max_len: int, d_model: int) -> np.ndarray:
    """The definition, entry by entry, in float64.

    p_{i,2j} = sin(i / 10000^(2j/d)), p_{i,2j+1} = cos(i / 10000^(2j/d)).
    """
    table = np.empty((max_len, d_model))
    for i in range(max_len):
        for col in range(d_model):
            j = col // 2
            angle = i / 10000 ** (2 * j / d_model)
            table[i, col] = np.sin(angle) if col % 2 == 0 else np.cos(angle)
    return table


@pytest.mark.parametrize("d_model", [1, 2, 7, 16, 33])
def test_table_matches_the_formula(d_model):
    pe = d2lh.PositionalEncoding(d_model, max_len=60)
    assert pe.P.shape == (1, 60, d_model)
    assert pe.P.dtype == torch.float32
    np.testing.assert_allclose(pe.P[0].numpy(), numpy_table(60, d_model), rtol=0, atol=1e-6)


def test_first_row_and_range():
    P = d2lh.PositionalEncoding(32, max_len=500).P[0]
    # position 0: sin(0) = 0 in even columns, cos(0) = 1 in odd ones
    assert torch.equal(P[0, 0::2], torch.zeros(16)) and torch.equal(P[0, 1::2], torch.ones(16))
    assert P.abs().max() <= 1


def test_a_longer_table_extends_a_shorter_one():
    short = d2lh.PositionalEncoding(16, max_len=50).P
    long = d2lh.PositionalEncoding(16, max_len=400).P
    assert torch.equal(long[:, :50], short)


def test_forward_adds_the_table_and_keeps_shape():
    torch.manual_seed(0)
    pe = d2lh.PositionalEncoding(8, max_len=20)
    X = torch.randn(3, 5, 8)
    Y = pe(X)
    assert Y.shape == (3, 5, 8)
    expected = X + torch.from_numpy(numpy_table(5, 8)).float()
    torch.testing.assert_close(Y, expected, rtol=0, atol=1e-6)
    # every sequence of the batch gets the same encoding
    torch.testing.assert_close(Y - X, (Y - X)[:1].expand(3, -1, -1))


def test_offset_selects_the_positions_of_the_tokens():
    torch.manual_seed(0)
    pe = d2lh.PositionalEncoding(8, max_len=20)
    X = torch.randn(2, 6, 8)
    full = pe(X)
    # feeding the tokens one at a time with offset t gives the rows of the full computation
    for t in range(6):
        assert torch.equal(pe(X[:, t : t + 1], offset=t), full[:, t : t + 1])
    # a chunk starting at position 2
    assert torch.equal(pe(X[:, 2:5], offset=2), full[:, 2:5])
    # the last positions of the table are reachable, and not beyond
    assert pe(torch.zeros(1, 1, 8), offset=19).shape == (1, 1, 8)
    torch.testing.assert_close(pe(torch.zeros(1, 1, 8), offset=19)[0, 0],
                               torch.from_numpy(numpy_table(20, 8)[19]).float(), rtol=0, atol=1e-6)


def test_error_beyond_max_len_names_max_len_offset_and_T():
    pe = d2lh.PositionalEncoding(8, max_len=10)
    with pytest.raises(ValueError, match=r"offset=0 .*T=11.*max_len=10"):
        pe(torch.zeros(1, 11, 8))
    with pytest.raises(ValueError, match=r"offset=8 .*T=3.*max_len=10"):
        pe(torch.zeros(1, 3, 8), offset=8)
    with pytest.raises(ValueError, match=r"offset=10 .*T=1.*max_len=10"):
        pe(torch.zeros(2, 1, 8), offset=10)


def test_bad_inputs_raise_value_errors():
    pe = d2lh.PositionalEncoding(8, max_len=10)
    with pytest.raises(ValueError, match=r"X must have shape \(B, T, d_model=8\), got \(1, 4, 6\)"):
        pe(torch.zeros(1, 4, 6))
    with pytest.raises(ValueError, match=r"X must have shape .*got \(4, 8\)"):
        pe(torch.zeros(4, 8))
    with pytest.raises(ValueError, match="offset must be a non-negative int, got -1"):
        pe(torch.zeros(1, 4, 8), offset=-1)
    with pytest.raises(ValueError, match="offset must be a non-negative int, got 1.5"):
        pe(torch.zeros(1, 4, 8), offset=1.5)
    for kwargs, message in (({"d_model": 0}, "d_model must be a positive int, got 0"),
                            ({"d_model": 4.0}, "d_model must be a positive int, got 4.0"),
                            ({"d_model": 4, "max_len": 0},
                             "max_len must be a positive int, got 0")):
        with pytest.raises(ValueError, match=message):
            d2lh.PositionalEncoding(**kwargs)


def test_buffer_moves_with_to_and_follows_the_dtype():
    pe = d2lh.PositionalEncoding(6, max_len=12)
    assert "P" in dict(pe.named_buffers())
    pe64 = pe.to(torch.float64)
    assert pe64.P.dtype == torch.float64
    np.testing.assert_allclose(pe64.P[0].numpy(), numpy_table(12, 6), rtol=0, atol=1e-6)
    pe.to("meta")  # a device move (the meta device exists on every machine)
    assert pe.P.device.type == "meta"
    X = torch.zeros(2, 3, 6, device="meta")
    assert pe(X).device.type == "meta"


def test_output_keeps_the_input_dtype():
    pe = d2lh.PositionalEncoding(4, max_len=8)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        assert pe(torch.zeros(1, 3, 4, dtype=dtype)).dtype == dtype


def test_table_is_not_in_the_state_dict():
    pe = d2lh.PositionalEncoding(8, max_len=10)
    assert "P" not in pe.state_dict()
    # so a checkpoint loads into a module built with another max_len
    other = d2lh.PositionalEncoding(8, max_len=50)
    other.load_state_dict(pe.state_dict())
    assert other.P.shape == (1, 50, 8)


def test_dropout_only_in_training_mode():
    torch.manual_seed(0)
    pe = d2lh.PositionalEncoding(16, dropout=0.5, max_len=10)
    X = torch.randn(4, 10, 16)
    pe.eval()
    assert torch.equal(pe(X), X + pe.P)
    pe.train()
    Y = pe(X)
    zeros = (Y == 0).float().mean().item()
    assert 0.35 < zeros < 0.65  # about half of the entries dropped
    kept = Y != 0
    # the survivors are scaled by 1 / (1 - p) = 2
    torch.testing.assert_close(Y[kept], 2 * (X + pe.P).expand_as(Y)[kept])


def test_no_trainable_parameters():
    assert list(d2lh.PositionalEncoding(8).parameters()) == []


# --------------------------------------------------------------------------------------------------
# Rotary position embeddings (RoPE)

F64 = torch.float64


def reference_rotary(x, positions, base=10000.0):
    """RoPE as complex multiplication: (x_2j + i x_2j+1) * exp(i m omega_j)."""
    d_k = x.shape[-1]
    omega = base ** (-torch.arange(0, d_k, 2, dtype=F64) / d_k)
    angles = torch.as_tensor(positions, dtype=F64)[:, None] * omega
    z = torch.view_as_complex(x.double().unflatten(-1, (-1, 2)).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


def test_rotary_frequencies_are_those_of_the_sinusoidal_encoding():
    omega = d2lh.rotary_frequencies(16, dtype=F64)
    assert omega.shape == (8,) and omega.dtype == F64 and omega[0] == 1
    P = d2lh.PositionalEncoding(16, max_len=50).P[0].double()
    positions = torch.arange(50, dtype=F64)[:, None]
    torch.testing.assert_close(torch.sin(positions * omega).float().double(), P[:, 0::2])
    torch.testing.assert_close(torch.cos(positions * omega).float().double(), P[:, 1::2])


def test_apply_rotary_is_complex_multiplication_and_keeps_norms():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 8, dtype=F64)
    positions = torch.tensor([0, 1, 2, 5, 11, 100, 4096])
    y = d2lh.apply_rotary(x, positions)
    torch.testing.assert_close(y, reference_rotary(x, positions))
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(y[..., 0, :], x[..., 0, :])  # position 0: no rotation
    assert y.dtype == F64 and y.shape == x.shape
    assert d2lh.apply_rotary(x.float(), positions).dtype == torch.float32
    assert d2lh.apply_rotary(x.half(), positions).dtype == torch.float16


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_apply_rotary_gives_the_numbers_of_the_pair_by_pair_formula_exactly(dtype):
    # the package rotates contiguous tensors (x cos + swapped x signed sin), faster on a CPU, but
    # with the same products and sums as the formula pair by pair: the same numbers, bit for bit,
    # forward and backward, so the stored outputs of the notebooks that train with RoPE stay put
    torch.manual_seed(4)
    x0 = torch.randn(3, 2, 9, 16).to(dtype)
    positions = torch.arange(5, 14)
    omega = d2lh.rotary_frequencies(16, 10000.0, torch.float64 if dtype == F64 else torch.float32)
    angles = positions.to(omega.dtype)[:, None] * omega
    cos, sin = torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)
    ours, theirs = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    y = d2lh.apply_rotary(ours, positions)
    even, odd = theirs[..., 0::2], theirs[..., 1::2]
    expected = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
    grad = torch.randn_like(y)
    y.backward(grad)
    expected.backward(grad)
    assert torch.equal(y, expected) and torch.equal(ours.grad, theirs.grad)
    rope = d2lh.RotaryEmbedding(16)
    assert torch.equal(rope(x0, offset=5), y.detach())


def test_rotary_score_depends_on_the_offset_only():
    torch.manual_seed(1)
    q, k = torch.randn(1, 32, dtype=F64), torch.randn(1, 32, dtype=F64)
    for m, n in [(0, 3), (7, 10), (100, 103), (5, 2), (1000, 997)]:
        for shift in (0, 1, 17, 500):
            here = d2lh.apply_rotary(q, [m]) @ d2lh.apply_rotary(k, [n]).T
            moved = d2lh.apply_rotary(q, [m + shift]) @ d2lh.apply_rotary(k, [n + shift]).T
            torch.testing.assert_close(here, moved)
    # ... and it does depend on the offset
    assert not torch.allclose(d2lh.apply_rotary(q, [0]) @ d2lh.apply_rotary(k, [1]).T,
                              d2lh.apply_rotary(q, [0]) @ d2lh.apply_rotary(k, [2]).T)


def test_rotary_embedding_offset_continues_the_positions():
    rope = d2lh.RotaryEmbedding(8, base=100.0)
    assert list(rope.parameters()) == [] and list(rope.buffers()) == []  # nothing to learn or store
    x = torch.randn(2, 6, 8)
    full = rope(x)
    torch.testing.assert_close(full[:, 4:], rope(x[:, 4:], offset=4))
    torch.testing.assert_close(full, d2lh.apply_rotary(x, torch.arange(6), base=100.0))
    torch.testing.assert_close(full.double(), reference_rotary(x, torch.arange(6), base=100.0))


@pytest.mark.parametrize("call, message", [
    (lambda: d2lh.apply_rotary(torch.zeros(3, 5), torch.arange(3)),
     r"x must have shape \(..., T, d_k\) with d_k even, got \(3, 5\)"),
    (lambda: d2lh.apply_rotary(torch.zeros(3, 4), torch.arange(4)),
     r"positions must have shape \(T,\)=\(3,\) for x of shape \(3, 4\), got \(4,\)"),
    (lambda: d2lh.RotaryEmbedding(7), "d_k must be even .*got d_k=7"),
    (lambda: d2lh.RotaryEmbedding(8, base=1.0), "base must be a number > 1, got 1.0"),
    (lambda: d2lh.RotaryEmbedding(8)(torch.zeros(2, 3, 6)), r"x must have shape \(..., T, d_k=8\), "
                                                            r"got \(2, 3, 6\)"),
    (lambda: d2lh.RotaryEmbedding(8)(torch.zeros(2, 3, 8), offset=-1),
     "offset must be a non-negative int, got -1"),
])
def test_rotary_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_rotary_rejects_integer_inputs(dtype):
    """cos and sin cast back to integers would be 0 or 1: a silently wrong rotation."""
    x = torch.ones(2, 3, 4, dtype=dtype)
    with pytest.raises(ValueError, match=rf"^x must be floating point, got dtype {dtype}$"):
        d2lh.apply_rotary(x, torch.arange(3))
    with pytest.raises(ValueError, match=rf"^x must be floating point, got dtype {dtype}$"):
        d2lh.RotaryEmbedding(4)(x)
