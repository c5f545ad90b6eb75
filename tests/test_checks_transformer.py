"""The checks of notebook 06_transformer (d2lhelpers/exercises/checks_transformer.py): right and
plausible wrong answers (see checks_common.py); the multiply-adds counted layer by layer, and the
cached decoder-block step written from the block's parts, each flag a mistake; the count's
reference against what FlopCounterMode counts on d2lh.Transformer."""

from __future__ import annotations

import math

import torch
from torch.utils.flop_counter import FlopCounterMode

import d2lhelpers as d2lh
from checks_common import CheckTests
from d2lhelpers.exercises import checks_transformer


def multiply_adds(d_model, num_heads, ffn_hidden, num_layers, vocab_size, T_src, T_tgt,
                  heads=False, causal=False, cross_kv="source", cross_queries="target",
                  cross_pairs=None, w_o=True, ffn=("source", "target"), ffn_layers=2, blocks=None,
                  output=1, scores=True, one_head=False, cross_once=False):
    """Notebook 06's count, layer by layer and head by head; each argument names a mistake."""
    d, d_k = d_model, d_model // num_heads

    def linear(d_in, d_out, positions):
        return d_in * d_out * positions

    def attention(T_q, T_k, causal_pairs=False, pairs=None):
        projections = (2 if w_o else 1) * linear(d, d, T_q) + 2 * linear(d, d, T_k)
        if pairs is None:
            pairs = T_q * (T_q + 1) // 2 if causal_pairs else T_q * T_k
        per_head = pairs * (d if heads else d_k) * scores  # heads=True: each head at full width
        return projections + 2 * (1 if one_head else num_heads) * per_head

    def feed_forward(T):
        return linear(d, ffn_hidden, T) + (ffn_layers - 1) * linear(ffn_hidden, d, T)

    encoder = decoder = cross = ffns = 0
    for block in range(num_layers if blocks is None else blocks):
        encoder += attention(T_src, T_src)
        decoder += attention(T_tgt, T_tgt, causal)
        T_q = T_tgt if cross_queries == "target" else T_src
        if block == 0 or not cross_once:
            cross += attention(T_q, {"source": T_src, "target": T_tgt}[cross_kv],
                               pairs=None if cross_pairs is None else T_tgt * T_tgt)
        ffns += sum(feed_forward({"source": T_src, "target": T_tgt}[s]) for s in ffn)
    return encoder, decoder, cross, ffns, output * linear(d, vocab_size, T_tgt)


def scaled(factor, **mistake):
    return lambda *sizes: tuple(factor * n for n in multiply_adds(*sizes, **mistake))


def attend(attention, x, keys, values, valid_lens):
    """Notebook 06's attention over projected keys and values, heads folded into the batch."""
    B, h = x.shape[0], attention.num_heads
    q = attention.split_heads(attention.W_q(x))
    lens = None if valid_lens is None else valid_lens.repeat_interleave(h, dim=0)
    heads = d2lh.DotProductAttention()(q.flatten(0, 1), keys.flatten(0, 1), values.flatten(0, 1),
                                       lens)
    return attention.W_o(attention.merge_heads(heads.unflatten(0, (B, h))))


def cached_block_step(post_norm_only=False, append=True, offset=True, causal=True,
                      pre_norm_only=False, cross_lens=True, read_cache=True, project_raw=False,
                      ffn_post_norm=False, swap_cross=False, extra_key=0, residual=True,
                      skip_ffn=False, norm_of=None, pre_norm_ffn_residual=True):
    """A cached decoder-block step, right by default; each flag off is one plausible mistake."""

    def step(block, x, cache, enc_keys, enc_values, src_valid_lens):
        def sublayer(add_norm, x, f):
            if skip_ffn and add_norm is block.add_norm3:
                return x
            if norm_of is not None:  # the layers of another sublayer's add & norm
                add_norm = getattr(block, norm_of[add_norm is block.add_norm1 and "self"
                                                  or add_norm is block.add_norm2 and "cross"
                                                  or "ffn"])
            keep = x if residual else 0
            if (not pre_norm_ffn_residual and add_norm is block.add_norm3
                    and add_norm.norm_first):  # x = block.ffn(norm(x)) in pre-norm
                keep = 0
            if ffn_post_norm and add_norm is block.add_norm3:
                return add_norm.norm(x + f(x))
            if (add_norm.norm_first and not post_norm_only) or pre_norm_only:
                return keep + f(add_norm.norm(x))
            return add_norm.norm(keep + f(x))

        block_input = x

        def masked_self_attention(h):
            attention = block.self_attention
            source = block_input if project_raw else h
            k = attention.split_heads(attention.W_k(source))
            v = attention.split_heads(attention.W_v(source))
            if append and not read_cache:  # stores them, but attends to the new positions only
                cache.append(k, v)
                keys, values = k, v
            elif append:
                cache.append(k, v)
                keys, values = cache.keys, cache.values
            else:  # attends to the cache and the new positions, but never stores them
                keys = k if cache.keys is None else torch.cat([cache.keys, k], dim=2)
                values = v if cache.values is None else torch.cat([cache.values, v], dim=2)
            seen_before = keys.shape[2] - h.shape[1] if offset else 0
            if causal:
                lens = d2lh.causal_valid_lens(h.shape[0], h.shape[1], seen_before + extra_key)
                lens = lens.clamp(max=keys.shape[2])  # (a mask j <= i + 1 would not raise)
            else:  # every new position sees all of the new positions
                lens = torch.full((h.shape[0],), keys.shape[2])
            return attend(attention, h, keys, values, lens)

        x = sublayer(block.add_norm1, x, masked_self_attention)
        if swap_cross:
            enc_keys, enc_values = enc_values, enc_keys
        x = sublayer(block.add_norm2, x, lambda h: attend(block.cross_attention, h, enc_keys,
                                                          enc_values,
                                                          src_valid_lens if cross_lens else None))
        return sublayer(block.add_norm3, x, block.ffn)

    return step


