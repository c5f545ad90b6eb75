"""The checks of notebook 06_transformer's coding exercises: the multiply-adds of a forward pass,
and a decoder block's cached step. (The Transformer itself is in d2lhelpers.transformer.)"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial

import torch

from ..attention import KVCache, causal_valid_lens
from ..transformer import DecoderBlock, EncoderBlock
from .cases import (case_label, feed_in_chunks, labelled, randint, randn, random_sizes,
                    seeded_generator, seeded_module)
from .runner import N_, Symptom, _, exercise_check, run_check

__all__ = ['check_sublayer_parameters', 'check_default_init_stds',
           'check_transformer_multiply_adds', 'check_cached_block_step']


# Exercise 1: the parameters of the two sublayers -------------------------------------------------

def _sublayer_parameters(d_model, ffn_hidden, *, biases=("attention", "W_1", "W_2"),
                         projections=4, norms=0, width=None):
    """(attention sublayer, FFN) parameters of an encoder block, right by default; each other
    value of an argument is a classic mistake. biases: the parts that keep theirs; norms: the
    LayerNorms counted in each; width: the FFN's hidden width used (None: ffn_hidden)."""
    d, f = d_model, (ffn_hidden if width is None else width * d_model)
    attention = projections * (d * d + d * ("attention" in biases)) + 2 * d * norms
    ffn = 2 * d * f + f * ("W_1" in biases) + d * ("W_2" in biases) + 2 * d * norms
    return attention, ffn


def _block_parameters(d_model, ffn_hidden):
    """The reference: the parameters of d2lh.EncoderBlock's attention and FFN, counted."""
    block = EncoderBlock(d_model, 1, ffn_hidden)
    return (sum(p.numel() for p in block.self_attention.parameters()),
            sum(p.numel() for p in block.ffn.parameters()))


_SUBLAYER_PARAMETERS_MISTAKES = {
    N_("Your counts leave out biases: every nn.Linear of the block has one (W_q, W_k, W_v, W_o, "
       "and the FFN's two layers)."): tuple(
        partial(_sublayer_parameters, biases=kept) for kept in (
            (), ("W_1", "W_2"), ("attention",), ("attention", "W_1"), ("attention", "W_2"))),
    N_("Your attention has three projections: W_o, which mixes the heads' outputs, is a fourth "
       "d_model x d_model layer."): (partial(_sublayer_parameters, projections=3),
                                    partial(_sublayer_parameters, projections=3, biases=())),
    N_("Your counts include the add & norm's LayerNorm (2 d_model parameters): count the sublayer "
       "itself."): partial(_sublayer_parameters, norms=1),
    N_("Your FFN's hidden width is 4 d_model, the paper's: use ffn_hidden, the width you are "
       "given."): partial(_sublayer_parameters, width=4),
}


@exercise_check
def check_sublayer_parameters(fn: Callable, seed: int = 0, hint: int = 1, *,
                              verbose: bool = False) -> None:
    """fn(d_model, ffn_hidden) -> (parameters of an encoder block's attention sublayer, of its
    FFN), compared with those of d2lh.EncoderBlock, counted."""
    generator = seeded_generator(seed)
    fixed = [(N_("notebook 07's model"), (64, 128)), (N_("the paper's base model"), (512, 2048)),
             (N_("a narrow FFN"), (12, 5)), (N_("one feature"), (1, 3))]
    random = [("", (s["d"], s["f"])) for s in random_sizes(generator, 2, d=(2, 40), f=(1, 90))]
    cases = labelled(fixed + random, lambda d, f: f"d_model={d}, ffn_hidden={f}")
    run_check("sublayer_parameters", fn, cases, reference=_block_parameters,
              hints=(N_("Which nn.Linear layers does each sublayer hold, what shape is each "
                        "weight, and does each have a bias?"),
                     N_("The attention sublayer holds four d_model -> d_model layers (W_q, W_k, "
                        "W_v, W_o); the FFN two, d_model -> ffn_hidden and ffn_hidden -> d_model. "
                        "A layer from a to b features holds a*b weights and b biases."),
                     N_("attention = 4 * (d_model * d_model + d_model); ffn = 2 * d_model * "
                        "ffn_hidden + ffn_hidden + d_model.")),
              atol=0.5, rtol=0.0, hint=hint, mistakes=_SUBLAYER_PARAMETERS_MISTAKES,
              verbose=verbose)


