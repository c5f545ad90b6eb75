"""Unit tests of d2lhelpers.attention.MultiHeadAttention and KVCache.

Checked against torch.nn.MultiheadAttention with copied weights, plus the invariants that make
masking and decoding with a key-value cache correct.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import d2lhelpers as d2lh

DTYPES_AND_TOLERANCES = [(torch.float32, 1e-5), (torch.float64, 1e-12)]


def make_pair(d_model, num_heads, dtype=torch.float32, bias=False, seed=0):
    """Our MultiHeadAttention and PyTorch's, holding the same weights, both in eval mode."""
    torch.manual_seed(seed)
    ours = d2lh.MultiHeadAttention(d_model, num_heads, bias=bias).to(dtype).eval()
    if bias:  # nn.Linear initialises biases; give them visible values anyway
        for layer in (ours.W_q, ours.W_k, ours.W_v, ours.W_o):
            nn.init.normal_(layer.bias)
    theirs = nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True, dtype=dtype)
    theirs.eval()
    return ours, d2lh.copy_to_torch_layer(ours, theirs)


def random_qkv(B, T_q, T_k, d_model, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, T_q, d_model, generator=g, dtype=dtype),
            torch.randn(B, T_k, d_model, generator=g, dtype=dtype),
            torch.randn(B, T_k, d_model, generator=g, dtype=dtype))


def causal_valid_lens(B, T):
    """(B, T): query t may look at keys 0 .. t, i.e. valid length t + 1."""
    return torch.arange(1, T + 1).expand(B, T)


