"""Unit tests of d2lhelpers.decoder_only: the pre-norm block of causal grouped-query attention with
RoPE, and the decoder-only language model with its key-value cache, cached computation checked
against recomputing. (The attention itself is tested in tests/test_attention.py, RoPE in
tests/test_positional.py, sampling and generation in tests/test_decoding.py.)"""

from __future__ import annotations

import pytest
import torch

import d2lhelpers as d2lh
from d2lhelpers import KVCache


def test_decoder_only_block_is_pre_norm_attention_then_ffn():
    torch.manual_seed(5)
    block = d2lh.DecoderOnlyBlock(8, 4, 2, ffn_hidden=16).eval()
    attention = block.attention
    assert isinstance(attention, d2lh.MultiHeadAttention) and attention.rotary is not None
    assert (attention.num_heads, attention.num_kv_heads) == (4, 2)
    X = torch.randn(2, 5, 8)
    causal = d2lh.causal_valid_lens(2, 5)
    h = block.norm1(X)
    X1 = X + attention(h, h, h, causal)
    expected = X1 + block.ffn(block.norm2(X1))
    torch.testing.assert_close(block(X), expected)
    torch.testing.assert_close(block(X, need_weights=True), expected)  # the readable path too
    assert attention.attention_weights.shape == (2, 4, 5, 5)


def small_lm(num_kv_heads=2, seed=6, dropout=0.0):
    torch.manual_seed(seed)
    return d2lh.DecoderOnlyLM(30, d_model=16, num_heads=4, num_kv_heads=num_kv_heads,
                              ffn_hidden=32, num_layers=2, dropout=dropout).eval()


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_lm_with_a_cache_computes_what_recomputing_computes(num_kv_heads):
    model = small_lm(num_kv_heads)
    tokens = torch.randint(30, (3, 9))
    full = model(tokens)
    state, pieces, start = model.init_state(), [], 0
    for size in (4, 1, 1, 3):
        pieces.append(model.step(tokens[:, start:start + size], state))
        start += size
        assert state.num_decoded == start
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


def test_lm_is_causal_and_knows_positions():
    model = small_lm()
    tokens = torch.randint(30, (2, 8))
    changed = tokens.clone()
    changed[:, 5] = (changed[:, 5] + 1) % 30
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    torch.testing.assert_close(a[:, :5], b[:, :5])  # a later token never changes earlier logits
    assert not torch.allclose(a[:, 5:], b[:, 5:])
    # the last position sees the same set of tokens in another order: only RoPE tells them apart
    with torch.no_grad():
        ab, ba = model(torch.tensor([[3, 8, 5]]))[0, -1], model(torch.tensor([[8, 3, 5]]))[0, -1]
    assert not torch.allclose(ab, ba)


def test_lm_state_reorder_keeps_chosen_rows():
    model = small_lm()
    tokens = torch.randint(30, (3, 4))
    state = model.init_state()
    model.step(tokens, state)
    state.reorder(torch.tensor([2, 2, 0]))
    next_tokens = torch.tensor([[1], [1], [1]])
    expected = model(torch.cat([tokens[[2, 2, 0]], next_tokens], dim=1))[:, -1:]
    torch.testing.assert_close(model.step(next_tokens, state), expected, atol=1e-5, rtol=1e-5)


def test_lm_bad_input_raises():
    model = small_lm()
    with pytest.raises(ValueError, match=r"^tokens must have shape \(B, T\), got \(2, 3, 4\)$"):
        model(torch.zeros(2, 3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^tokens must hold integer token indices, got dtype "
                                         r"torch.float32$"):
        model(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="3 caches for 2 blocks"):
        model.step(torch.zeros(1, 2, dtype=torch.long), d2lh.LMState([KVCache()] * 3))


def test_lm_state_counts_the_bytes_of_its_caches():
    model = d2lh.DecoderOnlyLM(20, d_model=16, num_heads=4, num_kv_heads=2, num_layers=3).eval()
    state = model.init_state()
    assert state.nbytes == 0 and state.num_decoded == 0
    model.step(torch.randint(20, (5, 7)), state)
    # keys and values (B, g, T, d_k) of every layer, float32: g = 2 heads of d_k = 4, not h = 4
    assert state.nbytes == d2lh.kv_cache_bytes(3, 2, 4, num_tokens=7, batch_size=5,
                                               bytes_per_number=4)


def test_forward_never_reads_a_value_on_the_host(host_syncs):
    model = small_lm()
    tokens = torch.randint(30, (3, 9))
    for need_weights in (False, True):
        assert host_syncs(model, tokens, need_weights) == 0
    state = model.init_state()
    assert host_syncs(model.step, tokens[:, :4], state) == 0
    assert host_syncs(model.step, tokens[:, 4:5], state) == 0