# Exercise 2: the residual stream at PyTorch's default initialisation -----------------------------

_LAYERS = 24


def _stream_stds(norm_first, s2, law="sqrt(1 + s^2 l)"):
    """The standard deviation of the residual stream after each of 24 add & norm layers around
    fresh FFNs whose output has variance ``s2`` for a normalised input: 1 after every post-norm
    layer; in pre-norm the variances add up, sqrt(1 + s2 l). Each other ``law`` is a classic
    mistake's curve."""
    layer = torch.arange(1, _LAYERS + 1, dtype=torch.float32)
    if not norm_first:
        return torch.ones(_LAYERS)
    return {"sqrt(1 + s^2 l)": torch.sqrt(1 + s2 * layer),
            "sqrt(1 + l)": torch.sqrt(1 + layer),  # section 3's initialisation kept
            "1 + s^2 l": 1 + s2 * layer,  # the variance, not its square root
            "sqrt(1 + s^2 l^2)": torch.sqrt(1 + s2 * layer ** 2),  # one FFN for every layer
            }[law]


def _pre_norm_as_post(result, norm_first) -> bool:
    """Whether a pre-norm curve stays at 1, as a post-norm one does."""
    return bool(norm_first) and bool(torch.allclose(torch.as_tensor(result, dtype=torch.float64),
                                                    torch.ones(_LAYERS, dtype=torch.float64),
                                                    atol=0.03))


_DEFAULT_INIT_STDS_MISTAKES = {  # each mistake's curve (None: a pre-norm curve that stays at 1)
    N_("Your FFNs keep section 3's initialisation (the curve is its sqrt(1 + layer)): leave them "
       "as PyTorch initialises them."): "sqrt(1 + l)",
    N_("Your curve is the variance of the stream: return its square root, the standard deviation."):
        "1 + s^2 l",
    N_("Your stack reuses one FFN in every layer: its outputs add up in step and the stream grows "
       "about linearly; build a fresh FFN for each layer."): "sqrt(1 + s^2 l^2)",
    N_("Your pre-norm stack stays at 1 as a post-norm one does: pass norm_first to AddNorm, so "
       "that pre-norm adds the FFN's output to the stream."): None,
}


@exercise_check
def check_default_init_stds(fn: Callable, seed: int = 0, hint: int = 1, *,
                            verbose: bool = False) -> None:
    """fn(norm_first) -> (24,): the standard deviation of the residual stream after each of 24
    AddNorm(64, norm_first) layers around fresh PositionwiseFFN(64, 256) at PyTorch's default
    initialisation, for a unit-scale input (16, 10, 64), the variance averaged over 8 stacks.
    Compared, within 15%, with sqrt(1 + s^2 layer) in pre-norm (s: the FFN's output standard
    deviation, measured here) and 1 in post-norm."""
    from ..transformer import PositionwiseFFN

    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(1000 + seed)
        s2 = float(torch.stack([PositionwiseFFN(64, 256)(torch.randn(16, 10, 64)).var()
                                for _ in range(64)]).mean())

    def seeded(norm_first):  # the learner's function on a stream of its own
        torch.manual_seed(seed)
        return fn(norm_first)

    mistakes = {sentence: Symptom(_pre_norm_as_post) if law is None else
                partial(lambda norm_first, law: _stream_stds(norm_first, s2, law), law=law)
                for sentence, law in _DEFAULT_INIT_STDS_MISTAKES.items()}
    run_check("default_init_stds", seeded, [(N_("pre-norm"), (True,)), (N_("post-norm"), (False,))],
              reference=lambda norm_first: _stream_stds(norm_first, s2),
              hints=(N_("Start from section 3's residual_stream_stds: what does it do to the FFNs "
                        "that PyTorch would not?"),
                     N_("Leave out the four init lines and keep the rest: a fresh AddNorm and "
                        "PositionwiseFFN(64, 256) at every layer, the variance of X after each "
                        "layer averaged over the 8 stacks, then the square root."),
                     N_("variances[layer] += X.var().item() / num_stacks after X = AddNorm(d, "
                        "norm_first=norm_first)(X, PositionwiseFFN(d, 4 * d)), under "
                        "torch.no_grad(); return variances.sqrt().")),
              atol=0.02, rtol=0.15, hint=hint, mistakes=mistakes, verbose=verbose)



