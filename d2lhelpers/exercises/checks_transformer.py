"""The checks of notebook 06_transformer's coding exercises: layer normalisation, the additive
causal mask, and a decoder block's cached step. (The Transformer itself is in
d2lhelpers.transformer.)"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import partial

import torch

from ..attention import KVCache, causal_valid_lens
from ..transformer import DecoderBlock
from .cases import (case_label, feed_in_chunks, labelled, randint, randn, random_sizes,
                    seeded_generator, seeded_module)
from .runner import Symptom, run_check

__all__ = ['check_layer_norm', 'check_causal_additive_mask', 'check_cached_block_step']


# The classic mistakes, each as the function that makes it ----------------------------------------

def _wrong_layer_norm(X, eps=1e-5, dims=(-1,), unbiased=False, eps_at="variance", centre=True,
                      divide_by="std", variance_dims="as the mean's"):
    """Layer normalisation, right by default; each other value of an argument is a mistake.
    dims: the axes the statistics are taken over (None: all of them)."""
    dims = tuple(range(X.dim())) if dims is None else dims
    mean = X.mean(dim=dims, keepdim=True)
    var_dims = dims if variance_dims == "as the mean's" else tuple(range(X.dim()))
    if variance_dims == "the mean's over everything":  # the mean over all, the variance per vector
        mean, var_dims = X.mean(), dims
    var = X.var(dim=var_dims, unbiased=unbiased, keepdim=True)
    centred = X - mean if centre else X
    if divide_by == "variance":
        return centred / (var + eps)
    if eps_at == "std":
        return centred / (var.sqrt() + eps)
    return centred / (var + (eps if eps_at == "variance" else 0.0)).sqrt()


_LAYER_NORM_MISTAKES = {
    "Your variance is the unbiased one (divided by d_model - 1): layer normalisation divides by "
    "d_model.": (partial(_wrong_layer_norm, unbiased=True),
                 partial(_wrong_layer_norm, unbiased=True, eps_at="std")),
    "Your statistics are taken over the first axis (across the vectors): each vector is "
    "normalised along its own last axis, d_model.": partial(_wrong_layer_norm, dims=(0,)),
    "Your statistics are taken over axis 1: each vector is normalised along the last axis, "
    "d_model, whatever the number of axes.": partial(_wrong_layer_norm, dims=(1,)),
    "Your statistics are taken over more than the last axis (the whole tensor, or several axes): "
    "each vector gets its own mean and variance, over its last axis.": (
        partial(_wrong_layer_norm, dims=None), partial(_wrong_layer_norm, dims=(-2, -1)),
        partial(_wrong_layer_norm, variance_dims="all"),
        partial(_wrong_layer_norm, variance_dims="the mean's over everything")),
    "Your eps is added outside the square root: it goes with the variance, sqrt(var + eps).":
        partial(_wrong_layer_norm, eps_at="std"),
    "Your eps is missing: on a constant vector the variance is 0, and eps keeps the division "
    "finite.": partial(_wrong_layer_norm, eps_at="nowhere"),
    "Your vectors are not centred: the mean is subtracted before dividing.":
        partial(_wrong_layer_norm, centre=False),
    "Your vectors are divided by the variance: layer normalisation divides by the standard "
    "deviation, its square root.": partial(_wrong_layer_norm, divide_by="variance"),
}


def check_layer_norm(fn: Callable, seed: int = 0, hint: int = 1, *,
                     verbose: bool = False) -> None:
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
              hint=hint, mistakes=_LAYER_NORM_MISTAKES, verbose=verbose)


def _mask(T, masked="future", value=-math.inf, dtype=torch.float32):
    """A (T, T) mask holding ``value`` where ``masked`` (future: j > i, right; future and
    present: j >= i; past: j < i; past and present: j <= i) and 0 elsewhere."""
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]  # query i, key j
    where = {"future": j > i, "future and present": j >= i, "past": j < i,
             "past and present": j <= i}[masked]
    if dtype == torch.bool:
        return where
    return torch.zeros(T, T, dtype=dtype).masked_fill(where, value)


def _large_negative(M, T) -> bool:
    """Whether a mask holds a large negative finite number where the future is, 0 elsewhere."""
    M = torch.as_tensor(M).double()
    future = _mask(T, dtype=torch.bool)
    return (M.shape == (T, T) and bool((M[~future] == 0).all()) and bool(future.any())
            and bool(torch.isfinite(M[future]).all()) and bool((M[future] <= -1e3).all()))


_CAUSAL_ADDITIVE_MASK_MISTAKES = {
    "Your mask hides the diagonal too: a position sees itself, so M[i, i] is 0.":
        partial(_mask, masked="future and present"),
    "Your mask hides the past instead of the future: query i sees keys 0 .. i, so the -inf lie "
    "above the diagonal (key j > i).": partial(_mask, masked="past"),
    "Your mask is boolean (or integer): this exercise asks for the float mask that is added to the "
    "scores, 0 where a key is seen and -inf where it is not.": tuple(
        partial(_mask, masked=masked, dtype=dtype, value=1)
        for masked in ("future", "past and present") for dtype in (torch.bool, torch.int64)),
    "Your mask holds 1 where a key is hidden: added to the scores, a mask needs -inf there so "
    "that the softmax gives weight 0.": partial(_mask, value=1.0),
    "Your mask holds a large negative number where a key is hidden: this exercise asks for -inf "
    "there.": Symptom(_large_negative),
    "Your mask is inverted: 0 where a key lies in the future, -inf where it is seen.":
        partial(_mask, masked="past and present"),
    "Your mask holds NaN where a key is seen: 0 times -inf is NaN, so a mask of 0 and -inf cannot "
    "be made by multiplying a 0/1 mask by -inf.": lambda T: _mask(T, value=1.0) * -math.inf,
}


def check_causal_additive_mask(fn: Callable, seed: int = 0, hint: int = 1, *,
                               verbose: bool = False) -> None:
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
              mistakes=_CAUSAL_ADDITIVE_MASK_MISTAKES, verbose=verbose,
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


def _wrong_block_step(block, x, cache, enc, src_valid_lens, placement="the block's",
                      store=True, read_cache=True, offset=True, causal=True, cross_mask=True,
                      project_from="sublayer input", swapped=(), shift=0, residual=(1, 2, 3),
                      skip=None, norms=(1, 2, 3)):
    """DecoderBlock.step written from the block's parts, right by default; each other value of an
    argument is a classic mistake. swapped: the attentions ("self", "cross") whose keys and values
    trade places; shift: the causal lengths off by it; residual: the sublayers (1, 2, 3) that
    keep their residual connection; skip: a sublayer left out; norms: the add_norm each sublayer
    uses."""
    sublayers = dict(zip((block.add_norm1, block.add_norm2, block.add_norm3), (1, 2, 3)))

    def sublayer(add_norm, x, f):
        n = sublayers[add_norm]
        if n == skip:
            return x
        pre = add_norm.norm_first if placement not in ("pre", "post") else placement == "pre"
        if placement.startswith("sublayer") and add_norm is getattr(block,
                                                                   f"add_norm{placement[9]}"):
            pre = placement.endswith("pre")  # "sublayer n pre" (or post): that one always so
        norm = getattr(block, f"add_norm{norms[n - 1]}").norm
        keep = x if n in residual else 0
        return keep + f(norm(x)) if pre else norm(keep + f(x))

    def masked_self_attention(h):
        attention = block.self_attention
        source = x if project_from == "block input" else h  # (pre-norm: h is norm(x))
        new = attention.project_keys_values(source, source)  # (B, h, T_new, d_k) each
        if "self" in swapped:
            new = KVCache(new.values, new.keys)
        seen = len(cache)
        if read_cache:
            keys = new.keys if cache.keys is None else torch.cat([cache.keys, new.keys], dim=2)
            values = new.values if seen == 0 else torch.cat([cache.values, new.values], dim=2)
        else:
            keys, values = new.keys, new.values
        if store:
            cache.append(new.keys, new.values)
        B, T_new, T_k = h.shape[0], h.shape[1], keys.shape[2]
        lens = (causal_valid_lens(B, T_new, T_k - T_new if offset else 0) + shift if causal
                else torch.full((B,), T_k))
        return attention.attend(h, KVCache(keys, values), lens)

    x = sublayer(block.add_norm1, x, masked_self_attention)
    lens = src_valid_lens if cross_mask else None
    source = KVCache(enc.values, enc.keys) if "cross" in swapped else enc
    x = sublayer(block.add_norm2, x, lambda h: block.cross_attention.attend(h, source, lens))
    return sublayer(block.add_norm3, x, block.ffn)


def _wrong_chunks(**mistake) -> Callable:
    """The outputs of :func:`_wrong_block_step` making ``mistake``, fed as the check feeds."""
    return partial(_outputs_in_chunks, partial(_wrong_block_step, **mistake))


_CACHED_BLOCK_STEP_MISTAKES = {
    "Your step normalises as post-norm whatever the block: a pre-norm block (norm_first) "
    "normalises each sublayer's input, x + f(norm(x)).": _wrong_chunks(placement="post"),
    "Your step normalises as pre-norm whatever the block: a post-norm block normalises the "
    "sum, norm(x + f(x)).": _wrong_chunks(placement="pre"),
    "Your sublayers do not all follow the block's placement: in a pre-norm block each sublayer "
    "(self-attention, cross-attention, FFN) normalises its input, in a post-norm block each "
    "normalises the sum.": tuple(_wrong_chunks(placement=f"sublayer {n} {placed}")
                                 for n in (1, 2, 3) for placed in ("pre", "post")),
    "Your step never sees the positions of earlier steps: the new keys and values join the "
    "cache, and the new positions attend to all of it.": (_wrong_chunks(store=False),
                                                          _wrong_chunks(read_cache=False)),
    "Your causal lengths forget the cached positions: each new position also sees every "
    "position cached before this step.": _wrong_chunks(offset=False),
    "Your new positions see each other in both directions: among the new positions too, the "
    "i-th sees only those up to itself.": _wrong_chunks(causal=False),
    "Your encoder-decoder attention ignores src_valid_lens: the source's padding must get "
    "weight 0.": _wrong_chunks(cross_mask=False),
    "Your keys and values are projected from the block's input, not from the normalised input "
    "that the queries come from (pre-norm).": _wrong_chunks(project_from="block input"),
    "Your keys and values trade places in an attention: the queries are compared with the keys, "
    "and the weights average the values.": tuple(
        _wrong_chunks(swapped=swapped) for swapped in (("cross",), ("self",), ("self", "cross"))),
    "Your causal lengths are off by one: the i-th new position sees the cached positions and the "
    "new ones up to itself, itself included.": tuple(_wrong_chunks(shift=shift)
                                                     for shift in (1, -1)),
    "Your sublayers leave out a residual connection: each sublayer's output is added to its "
    "input.": tuple(_wrong_chunks(residual=residual)
                    for residual in ((), (2, 3), (1, 3), (1, 2))),
    "Your step leaves out a sublayer: masked self-attention, then encoder-decoder attention, then "
    "the FFN, each with its own add & norm.": tuple(_wrong_chunks(skip=n) for n in (1, 2, 3)),
    "Your sublayers use each other's normalisations: add_norm1 goes with the self-attention, "
    "add_norm2 with the encoder-decoder attention, add_norm3 with the FFN.": tuple(
        _wrong_chunks(norms=norms) for norms in itertools.permutations((1, 2, 3))
        if norms != (1, 2, 3)),
}


def check_cached_block_step(fn: Callable, seed: int = 0, hint: int = 1, *,
                            verbose: bool = False) -> None:
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
                  hint=hint, mistakes=_CACHED_BLOCK_STEP_MISTAKES, verbose=verbose)


MISTAKES = {"check_layer_norm": _LAYER_NORM_MISTAKES,
            "check_causal_additive_mask": _CAUSAL_ADDITIVE_MASK_MISTAKES,
            "check_cached_block_step": _CACHED_BLOCK_STEP_MISTAKES}  # the catalogues, for the tests