def sublayer_parameters(biases=True, w_o=True, layer_norm=False, paper_width=False):
    """Exercise 1's counts, layer by layer; each argument names a mistake."""

    def count(d_model, ffn_hidden):
        def linear(d_in, d_out):
            return d_in * d_out + (d_out if biases else 0)

        hidden = 4 * d_model if paper_width else ffn_hidden
        norm = 2 * d_model if layer_norm else 0
        return ((4 if w_o else 3) * linear(d_model, d_model) + norm,
                linear(d_model, hidden) + linear(hidden, d_model) + norm)

    return count


def default_init_stds(kept_init=False, shared=False, variance=False, placement=True):
    """Exercise 2's curves, as the notebook's solution computes them (for 24 layers, d = 64, 8
    stacks); each argument names a mistake."""

    def stds(norm_first, num_layers=24, d=64, num_stacks=8):
        variances = torch.zeros(num_layers)
        with torch.no_grad():
            for _ in range(num_stacks):
                X, one = torch.randn(16, 10, d), d2lh.PositionwiseFFN(d, 4 * d)
                for layer in range(num_layers):
                    ffn = one if shared else d2lh.PositionwiseFFN(d, 4 * d)
                    if kept_init:  # section 3's He initialisation
                        torch.nn.init.normal_(ffn.linear1.weight, std=math.sqrt(2 / d))
                        torch.nn.init.normal_(ffn.linear2.weight, std=math.sqrt(1 / (4 * d)))
                        torch.nn.init.zeros_(ffn.linear1.bias)
                        torch.nn.init.zeros_(ffn.linear2.bias)
                    X = d2lh.AddNorm(d, norm_first=norm_first and placement)(X, ffn)
                    variances[layer] += X.var().item() / num_stacks
        return variances if variance else variances.sqrt()

    return stds


