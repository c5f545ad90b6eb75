"""Right and plausible wrong answers to the "build it" exercises of notebooks 06 and 07: each
factory returns a right answer by default, and a mistake with one flag flipped. The CHECKS table of
tests/test_exercise_checks.py runs them through the checks."""

from __future__ import annotations

import torch

import d2lhelpers as d2lh


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



def cached_greedy_decode(keep_bos=False, stop_early=True, fill_eos=True, feed_prefix=False):
    """Greedy decoding with the cache, right by default; each flag flipped is a plausible mistake."""

    @torch.no_grad()
    def decode(model, src, src_valid_len, bos, eos, max_len):
        model.eval()
        state = model.decoder.init_state(model.encoder(src, src_valid_len), src_valid_len)
        tokens = torch.full((src.shape[0], 1), bos)
        finished = torch.zeros(src.shape[0], dtype=torch.bool)
        for _ in range(max_len):
            fed = tokens if feed_prefix else tokens[:, -1:]  # the whole prefix: the cache doubles up
            next_token = model.decoder.step(fed, state)[:, -1].argmax(dim=-1)
            if fill_eos:
                next_token = next_token.masked_fill(finished, eos)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            finished |= next_token == eos
            if stop_early and finished.all():
                break
        return tokens if keep_bos else tokens[:, 1:]

    return decode



def translation_log_prob(shift=True, stop_at_eos=True, include_eos=True):
    """Scoring given translations by teacher forcing, right by default; a flag off is a mistake."""

    @torch.no_grad()
    def score(model, src, src_valid_len, tokens, bos, eos):
        B, T = tokens.shape
        dec_input = torch.cat([torch.full((B, 1), bos), tokens[:, :-1]], dim=1) if shift else tokens
        log_p = torch.log_softmax(model(src, src_valid_len, dec_input), dim=-1)
        token_log_p = log_p.gather(2, tokens[..., None]).squeeze(2)  # (B, T)
        is_eos = tokens == eos
        first = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), T)  # index of <eos>
        lengths = torch.where(is_eos.any(dim=1), first + int(include_eos), T) if stop_at_eos \
            else torch.full((B,), T)
        counted = torch.arange(T)[None, :] < lengths[:, None]
        return torch.where(counted, token_log_p, 0.0).sum(dim=1), lengths

    return score