# The classic mistakes, each as the function that makes it ----------------------------------------

PARTS = ("encoder self-attention", "decoder self-attention", "encoder-decoder attention", "FFNs",
         "output layer")  # the parts of transformer_multiply_adds, in its order


def _multiply_adds(d_model, num_heads, ffn_hidden, num_layers, vocab_size, T_src, T_tgt, *,
                   heads="shared", causal="full", cross_kv="source", cross_queries="target",
                   cross_pairs="T_tgt T_src",
                   projections=4, ffn_matrices=2, ffn_stacks="both", layers=True, output="once",
                   per="multiply-add", once=()):
    """The multiply-adds of one teacher-forced forward pass of the Transformer, for one source
    sentence of T_src tokens and a decoder input of T_tgt tokens, split into PARTS; right by
    default, each other value of an argument is a classic mistake (heads "none": no scores or
    weighted sums; "one": those of one head of width d_model/h; once: the parts, 0 to 2, counted
    for one block only)."""
    d, N = d_model, (num_layers if layers else 1)

    def attention(T_q, T_kv, pairs):
        # W_q (and W_o) on the queries' positions, W_k and W_v on the keys' positions, then the
        # scores and the weighted sums: one dot product of width d_model per query-key pair each
        count = (projections - 2) * T_q * d * d + 2 * T_kv * d * d
        width = {"multiply": num_heads * d, "none": 0, "one": d // num_heads}.get(heads, d)
        return count + 2 * pairs * width

    kv_length = T_src if cross_kv == "source" else T_tgt
    pairs = {"T_tgt T_src": T_tgt * T_src, "T_tgt^2": T_tgt * T_tgt,
             "T_src^2": T_src * T_src}[cross_pairs]
    unmasked = {"full": T_tgt * T_tgt, "half with the diagonal": T_tgt * (T_tgt + 1) // 2}[causal]
    ffn_positions = {"both": T_src + T_tgt, "target": T_tgt, "source": T_src}[ffn_stacks]
    blocks = [1 if part in once else N for part in range(3)]
    counts = (blocks[0] * attention(T_src, T_src, T_src * T_src),
              blocks[1] * attention(T_tgt, T_tgt, unmasked),
              blocks[2] * attention(T_tgt if cross_queries == "target" else T_src, kv_length,
                                    pairs),
              N * ffn_matrices * d * ffn_hidden * ffn_positions,
              {"once": 1, "none": 0, "per block": N}[output] * T_tgt * d * vocab_size)
    return tuple(2 * c if per == "FLOP" else c for c in counts)


_MULTIPLY_ADDS_MISTAKES = {
    N_("Your counts are FLOPs, two per multiply-add (what FlopCounterMode reports): the exercise "
       "counts multiply-adds."): partial(_multiply_adds, per="FLOP"),
    N_("Your attention grows with the number of heads: h heads of width d_model/h compute their "
       "scores and weighted sums with T_q T_k d_model multiply-adds together, as one full-width "
       "head would."): partial(_multiply_adds, heads="multiply"),
    N_("Your attention counts only its projections: the scores Q K^T and the weighted sums of the "
       "values are matrix products too, T_q T_k d_model multiply-adds each."):
        partial(_multiply_adds, heads="none"),
    N_("Your scores and weighted sums count one head, of width d_k = d_model / h: all h heads "
       "compute theirs, T_q T_k d_model multiply-adds together."):
        partial(_multiply_adds, heads="one"),
    N_("Your count of an attention is that of one block: every block of its stack has one, "
       "num_layers in all."): tuple(partial(_multiply_adds, once=once)
                                   for once in ((2,), (1,), (0,), (1, 2))),
    N_("Your decoder's self-attention counts only the pairs the causal mask lets through: this "
       "code computes the scores of the future keys too, then masks them; the mask saves no "
       "multiply-adds (fused kernels can skip whole blocks of them, at most half)."):
        partial(_multiply_adds, causal="half with the diagonal"),
    N_("Your encoder-decoder attention takes its keys and values from the decoder's T_tgt "
       "positions: they come from the encoder's T_src outputs."): (
        partial(_multiply_adds, cross_kv="target"),
        partial(_multiply_adds, cross_kv="target", cross_pairs="T_tgt^2")),
    N_("Your encoder-decoder attention scores the wrong pairs: its T_tgt queries (the decoder) "
       "meet T_src keys (the encoder)."): (partial(_multiply_adds, cross_pairs="T_tgt^2"),
                                          partial(_multiply_adds, cross_pairs="T_src^2"),
                                          partial(_multiply_adds, cross_queries="source",
                                                  cross_pairs="T_src^2")),
    N_("Your attention has three projections: W_o, which mixes the heads' outputs, is a fourth "
       "d_model x d_model matrix."): partial(_multiply_adds, projections=3),
    N_("Your FFNs count one of their two matrices: d_model -> ffn_hidden, then ffn_hidden -> "
       "d_model."): partial(_multiply_adds, ffn_matrices=1),
    N_("Your FFNs count one stack: every block of both stacks has an FFN, at every position."): (
        partial(_multiply_adds, ffn_stacks="target"), partial(_multiply_adds, ffn_stacks="source")),
    N_("Your count is that of one block per stack: each stack has num_layers blocks."):
        partial(_multiply_adds, layers=False),
    N_("Your count leaves out the output layer, which turns every target position into V scores."):
        partial(_multiply_adds, output="none"),
    N_("Your output layer is counted once per block: it runs once, after the last block."):
        partial(_multiply_adds, output="per block"),
}


@exercise_check
def check_transformer_multiply_adds(fn: Callable, seed: int = 0, hint: int = 1, *,
                                    verbose: bool = False) -> None:
    """fn(d_model, num_heads, ffn_hidden, num_layers, vocab_size, T_src, T_tgt) -> the
    multiply-adds of one forward pass of the Transformer (teacher forcing) on one source sentence
    of T_src tokens and a decoder input of T_tgt tokens, as a tuple of five numbers (PARTS):
    encoder self-attention, decoder self-attention, encoder-decoder attention (each summed over
    the blocks), the FFNs of both stacks, the output layer. Matrix products only: one
    multiply-add per weight per position (biases, softmax and LayerNorm not counted)."""
    generator = seeded_generator(seed)
    fixed = [(N_("the notebook's tiny model"), (16, 4, 32, 2, 30, 7, 5)),
             (N_("a single source token"), (8, 2, 16, 1, 11, 1, 4)),
             (N_("one head"), (12, 1, 24, 3, 20, 6, 9)),
             (N_("the paper's base model"), (512, 8, 2048, 6, 37000, 25, 27))]
    random = [("", (s["d_k"] * s["h"], s["h"], s["ffn_hidden"], s["num_layers"], s["V"],
                    s["T_src"], s["T_tgt"]))
              for s in random_sizes(generator, 2, d_k=(1, 8), h=(1, 4), ffn_hidden=(1, 64),
                                    num_layers=(1, 4), V=(5, 100), T_src=(1, 30), T_tgt=(1, 30))]
    cases = labelled(fixed + random,
                     lambda d, h, f, N, V, T_src, T_tgt: f"d_model={d}, num_heads={h}, "
                     f"ffn_hidden={f}, num_layers={N}, vocab_size={V}, T_src={T_src}, "
                     f"T_tgt={T_tgt}")
    run_check("transformer_multiply_adds", fn, cases, reference=_multiply_adds,
              hints=(N_("Go through one block of each stack: which matrices does each position "
                        "pass through, how many query-key pairs does each attention score, and "
                        "which sequence gives the keys and values of the encoder-decoder "
                        "attention?"),
                     N_("A linear layer costs its weights' count per position. An attention costs "
                        "W_q and W_o on the queries' positions, W_k and W_v on the keys', plus the "
                        "scores and the weighted sums, T_q T_k d_model each, whatever the number "
                        "of heads or the mask. Every block of both stacks has its attentions and "
                        "FFN; the output layer runs once."),
                     N_("a linear layer from a to b features costs a*b per position. An attention "
                        "with T_q queries over T_k keys: W_q and W_o on T_q positions, W_k and W_v "
                        "on T_k positions (d_model^2 each), then T_q*T_k*d_model for the scores "
                        "and as many for the weighted sums, whatever the number of heads; the "
                        "causal mask saves nothing. Times num_layers; the FFN costs "
                        "2*d_model*ffn_hidden per position in both stacks; the output layer runs "
                        "once: T_tgt*d_model*vocab_size.")),
              atol=0.5, rtol=0.0, hint=hint, mistakes=_MULTIPLY_ADDS_MISTAKES, verbose=verbose)


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
                      skip=None, norms=(1, 2, 3), residual_in=("pre", "post")):
    """DecoderBlock.step written from the block's parts, right by default; each other value of an
    argument is a classic mistake. swapped: the attentions ("self", "cross") whose keys and values
    trade places; shift: the causal lengths off by it; residual: the sublayers (1, 2, 3) that
    keep their residual connection (in the placements residual_in; in the other, all do); skip: a
    sublayer left out; norms: the add_norm each sublayer uses."""
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
        keep = x if n in residual or ("pre" if pre else "post") not in residual_in else 0
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
    N_("Your step normalises as post-norm whatever the block: a pre-norm block (norm_first) "
       "normalises each sublayer's input, x + f(norm(x))."): _wrong_chunks(placement="post"),
    N_("Your step normalises as pre-norm whatever the block: a post-norm block normalises the sum, "
       "norm(x + f(x))."): _wrong_chunks(placement="pre"),
    N_("Your sublayers do not all follow the block's placement: in a pre-norm block each sublayer "
       "(self-attention, cross-attention, FFN) normalises its input, in a post-norm block each "
       "normalises the sum."): tuple(_wrong_chunks(placement=f"sublayer {n} {placed}")
                                    for n in (1, 2, 3) for placed in ("pre", "post")),
    N_("Your step never sees the positions of earlier steps: the new keys and values join the "
       "cache, and the new positions attend to all of it."): (_wrong_chunks(store=False),
                                                             _wrong_chunks(read_cache=False)),
    N_("Your causal lengths forget the cached positions: each new position also sees every "
       "position cached before this step."): _wrong_chunks(offset=False),
    N_("Your new positions see each other in both directions: among the new positions too, the "
       "i-th sees only those up to itself."): _wrong_chunks(causal=False),
    N_("Your encoder-decoder attention ignores src_valid_lens: the source's padding must get "
       "weight 0."): _wrong_chunks(cross_mask=False),
    N_("Your keys and values are projected from the block's input, not from the normalised input "
       "that the queries come from (pre-norm)."): _wrong_chunks(project_from="block input"),
    N_("Your keys and values trade places in an attention: the queries are compared with the keys, "
       "and the weights average the values."): tuple(
        _wrong_chunks(swapped=swapped) for swapped in (("cross",), ("self",), ("self", "cross"))),
    N_("Your causal lengths are off by one: the i-th new position sees the cached positions and "
       "the new ones up to itself, itself included."): tuple(_wrong_chunks(shift=shift)
                                                            for shift in (1, -1)),
    N_("Your sublayers leave out a residual connection: each sublayer's output is added to its "
       "input."): tuple(_wrong_chunks(residual=residual, residual_in=placed)
                       for placed in (("pre", "post"), ("pre",), ("post",))
                       for residual in ((), (2, 3), (1, 3), (1, 2))),
    N_("Your step leaves out a sublayer: masked self-attention, then encoder-decoder attention, "
       "then the FFN, each with its own add & norm."):
        tuple(_wrong_chunks(skip=n) for n in (1, 2, 3)),
    N_("Your sublayers use each other's normalisations: add_norm1 goes with the self-attention, "
       "add_norm2 with the encoder-decoder attention, add_norm3 with the FFN."): tuple(
        _wrong_chunks(norms=norms) for norms in itertools.permutations((1, 2, 3))
        if norms != (1, 2, 3)),
}