@pytest.mark.parametrize("dtype,tol", DTYPES_AND_TOLERANCES)
@pytest.mark.parametrize("bias", [False, True])
def test_matches_pytorch_without_mask(dtype, tol, bias):
    ours, theirs = make_pair(12, 3, dtype, bias=bias)
    q, k, v = random_qkv(2, 5, 7, 12, dtype)
    out = ours(q, k, v)
    ref, ref_weights = theirs(q, k, v, need_weights=True, average_attn_weights=False)
    assert out.shape == (2, 5, 12) and out.dtype == dtype
    assert ours.attention_weights.shape == (2, 3, 5, 7)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    torch.testing.assert_close(ours.attention_weights, ref_weights, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,tol", DTYPES_AND_TOLERANCES)
def test_matches_pytorch_with_key_padding_mask(dtype, tol):
    ours, theirs = make_pair(16, 4, dtype)
    q, k, v = random_qkv(3, 4, 6, 16, dtype)
    valid_lens = torch.tensor([2, 6, 3])
    out = ours(q, k, v, valid_lens)
    # PyTorch's key_padding_mask is True where a key must be ignored
    padding = torch.arange(6)[None, :] >= valid_lens[:, None]  # (B, T_k)
    ref, ref_weights = theirs(q, k, v, key_padding_mask=padding, need_weights=True,
                              average_attn_weights=False)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    torch.testing.assert_close(ours.attention_weights, ref_weights, rtol=tol, atol=tol)
    # masked keys get exactly zero weight, in every head
    assert torch.all(ours.attention_weights[0, :, :, 2:] == 0)
    assert torch.all(ours.attention_weights[2, :, :, 3:] == 0)


@pytest.mark.parametrize("dtype,tol", DTYPES_AND_TOLERANCES)
def test_matches_pytorch_with_causal_mask(dtype, tol):
    ours, theirs = make_pair(16, 2, dtype)
    X, _, _ = random_qkv(2, 6, 6, 16, dtype)
    out = ours(X, X, X, causal_valid_lens(2, 6))
    # PyTorch's boolean attn_mask is True where a query may NOT look: above the diagonal
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    ref, ref_weights = theirs(X, X, X, attn_mask=causal, need_weights=True,
                              average_attn_weights=False)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    torch.testing.assert_close(ours.attention_weights, ref_weights, rtol=tol, atol=tol)
    assert torch.all(torch.triu(ours.attention_weights, diagonal=1) == 0)


@pytest.mark.parametrize("dtype,tol", DTYPES_AND_TOLERANCES)
def test_matches_pytorch_with_per_query_lengths(dtype, tol):
    """2-D valid_lens that differ between sequences: a 3-D attn_mask, one per (sequence, head)."""
    ours, theirs = make_pair(8, 2, dtype)
    q, k, v = random_qkv(2, 3, 5, 8, dtype)
    valid_lens = torch.tensor([[1, 3, 5], [2, 2, 4]])
    out = ours(q, k, v, valid_lens)
    allowed = d2lh.valid_lens_to_mask(valid_lens, 3, 5)  # (B, T_q, T_k), True where allowed
    # PyTorch wants (B*h, T_q, T_k) with the heads of a sequence next to each other
    attn_mask = ~allowed.repeat_interleave(2, dim=0)
    ref, ref_weights = theirs(q, k, v, attn_mask=attn_mask, need_weights=True,
                              average_attn_weights=False)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    torch.testing.assert_close(ours.attention_weights, ref_weights, rtol=tol, atol=tol)


def test_masked_keys_and_values_never_leak():
    ours, _ = make_pair(8, 2)
    q, k, v = random_qkv(2, 3, 6, 8, torch.float32)
    valid_lens = torch.tensor([2, 4])
    out = ours(q, k, v, valid_lens)
    k2, v2 = k.clone(), v.clone()
    k2[0, 2:], v2[0, 2:] = 1e3, -1e3  # change only masked positions of sequence 0 ...
    k2[1, 4:] = torch.randn(2, 8)
    v2[1, 4:] = torch.randn(2, 8)  # ... and of sequence 1
    torch.testing.assert_close(ours(q, k2, v2, valid_lens), out, rtol=0, atol=1e-6)
    # a change in a valid position, by contrast, does change the output
    v2[0, 1] += 1
    assert not torch.allclose(ours(q, k2, v2, valid_lens)[0], out[0])


def test_a_future_token_never_changes_an_earlier_output():
    ours, _ = make_pair(8, 4)
    X, _, _ = random_qkv(1, 7, 7, 8, torch.float32)
    out = ours(X, X, X, causal_valid_lens(1, 7))
    for t in range(6):
        Y = X.clone()
        Y[:, t + 1 :] = torch.randn(1, 6 - t, 8)  # rewrite every token after t
        changed = ours(Y, Y, Y, causal_valid_lens(1, 7))
        torch.testing.assert_close(changed[:, : t + 1], out[:, : t + 1], rtol=0, atol=1e-6)
        assert not torch.allclose(changed[:, t + 1 :], out[:, t + 1 :])


def test_zero_valid_length_gives_zero_output_not_nan():
    ours, _ = make_pair(8, 2)
    q, k, v = random_qkv(2, 3, 4, 8, torch.float32)
    out = ours(q, k, v, torch.tensor([0, 4]))
    assert torch.all(out[0] == 0)  # no bias: attending to nothing gives W_o(0) = 0
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("dtype,tol", DTYPES_AND_TOLERANCES)
def test_kv_cache_step_by_step_equals_full_causal(dtype, tol, need_weights):
    ours, _ = make_pair(12, 3, dtype)
    X, _, _ = random_qkv(2, 6, 6, 12, dtype)
    full = ours(X, X, X, causal_valid_lens(2, 6))
    full_weights = ours.attention_weights
    cache = d2lh.KVCache()
    assert len(cache) == 0
    for t in range(6):
        x_t = X[:, t : t + 1]  # the t-th token alone: (B, 1, d_model)
        new = ours.project_keys_values(x_t, x_t)
        cache.append(new.keys, new.values)
        step = ours.attend(x_t, cache, need_weights=need_weights)  # sees positions 0 .. t
        assert len(cache) == t + 1  # the cache grows by one position per step
        assert cache.keys.shape == cache.values.shape == (2, 3, t + 1, 4)  # (B, h, t+1, d_k)
        assert step.shape == (2, 1, 12)
        torch.testing.assert_close(step, full[:, t : t + 1], rtol=tol, atol=tol)
        if need_weights:
            torch.testing.assert_close(ours.attention_weights[..., 0, :],
                                       full_weights[:, :, t, : t + 1], rtol=tol, atol=tol)
        else:
            assert ours.attention_weights is None


def test_kv_cache_with_several_new_positions_and_a_mask():
    """Appending a chunk of 3 positions to a cache of 2, with causal lengths inside the chunk."""
    ours, _ = make_pair(8, 2)
    X, _, _ = random_qkv(1, 5, 5, 8, torch.float32)
    full = ours(X, X, X, causal_valid_lens(1, 5))
    cache = d2lh.KVCache()
    outputs = []
    for chunk, lens in ((X[:, :2], causal_valid_lens(1, 2)), (X[:, 2:], torch.tensor([[3, 4, 5]]))):
        new = ours.project_keys_values(chunk, chunk)
        cache.append(new.keys, new.values)
        outputs.append(ours.attend(chunk, cache, lens))
    assert len(cache) == 5
    torch.testing.assert_close(torch.cat(outputs, dim=1), full)


def test_kv_cache_reorder_keeps_the_chosen_rows_in_order():
    ours, _ = make_pair(8, 2)
    X, _, _ = random_qkv(3, 4, 4, 8, torch.float32)
    cache = ours.project_keys_values(X, X)
    keys, values = cache.keys.clone(), cache.values.clone()
    rows = torch.tensor([2, 2, 0, 1])  # may repeat rows and change the batch size
    cache.reorder(rows)
    assert torch.equal(cache.keys, keys[rows]) and torch.equal(cache.values, values[rows])
    empty = d2lh.KVCache()
    empty.reorder(rows)  # nothing cached yet: nothing to do
    assert len(empty) == 0


@pytest.mark.parametrize("dtype,tol", DTYPES_AND_TOLERANCES)
def test_projected_keys_values_equal_passing_keys(dtype, tol):
    ours, _ = make_pair(16, 4, dtype)
    q, memory, _ = random_qkv(2, 5, 7, 16, dtype)
    valid_lens = torch.tensor([3, 7])
    direct = ours(q, memory, memory, valid_lens)
    cache = ours.project_keys_values(memory, memory)
    assert len(cache) == 7 and cache.keys.shape == (2, 4, 7, 4)
    via_cache = ours.attend(q, cache, valid_lens)
    torch.testing.assert_close(via_cache, direct, rtol=tol, atol=tol)
    assert len(cache) == 7  # attending over a projected memory does not append to it
    # one query at a time, as a decoder does, gives the same rows
    for t in range(5):
        row = ours.attend(q[:, t : t + 1], cache, valid_lens)
        torch.testing.assert_close(row, direct[:, t : t + 1], rtol=tol, atol=tol)


def test_shapes_and_heads_are_slices_of_the_projections():
    ours = d2lh.MultiHeadAttention(d_model=12, num_heads=3)
    assert (ours.d_model, ours.num_heads, ours.d_k) == (12, 3, 4)
    assert sum(p.numel() for p in ours.parameters()) == 4 * 12 * 12
    x = torch.arange(2 * 5 * 12.0).reshape(2, 5, 12)
    split = ours.split_heads(x)
    assert split.shape == (2, 3, 5, 4)  # (B, h, T, d_k)
    # head i of sequence b holds features i*d_k .. (i+1)*d_k - 1
    assert torch.equal(split[1, 2], x[1, :, 8:12])
    assert torch.equal(ours.merge_heads(split), x)
    q, k, v = random_qkv(2, 4, 9, 12, torch.float32)
    assert ours(q, k, v).shape == (2, 4, 12)
    assert ours.attention_weights.shape == (2, 3, 4, 9)
    torch.testing.assert_close(ours.attention_weights.sum(-1), torch.ones(2, 3, 4))


def test_bad_inputs_raise_value_errors_with_the_shapes():
    def raises(match):
        return pytest.raises(ValueError, match=match)

    with raises("d_model must be a positive multiple of num_heads, got d_model=10, num_heads=3"):
        d2lh.MultiHeadAttention(10, 3)
    with raises("got d_model=0, num_heads=2"):
        d2lh.MultiHeadAttention(0, 2)
    mha = d2lh.MultiHeadAttention(8, 2)
    q, k, v = random_qkv(2, 3, 4, 8, torch.float32)
    with raises(r"queries must have shape \(B, T, d_model=8\), got \(2, 3, 6\)"):
        mha(torch.zeros(2, 3, 6), k, v)
    with raises(r"keys must have shape \(B, T, d_model=8\), got \(2, 4, 5\)"):
        mha(q, torch.zeros(2, 4, 5), v)
    with raises(r"values must have shape \(B, T, d_model=8\), got \(2, 4, 7\)"):
        mha(q, k, torch.zeros(2, 4, 7))
    with raises(r"share the batch size B, got \(2, 3, 8\), \(1, 4, 8\)"):
        mha(q, k[:1], v[:1])
    with raises(r"same number of pairs T_k, got keys \(2, 4, 8\) and values \(2, 3, 8\)"):
        mha(q, k, v[:, :3])
    with raises(r"queries must be a 3-D tensor \(B, T, width\), got \(3, 8\)"):
        mha(q[0], k, v)
    with raises(r"valid_lens must lie in \[0, T_k=4\], got values from 1 to 5"):
        mha(q, k, v, torch.tensor([1, 5]))
    with raises(r"valid_lens must lie in \[0, T_k=4\], got values from -1"):
        mha(q, k, v, torch.tensor([-1, 2]))
    with raises(r"valid_lens must have shape \(B,\)=\(2,\) or \(B, T_q\)=\(2, 3\)"):
        mha(q, k, v, torch.tensor([1, 2, 3]))
    with raises(r"keys must have shape \(B, T, d_model=8\), got \(2, 4, 3\)"):
        mha.project_keys_values(torch.zeros(2, 4, 3), v)
    cache = mha.project_keys_values(k, v)  # batch of 2
    with raises("queries have batch size 3 but the cache holds a batch of 2"):
        mha.attend(torch.zeros(3, 1, 8), cache)
    with raises("queries have batch size 2 but the cache holds nothing"):
        mha.attend(q, d2lh.KVCache())
    with raises(r"queries must have shape \(B, T, d_model=8\), got \(2, 1, 4\)"):
        mha.attend(torch.zeros(2, 1, 4), cache)


def test_dropout_is_active_only_in_training():
    torch.manual_seed(0)
    mha = d2lh.MultiHeadAttention(8, 2, dropout=0.5)
    q, k, v = random_qkv(2, 3, 4, 8, torch.float32)
    mha.eval()
    assert torch.equal(mha(q, k, v), mha(q, k, v))
    mha.train()
    assert not torch.equal(mha(q, k, v), mha(q, k, v))


def test_gradients_flow_to_every_projection():
    mha = d2lh.MultiHeadAttention(8, 2)
    q, k, v = random_qkv(2, 3, 4, 8, torch.float32)
    mha(q, k, v, torch.tensor([2, 4])).sum().backward()
    for name in ("W_q", "W_k", "W_v", "W_o"):
        grad = getattr(mha, name).weight.grad
        assert grad is not None and grad.abs().sum() > 0, name
