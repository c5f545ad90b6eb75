"""Held-out trial 2: wrong answers to the notebooks' coding exercises, written blind to the checks'
catalogues of mistakes (the MISTAKES dicts, the ``_wrong_*`` functions and the checks' tests were
not read; only each check's docstring, the exercise statements and their solutions).

Each wrong answer is what a learner could plausibly write: the notebook's right answer with one
classic mistake, named in a one-line comment above it and in its registration
(``@wrong(check, mistake)``). ``CONTROLS`` holds one right answer per check (the notebooks'
solutions, rewritten with the package's helpers), so that a run can tell a broken harness from a
check that fails a right answer.

Not a pytest module (no ``test_`` prefix): ``benchmarks/diagnoses_trial.py`` runs every wrong
answer through its check and prints the table of diagnoses.
"""

from __future__ import annotations

import math

import torch
from torch import nn

import d2lhelpers as d2lh

# (check name, the mistake in plain words, the learner's function or class)
MISTAKES: list[tuple[str, str, object]] = []
# check name -> a right answer (the harness's control)
CONTROLS: dict[str, object] = {}


def wrong(check: str, mistake: str):
    def register(fn):
        MISTAKES.append((check, mistake, fn))
        return fn
    return register


def right(check: str):
    def register(fn):
        CONTROLS[check] = fn
        return fn
    return register


# =================================================================================================
# 02 Nadaraya-Watson: check_loo_error (check_laplace_pooling, in the trial as first run, went with
# its exercise: its 3 wrong answers, all named, were removed)
# =================================================================================================

@right("check_loo_error")
def loo_ok(x, y, width):
    scores = -((x[:, None] - x[None, :]) / width) ** 2 / 2
    itself = torch.eye(len(x), dtype=torch.bool, device=x.device)
    weights = torch.softmax(scores.masked_fill(itself, -math.inf), dim=1)
    return ((weights @ y - y) ** 2).mean().item()


# Point i is not left out: each y_i is predicted from all points, itself included
@wrong("check_loo_error", "point i not left out (diagonal not masked)")
def loo_self_included(x, y, width):
    scores = -((x[:, None] - x[None, :]) / width) ** 2 / 2
    weights = torch.softmax(scores, dim=1)
    return ((weights @ y - y) ** 2).mean().item()


# The 1/2 of the Gaussian exponent forgotten
@wrong("check_loo_error", "the /2 of the Gaussian exponent left out")
def loo_no_half(x, y, width):
    scores = -((x[:, None] - x[None, :]) / width) ** 2
    itself = torch.eye(len(x), dtype=torch.bool, device=x.device)
    weights = torch.softmax(scores.masked_fill(itself, -math.inf), dim=1)
    return ((weights @ y - y) ** 2).mean().item()


# Softmax over dim 0 (the column of each key) instead of each query's row
@wrong("check_loo_error", "softmax over the wrong axis (dim 0)")
def loo_wrong_axis(x, y, width):
    scores = -((x[:, None] - x[None, :]) / width) ** 2 / 2
    itself = torch.eye(len(x), dtype=torch.bool, device=x.device)
    weights = torch.softmax(scores.masked_fill(itself, -math.inf), dim=0)
    return ((weights @ y - y) ** 2).mean().item()


# =================================================================================================
# 04 Multi-head attention: check_per_head_weights, check_to_torch_multihead,
# check_packed_self_attention
# =================================================================================================

def _heads_scores(mha, queries, keys, scale=True):
    Q, K = mha.split_heads(mha.W_q(queries)), mha.split_heads(mha.W_k(keys))  # (B, h, T, d_k)
    scores = Q @ K.transpose(-1, -2)
    return scores / math.sqrt(mha.d_k) if scale else scores


def _fold_softmax(scores, lens):
    """(B, h, T_q, T_k) scores, lens for (B*h) rows -> (B, h, T_q, T_k) weights."""
    B, h = scores.shape[:2]
    return d2lh.masked_softmax(scores.flatten(0, 1), lens).unflatten(0, (B, h))


@right("check_per_head_weights")
def per_head_ok(mha, queries, keys, valid_lens=None):
    h = mha.num_heads
    lens = None if valid_lens is None else valid_lens.repeat_interleave(h, dim=0)
    return _fold_softmax(_heads_scores(mha, queries, keys), lens)


# Scores not divided by sqrt(d_k)
@wrong("check_per_head_weights", "scores not scaled by 1/sqrt(d_k)")
def per_head_no_scale(mha, queries, keys, valid_lens=None):
    h = mha.num_heads
    lens = None if valid_lens is None else valid_lens.repeat_interleave(h, dim=0)
    return _fold_softmax(_heads_scores(mha, queries, keys, scale=False), lens)


# Lengths tiled with repeat (b0, b1, b0, b1) instead of repeat_interleave (b0, b0, b1, b1)
@wrong("check_per_head_weights", "valid_lens repeated with repeat instead of repeat_interleave")
def per_head_repeat(mha, queries, keys, valid_lens=None):
    h = mha.num_heads
    if valid_lens is None:
        lens = None
    elif valid_lens.dim() == 1:
        lens = valid_lens.repeat(h)
    else:
        lens = valid_lens.repeat(h, 1)
    return _fold_softmax(_heads_scores(mha, queries, keys), lens)


# Heads cut as strided features (reshape (B, T, d_k, h)) instead of consecutive blocks
@wrong("check_per_head_weights", "head split takes strided features (reshape to (d_k, h))")
def per_head_strided_split(mha, queries, keys, valid_lens=None):
    h, d_k = mha.num_heads, mha.d_k
    B, T_q, _ = queries.shape
    T_k = keys.shape[1]
    Q = mha.W_q(queries).reshape(B, T_q, d_k, h).permute(0, 3, 1, 2)
    K = mha.W_k(keys).reshape(B, T_k, d_k, h).permute(0, 3, 1, 2)
    lens = None if valid_lens is None else valid_lens.repeat_interleave(h, dim=0)
    return _fold_softmax(Q @ K.transpose(-1, -2) / math.sqrt(d_k), lens)