@exercise_check
def check_cached_block_step(fn: Callable, seed: int = 0, hint: int = 1, *,
                            verbose: bool = False) -> None:
    """fn(block, x, cache, enc_keys, enc_values, src_valid_lens) -> the outputs (B, T_new, d_model)
    of a decoder block (post-norm or pre-norm) on new positions x, which it appends to ``cache``
    (a KVCache) before attending causally to all of it, then to the encoder's projected keys and
    values (B, h, T_src, d_k). Checked over several steps against ``DecoderBlock.step``."""
    generator = seeded_generator(seed)
    fixed = [(N_("one position per step"), False, (1, 1, 1, 1), 4),
             (N_("one position per step"), True, (1, 1, 1), 4),
             (N_("several positions per step"), False, (3, 2), 4),
             (N_("several positions per step"), True, (2, 1, 3), 2)]
    random = [("", bool(randint(generator, 0, 1)), (s["first"], s["second"]), 2)
              for s in random_sizes(generator, 2, first=(1, 4), second=(1, 3))]
    cases = []
    for what, norm_first, chunks, heads in fixed + random:
        block = seeded_module(generator, DecoderBlock, 8, heads, 16, dropout=0.0,
                              norm_first=norm_first)
        B, T_src = 2, int(randint(generator, 2, 6))
        X, enc_outputs = randn(generator, B, sum(chunks), 8), randn(generator, B, T_src, 8)
        src_valid_lens = torch.tensor([T_src, int(randint(generator, 1, T_src))])
        label = ((_("pre-norm block") if norm_first else _("post-norm block"))
                 + f", d_model=8, h={heads}, "
                 + _("steps of {chunks} positions").format(chunks=list(chunks))
                 + f", T_src={T_src}, src_valid_lens={src_valid_lens.tolist()}")
        cases.append((case_label(what, label), (block, X, chunks, enc_outputs, src_valid_lens)))

    def learner_step(block, x, cache, enc, src_valid_lens):  # the exercise's signature
        return fn(block, x, cache, enc.keys, enc.values, src_valid_lens)

    def reference_step(block, x, cache, enc, src_valid_lens):
        return block.step(x, cache, enc, src_valid_lens)

    with torch.no_grad():
        run_check("cached_block_step", lambda *args: _outputs_in_chunks(learner_step, *args), cases,
                  reference=lambda *args: _outputs_in_chunks(reference_step, *args),
                  hints=(N_("Which sublayer's input is normalised in pre-norm, and what does "
                            "post-norm normalise instead? Which positions may the i-th new "
                            "position see, counting those cached at earlier steps?"),
                         N_("Write the sublayer step once for both placements; in the masked "
                            "self-attention, project the new keys and values from the same input "
                            "as the queries, append them before attending, and let the i-th new "
                            "position see every position cached before this step plus the new ones "
                            "up to itself."),
                         N_("Per sublayer: post-norm is norm(x + f(x)), pre-norm x + f(norm(x)), "
                            "chosen by block.add_normN.norm_first. In the masked self-attention, "
                            "append the new positions' keys and values (projected from the same "
                            "input as the queries) before attending, and give the i-th new "
                            "position the causal length offset + i + 1, offset being the number of "
                            "positions cached before this step. (The outputs shown are those of "
                            "all steps, side by side along the position axis.)")),
                  hint=hint, mistakes=_CACHED_BLOCK_STEP_MISTAKES, verbose=verbose)


MISTAKES = {"check_sublayer_parameters": _SUBLAYER_PARAMETERS_MISTAKES,
            "check_default_init_stds": _DEFAULT_INIT_STDS_MISTAKES,
            "check_transformer_multiply_adds": _MULTIPLY_ADDS_MISTAKES,
            "check_cached_block_step": _CACHED_BLOCK_STEP_MISTAKES}  # the catalogues, for the tests
