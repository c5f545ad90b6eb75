"""Unit tests of d2lhelpers.decoder_only: the pre-norm block of causal grouped-query attention with
RoPE, and the decoder-only language model with its key-value cache, cached computation checked
against recomputing. (The attention itself is tested in tests/test_attention.py, RoPE in
tests/test_positional.py, sampling and generation in tests/test_decoding.py.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn

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
    with pytest.raises(ValueError, match=r"^tokens must be token ids in \[0, vocab_size=30\), "
                                         r"got 30$"):
        model(torch.tensor([[3, 30, 1]]))  # nn.Embedding's IndexError would name neither
    with pytest.raises(ValueError, match=r"^tokens must be token ids in \[0, vocab_size=30\), "
                                         r"got -2$"):
        model(torch.tensor([[-2]]))
    with pytest.raises(ValueError, match=r"^tokens must hold at least one token per row, got "
                                         r"shape \(2, 0\)$"):
        model(torch.zeros(2, 0, dtype=torch.long))  # would return empty logits silently
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


def test_forward_reads_the_token_range_once_and_a_step_reads_nothing(host_syncs):
    model = small_lm()
    tokens = torch.randint(30, (3, 9))
    for need_weights in (False, True):
        assert host_syncs(model, tokens, need_weights) == 1  # the smallest and largest id, once
    state = model.init_state()
    assert host_syncs(model.step, tokens[:, :4], state) == 0  # generation feeds its own tokens
    assert host_syncs(model.step, tokens[:, 4:5], state) == 0
    assert host_syncs(model.blocks[0], torch.randn(3, 9, 16)) == 0  # the blocks trust their input


@pytest.mark.parametrize("norm, ffn, bias", [("layer", "relu", True), ("rms", "swiglu", False),
                                             ("rms", "relu", True), ("layer", "swiglu", False)])
def test_the_block_takes_the_norm_the_ffn_and_biases(norm, ffn, bias):
    torch.manual_seed(0)
    block = d2lh.DecoderOnlyBlock(8, 4, 2, ffn_hidden=12, norm=norm, ffn=ffn, bias=bias).eval()
    assert isinstance(block.norm1, nn.LayerNorm if norm == "layer" else nn.RMSNorm)
    assert isinstance(block.ffn, d2lh.PositionwiseFFN if ffn == "relu" else d2lh.SwiGLU)
    has_bias = [name for name, _ in block.named_parameters() if name.endswith("bias")]
    assert bool(has_bias) == (bias and (norm == "layer" or ffn == "relu"))
    assert not any(name.startswith("attention.") for name in has_bias), "attention has no bias"
    X = torch.randn(2, 5, 8)
    h = block.norm1(X)
    X1 = X + block.attention(h, h, h, d2lh.causal_valid_lens(2, 5))
    torch.testing.assert_close(block(X), X1 + block.ffn(block.norm2(X1)))
    if ffn == "swiglu":
        f = block.ffn
        x = torch.randn(4, 8)
        expected = f.W_down(torch.nn.functional.silu(f.W_gate(x)) * f.W_up(x))
        torch.testing.assert_close(f(x), expected)
    with pytest.raises(ValueError, match=r"^norm must be one of 'layer', 'rms', got 'batch'$"):
        d2lh.DecoderOnlyBlock(8, 4, norm="batch")
    with pytest.raises(ValueError, match=r"^ffn must be one of 'relu', 'swiglu', got 'gelu'$"):
        d2lh.DecoderOnlyBlock(8, 4, ffn="gelu")


def test_defaults_keep_the_2017_pieces_and_tied_embeddings_share_one_matrix():
    model = small_lm()
    names = {name for name, _ in model.named_parameters()}
    assert {"blocks.0.norm1.bias", "blocks.0.ffn.linear1.bias", "final_norm.bias",
            "output.bias"} <= names and isinstance(model.final_norm, nn.LayerNorm)
    torch.manual_seed(0)
    tied = d2lh.DecoderOnlyLM(30, d_model=16, num_heads=4, ffn_hidden=32, num_layers=1,
                              norm="rms", ffn="swiglu", bias=False, tie_embeddings=True)
    assert tied.output.weight is tied.embedding.weight and tied.output.bias is None
    untied = sum(p.numel() for p in d2lh.DecoderOnlyLM(
        30, d_model=16, num_heads=4, ffn_hidden=32, num_layers=1, norm="rms", ffn="swiglu",
        bias=False).parameters())
    assert untied - sum(p.numel() for p in tied.parameters()) == 30 * 16
