"""The checks of notebook 06_transformer's coding exercises: layer normalisation, the additive
causal mask, and a decoder block's cached step. (The Transformer itself is in
d2lhelpers.transformer.)"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..transformer import DecoderBlock
from .cases import (case_label, feed_in_chunks, labelled, randint, randn, random_sizes,
                    seeded_generator, seeded_module)
from .runner import run_check

__all__ = ['check_layer_norm', 'check_causal_additive_mask', 'check_cached_block_step']


def check_layer_norm(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(X, eps=1e-5) -> X normalised over its last axis (each token's vector, of width d_model):
    (X - mean) / sqrt(var + eps), with the biased variance (dividing by d_model) and no learned
    scale or shift. X has any shape (..., d_model); the result has X's shape and dtype."""
    generator = seeded_generator(seed)
    fixed = [("the worked example [[1, 2], [2, 3]]",
              (torch.tensor([[1.0, 2.0], [2.0, 3.0]]), 1e-5)),
             ("a constant row and a nearly constant one (eps matters)",
              (torch.tensor([[4.0, 4.0, 4.0], [0.001, 0.0, -0.001]]), 1e-5)),
             ("a large eps", (randn(generator, 3, 4), 1.0)),
             ("3-D input (B, T, d_model)", (randn(generator, 2, 3, 5), 1e-5)),
             ("float64", (randn(generator, 4, 6, dtype=torch.float64), 1e-5))]
    random = [("", (3 * randn(generator, s["B"], s["T"], s["d_model"]) + 2, 1e-5))  # not centred
              for s in random_sizes(generator, 2, B=(1, 3), T=(1, 5), d_model=(2, 16))]
    cases = labelled(fixed + random, lambda X, eps: f"X {tuple(X.shape)}, eps={eps:g}")
    run_check("layer_norm", fn, cases,
              reference=lambda X, eps: torch.nn.functional.layer_norm(X, X.shape[-1:], eps=eps),
              hints=("Normalise each vector along its last axis. Which variance is it (divided by "
                     "d_model or by d_model - 1), and where does eps go?",
                     "take the mean and the variance over the last axis (dim=-1, keepdim=True), "
                     "the variance biased (unbiased=False: divide by d_model, not d_model - 1); "
                     "return (X - mean) / sqrt(var + eps), eps inside the square root."),
              hint=hint)


def check_causal_additive_mask(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(T) -> the additive causal mask M (T, T), float: 0 on and below the diagonal, -inf above
    it, so that softmax(Q K^T / sqrt(d) + M) lets query i see keys 0 .. i only."""
    generator = seeded_generator(seed)
    sizes = [("a single position", (1,)), ("", (2,)), ("", (5,))]
    sizes += [("", (s["T"],)) for s in random_sizes(generator, 2, T=(3, 12))]
    cases = labelled(sizes, lambda T: f"T={T}")

    def as_float_mask(M, T):  # compared as it is: -inf must stay -inf, 0 stay 0
        if not isinstance(M, torch.Tensor) or not M.is_floating_point():
            raise TypeError("expected a float tensor of 0 and -inf, got "
                            + (f"dtype {M.dtype}" if isinstance(M, torch.Tensor)
                               else type(M).__name__))
        return M

    run_check("causal_additive_mask", fn, cases,
              reference=lambda T: torch.nn.Transformer.generate_square_subsequent_mask(T),
              compare_through=("added to the scores as a float mask", as_float_mask),
              hints=("The mask is added to the scores: what must be added where a key lies in the "
                     "future, and what elsewhere? Does a position see itself?",
                     "M[i, j] = -inf when key j is in the future of query i (j > i), 0 otherwise "
                     "(the diagonal included: a position sees itself); e.g. torch.full((T, T), "
                     "float('-inf')).triu(diagonal=1). A float mask, not a boolean one: it is "
                     "added to the scores."),
              hint=hint)


def _outputs_in_chunks(step, block, X, chunk_sizes, enc_outputs, src_valid_lens):
    """The outputs (B, T, d_model) of ``step(block, x, cache, enc, src_valid_lens)`` fed X in
    chunks of the given sizes (see :func:`.cases.feed_in_chunks`); ``enc`` is a KVCache holding
    the encoder outputs projected once by the block's encoder-decoder attention."""
    enc = block.cross_attention.project_keys_values(enc_outputs, enc_outputs)  # (B, h, T_src, d_k)
    return feed_in_chunks(lambda x, cache: step(block, x, cache, enc, src_valid_lens), X,
                          chunk_sizes)[0]


def check_cached_block_step(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(block, x, cache, enc_keys, enc_values, src_valid_lens) -> the outputs (B, T_new, d_model)
    of a decoder block (post-norm or pre-norm) on new positions x, which it appends to ``cache``
    (a KVCache) before attending causally to all of it, then to the encoder's projected keys and
    values (B, h, T_src, d_k). Checked over several steps against ``DecoderBlock.step``."""
    generator = seeded_generator(seed)
    fixed = [("one position per step", False, (1, 1, 1, 1), 4),
             ("one position per step", True, (1, 1, 1), 4),
             ("several positions per step", False, (3, 2), 4),
             ("several positions per step", True, (2, 1, 3), 2)]
    random = [("", bool(randint(generator, 0, 1)), (s["first"], s["second"]), 2)
              for s in random_sizes(generator, 2, first=(1, 4), second=(1, 3))]
    cases = []
    for what, norm_first, chunks, heads in fixed + random:
        block = seeded_module(generator, DecoderBlock, 8, heads, 16, dropout=0.0,
                              norm_first=norm_first)
        B, T_src = 2, int(randint(generator, 2, 6))
        X, enc_outputs = randn(generator, B, sum(chunks), 8), randn(generator, B, T_src, 8)
        src_valid_lens = torch.tensor([T_src, int(randint(generator, 1, T_src))])
        label = (f"{'pre' if norm_first else 'post'}-norm block, d_model=8, h={heads}, steps of "
                 f"{list(chunks)} positions, T_src={T_src}, src_valid_lens={src_valid_lens.tolist()}")
        cases.append((case_label(what, label), (block, X, chunks, enc_outputs, src_valid_lens)))

    def learner_step(block, x, cache, enc, src_valid_lens):  # the exercise's signature
        return fn(block, x, cache, enc.keys, enc.values, src_valid_lens)

    def reference_step(block, x, cache, enc, src_valid_lens):
        return block.step(x, cache, enc, src_valid_lens)

    with torch.no_grad():
        run_check("cached_block_step", lambda *args: _outputs_in_chunks(learner_step, *args), cases,
                  reference=lambda *args: _outputs_in_chunks(reference_step, *args),
                  hints=("Which sublayer's input is normalised in pre-norm, and what does post-norm "
                         "normalise instead? Which positions may the i-th new position see, counting "
                         "those cached at earlier steps?",
                         "Per sublayer: post-norm is norm(x + f(x)), pre-norm x + f(norm(x)), chosen "
                         "by block.add_normN.norm_first. In the masked self-attention, append the new "
                         "positions' keys and values (projected from the same input as the queries) "
                         "before attending, and give the i-th new position the causal length "
                         "offset + i + 1, offset being the number of positions cached before this "
                         "step. (The outputs shown are those of all steps, side by side along the "
                         "position axis.)"),
                  hint=hint)
