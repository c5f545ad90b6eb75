"""The checks of the Transformer notebooks' "build it" exercises pass a right answer and catch the
plausible wrong ones, naming the input they failed on."""

from __future__ import annotations

import pytest
import torch

import d2lhelpers as d2lh
from d2lhelpers.exercises import ExerciseCheckFailed


def attend(attention, x, keys, values, valid_lens):
    """Notebook 06's attention over projected keys and values, heads folded into the batch."""
    B, h = x.shape[0], attention.num_heads
    q = attention.split_heads(attention.W_q(x))
    lens = None if valid_lens is None else valid_lens.repeat_interleave(h, dim=0)
    heads = d2lh.DotProductAttention()(q.flatten(0, 1), keys.flatten(0, 1), values.flatten(0, 1),
                                       lens)
    return attention.W_o(attention.merge_heads(heads.unflatten(0, (B, h))))


def cached_block_step(post_norm_only=False, append=True, offset=True, causal=True):
    """A cached decoder-block step, right by default; each flag off is one plausible mistake."""

    def step(block, x, cache, enc_keys, enc_values, enc_valid_lens):
        def sublayer(add_norm, x, f):
            if add_norm.norm_first and not post_norm_only:
                return x + f(add_norm.norm(x))
            return add_norm.norm(x + f(x))

        def masked_self_attention(h):
            attention = block.self_attention
            k, v = attention.split_heads(attention.W_k(h)), attention.split_heads(attention.W_v(h))
            if append:
                cache.append(k, v)
                keys, values = cache.keys, cache.values
            else:  # attends to the cache and the new positions, but never stores them
                keys = k if cache.keys is None else torch.cat([cache.keys, k], dim=2)
                values = v if cache.values is None else torch.cat([cache.values, v], dim=2)
            seen_before = keys.shape[2] - h.shape[1] if offset else 0
            if causal:
                lens = d2lh.causal_valid_lens(h.shape[0], h.shape[1], seen_before)
            else:  # every new position sees all of the new positions
                lens = torch.full((h.shape[0],), keys.shape[2])
            return attend(attention, h, keys, values, lens)

        x = sublayer(block.add_norm1, x, masked_self_attention)
        x = sublayer(block.add_norm2, x, lambda h: attend(block.cross_attention, h, enc_keys,
                                                          enc_values, enc_valid_lens))
        return sublayer(block.add_norm3, x, block.ffn)

    return step


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_block_step_passes_a_right_answer(seed, capsys):
    d2lh.exercises.check_cached_block_step(cached_block_step(), seed=seed)
    assert capsys.readouterr().out.startswith("Correct: cached_block_step passed all")


@pytest.mark.parametrize("mistake, where", [
    (dict(post_norm_only=True), "pre-norm block"),  # ignores norm_first
    (dict(append=False), "one position per step"),  # never stores the new keys and values
    (dict(offset=False), "one position per step"),  # causal lengths that forget the cache
    (dict(causal=False), "several positions per step"),  # new positions see later new ones
])
def test_cached_block_step_catches_plausible_mistakes(mistake, where):
    with pytest.raises(ExerciseCheckFailed, match=f"cached_block_step is not right yet on input "
                                                  f".*{where}") as failure:
        d2lh.exercises.check_cached_block_step(cached_block_step(**mistake))
    assert "Hint: " in str(failure.value)
