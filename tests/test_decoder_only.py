"""d2lhelpers.decoder_only: RoPE, grouped-query attention and its cache, the online softmax, the
memory tracker, the decoder-only language model, sampling. Attention is checked against
torch.nn.functional.scaled_dot_product_attention in float64; cached computation against
recomputing."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

import d2lhelpers as d2lh
from d2lhelpers import KVCache

F64 = torch.float64


def reference_rotary(x, positions, base=10000.0):
    """RoPE as complex multiplication: (x_2j + i x_2j+1) * exp(i m omega_j)."""
    d_k = x.shape[-1]
    omega = base ** (-torch.arange(0, d_k, 2, dtype=F64) / d_k)
    angles = torch.as_tensor(positions, dtype=F64)[:, None] * omega
    z = torch.view_as_complex(x.double().unflatten(-1, (-1, 2)).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


# --------------------------------------------------------------------------------------------------
# RoPE


def test_rotary_frequencies_are_those_of_the_sinusoidal_encoding():
    omega = d2lh.rotary_frequencies(16, dtype=F64)
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
    x = torch.randn(2, 6, 8)
    full = rope(x)
    torch.testing.assert_close(full[:, 4:], rope(x[:, 4:], offset=4))
    torch.testing.assert_close(full, d2lh.apply_rotary(x, torch.arange(6), base=100.0))


@pytest.mark.parametrize("call, message", [
    (lambda: d2lh.apply_rotary(torch.zeros(3, 5), torch.arange(3)), "d_k even"),
    (lambda: d2lh.apply_rotary(torch.zeros(3, 4), torch.arange(4)), r"positions must have shape \(T,\)=\(3,\)"),
    (lambda: d2lh.RotaryEmbedding(7), "d_k must be even"),
    (lambda: d2lh.RotaryEmbedding(8, base=1.0), "base must be"),
    (lambda: d2lh.RotaryEmbedding(8)(torch.zeros(2, 3, 6)), r"d_k=8\), got \(2, 3, 6\)"),
])
def test_rotary_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --------------------------------------------------------------------------------------------------
# Grouped-query attention


def random_gqa(d_model, h, g, rotary=False, bias=False, seed=0):
    torch.manual_seed(seed)
    return d2lh.GroupedQueryAttention(d_model, h, g, bias=bias, rotary=rotary).double().eval()


def reference_gqa(layer, queries, keys, values, valid_lens=None):
    """The layer's function written with PyTorch's fused attention and enable_gqa."""
    B, T_q, _ = queries.shape
    T_k = keys.shape[1]
    Q = layer.W_q(queries).view(B, T_q, layer.num_heads, layer.d_k).transpose(1, 2)
    K = layer.W_k(keys).view(B, T_k, layer.num_kv_heads, layer.d_k).transpose(1, 2)
    V = layer.W_v(values).view(B, T_k, layer.num_kv_heads, layer.d_k).transpose(1, 2)
    if layer.rotary is not None:
        Q = reference_rotary(Q, torch.arange(T_q))
        K = reference_rotary(K, torch.arange(T_k))
    mask = None if valid_lens is None else d2lh.valid_lens_to_mask(valid_lens, T_q, T_k)[:, None]
    heads = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, enable_gqa=True)
    return layer.W_o(heads.transpose(1, 2).reshape(B, T_q, -1))


@pytest.mark.parametrize("h, g", [(4, 4), (4, 2), (4, 1), (6, 3)])
@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_gqa_equals_scaled_dot_product_attention_with_enable_gqa(h, g, rotary, need_weights):
    layer = random_gqa(24, h, g, rotary, bias=True)
    torch.manual_seed(2)
    queries, keys = torch.randn(3, 5, 24, dtype=F64), torch.randn(3, 7, 24, dtype=F64)
    values = torch.randn(3, 7, 24, dtype=F64)
    for valid_lens in (None, torch.tensor([7, 2, 0]), torch.tensor([[1, 2, 3, 4, 5]] * 3)):
        got = layer(queries, keys, values, valid_lens, need_weights=need_weights)
        torch.testing.assert_close(got, reference_gqa(layer, queries, keys, values, valid_lens))
        if need_weights:
            weights = layer.attention_weights
            assert weights.shape == (3, h, 5, 7)
            if valid_lens is not None and valid_lens.dim() == 1:
                assert torch.all(weights[2] == 0)  # no valid key: no weight, no NaN
                assert torch.all(weights[1, ..., 2:] == 0)
        else:
            assert layer.attention_weights is None


def test_gqa_with_as_many_key_value_heads_as_query_heads_is_multi_head_attention():
    torch.manual_seed(3)
    mha = d2lh.MultiHeadAttention(16, 4, bias=True).double().eval()
    gqa = d2lh.GroupedQueryAttention(16, 4, 4, bias=True).double().eval()
    gqa.load_state_dict({k: v for k, v in mha.state_dict().items()})
    X, Y = torch.randn(2, 5, 16, dtype=F64), torch.randn(2, 6, 16, dtype=F64)
    for lens in (None, torch.tensor([6, 3]), torch.tensor([[1, 2, 3, 4, 5], [6, 0, 2, 2, 1]])):
        for need_weights in (True, False):
            torch.testing.assert_close(gqa(X, Y, Y, lens, need_weights),
                                       mha(X, Y, Y, lens, need_weights))
    gqa(X, Y, Y, need_weights=True)
    mha(X, Y, Y, need_weights=True)
    torch.testing.assert_close(gqa.attention_weights, mha.attention_weights)


def test_query_heads_of_a_group_share_their_key_value_head():
    layer = random_gqa(8, 4, 2)
    X = torch.randn(1, 3, 8, dtype=F64)
    with torch.no_grad():  # give query heads 0 and 1 the same projection: same group, same weights
        layer.W_q.weight[2:4] = layer.W_q.weight[0:2]
        layer.W_q.weight[4:6] = layer.W_q.weight[0:2]  # head 2, in the other group
    layer(X, X, X, need_weights=True)
    w = layer.attention_weights[0]
    torch.testing.assert_close(w[0], w[1])
    assert not torch.allclose(w[0], w[2])


@pytest.mark.parametrize("h, g", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("chunks", [(1, 1, 1, 1, 1, 1), (2, 3, 1), (6,)])
def test_gqa_step_with_a_cache_equals_causal_attention_over_everything(h, g, chunks):
    layer = random_gqa(8, h, g, rotary=True)
    X = torch.randn(2, 6, 8, dtype=F64)
    causal = d2lh.causal_valid_lens(2, 6)
    expected = reference_gqa(layer, X, X, X, causal)
    cache, outputs, start = KVCache(), [], 0
    for size in chunks:
        outputs.append(layer.step(X[:, start:start + size], cache))
        start += size
        assert cache.keys.shape == (2, g, start, 2)  # (B, g, T_seen, d_k): g heads, not h
    torch.testing.assert_close(torch.cat(outputs, dim=1), expected)
    torch.testing.assert_close(layer.step(X, KVCache(), need_weights=True), expected)


@pytest.mark.parametrize("call, message", [
    (lambda: d2lh.GroupedQueryAttention(12, 4, 3), "num_kv_heads must divide num_heads"),
    (lambda: d2lh.GroupedQueryAttention(10, 4, 2), "num_heads must divide d_model"),
    (lambda: d2lh.GroupedQueryAttention(8, 2, 0), "num_kv_heads must be a positive int"),
    (lambda: d2lh.GroupedQueryAttention(8, 2)(torch.zeros(1, 3, 8), torch.zeros(1, 4, 6),
                                              torch.zeros(1, 4, 6)), r"keys must have shape"),
    (lambda: d2lh.GroupedQueryAttention(8, 2)(torch.zeros(1, 3, 8), torch.zeros(1, 4, 8),
                                              torch.zeros(1, 4, 8), torch.tensor([5])),
     r"valid_lens must lie in \[0, T_k=4\]"),
    (lambda: d2lh.GroupedQueryAttention(8, 4, 2).attend(torch.zeros(1, 3, 8), KVCache()),
     "the cache must hold keys"),
])
def test_gqa_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_kv_cache_bytes_counts_keys_and_values_of_every_layer():
    assert d2lh.kv_cache_bytes(32, 8, 128, num_tokens=4096, batch_size=2) == \
        2 * 32 * 8 * 128 * 4096 * 2 * 2
    model = d2lh.DecoderOnlyLM(20, d_model=16, num_heads=4, num_kv_heads=2, num_layers=3).eval()
    state = model.init_state()
    model.step(torch.randint(20, (5, 7)), state)
    assert state.nbytes == d2lh.kv_cache_bytes(3, 2, 4, num_tokens=7, batch_size=5,
                                               bytes_per_number=4)
    with pytest.raises(ValueError, match="num_kv_heads"):
        d2lh.kv_cache_bytes(2, 0, 4)


# --------------------------------------------------------------------------------------------------
# Online softmax


@pytest.mark.parametrize("heads", [False, True])
@pytest.mark.parametrize("block_size", [1, 3, 4, 64])
def test_online_softmax_attention_equals_fused_attention(heads, block_size):
    torch.manual_seed(4)
    lead = (3, 2) if heads else (3,)
    Q, K = torch.randn(*lead, 5, 6, dtype=F64), torch.randn(*lead, 9, 6, dtype=F64)
    V = torch.randn(*lead, 9, 4, dtype=F64) * 3
    lens_cases = [None, torch.tensor([9, 4, 0]), torch.tensor([[1, 3, 5, 7, 9], [2, 2, 0, 9, 1],
                                                               [9, 9, 9, 9, 9]])]
    for lens in lens_cases:
        got = d2lh.online_softmax_attention(Q, K, V, lens, block_size=block_size)
        mask = None
        if lens is not None:
            mask = d2lh.valid_lens_to_mask(lens, 5, 9)
            mask = mask[:, None] if heads else mask
        torch.testing.assert_close(got, F.scaled_dot_product_attention(Q, K, V, attn_mask=mask))
        assert torch.isfinite(got).all()


def test_online_softmax_survives_scores_that_overflow_a_plain_exp():
    q = torch.full((1, 1, 2), 300.0)
    k = torch.tensor([[[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]])  # scores ~ 400 .. 1300: exp overflows
    v = torch.tensor([[[1.0], [2.0], [3.0]]])
    assert not torch.isfinite(torch.exp(q @ k.transpose(1, 2))).all()
    torch.testing.assert_close(d2lh.online_softmax_attention(q, k, v, block_size=1),
                               F.scaled_dot_product_attention(q, k, v))


def test_online_softmax_update_step_by_step():
    scores = torch.tensor([[0.5, -math.inf, 2.0, 1.0]], dtype=F64)  # one query, four keys
    values = torch.tensor([[1.0], [10.0], [2.0], [3.0]], dtype=F64)
    m, l, acc = (torch.tensor([[-math.inf]], dtype=F64), torch.zeros(1, 1, dtype=F64),
                 torch.zeros(1, 1, dtype=F64))
    # a block with only a masked key: nothing changes, nothing becomes NaN
    m, l, acc = d2lh.online_softmax_update(m, l, acc, scores[:, 1:2], values[1:2])
    assert m.item() == -math.inf and l.item() == 0 and acc.item() == 0
    for j in (0, 2, 3):
        m, l, acc = d2lh.online_softmax_update(m, l, acc, scores[:, j:j + 1], values[j:j + 1])
        seen = scores[:, :j + 1]
        assert m.item() == seen.max().item()
        torch.testing.assert_close(l, torch.exp(seen - m).sum(dim=-1, keepdim=True))
    torch.testing.assert_close(acc / l, torch.softmax(scores, dim=-1) @ values)


def test_online_softmax_bad_input_raises():
    with pytest.raises(ValueError, match="do not fit"):
        d2lh.online_softmax_attention(torch.zeros(2, 3, 4), torch.zeros(2, 5, 3), torch.zeros(2, 5, 2))
    with pytest.raises(ValueError, match="block_size"):
        d2lh.online_softmax_attention(torch.zeros(2, 3, 4), torch.zeros(2, 5, 4),
                                      torch.zeros(2, 5, 2), block_size=0)
    with pytest.raises(ValueError, match="valid_lens"):
        d2lh.online_softmax_attention(torch.zeros(2, 3, 4), torch.zeros(2, 5, 4),
                                      torch.zeros(2, 5, 2), torch.tensor([6, 1]))


def test_memory_tracker_counts_what_is_held_at_once():
    before = torch.ones(1000)  # made before the block: not counted
    with d2lh.TensorMemoryTracker() as tracker:
        a = torch.zeros(256)  # 1,024 bytes
        view = a[10:20].view(2, 5)  # a view: no new memory
        b = a + 1  # 1,024 more: peak 2,048
        del a, view, b  # both freed
        c = torch.zeros(128, dtype=F64)  # 1,024 bytes again
        before.mul_(2)  # in place: nothing new
    assert tracker.peak_bytes == 2048
    assert tracker.current_bytes == 1024 and c.numel() == 128


def test_online_softmax_holds_less_than_the_weights_and_grows_linearly():
    peaks = {}
    for T in (512, 1024):
        Q = K = V = torch.randn(1, T, 8)
        with d2lh.TensorMemoryTracker() as naive:
            d2lh.DotProductAttention()(Q, K, V)
        with d2lh.TensorMemoryTracker() as online:
            d2lh.online_softmax_attention(Q, K, V, block_size=32)
        peaks[T] = naive.peak_bytes, online.peak_bytes
        assert naive.peak_bytes >= T * T * 4 and naive.peak_bytes > 8 * online.peak_bytes
    assert peaks[1024][0] > 3.5 * peaks[512][0] and peaks[1024][1] < 2.5 * peaks[512][1]


# --------------------------------------------------------------------------------------------------
# The decoder-only model


def test_decoder_only_block_is_pre_norm_attention_then_ffn():
    torch.manual_seed(5)
    block = d2lh.DecoderOnlyBlock(8, 4, 2, ffn_hidden=16).eval()
    X = torch.randn(2, 5, 8)
    causal = d2lh.causal_valid_lens(2, 5)
    h = block.norm1(X)
    X1 = X + block.attention(h, h, h, causal)
    expected = X1 + block.ffn(block.norm2(X1))
    torch.testing.assert_close(block(X), expected)


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
    with pytest.raises(ValueError, match=r"tokens must be indices of shape \(B, T\)"):
        model(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="3 caches for 2 blocks"):
        model.step(torch.zeros(1, 2, dtype=torch.long), d2lh.LMState([KVCache()] * 3))


# --------------------------------------------------------------------------------------------------
# Sampling and generation


def test_next_token_probs_temperature_and_top_k():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 1.0, 1.5]])
    torch.testing.assert_close(d2lh.next_token_probs(logits), torch.softmax(logits, dim=-1))
    torch.testing.assert_close(d2lh.next_token_probs(logits, temperature=0.5),
                               torch.softmax(2 * logits, dim=-1))
    greedy = d2lh.next_token_probs(logits, temperature=0)
    assert torch.equal(greedy, torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0]]))
    top2 = d2lh.next_token_probs(logits, top_k=2)
    assert torch.equal(top2 > 0, torch.tensor([[True, True, False, False], [False, True, False, True]]))
    torch.testing.assert_close(top2.sum(dim=-1), torch.ones(2))
    torch.testing.assert_close(top2[0, :2], torch.softmax(logits[0, :2], dim=-1))
    torch.testing.assert_close(d2lh.next_token_probs(logits, top_k=10), torch.softmax(logits, -1))
    hot, cold = (d2lh.next_token_probs(logits, temperature=t).max(dim=-1).values for t in (2.0, 0.5))
    assert torch.all(hot < torch.softmax(logits, -1).max(dim=-1).values) and torch.all(cold > hot)
    for bad, message in [({"temperature": -1.0}, "temperature"), ({"top_k": 0}, "top_k"),
                         ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p")]:
        with pytest.raises(ValueError, match=message):
            d2lh.next_token_probs(logits, **bad)


def test_top_p_keeps_the_nucleus():
    probs = torch.tensor([[0.5, 0.05, 0.3, 0.15], [0.25, 0.25, 0.25, 0.25]])
    logits = probs.log()
    # row 0: 0.5, then 0.5 + 0.3 = 0.8 >= 0.75: tokens 0 and 2 kept; row 1: three tokens reach 0.75
    got = d2lh.next_token_probs(logits, top_p=0.75)
    torch.testing.assert_close(got[0], torch.tensor([0.5, 0, 0.3, 0]) / 0.8)
    assert int((got[1] > 0).sum()) == 3
    torch.testing.assert_close(d2lh.next_token_probs(logits, top_p=0.4)[0], torch.tensor([1.0, 0, 0, 0]))
    torch.testing.assert_close(d2lh.next_token_probs(logits, top_p=1.0), probs)
    # with top_k, the nucleus is taken among the k kept tokens, after renormalising them
    both = d2lh.next_token_probs(logits, top_k=2, top_p=0.6)  # row 0: 0.5/0.8, 0.3/0.8 -> 0.625
    torch.testing.assert_close(both[0], torch.tensor([1.0, 0, 0, 0]))


def test_generate_with_and_without_cache_greedy_and_sampled():
    model = small_lm()
    prompt = torch.randint(30, (4, 3))
    cached = d2lh.generate(model, prompt, 12, temperature=0)
    assert cached.shape == (4, 12)
    assert torch.equal(cached, d2lh.generate(model, prompt, 12, temperature=0, use_cache=False))
    assert torch.equal(cached, d2lh.generate(model, prompt, 12, top_k=1))  # top-1 is greedy
    assert torch.equal(cached, d2lh.generate(model, prompt, 12, top_p=1e-6))  # so is a tiny nucleus
    draws = [d2lh.generate(model, prompt, 12, temperature=1.5,
                           generator=torch.Generator().manual_seed(0)) for _ in range(2)]
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], cached)
    # greedy continuation equals the argmax of teacher forcing on the generated sequence
    sequence = torch.cat([prompt, cached], dim=1)
    with torch.no_grad():
        assert torch.equal(model(sequence)[:, 2:-1].argmax(dim=-1), cached)


def test_generate_keeps_finished_rows_at_eos_and_stops():
    model = small_lm()
    prompt = torch.randint(30, (3, 2))
    free = d2lh.generate(model, prompt, 6, temperature=0)
    eos = int(free[0, 1])  # row 0 produces it at its second token
    out = d2lh.generate(model, prompt, 50, temperature=0, eos=eos)
    assert torch.all(out[0, 1:] == eos)
    for row in range(3):
        produced = (out[row] == eos).nonzero()
        if len(produced):
            assert torch.all(out[row, produced[0, 0]:] == eos)
    assert out.shape[1] == 50 or torch.all((out == eos).any(dim=1))
    with pytest.raises(ValueError, match="prompt must have shape"):
        d2lh.generate(model, torch.zeros(3, 0, dtype=torch.long), 5)