CHECKS = {
    "check_sublayer_parameters": (sublayer_parameters(), {
        "no biases": (sublayer_parameters(biases=False), "result 0 of the tuple", "biases"),
        "no W_o": (sublayer_parameters(w_o=False), "result 0 of the tuple", "three projections"),
        "the LayerNorm counted": (sublayer_parameters(layer_norm=True), "result 0 of the tuple",
                                  "LayerNorm"),
        "the paper's width": (sublayer_parameters(paper_width=True), "result 1 of the tuple",
                              "4 d_model"),
        "the two numbers swapped": (lambda d, f: sublayer_parameters()(d, f)[::-1], "tuple",
                                    "~another order"),
    }),
    "check_default_init_stds": (default_init_stds(), {
        "section 3's initialisation kept": (default_init_stds(kept_init=True), "pre-norm",
                                            "section 3's initialisation"),
        "one FFN for every layer": (default_init_stds(shared=True), "pre-norm", "reuses one FFN"),
        "the variance": (default_init_stds(variance=True), "pre-norm", "the variance"),
        "norm_first ignored": (default_init_stds(placement=False), "pre-norm", "stays at 1"),
    }),
    "check_transformer_multiply_adds": (multiply_adds, {
        "no scores or weighted sums": (lambda *s: multiply_adds(*s, scores=False),
                                       "result 0 of the tuple", "only its projections"),
        "one head's scores": (lambda *s: multiply_adds(*s, one_head=True),
                              "result 0 of the tuple", "count one head"),
        "the cross-attention of one block": (lambda *s: multiply_adds(*s, cross_once=True),
                                             "result 2 of the tuple", "count of an attention"),
        "FLOPs": (scaled(2), "result 0 of the tuple", "two per multiply-add"),
        "every head at full width": (lambda *s: multiply_adds(*s, heads=True),
                                     "the notebook's tiny model", "number of heads"),
        "the causal mask halves the decoder's scores": (lambda *s: multiply_adds(*s, causal=True),
                                                        "result 1 of the tuple", "causal mask"),
        "keys and values from the decoder": (lambda *s: multiply_adds(*s, cross_kv="target"),
                                             "result 2 of the tuple",
                                             "keys and values from the decoder's"),
        "queries from the encoder": (lambda *s: multiply_adds(*s, cross_queries="source"),
                                     "result 2 of the tuple", "scores the wrong pairs"),
        "T_tgt x T_tgt pairs": (lambda *s: multiply_adds(*s, cross_pairs="T_tgt^2"),
                                "result 2 of the tuple", "scores the wrong pairs"),
        "no W_o": (lambda *s: multiply_adds(*s, w_o=False), "result 0 of the tuple",
                   "three projections"),
        "one FFN matrix": (lambda *s: multiply_adds(*s, ffn_layers=1), "result 3 of the tuple",
                           "one of their two matrices"),
        "FFNs of the decoder only": (lambda *s: multiply_adds(*s, ffn=("target",)),
                                     "result 3 of the tuple", "one stack"),
        "one block per stack": (lambda *s: multiply_adds(*s, blocks=1), "result 0 of the tuple",
                                "one block per stack"),
        "no output layer": (lambda *s: multiply_adds(*s, output=0), "result 4 of the tuple",
                            "leaves out the output layer"),
        "output layer in every block": (
            lambda *s: multiply_adds(*s, output=s[3]), "result 4 of the tuple", "once per block"),
        "a dict": (lambda *s: dict(zip(checks_transformer.PARTS, multiply_adds(*s))),
                   "expected a tuple", None),
        "the embeddings counted as products": (
            lambda *s: multiply_adds(*s, output=2), "result 4 of the tuple", None),
    }),
    "check_cached_block_step": (cached_block_step(), {
        "the pre-norm FFN without its residual": (
            cached_block_step(pre_norm_ffn_residual=False), "pre-norm block", "residual"),
        "post-norm only (norm_first ignored)": (cached_block_step(post_norm_only=True),
                                                "pre-norm block", "as post-norm"),
        "the FFN always post-norm": (cached_block_step(ffn_post_norm=True), "pre-norm block",
                                     "do not all follow"),
        "pre-norm only": (cached_block_step(pre_norm_only=True), "post-norm block",
                          "as pre-norm"),
        "new keys and values never stored": (cached_block_step(append=False),
                                             "one position per step", "never sees"),
        "the cache stored but not read": (cached_block_step(read_cache=False),
                                          "one position per step", "never sees"),
        "causal lengths forget the cache": (cached_block_step(offset=False),
                                            "one position per step", "forget the cached"),
        "no causal mask among the new positions": (cached_block_step(causal=False),
                                                   "several positions per step",
                                                   "both directions"),
        "source padding not masked": (cached_block_step(cross_lens=False), "src_valid_lens",
                                      "ignores src_valid_lens"),
        "keys projected from the block's input": (cached_block_step(project_raw=True),
                                                  "pre-norm block", "block's input"),
        "the encoder's values used as keys, its keys as values": (
            cached_block_step(swap_cross=True), "on input", "trade places"),
        "each new position also sees the next one": (cached_block_step(extra_key=1),
                                                     "several positions per step", "off by one"),
        "no residual connections": (cached_block_step(residual=False), "on input",
                                    "residual connection"),
        "the FFN left out": (cached_block_step(skip_ffn=True), "on input", "leaves out a sublayer"),
        "the self-attention and cross-attention norms swapped": (
            cached_block_step(norm_of={"self": "add_norm2", "cross": "add_norm1",
                                       "ffn": "add_norm3"}), "on input", "each other's"),
        "pre-norm only and the cache never stored": (
            cached_block_step(pre_norm_only=True, append=False), "on input", None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_transformer


def test_reference_count_is_what_flop_counter_counts_on_the_transformer():
    """Part by part, on the package's Transformer (the notebook's code), readable path. A block's
    sublayers run inside its AddNorm modules, and the encoder-decoder attention's keys and values
    are projected by the decoder's init_state, outside the blocks."""
    for sizes in [(16, 4, 32, 2, 30, 7, 5), (12, 3, 20, 1, 9, 1, 6), (8, 1, 8, 3, 5, 9, 2)]:
        d, h, f, N, V, T_src, T_tgt = sizes
        model = d2lh.Transformer(7, V, d, h, f, N, dropout=0.0).eval()
        src, dec_input = torch.randint(0, 7, (1, T_src)), torch.randint(0, V, (1, T_tgt))
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(src, torch.tensor([T_src]), dec_input, need_weights=True)
        flops = {name: sum(per_op.values()) // 2 for name, per_op in
                 counter.get_flop_counts().items()}  # multiply-adds per module

        def blocks(stack, part):
            return sum(flops[f"Transformer.{stack}.blocks.{i}.{part}"] for i in range(N))

        decoder_blocks = sum(blocks("decoder", f"add_norm{i}") for i in (1, 2, 3))
        cross_keys_values = flops["Transformer.decoder"] - decoder_blocks - flops[
            "Transformer.decoder.output"]
        parts = (blocks("encoder", "add_norm1"), blocks("decoder", "add_norm1"),
                 blocks("decoder", "add_norm2") + cross_keys_values,
                 blocks("encoder", "ffn") + blocks("decoder", "ffn"),
                 flops["Transformer.decoder.output"])
        assert parts == checks_transformer._multiply_adds(*sizes)
        assert counter.get_total_flops() == 2 * sum(parts)