# valid_lens never used: a plain softmax over all keys
@wrong("check_per_head_weights", "mask ignored (plain softmax, valid_lens unused)")
def per_head_no_mask(mha, queries, keys, valid_lens=None):
    return torch.softmax(_heads_scores(mha, queries, keys), dim=-1)


def _torch_mha(mha, order=("W_q", "W_k", "W_v"), transpose=False, biases=True, out=True):
    with_bias = mha.W_q.bias is not None and biases
    layer = nn.MultiheadAttention(mha.d_model, mha.num_heads, bias=with_bias, batch_first=True,
                                  device=mha.W_q.weight.device)
    projections = [getattr(mha, name) for name in order]
    with torch.no_grad():
        weight = torch.cat([p.weight.T if transpose else p.weight for p in projections])
        layer.in_proj_weight.copy_(weight)
        if out:
            layer.out_proj.weight.copy_(mha.W_o.weight.T if transpose else mha.W_o.weight)
        if with_bias:
            layer.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))
            if out:
                layer.out_proj.bias.copy_(mha.W_o.bias)
    return layer


@right("check_to_torch_multihead")
def to_torch_ok(mha):
    return _torch_mha(mha)


# in_proj_weight stacked keys, queries, values instead of queries, keys, values
@wrong("check_to_torch_multihead", "projections stacked in the order K, Q, V")
def to_torch_kqv(mha):
    return _torch_mha(mha, order=("W_k", "W_q", "W_v"))


# Each weight copied transposed (x @ W instead of W x: nn.Linear keeps (out, in))
@wrong("check_to_torch_multihead", "weight matrices copied transposed")
def to_torch_transposed(mha):
    return _torch_mha(mha, transpose=True)


# The layer built with bias=False whatever mha has: its biases are dropped
@wrong("check_to_torch_multihead", "biases dropped (bias=False always)")
def to_torch_no_bias(mha):
    return _torch_mha(mha, biases=False)


# The output projection left at PyTorch's random initialisation
@wrong("check_to_torch_multihead", "out_proj not copied (W_o left random)")
def to_torch_no_out_proj(mha):
    return _torch_mha(mha, out=False)


class _PackedBase(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)
        self.attention_weights = None

    def _qkv(self, X):
        B, T, _ = X.shape
        return self.W_qkv(X).reshape(B, T, 3, self.num_heads, self.d_k).permute(2, 0, 3, 1, 4)

    @staticmethod
    def _lens(valid_lens, h):
        return None if valid_lens is None else valid_lens.repeat_interleave(h, dim=0)


@right("check_packed_self_attention")
class PackedOk(_PackedBase):
    def forward(self, X, valid_lens=None):
        B, T, d_model = X.shape
        Q, K, V = self._qkv(X)
        weights = _fold_softmax(Q @ K.transpose(-1, -2) / math.sqrt(self.d_k),
                                self._lens(valid_lens, self.num_heads))
        self.attention_weights = weights.detach()
        return self.W_o((weights @ V).transpose(1, 2).reshape(B, T, d_model))


# Packed features read as per head [q, k, v] (reshape (B, T, h, 3, d_k)), not [Q | K | V]
@wrong("check_packed_self_attention", "packed output split per head (h, 3, d_k) instead of (3, h, d_k)")
class PackedInterleaved(_PackedBase):
    def forward(self, X, valid_lens=None):
        B, T, d_model = X.shape
        Q, K, V = self.W_qkv(X).reshape(B, T, self.num_heads, 3, self.d_k).permute(3, 0, 2, 1, 4)
        weights = _fold_softmax(Q @ K.transpose(-1, -2) / math.sqrt(self.d_k),
                                self._lens(valid_lens, self.num_heads))
        self.attention_weights = weights.detach()
        return self.W_o((weights @ V).transpose(1, 2).reshape(B, T, d_model))


# Scores not divided by sqrt(d_k)
@wrong("check_packed_self_attention", "scores not scaled by 1/sqrt(d_k)")
class PackedNoScale(_PackedBase):
    def forward(self, X, valid_lens=None):
        B, T, d_model = X.shape
        Q, K, V = self._qkv(X)
        weights = _fold_softmax(Q @ K.transpose(-1, -2), self._lens(valid_lens, self.num_heads))
        self.attention_weights = weights.detach()
        return self.W_o((weights @ V).transpose(1, 2).reshape(B, T, d_model))


# Heads merged by reshaping (B, h, T, d_k) straight to (B, T, d_model), no transpose first
@wrong("check_packed_self_attention", "heads merged without transposing h and T")
class PackedMergeNoTranspose(_PackedBase):
    def forward(self, X, valid_lens=None):
        B, T, d_model = X.shape
        Q, K, V = self._qkv(X)
        weights = _fold_softmax(Q @ K.transpose(-1, -2) / math.sqrt(self.d_k),
                                self._lens(valid_lens, self.num_heads))
        self.attention_weights = weights.detach()
        return self.W_o((weights @ V).reshape(B, T, d_model))


# attention_weights keeps the scaled scores (before the softmax) instead of the weights
@wrong("check_packed_self_attention", "attention_weights stores the scores, not the softmax")
class PackedKeepsScores(_PackedBase):
    def forward(self, X, valid_lens=None):
        B, T, d_model = X.shape
        Q, K, V = self._qkv(X)
        scores = Q @ K.transpose(-1, -2) / math.sqrt(self.d_k)
        weights = _fold_softmax(scores, self._lens(valid_lens, self.num_heads))
        self.attention_weights = scores.detach()
        return self.W_o((weights @ V).transpose(1, 2).reshape(B, T, d_model))


# =================================================================================================
# 05 Self-attention and positional encoding: check_sinusoidal_table, check_relative_self_attention
# =================================================================================================

@right("check_sinusoidal_table")
def sinusoidal_ok(max_len, d):
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    frequencies = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.empty(max_len, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequencies)
    table[:, 1::2] = torch.cos(position * frequencies[: d // 2])
    return table


# Exponent j/d instead of 2j/d (frequency index of the pair, not of the column)
@wrong("check_sinusoidal_table", "exponent j/d instead of 2j/d")
def sinusoidal_j_not_2j(max_len, d):
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    frequencies = 10000 ** (-torch.arange((d + 1) // 2, dtype=torch.float64) / d)
    table = torch.empty(max_len, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequencies)
    table[:, 1::2] = torch.cos(position * frequencies[: d // 2])
    return table


# Cosine in the even columns and sine in the odd ones
@wrong("check_sinusoidal_table", "sin and cos swapped (cos in even columns)")
def sinusoidal_swapped(max_len, d):
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    frequencies = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.empty(max_len, d, dtype=torch.float64)
    table[:, 0::2] = torch.cos(position * frequencies)
    table[:, 1::2] = torch.sin(position * frequencies[: d // 2])
    return table


# Positions counted from 1 instead of 0
@wrong("check_sinusoidal_table", "positions start at 1 instead of 0")
def sinusoidal_from_one(max_len, d):
    position = torch.arange(1, max_len + 1, dtype=torch.float64)[:, None]
    frequencies = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.empty(max_len, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequencies)
    table[:, 1::2] = torch.cos(position * frequencies[: d // 2])
    return table


# Only the complete pairs filled: an odd width's last (sine) column stays 0
@wrong("check_sinusoidal_table", "odd width: last sine column left at 0")
def sinusoidal_odd_last_zero(max_len, d):
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    pairs = d // 2
    frequencies = 10000 ** (-torch.arange(0, 2 * pairs, 2, dtype=torch.float64) / d)
    table = torch.zeros(max_len, d, dtype=torch.float64)
    table[:, 0:2 * pairs:2] = torch.sin(position * frequencies)
    table[:, 1:2 * pairs:2] = torch.cos(position * frequencies)
    return table


class _RelativeBase(nn.Module):
    def __init__(self, d_model, max_distance):
        super().__init__()
        self.max_distance = max_distance
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, d_model, bias=False)
        self.relative_bias = nn.Parameter(torch.zeros(2 * max_distance + 1))
        self.attention_weights = None

    def _offsets(self, X):
        index = torch.arange(X.shape[1], device=X.device)
        return index[None, :] - index[:, None]  # key j minus query i

    def _finish(self, X, scores, valid_lens):
        weights = d2lh.masked_softmax(scores, valid_lens)
        self.attention_weights = weights.detach()
        return weights @ self.W_v(X)


@right("check_relative_self_attention")
class RelativeOk(_RelativeBase):
    def forward(self, X, valid_lens=None):
        m = self.max_distance
        bias = self.relative_bias[self._offsets(X).clamp(-m, m) + m]
        scores = self.W_q(X) @ self.W_k(X).transpose(1, 2) / math.sqrt(X.shape[-1]) + bias
        return self._finish(X, scores, valid_lens)


# Offset taken as query minus key (i - j) instead of key minus query (j - i)
@wrong("check_relative_self_attention", "offset i - j instead of j - i")
class RelativeReversed(_RelativeBase):
    def forward(self, X, valid_lens=None):
        m = self.max_distance
        bias = self.relative_bias[(-self._offsets(X)).clamp(-m, m) + m]
        scores = self.W_q(X) @ self.W_k(X).transpose(1, 2) / math.sqrt(X.shape[-1]) + bias
        return self._finish(X, scores, valid_lens)


# Clipped offset used as the index without adding max_distance (negative ones wrap around)
@wrong("check_relative_self_attention", "index not shifted by max_distance")
class RelativeNoShift(_RelativeBase):
    def forward(self, X, valid_lens=None):
        m = self.max_distance
        bias = self.relative_bias[self._offsets(X).clamp(-m, m)]
        scores = self.W_q(X) @ self.W_k(X).transpose(1, 2) / math.sqrt(X.shape[-1]) + bias
        return self._finish(X, scores, valid_lens)


# The bias added before the division by sqrt(d): it gets scaled too
@wrong("check_relative_self_attention", "bias divided by sqrt(d) along with the dot products")
class RelativeScaledBias(_RelativeBase):
    def forward(self, X, valid_lens=None):
        m = self.max_distance
        bias = self.relative_bias[self._offsets(X).clamp(-m, m) + m]
        scores = (self.W_q(X) @ self.W_k(X).transpose(1, 2) + bias) / math.sqrt(X.shape[-1])
        return self._finish(X, scores, valid_lens)


# Offsets not clipped to [-max_distance, max_distance]
@wrong("check_relative_self_attention", "offsets not clipped")
class RelativeNoClip(_RelativeBase):
    def forward(self, X, valid_lens=None):
        m = self.max_distance
        bias = self.relative_bias[self._offsets(X) + m]
        scores = self.W_q(X) @ self.W_k(X).transpose(1, 2) / math.sqrt(X.shape[-1]) + bias
        return self._finish(X, scores, valid_lens)


# =================================================================================================
# 06 Transformer: check_cached_block_step (with notebook 06's `attend`)
# =================================================================================================

def attend(attention, x, keys, values, valid_lens):
    """Notebook 06, section 7: queries x attend over projected keys and values (B, h, T_k, d_k)."""
    B, h = x.shape[0], attention.num_heads
    q = attention.split_heads(attention.W_q(x))
    lens = None if valid_lens is None else valid_lens.repeat_interleave(h, dim=0)
    heads = d2lh.DotProductAttention()(q.flatten(0, 1), keys.flatten(0, 1), values.flatten(0, 1),
                                       lens)
    return attention.W_o(attention.merge_heads(heads.unflatten(0, (B, h))))


def _sublayer(add_norm, x, f, norm_first=None):
    norm_first = add_norm.norm_first if norm_first is None else norm_first
    return x + f(add_norm.norm(x)) if norm_first else add_norm.norm(x + f(x))


def _block_rest(block, x, enc_keys, enc_values, src_valid_lens, norm_first=None):
    x = _sublayer(block.add_norm2, x, lambda h: attend(block.cross_attention, h, enc_keys,
                                                       enc_values, src_valid_lens), norm_first)
    return _sublayer(block.add_norm3, x, block.ffn, norm_first)


@right("check_cached_block_step")
def block_step_ok(block, x, cache, enc_keys, enc_values, src_valid_lens):
    def masked_self_attention(h):
        a = block.self_attention
        cache.append(a.split_heads(a.W_k(h)), a.split_heads(a.W_v(h)))
        causal = d2lh.causal_valid_lens(h.shape[0], h.shape[1], len(cache) - h.shape[1], h.device)
        return attend(a, h, cache.keys, cache.values, causal)

    x = _sublayer(block.add_norm1, x, masked_self_attention)
    return _block_rest(block, x, enc_keys, enc_values, src_valid_lens)


# New keys and values concatenated into a local tensor: the cache itself is never appended to
@wrong("check_cached_block_step", "cache not updated (keys concatenated locally)")
def block_step_cache_not_updated(block, x, cache, enc_keys, enc_values, src_valid_lens):
    def masked_self_attention(h):
        a = block.self_attention
        k, v = a.split_heads(a.W_k(h)), a.split_heads(a.W_v(h))
        if len(cache):
            k, v = torch.cat([cache.keys, k], dim=2), torch.cat([cache.values, v], dim=2)
        causal = d2lh.causal_valid_lens(h.shape[0], h.shape[1], k.shape[2] - h.shape[1], h.device)
        return attend(a, h, k, v, causal)

    x = _sublayer(block.add_norm1, x, masked_self_attention)
    return _block_rest(block, x, enc_keys, enc_values, src_valid_lens)


# Causal lengths 1..T_new, forgetting the offset of the positions already cached
@wrong("check_cached_block_step", "causal mask without the cache offset")
def block_step_no_offset(block, x, cache, enc_keys, enc_values, src_valid_lens):
    def masked_self_attention(h):
        a = block.self_attention
        cache.append(a.split_heads(a.W_k(h)), a.split_heads(a.W_v(h)))
        causal = d2lh.causal_valid_lens(h.shape[0], h.shape[1], 0, h.device)
        return attend(a, h, cache.keys, cache.values, causal)

    x = _sublayer(block.add_norm1, x, masked_self_attention)
    return _block_rest(block, x, enc_keys, enc_values, src_valid_lens)


# Every sublayer post-norm, norm_first ignored
@wrong("check_cached_block_step", "always post-norm (norm_first ignored)")
def block_step_always_post_norm(block, x, cache, enc_keys, enc_values, src_valid_lens):
    def masked_self_attention(h):
        a = block.self_attention
        cache.append(a.split_heads(a.W_k(h)), a.split_heads(a.W_v(h)))
        causal = d2lh.causal_valid_lens(h.shape[0], h.shape[1], len(cache) - h.shape[1], h.device)
        return attend(a, h, cache.keys, cache.values, causal)

    x = _sublayer(block.add_norm1, x, masked_self_attention, norm_first=False)
    return _block_rest(block, x, enc_keys, enc_values, src_valid_lens, norm_first=False)


# Pre-norm: keys and values cached from the block's input x instead of the normalised x
@wrong("check_cached_block_step", "pre-norm: keys/values projected from un-normalised x")
def block_step_keys_unnormalised(block, x, cache, enc_keys, enc_values, src_valid_lens):
    x_in = x

    def masked_self_attention(h):
        a = block.self_attention
        cache.append(a.split_heads(a.W_k(x_in)), a.split_heads(a.W_v(x_in)))
        causal = d2lh.causal_valid_lens(h.shape[0], h.shape[1], len(cache) - h.shape[1], h.device)
        return attend(a, h, cache.keys, cache.values, causal)

    x = _sublayer(block.add_norm1, x, masked_self_attention)
    return _block_rest(block, x, enc_keys, enc_values, src_valid_lens)


# =================================================================================================
# 07 Translation: check_cached_greedy_decode, check_translation_log_prob
# =================================================================================================

@right("check_cached_greedy_decode")
@torch.no_grad()
def greedy_ok(model, src, src_valid_lens, bos, eos, max_len):
    model.eval()
    state = model.decoder.init_state(model.encoder(src, src_valid_lens), src_valid_lens)
    newest = torch.full((src.shape[0], 1), bos, device=src.device)
    finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    outputs = []
    for _ in range(max_len):
        logits = model.decoder.step(newest, state)
        newest = logits[:, -1].argmax(dim=-1).masked_fill(finished, eos)[:, None]
        outputs.append(newest)
        finished |= newest[:, 0] == eos
        if finished.all():
            break
    return torch.cat(outputs, dim=1)


# Finished sentences go on with whatever the model predicts, not <eos>
@wrong("check_cached_greedy_decode", "finished sentences not forced to keep emitting <eos>")
@torch.no_grad()
def greedy_no_eos_fill(model, src, src_valid_lens, bos, eos, max_len):
    model.eval()
    state = model.decoder.init_state(model.encoder(src, src_valid_lens), src_valid_lens)
    newest = torch.full((src.shape[0], 1), bos, device=src.device)
    finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    outputs = []
    for _ in range(max_len):
        newest = model.decoder.step(newest, state)[:, -1].argmax(dim=-1)[:, None]
        outputs.append(newest)
        finished |= newest[:, 0] == eos
        if finished.all():
            break
    return torch.cat(outputs, dim=1)


# <bos> kept as the first column of the output
@wrong("check_cached_greedy_decode", "<bos> left in the output")
@torch.no_grad()
def greedy_keeps_bos(model, src, src_valid_lens, bos, eos, max_len):
    model.eval()
    state = model.decoder.init_state(model.encoder(src, src_valid_lens), src_valid_lens)
    newest = torch.full((src.shape[0], 1), bos, device=src.device)
    finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    outputs = [newest]
    for _ in range(max_len):
        logits = model.decoder.step(newest, state)
        newest = logits[:, -1].argmax(dim=-1).masked_fill(finished, eos)[:, None]
        outputs.append(newest)
        finished |= newest[:, 0] == eos
        if finished.all():
            break
    return torch.cat(outputs, dim=1)


# The loop stops as soon as any sentence has finished, not all of them
@wrong("check_cached_greedy_decode", "stops when any sentence finishes (any instead of all)")
@torch.no_grad()
def greedy_stops_on_any(model, src, src_valid_lens, bos, eos, max_len):
    model.eval()
    state = model.decoder.init_state(model.encoder(src, src_valid_lens), src_valid_lens)
    newest = torch.full((src.shape[0], 1), bos, device=src.device)
    finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    outputs = []
    for _ in range(max_len):
        logits = model.decoder.step(newest, state)
        newest = logits[:, -1].argmax(dim=-1).masked_fill(finished, eos)[:, None]
        outputs.append(newest)
        finished |= newest[:, 0] == eos
        if finished.any():
            break
    return torch.cat(outputs, dim=1)


# The whole prefix fed to step() at every step, on top of what the cache already holds
@wrong("check_cached_greedy_decode", "whole prefix re-fed to the cached decoder each step")
@torch.no_grad()
def greedy_refeeds_prefix(model, src, src_valid_lens, bos, eos, max_len):
    model.eval()
    state = model.decoder.init_state(model.encoder(src, src_valid_lens), src_valid_lens)
    tokens = torch.full((src.shape[0], 1), bos, device=src.device)
    finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decoder.step(tokens, state)
        newest = logits[:, -1].argmax(dim=-1).masked_fill(finished, eos)
        tokens = torch.cat([tokens, newest[:, None]], dim=1)
        finished |= newest == eos
        if finished.all():
            break
    return tokens[:, 1:]


def _token_log_p(model, src, src_valid_lens, tokens, bos, shift=True, normalise=True):
    B, T = tokens.shape
    dec_input = torch.cat([torch.full((B, 1), bos, device=tokens.device), tokens[:, :-1]],
                          dim=1) if shift else tokens
    out = model(src, src_valid_lens, dec_input)
    log_p = torch.log_softmax(out, dim=-1) if normalise else out
    return log_p.gather(2, tokens[..., None]).squeeze(2)


def _first_eos_lengths(tokens, eos, plus=1):
    T = tokens.shape[1]
    is_eos = tokens == eos
    return torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1) + plus, T)


def _sum_up_to(token_log_p, lengths):
    T = token_log_p.shape[1]
    counted = torch.arange(T, device=token_log_p.device)[None, :] < lengths[:, None]
    return torch.where(counted, token_log_p, 0.0).sum(dim=1)


@right("check_translation_log_prob")
@torch.no_grad()
def log_prob_ok(model, src, src_valid_lens, tokens, bos, eos):
    model.eval()
    lengths = _first_eos_lengths(tokens, eos)
    return _sum_up_to(_token_log_p(model, src, src_valid_lens, tokens, bos), lengths), lengths


# Decoder fed the tokens themselves, not shifted right behind <bos>
@wrong("check_translation_log_prob", "decoder input not shifted right (no <bos>)")
@torch.no_grad()
def log_prob_no_shift(model, src, src_valid_lens, tokens, bos, eos):
    model.eval()
    lengths = _first_eos_lengths(tokens, eos)
    token_log_p = _token_log_p(model, src, src_valid_lens, tokens, bos, shift=False)
    return _sum_up_to(token_log_p, lengths), lengths


# Counting up to the first <eos> excluded (argmax without + 1)
@wrong("check_translation_log_prob", "<eos> itself not counted (length off by one)")
@torch.no_grad()
def log_prob_eos_excluded(model, src, src_valid_lens, tokens, bos, eos):
    model.eval()
    lengths = _first_eos_lengths(tokens, eos, plus=0)
    return _sum_up_to(_token_log_p(model, src, src_valid_lens, tokens, bos), lengths), lengths


# Raw logits of the tokens summed, without log_softmax
@wrong("check_translation_log_prob", "raw logits summed (no log_softmax)")
@torch.no_grad()
def log_prob_raw_logits(model, src, src_valid_lens, tokens, bos, eos):
    model.eval()
    lengths = _first_eos_lengths(tokens, eos)
    token_log_p = _token_log_p(model, src, src_valid_lens, tokens, bos, normalise=False)
    return _sum_up_to(token_log_p, lengths), lengths


# Mean log-probability per token instead of the sum
@wrong("check_translation_log_prob", "mean per token instead of the sum")
@torch.no_grad()
def log_prob_mean(model, src, src_valid_lens, tokens, bos, eos):
    model.eval()
    lengths = _first_eos_lengths(tokens, eos)
    total = _sum_up_to(_token_log_p(model, src, src_valid_lens, tokens, bos), lengths)
    return total / lengths, lengths


# =================================================================================================
# 08 Bahdanau attention: check_gru_cell, check_luong_step
# =================================================================================================

@right("check_gru_cell")
def gru_ok(x, h, W_ih, W_hh, b_ih, b_hh):
    i_r, i_z, i_n = (x @ W_ih.T + b_ih).chunk(3, dim=-1)
    h_r, h_z, h_n = (h @ W_hh.T + b_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


# The update gate weighs the candidate, not the old state: z * n + (1 - z) * h
@wrong("check_gru_cell", "update gate convention flipped: z*n + (1-z)*h")
def gru_z_flipped(x, h, W_ih, W_hh, b_ih, b_hh):
    i_r, i_z, i_n = (x @ W_ih.T + b_ih).chunk(3, dim=-1)
    h_r, h_z, h_n = (h @ W_hh.T + b_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return z * n + (1 - z) * h


# Reset gate applied to h before its projection: W_hn (r * h) + b_hn (the paper's form)
@wrong("check_gru_cell", "reset applied to h before the projection W_hn")
def gru_reset_before_projection(x, h, W_ih, W_hh, b_ih, b_hh):
    H = h.shape[-1]
    i_r, i_z, i_n = (x @ W_ih.T + b_ih).chunk(3, dim=-1)
    h_r, h_z, _ = (h @ W_hh.T + b_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + (r * h) @ W_hh[2 * H:].T + b_hh[2 * H:])
    return (1 - z) * n + z * h


# Rows read as update, reset, candidate (z first) instead of reset, update, candidate
@wrong("check_gru_cell", "gate rows read in the order z, r, n")
def gru_gate_order(x, h, W_ih, W_hh, b_ih, b_hh):
    i_z, i_r, i_n = (x @ W_ih.T + b_ih).chunk(3, dim=-1)
    h_z, h_r, h_n = (h @ W_hh.T + b_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


@right("check_luong_step")
def luong_ok(embedded, hidden, enc_outputs, valid_lens, cell, W_a, W_c):
    new_hidden = cell(embedded, hidden)
    scores = (new_hidden @ W_a)[:, None] @ enc_outputs.transpose(1, 2)
    weights = d2lh.masked_softmax(scores, valid_lens)
    context = (weights @ enc_outputs)[:, 0]
    return torch.tanh(W_c(torch.cat([context, new_hidden], dim=-1))), new_hidden, weights[:, 0]


# The previous state asks the question (Bahdanau's order), the new one only goes into W_c
@wrong("check_luong_step", "old hidden state used as the query")
def luong_old_query(embedded, hidden, enc_outputs, valid_lens, cell, W_a, W_c):
    new_hidden = cell(embedded, hidden)
    scores = (hidden @ W_a)[:, None] @ enc_outputs.transpose(1, 2)
    weights = d2lh.masked_softmax(scores, valid_lens)
    context = (weights @ enc_outputs)[:, 0]
    return torch.tanh(W_c(torch.cat([context, new_hidden], dim=-1))), new_hidden, weights[:, 0]


# Concatenated as [s_i; c_i] instead of [c_i; s_i]
@wrong("check_luong_step", "concatenation order [s; c] instead of [c; s]")
def luong_concat_order(embedded, hidden, enc_outputs, valid_lens, cell, W_a, W_c):
    new_hidden = cell(embedded, hidden)
    scores = (new_hidden @ W_a)[:, None] @ enc_outputs.transpose(1, 2)
    weights = d2lh.masked_softmax(scores, valid_lens)
    context = (weights @ enc_outputs)[:, 0]
    return torch.tanh(W_c(torch.cat([new_hidden, context], dim=-1))), new_hidden, weights[:, 0]


# s W_a^T h instead of s W_a h (W_a applied transposed)
@wrong("check_luong_step", "W_a transposed (s @ W_a.T)")
def luong_wa_transposed(embedded, hidden, enc_outputs, valid_lens, cell, W_a, W_c):
    new_hidden = cell(embedded, hidden)
    scores = (new_hidden @ W_a.T)[:, None] @ enc_outputs.transpose(1, 2)
    weights = d2lh.masked_softmax(scores, valid_lens)
    context = (weights @ enc_outputs)[:, 0]
    return torch.tanh(W_c(torch.cat([context, new_hidden], dim=-1))), new_hidden, weights[:, 0]


# Plain softmax: the padding of the source gets weight
@wrong("check_luong_step", "source mask ignored (plain softmax)")
def luong_no_mask(embedded, hidden, enc_outputs, valid_lens, cell, W_a, W_c):
    new_hidden = cell(embedded, hidden)
    scores = (new_hidden @ W_a)[:, None] @ enc_outputs.transpose(1, 2)
    weights = torch.softmax(scores, dim=-1)
    context = (weights @ enc_outputs)[:, 0]
    return torch.tanh(W_c(torch.cat([context, new_hidden], dim=-1))), new_hidden, weights[:, 0]


# =================================================================================================
# 09 Training recipe: check_real_token_smoothing
# =================================================================================================

def _valid(logits, valid_lens):
    T = logits.shape[1]
    return torch.arange(T, device=logits.device)[None, :] < valid_lens[:, None]


@right("check_real_token_smoothing")
def smoothing_ok(logits, targets, valid_lens, eps, real_tokens):
    valid = _valid(logits, valid_lens)
    log_p = torch.log_softmax(logits[valid], dim=-1)
    nll = -log_p.gather(1, targets[valid][:, None]).squeeze(1)
    uniform = -log_p[:, real_tokens].mean(dim=-1)
    return ((1 - eps) * nll + eps * uniform).mean()


# eps spread over all V tokens (ordinary label smoothing), real_tokens unused
@wrong("check_real_token_smoothing", "uniform part over all V tokens (real_tokens ignored)")
def smoothing_all_tokens(logits, targets, valid_lens, eps, real_tokens):
    valid = _valid(logits, valid_lens)
    log_p = torch.log_softmax(logits[valid], dim=-1)
    nll = -log_p.gather(1, targets[valid][:, None]).squeeze(1)
    uniform = -log_p.mean(dim=-1)
    return ((1 - eps) * nll + eps * uniform).mean()


# Mean over every position, padding included
@wrong("check_real_token_smoothing", "mean over all positions, padding included")
def smoothing_padding_counted(logits, targets, valid_lens, eps, real_tokens):
    log_p = torch.log_softmax(logits, dim=-1)
    nll = -log_p.gather(2, targets[..., None]).squeeze(2)
    uniform = -log_p[..., real_tokens].mean(dim=-1)
    return ((1 - eps) * nll + eps * uniform).mean()


# Dense target distribution times log p: 0 * (-inf) = NaN on forbidden tokens
@wrong("check_real_token_smoothing", "q * log p over all tokens: 0 * -inf gives NaN")
def smoothing_nan(logits, targets, valid_lens, eps, real_tokens):
    valid = _valid(logits, valid_lens)
    log_p = torch.log_softmax(logits[valid], dim=-1)
    R = real_tokens.sum()
    q = eps / R * real_tokens.to(log_p.dtype).expand_as(log_p).clone()
    q = q + (1 - eps) * nn.functional.one_hot(targets[valid], log_p.shape[-1]).to(log_p.dtype)
    return (-(q * log_p).sum(dim=-1)).mean()


# The (1 - eps) weight of the target's term forgotten
@wrong("check_real_token_smoothing", "target term not weighted by (1 - eps)")
def smoothing_no_one_minus_eps(logits, targets, valid_lens, eps, real_tokens):
    valid = _valid(logits, valid_lens)
    log_p = torch.log_softmax(logits[valid], dim=-1)
    nll = -log_p.gather(1, targets[valid][:, None]).squeeze(1)
    uniform = -log_p[:, real_tokens].mean(dim=-1)
    return (nll + eps * uniform).mean()


# =================================================================================================
# 10 Decoding: check_advance_beams
# =================================================================================================

def _advance(log_probs, lengths, finished, step_log_probs, eos, alpha, handle_finished=True,
             freeze_lengths=True, use_alpha=True, new_lengths=True):
    B, k, V = step_log_probs.shape
    if handle_finished:
        only_eos = torch.full_like(step_log_probs, float("-inf"))
        only_eos[..., eos] = 0.0
        step_log_probs = torch.where(finished[..., None], only_eos, step_log_probs)
    candidates = log_probs[..., None] + step_log_probs
    candidate_lengths = torch.where(finished, lengths, lengths + 1) if freeze_lengths \
        else lengths + 1
    scores = candidates / candidate_lengths[..., None].float() ** alpha if use_alpha \
        else candidates
    best = scores.reshape(B, k * V).topk(k, dim=-1).indices
    parents, tokens = best // V, best % V
    kept_lengths = (candidate_lengths if new_lengths else lengths).gather(1, parents)
    return (candidates.reshape(B, k * V).gather(1, best), kept_lengths,
            finished.gather(1, parents) | (tokens == eos), parents, tokens)


@right("check_advance_beams")
def beams_ok(log_probs, lengths, finished, step_log_probs, eos, alpha):
    return _advance(log_probs, lengths, finished, step_log_probs, eos, alpha)


# Finished beams extended by every token like the others (no <eos>-only continuation)
@wrong("check_advance_beams", "finished beams not special-cased (extended by every token)")
def beams_finished_extended(log_probs, lengths, finished, step_log_probs, eos, alpha):
    return _advance(log_probs, lengths, finished, step_log_probs, eos, alpha,
                    handle_finished=False, freeze_lengths=False)


# A finished beam's length still grows by one each step
@wrong("check_advance_beams", "finished beams' lengths still incremented")
def beams_finished_length_grows(log_probs, lengths, finished, step_log_probs, eos, alpha):
    return _advance(log_probs, lengths, finished, step_log_probs, eos, alpha,
                    freeze_lengths=False)


# Candidates ranked by their total log-probability, the length penalty left out
@wrong("check_advance_beams", "ranked by raw log P (alpha / length normalisation ignored)")
def beams_no_alpha(log_probs, lengths, finished, step_log_probs, eos, alpha):
    return _advance(log_probs, lengths, finished, step_log_probs, eos, alpha, use_alpha=False)


# Returned lengths are the parents' old lengths, not the candidates' (one token short)
@wrong("check_advance_beams", "returned lengths not incremented (parents' old lengths)")
def beams_old_lengths(log_probs, lengths, finished, step_log_probs, eos, alpha):
    return _advance(log_probs, lengths, finished, step_log_probs, eos, alpha, new_lengths=False)


# =================================================================================================
# 11 Modern attention: check_rotary_at_positions, check_online_softmax_update; 12 Decoder-only LM:
# check_cached_gqa_self_attention, check_top_p_probs
# =================================================================================================

def _omega(d_k):
    return 10000.0 ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)


@right("check_rotary_at_positions")
def rotary_ok(x, positions):
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = positions.to(dtype)[:, None] * _omega(x.shape[-1]).to(dtype)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


# positions ignored: rows rotated as 0 .. T-1
@wrong("check_rotary_at_positions", "positions ignored (rows rotated as 0..T-1)")
def rotary_arange(x, positions):
    positions = torch.arange(x.shape[-2])
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = positions.to(dtype)[:, None] * _omega(x.shape[-1]).to(dtype)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


# Sign of the sine flipped: rotation by -angle
@wrong("check_rotary_at_positions", "rotation in the wrong direction (sin sign flipped)")
def rotary_clockwise(x, positions):
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = positions.to(dtype)[:, None] * _omega(x.shape[-1]).to(dtype)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos + odd * sin, -even * sin + odd * cos], dim=-1).flatten(-2)


# Pairs taken as (x_j, x_{j + d/2}) (rotate-half layout) instead of (x_2j, x_2j+1)
@wrong("check_rotary_at_positions", "pairs (j, j + d/2) instead of (2j, 2j+1)")
def rotary_halves(x, positions):
    d_k = x.shape[-1]
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = positions.to(dtype)[:, None] * _omega(d_k).to(dtype)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    first, second = x[..., : d_k // 2], x[..., d_k // 2:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


# Angles always computed in float32, even for a float64 x
@wrong("check_rotary_at_positions", "angles in float32 even for float64 x")
def rotary_float32_angles(x, positions):
    angles = positions.float()[:, None] * _omega(x.shape[-1]).float()
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


@right("check_online_softmax_update")
def online_ok(m, l, acc, scores, values):
    m_new = torch.maximum(m, scores.max(dim=-1, keepdim=True).values)
    shift = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
    p = torch.exp(scores - shift)
    rescale = torch.exp(m - shift)
    return m_new, l * rescale + p.sum(dim=-1, keepdim=True), acc * rescale + p @ values


# No guard for a query that has seen only -inf: exp(-inf - -inf) = NaN
@wrong("check_online_softmax_update", "no guard for all -inf rows (NaN)")
def online_no_guard(m, l, acc, scores, values):
    m_new = torch.maximum(m, scores.max(dim=-1, keepdim=True).values)
    p = torch.exp(scores - m_new)
    rescale = torch.exp(m - m_new)
    return m_new, l * rescale + p.sum(dim=-1, keepdim=True), acc * rescale + p @ values


# The running sum l rescaled, but acc not
@wrong("check_online_softmax_update", "acc not rescaled by exp(m - m_new)")
def online_acc_not_rescaled(m, l, acc, scores, values):
    m_new = torch.maximum(m, scores.max(dim=-1, keepdim=True).values)
    shift = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
    p = torch.exp(scores - shift)
    rescale = torch.exp(m - shift)
    return m_new, l * rescale + p.sum(dim=-1, keepdim=True), acc + p @ values


# The old maximum returned instead of the new one
@wrong("check_online_softmax_update", "old m returned instead of the new maximum")
def online_old_m(m, l, acc, scores, values):
    m_new = torch.maximum(m, scores.max(dim=-1, keepdim=True).values)
    shift = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
    p = torch.exp(scores - shift)
    rescale = torch.exp(m - shift)
    return m, l * rescale + p.sum(dim=-1, keepdim=True), acc * rescale + p @ values


# l replaced by this block's sum: the earlier blocks' sum dropped
@wrong("check_online_softmax_update", "l not carried over (only this block's sum)")
def online_l_not_carried(m, l, acc, scores, values):
    m_new = torch.maximum(m, scores.max(dim=-1, keepdim=True).values)
    shift = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
    p = torch.exp(scores - shift)
    rescale = torch.exp(m - shift)
    return m_new, p.sum(dim=-1, keepdim=True), acc * rescale + p @ values


class _GQABase(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        self.h, self.g, self.d_k = num_heads, num_kv_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.d_k, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.d_k, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def _project(self, X):
        Q = self.W_q(X).unflatten(-1, (self.h, self.d_k)).transpose(1, 2)
        K = self.W_k(X).unflatten(-1, (self.g, self.d_k)).transpose(1, 2)
        V = self.W_v(X).unflatten(-1, (self.g, self.d_k)).transpose(1, 2)
        return Q, K, V

    def _attend(self, Q, K_all, V_all, lens):
        B = Q.shape[0]
        scores = Q @ K_all.transpose(-2, -1) / math.sqrt(self.d_k)
        weights = d2lh.masked_softmax(scores.flatten(0, 1), lens.repeat_interleave(self.h, dim=0))
        heads = weights.unflatten(0, (B, self.h)) @ V_all
        return self.W_o(heads.transpose(1, 2).flatten(2))

    def _expand(self, cache):
        r = self.h // self.g
        return cache.keys.repeat_interleave(r, dim=1), cache.values.repeat_interleave(r, dim=1)


@right("check_cached_gqa_self_attention")
class GQAOk(_GQABase):
    def forward(self, X, cache):
        B, T_new, _ = X.shape
        offset = len(cache)
        positions = torch.arange(offset, offset + T_new, device=X.device)
        Q, K, V = self._project(X)
        Q, K = d2lh.apply_rotary(Q, positions), d2lh.apply_rotary(K, positions)
        cache.append(K, V)
        return self._attend(Q, *self._expand(cache), d2lh.causal_valid_lens(B, T_new, offset))


# Key-value heads tiled with repeat (0, 1, 0, 1) instead of repeat_interleave (0, 0, 1, 1)
@wrong("check_cached_gqa_self_attention", "kv heads expanded with repeat instead of repeat_interleave")
class GQARepeat(_GQABase):
    def forward(self, X, cache):
        B, T_new, _ = X.shape
        offset = len(cache)
        positions = torch.arange(offset, offset + T_new, device=X.device)
        Q, K, V = self._project(X)
        Q, K = d2lh.apply_rotary(Q, positions), d2lh.apply_rotary(K, positions)
        cache.append(K, V)
        r = self.h // self.g
        K_all, V_all = cache.keys.repeat(1, r, 1, 1), cache.values.repeat(1, r, 1, 1)
        return self._attend(Q, K_all, V_all, d2lh.causal_valid_lens(B, T_new, offset))


# New positions rotated as 0 .. T_new-1, the cache's offset forgotten
@wrong("check_cached_gqa_self_attention", "RoPE positions start at 0 each step (offset forgotten)")
class GQARotaryNoOffset(_GQABase):
    def forward(self, X, cache):
        B, T_new, _ = X.shape
        offset = len(cache)
        positions = torch.arange(T_new, device=X.device)
        Q, K, V = self._project(X)
        Q, K = d2lh.apply_rotary(Q, positions), d2lh.apply_rotary(K, positions)
        cache.append(K, V)
        return self._attend(Q, *self._expand(cache), d2lh.causal_valid_lens(B, T_new, offset))


# The values rotated as well as the queries and keys
@wrong("check_cached_gqa_self_attention", "values rotated too")
class GQARotatesValues(_GQABase):
    def forward(self, X, cache):
        B, T_new, _ = X.shape
        offset = len(cache)
        positions = torch.arange(offset, offset + T_new, device=X.device)
        Q, K, V = self._project(X)
        Q, K = d2lh.apply_rotary(Q, positions), d2lh.apply_rotary(K, positions)
        V = d2lh.apply_rotary(V, positions)
        cache.append(K, V)
        return self._attend(Q, *self._expand(cache), d2lh.causal_valid_lens(B, T_new, offset))


# Causal lengths 1..T_new: the new positions cannot see most of the cache
@wrong("check_cached_gqa_self_attention", "causal mask without the cache offset")
class GQACausalNoOffset(_GQABase):
    def forward(self, X, cache):
        B, T_new, _ = X.shape
        offset = len(cache)
        positions = torch.arange(offset, offset + T_new, device=X.device)
        Q, K, V = self._project(X)
        Q, K = d2lh.apply_rotary(Q, positions), d2lh.apply_rotary(K, positions)
        cache.append(K, V)
        return self._attend(Q, *self._expand(cache), d2lh.causal_valid_lens(B, T_new, 0))


def _nucleus(logits, top_p, crossing=True, renormalise=True, descending=True, scatter=True):
    probs = torch.softmax(logits, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=descending)
    cumulative = sorted_probs.cumsum(dim=-1)
    keep_sorted = (cumulative - sorted_probs < top_p) if crossing else (cumulative < top_p)
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted) if scatter \
        else keep_sorted
    kept = probs * keep
    return kept / kept.sum(dim=-1, keepdim=True) if renormalise else kept


@right("check_top_p_probs")
def top_p_ok(logits, top_p):
    return _nucleus(logits, top_p)


# cumsum < top_p: the token that crosses top_p is dropped
@wrong("check_top_p_probs", "the token crossing top_p dropped (cumsum < p)")
def top_p_drops_crossing(logits, top_p):
    return _nucleus(logits, top_p, crossing=False)


# Kept probabilities not renormalised to sum to 1
@wrong("check_top_p_probs", "kept probabilities not renormalised")
def top_p_not_renormalised(logits, top_p):
    return _nucleus(logits, top_p, renormalise=False)


# Sorted ascending (sort's default): the least probable tokens make the nucleus
@wrong("check_top_p_probs", "sorted ascending (least probable tokens kept)")
def top_p_ascending(logits, top_p):
    return _nucleus(logits, top_p, descending=False)


# Keep-mask built in sorted order applied to the unsorted probabilities (no scatter back)
@wrong("check_top_p_probs", "sorted-order mask applied to unsorted probabilities")
def top_p_no_scatter(logits, top_p):
    return _nucleus(logits, top_p, scatter=False)
