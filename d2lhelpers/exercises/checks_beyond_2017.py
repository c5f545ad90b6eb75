"""The checks of the coding exercises of notebooks 11_modern_attention (RoPE at given positions,
one block of the online softmax) and 12_decoder_only_lm (cached grouped-query self-attention,
top-p probabilities): the two halves of the former notebook 11_beyond_2017."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from ..attention import (
    MultiHeadAttention,
    causal_valid_lens,
    masked_softmax,
    online_softmax_update,
    sequence_mask,
)
from ..decoding import next_token_probs
from ..positional import apply_rotary
from .cases import (
    case_label,
    feed_in_chunks,
    labelled,
    load_linear_weights,
    randint,
    randn,
    random_floats,
    random_sizes,
    seeded_generator,
    seeded_module,
)
from .runner import N_, Symptom, _, exercise_check, run_check

__all__ = ["check_rotary_at_positions", "check_online_softmax_update",
           "check_cached_gqa_self_attention", "check_top_p_probs"]


# The classic mistakes, each as the function that makes it ----------------------------------------

def _wrong_rotary(x, positions, pairs="neighbours", turn=1, exponent="2j", written="interleaved",
                  use_positions=True, frequencies_in=torch.float64, shift=0, trig="cos, sin"):
    """RoPE at given positions, right by default; each other value of an argument is a classic
    mistake. pairs "halves": feature j with feature j + d_k/2; written "halves": the rotated
    pairs put back as two halves. frequencies_in: the dtype the frequencies are computed in (None:
    that of the angles; it matters for the large angles of some mistakes)."""
    T, d_k = x.shape[-2:]
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    j = torch.arange(d_k // 2, dtype=frequencies_in or dtype)
    power = {"2j": 2 * j / d_k, "j": j / d_k, "4j": 4 * j / d_k, "-2j": -2 * j / d_k}[exponent]
    omega = (10000.0 ** -power).to(dtype)  # (d_k/2,)
    m = (positions if use_positions else torch.arange(T)) + shift
    angles = m.to(dtype)[:, None] * omega  # (T, d_k/2)
    cos, sin = torch.cos(angles).to(x.dtype), turn * torch.sin(angles).to(x.dtype)
    if trig == "sin, cos":  # each other's place
        cos, sin = sin / turn, turn * cos
    if pairs == "halves":
        a, b = x[..., :d_k // 2], x[..., d_k // 2:]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    first, second = a * cos - b * sin, a * sin + b * cos
    if written == "halves" or (pairs == "halves" and written != "interleaved anyway"):
        return torch.cat([first, second], dim=-1)
    return torch.stack([first, second], dim=-1).flatten(-2)


def _not_a_rotation(result, x, positions) -> bool:
    """Whether the result has x's shape but changes the length of some vector x[..., t, :] (which
    a rotation of its pairs, whichever they are, keeps)."""
    y = torch.as_tensor(result).double()
    x = x.double()
    if y.shape != x.shape:
        return False
    return not torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-4, rtol=1e-4)


def _float32_angles(result, x, positions) -> bool:
    """Whether a float64 result for a float64 x is near the right one (within the error of
    float32 angles at far positions) without being it: angles computed in float32."""
    y = torch.as_tensor(result)
    return (x.dtype == y.dtype == torch.float64 and bool(positions.abs().max() > 1000)
            and bool(torch.allclose(y, apply_rotary(x, positions), atol=2e-2)))


_ROTARY_AT_POSITIONS_MISTAKES = {
    N_("Your angles are float32 (torch.arange(...) / d_k is float32 unless told otherwise): at far "
       "positions they lose digits; compute the frequencies and angles in x's float64."):
        Symptom(_float32_angles),
    N_("Your pairs are the two halves (feature j with feature j + d_k/2): here a pair is two "
       "neighbours, features 2j and 2j+1."): (
        partial(_wrong_rotary, pairs="halves"),
        partial(_wrong_rotary, pairs="halves", written="interleaved anyway")),
    N_("Your rotated pairs are written back as two halves (all first features, then all second "
       "ones): each pair goes back to its place, features 2j and 2j+1."):
        partial(_wrong_rotary, written="halves"),
    N_("Your rotation turns the other way: y_2j = x_2j cos - x_2j+1 sin, y_2j+1 = x_2j sin + "
       "x_2j+1 cos (multiplying by e^(i angle))."): partial(_wrong_rotary, turn=-1),
    N_("Your frequencies use the exponent j/d_k: pair j turns at omega_j = 10000^(-2j/d_k)."):
        partial(_wrong_rotary, exponent="j"),
    N_("Your frequencies use the exponent 4j/d_k: pair j uses 2j/d_k; did you double an index that "
       "is already 2j?"): partial(_wrong_rotary, exponent="4j"),
    N_("Your frequencies grow with j (10000^(2j/d_k)): omega_j = 10000^(-2j/d_k) falls from 1."): (
        partial(_wrong_rotary, exponent="-2j"),
        partial(_wrong_rotary, exponent="-2j", frequencies_in=None)),
    N_("Your rotation uses the positions 0 .. T-1, not those you were given: row t turns as "
       "position positions[t]."): partial(_wrong_rotary, use_positions=False),
    N_("Your positions are off by one: row t turns by the angle of position positions[t] itself."):
        tuple(partial(_wrong_rotary, shift=shift) for shift in (1, -1)),
    N_("Your cos and sin trade places: y_2j = x_2j cos - x_2j+1 sin, with cos and sin of the same "
       "angle."): tuple(partial(_wrong_rotary, trig="sin, cos", turn=turn) for turn in (1, -1)),
    N_("Your result is not a rotation: it changes the length of x's vectors, which turning each "
       "pair (x_2j, x_2j+1) by an angle keeps."): Symptom(_not_a_rotation),
}


@exercise_check
def check_rotary_at_positions(fn: Callable, seed: int = 0, hint: int = 1, *,
                              verbose: bool = False) -> None:
    """fn(x, positions) -> x with each pair of features (x_2j, x_2j+1) of row t rotated by the
    angle positions[t] * omega_j, omega_j = 10000^(-2j / d_k): x (..., T, d_k), positions (T,)
    whole numbers, any of them (not only 0 .. T-1). As ``d2lh.apply_rotary``."""
    generator = seeded_generator(seed)
    fixed = [(N_("positions 0 .. T-1"), (randn(generator, 1, 5, 8), torch.arange(5))),
             (N_("the odd positions of a cache"),
              (randn(generator, 2, 4, 8), torch.tensor([1, 3, 5, 7]))),
             (N_("position 0 only: no rotation"), (randn(generator, 1, 1, 4), torch.tensor([0]))),
             (N_("heads: x (B, h, T, d_k)"),
              (randn(generator, 2, 3, 4, 6), torch.tensor([9, 2, 4, 0]))),
             (N_("far positions, float64"), (randn(generator, 1, 3, 16, dtype=torch.float64),
                                             torch.tensor([1000, 40000, 65535])))]
    random = []
    for s in random_sizes(generator, 2, B=(1, 3), T=(1, 6), half_d_k=(1, 8)):
        positions = randint(generator, 0, 60, (s["T"],))  # drawn before x
        random.append(("", (randn(generator, s["B"], s["T"], 2 * s["half_d_k"]), positions)))
    cases = labelled(fixed + random, lambda x, positions:
                     f"x {tuple(x.shape)}, positions {positions.tolist()}")
    run_check("rotary_at_positions", fn, cases, reference=apply_rotary,
              hints=(N_("Which features form a pair, by how much does pair j turn at position m, "
                        "and in which direction? Does your angle use the positions you were "
                        "given?"),
                     N_("Pair j is two neighbours, (x[..., 2j], x[..., 2j+1]); it turns by the "
                        "angle positions[t] * omega_j, omega_j falling from 1 as j grows, in the "
                        "direction of multiplying x_2j + i x_2j+1 by e^(i angle); the angles in "
                        "the precision of x (float64 for a float64 x)."),
                     N_("pair j is (x[..., 2j], x[..., 2j+1]) (neighbours, not the two halves); "
                        "its angle is positions[t] * omega_j with omega_j = 10000 ** (-2j / d_k); "
                        "y_2j = x_2j cos - x_2j+1 sin, y_2j+1 = x_2j sin + x_2j+1 cos (the complex "
                        "number x_2j + i x_2j+1 times e^(i angle)). Compute the angles in float64 "
                        "for a float64 x, and keep x's shape.")),
              hint=hint, mistakes=_ROTARY_AT_POSITIONS_MISTAKES, verbose=verbose)


def _wrong_online_update(m, l, acc, scores, values, rescale=("l", "acc"), guard=True,
                         shift="new maximum", maximum="running", factor="exp(m - m_new)",
                         returned="state", max_over=(-1, True), sum_over=(-1, True)):
    """One block of the online softmax, right by default; each other value of an argument is a
    classic mistake. max_over, sum_over: the axis the block's maximum, and l's new sum, reduce,
    and whether they keep it (keepdim)."""
    block_max = scores.amax(dim=max_over[0], keepdim=max_over[1])
    m_new = block_max if maximum == "block" else torch.maximum(m, block_max)
    def guarded(maximum):  # 0 instead of -inf
        return torch.where(torch.isinf(maximum), torch.zeros_like(maximum), maximum) if guard \
            else maximum

    reference = torch.zeros_like(m_new) if shift == "none" else guarded(m_new)
    if shift == "old maximum everywhere":
        reference = guarded(m)
    p = torch.exp(scores - (guarded(m) if shift == "old maximum" else reference))
    correction = torch.exp(m - reference) if factor == "exp(m - m_new)" else \
        torch.exp(reference - m)
    if factor == "the block's maximum":  # the old sums compared with the block's maximum alone
        correction = torch.exp(m - guarded(block_max))
    new_l = (l * correction if "l" in rescale else l) + p.sum(dim=sum_over[0],
                                                             keepdim=sum_over[1])
    new_acc = (acc * correction if "acc" in rescale else acc) + p @ values
    if returned == "normalised":
        new_acc = new_acc / torch.where(new_l > 0, new_l, torch.ones_like(new_l))
    return (m if maximum == "kept" else m_new), new_l, new_acc


_ONLINE_SOFTMAX_UPDATE_MISTAKES = {
    N_("Your acc is not rescaled when the maximum grows: it was summed under the old maximum, so "
       "it must be brought to the new one, as l is, before the new block is added."):
        partial(_wrong_online_update, rescale=("l",)),
    N_("Your l is not rescaled when the maximum grows: it was summed under the old maximum, so it "
       "must be brought to the new one, as acc is, before the new block is added."):
        partial(_wrong_online_update, rescale=("acc",)),
    N_("Your sums are not rescaled when the maximum grows: l and acc were made under the old "
       "maximum; by what factor do they go over to the new one?"):
        partial(_wrong_online_update, rescale=()),
    N_("Your rescaling factor is inverted: when the maximum grows, the sums made under the old one "
       "must shrink, not grow."):
        partial(_wrong_online_update, factor="exp(m_new - m)"),
    N_("Your rescaling factor compares m with the block's maximum alone: the old sums go from m to "
       "the new running maximum, the larger of m and the block's maximum."):
        partial(_wrong_online_update, factor="the block's maximum"),
    N_("Your state turns NaN for a query that has seen only -inf scores (exp(-inf - (-inf)) is "
       "NaN): such a query's l and acc must stay 0."):
        partial(_wrong_online_update, guard=False),
    N_("Your exponentials use the raw scores, not the scores minus the running maximum: "
       "exp(score - m) keeps them at most 1 (and m is then part of the state)."):
        partial(_wrong_online_update, shift="none"),
    N_("Your new block is shifted by the old maximum: its exponentials are taken relative to the "
       "new maximum, like the rescaled sums."): (
        partial(_wrong_online_update, shift="old maximum"),
        partial(_wrong_online_update, shift="old maximum everywhere")),
    N_("Your maximum is the new block's alone: m_new is the largest score seen so far, the old m "
       "included."): partial(_wrong_online_update, maximum="block"),
    N_("Your m is not updated: return the new maximum, max(m, the block's largest score)."):
        partial(_wrong_online_update, maximum="kept"),
    N_("Your acc is divided by l: acc stays the unnormalised weighted sum until the last block."):
        partial(_wrong_online_update, returned="normalised"),
    N_("Your maximum or sum drops the axis it reduces (no keepdim): a (T_q,) vector against the "
       "(T_q, 1) state broadcasts every query against every other."): (
        partial(_wrong_online_update, max_over=(-1, False)),
        partial(_wrong_online_update, sum_over=(-1, False))),
    N_("Your maximum or sum runs over the queries: each query takes its own over the block's keys, "
       "the last axis."): (partial(_wrong_online_update, max_over=(-2, True)),
                          partial(_wrong_online_update, sum_over=(-2, True))),
}


@exercise_check
def check_online_softmax_update(fn: Callable, seed: int = 0, hint: int = 1, *,
                                verbose: bool = False) -> None:
    """fn(m, l, acc, scores, values) -> (m, l, acc) after one more block of keys: m (..., T_q, 1)
    the running maximum (-inf before any valid key), l (..., T_q, 1) the sum of exp(score - m),
    acc (..., T_q, d_v) the sum of exp(score - m) * value; scores (..., T_q, b) with -inf for
    masked keys; values (..., b, d_v). As ``d2lh.online_softmax_update``."""
    generator = seeded_generator(seed)
    inf = math.inf

    def state_after(scores, values):  # the reference's state after some earlier blocks
        shape = scores.shape[:-1] + (1,)
        m = torch.full(shape, -inf, dtype=scores.dtype)
        l = torch.zeros(shape, dtype=scores.dtype)
        acc = torch.zeros(scores.shape[:-1] + values.shape[-1:], dtype=scores.dtype)
        return online_softmax_update(m, l, acc, scores, values) if scores.shape[-1] else (m, l, acc)

    def case(what, earlier, new, d_v=3, dtype=torch.float32):
        earlier, new = torch.tensor(earlier, dtype=dtype), torch.tensor(new, dtype=dtype)
        values_before = randn(generator, *earlier.shape[:-2], earlier.shape[-1], d_v, dtype=dtype)
        values = randn(generator, *new.shape[:-2], new.shape[-1], d_v, dtype=dtype)
        m, l, acc = state_after(earlier, values_before)
        label = _("earlier scores {earlier}, new block {new}, d_v={d_v}").format(
            earlier=earlier.tolist(), new=new.tolist(), d_v=d_v)
        return case_label(what, label), (m, l, acc, new, values)

    cases = [
        case(N_("the first block: nothing seen yet (m = -inf, l = acc = 0)"), [[]],
             [[0.5, 2.0, -1.0]]),
        case(N_("the maximum grows: what was summed must be rescaled"), [[0.0, 1.0]], [[3.0, 0.5]]),
        case(N_("every new score below the running maximum"), [[4.0, 1.0]], [[0.0, 2.0, 3.5]]),
        case(N_("masked keys (-inf) in the block"), [[1.0, 0.0], [2.0, -1.0]],
             [[-inf, 0.5, -inf], [3.0, -inf, -inf]]),
        case(N_("a query with no valid key yet meets a fully masked block"),
             [[-inf, -inf], [0.0, 1.0]], [[-inf, -inf], [-inf, -inf]]),
        case(N_("large scores: exp(score) alone would overflow"), [[900.0, 1000.0]],
             [[1005.0, 950.0]]),
        case(N_("heads: (B, h, T_q, b), float64"), [[[[0.1, 0.4]], [[2.0, -3.0]]]],
             [[[[1.0, -0.5, 0.2]], [[-inf, 5.0, 1.0]]]], d_v=2, dtype=torch.float64),
    ]
    for s in random_sizes(generator, 2, T_q=(1, 4), seen=(1, 5), b=(1, 5)):
        earlier = (3 * randn(generator, s["T_q"], s["seen"])).tolist()
        new = (3 * randn(generator, s["T_q"], s["b"])).tolist()
        cases.append(case("", earlier, new, d_v=int(randint(generator, 1, 4))))
    run_check("online_softmax_update", fn, cases, reference=online_softmax_update,
              hints=(N_("Results 0, 1, 2 are the new m, l and acc. When the maximum grows, by what "
                        "factor must the sums made under the old maximum be multiplied? And what "
                        "must a query that has seen only -inf scores end with?"),
                     N_("The new maximum is the larger of the old one and the block's; the old "
                        "sums were made under the old maximum, so each gets the factor "
                        "exp(m - m_new) before the block's terms join them. A query whose maximum "
                        "is still -inf must subtract 0, not -inf."),
                     N_("m_new = max(m, largest new score); p = exp(scores - m_new); both sums "
                        "were made with exp(score - m), so multiply l and acc by exp(m - m_new) "
                        "before adding p.sum(-1) and p @ values. While m_new is -inf, subtract 0 "
                        "instead of m_new (exp(-inf - (-inf)) is NaN), so that l and acc stay 0.")),
              hint=hint, mistakes=_ONLINE_SOFTMAX_UPDATE_MISTAKES, verbose=verbose)


def _gqa_cases(generator):
    """(description, (gqa, X, chunks)): a seeded grouped-query MultiHeadAttention with RoPE, whose weights the
    learner's module receives, new positions X (B, T, d_model) and the sizes of the steps."""
    fixed = [(N_("one position per step"), dict(h=4, g=2, d_k=2, B=2), (1, 1, 1, 1)),
             (N_("several positions per step"), dict(h=4, g=2, d_k=4, B=2), (3, 2)),
             (N_("multi-query: one key-value head"), dict(h=4, g=1, d_k=2, B=1), (2, 1, 3)),
             (N_("multi-head: as many key-value heads as query heads"), dict(h=2, g=2, d_k=4, B=2),
              (1, 3)),
             (N_("one step over everything"), dict(h=6, g=3, d_k=2, B=1), (5,))]
    for s in random_sizes(generator, 2, g=(1, 3), group=(1, 3), half_d_k=(1, 3), B=(1, 3),
                          first=(1, 4), second=(1, 3)):
        fixed.append(("", dict(h=s["g"] * s["group"], g=s["g"], d_k=2 * s["half_d_k"], B=s["B"]),
                      (s["first"], s["second"])))
    cases = []
    for what, s, chunks in fixed:
        d_model = s["h"] * s["d_k"]
        gqa = seeded_module(generator, MultiHeadAttention, d_model, s["h"], num_kv_heads=s["g"],
                            rotary=True)
        X = randn(generator, s["B"], sum(chunks), d_model)
        label = (f"d_model={d_model}, h={s['h']}, g={s['g']}, d_k={s['d_k']}, B={s['B']}, "
                 + _("steps of {chunks} positions").format(chunks=list(chunks)))
        cases.append((case_label(what, label), (gqa, X, chunks)))
    return cases


def _wrong_gqa_step(gqa, X, cache, rotate=("queries", "keys"), positions="after the cache",
                    heads="interleave", causal="with the cache", scale="d_k",
                    cache_keys="rotated", query_positions=None, key_positions=None, shift=0,
                    swapped=False, axis=-1):
    """A cached grouped-query RoPE step with gqa's weights, right by default; each other value of
    an argument is a classic mistake. query_positions, key_positions: the positions of the
    queries, or the keys, alone (as ``positions``); shift: the positions off by it; swapped: the
    keys and values trade places; axis: that of the softmax."""
    B, T, d_model = X.shape
    h, g, d_k = gqa.num_heads, gqa.num_kv_heads, gqa.d_k
    seen = len(cache)

    def at(kind):  # the positions of the new tokens, as counted
        start = {"after the cache": seen, "from 0": 0, "after appending": seen + T}[kind]
        return torch.arange(start, start + T) + shift

    where = at(positions)
    Q = gqa.split_heads(gqa.W_q(X))  # (B, h, T, d_k)
    K, V = gqa.split_heads(gqa.W_k(X)), gqa.split_heads(gqa.W_v(X))  # (B, g, T, d_k)
    if swapped:
        K, V = V, K
    Q = apply_rotary(Q, at(query_positions) if query_positions else where) \
        if "queries" in rotate else Q
    rotated = apply_rotary(K, at(key_positions) if key_positions else where) \
        if "keys" in rotate else K
    V = apply_rotary(V, where) if "values" in rotate else V
    cache.append(rotated if cache_keys == "rotated" else K, V)
    keys = cache.keys if cache_keys == "rotated" else apply_rotary(cache.keys,
                                                                  torch.arange(len(cache)))
    if cache_keys == "rotated again":  # the whole cache rotated at every step, stored so
        cache.keys = keys
    if heads == "interleave":  # query head i reads key-value head i // (h/g)
        keys, values = (t.repeat_interleave(h // g, dim=1) for t in (keys, cache.values))
    else:  # tiled: query head i reads head i % g
        keys, values = (t.repeat(1, h // g, 1, 1) for t in (keys, cache.values))
    divisor = {"d_k": math.sqrt(d_k), "d_model": math.sqrt(d_model), "none": 1.0,
               "g d_k": math.sqrt(g * d_k)}[scale]
    scores = (Q @ keys.transpose(-2, -1) / divisor).flatten(0, 1)  # (B*h, T, T_k)
    T_k = keys.shape[2]
    lens = {"with the cache": causal_valid_lens(B, T, T_k - T),
            "without the cache": causal_valid_lens(B, T, 0),
            "none": torch.full((B,), T_k),
            "one more": causal_valid_lens(B, T, T_k - T) + 1,
            "one fewer": causal_valid_lens(B, T, T_k - T) - 1,
            "one fewer, -inf": causal_valid_lens(B, T, T_k - T) - 1}[causal]
    lens = lens.repeat_interleave(h, dim=0)
    if axis != -1:  # the causal mask, then the softmax over the queries
        allowed = sequence_mask(lens if lens.dim() == 2 else lens[:, None], T_k).expand_as(scores)
        weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=axis)
    elif causal != "with the cache" and causal.startswith("one"):  # past the keys: all of them
        allowed = sequence_mask(lens, T_k)
        if causal.endswith("-inf"):  # a query with no key to see: NaN
            weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), -1)
        else:
            weights = torch.softmax(scores.masked_fill(~allowed, torch.finfo(scores.dtype).min),
                                    -1).masked_fill(~allowed, 0.0)
    else:
        weights = masked_softmax(scores, lens)
    heads_out = weights.unflatten(0, (B, h)) @ values  # (B, h, T, d_k)
    return gqa.W_o(gqa.merge_heads(heads_out))


def _wrong_gqa(**mistake) -> Callable:
    """The outputs and cache of :func:`_wrong_gqa_step` making ``mistake``, fed as the check
    feeds."""

    def outputs_and_cache(gqa, X, chunks):
        with torch.no_grad():
            outputs, cache = feed_in_chunks(partial(_wrong_gqa_step, gqa, **mistake), X, chunks)
        return outputs, cache.keys, cache.values

    return outputs_and_cache


_CACHED_GQA_MISTAKES = {
    N_("Your queries are not rotated: RoPE turns the queries and the keys, each at its position."):
        _wrong_gqa(rotate=("keys",)),
    N_("Your keys are not rotated: RoPE turns the queries and the keys, each at its position."):
        _wrong_gqa(rotate=("queries",)),
    N_("Your values are rotated too: RoPE turns the queries and the keys only."):
        _wrong_gqa(rotate=("queries", "keys", "values")),
    N_("Your positions restart at 0 at every step: the new positions follow the len(cache) cached "
       "ones."): _wrong_gqa(positions="from 0"),
    N_("Your positions are counted after appending to the cache: the first new position is "
       "len(cache) as it was before this step."): _wrong_gqa(positions="after appending"),
    N_("Your query heads read the key-value heads tiled (head i reads i % g): each group of h/g "
       "neighbouring query heads shares one key-value head (head i reads i // (h/g))."):
        _wrong_gqa(heads="tile"),
    N_("Your new positions see each other in both directions: among the new positions too, the "
       "i-th sees only those up to itself."): _wrong_gqa(causal="none"),
    N_("Your causal lengths forget the cached positions: each new position also sees every "
       "position cached before this step."):
        _wrong_gqa(causal="without the cache"),
    N_("Your cache holds the keys before their rotation: cache them rotated, at their positions, "
       "so that they are never rotated again."): _wrong_gqa(cache_keys="unrotated"),
    N_("Your cached keys are rotated again at every step: rotate each key once, at its position, "
       "when it joins the cache."): _wrong_gqa(cache_keys="rotated again"),
    N_("Your scores are divided by sqrt(d_model): each head scales by the square root of its own "
       "width, d_k."): _wrong_gqa(scale="d_model"),
    N_("Your scores are not scaled: each head divides them by the square root of its width d_k."):
        _wrong_gqa(scale="none"),
    N_("Your scores are divided by sqrt(g * d_k), the width of all the key-value heads: each head "
       "scales by the square root of its own width, d_k."): _wrong_gqa(scale="g d_k"),
    N_("Your queries and keys turn at different positions: both are rotated at the positions of "
       "the new tokens, len(cache) onwards."): tuple(
        _wrong_gqa(**{which: kind}) for which in ("query_positions", "key_positions")
        for kind in ("from 0", "after appending")),
    N_("Your positions are off by one: the new tokens sit at positions len(cache), len(cache) + 1, "
       "..."): tuple(_wrong_gqa(shift=shift) for shift in (1, -1)),
    N_("Your causal lengths are off by one: the i-th new position sees the cached positions and "
       "the new ones up to itself, itself included."): tuple(
        _wrong_gqa(causal=causal) for causal in ("one more", "one fewer", "one fewer, -inf")),
    N_("Your keys and values trade places: the keys come from W_k (and are rotated), the values "
       "from W_v."): _wrong_gqa(swapped=True),
    N_("Your softmax runs over the queries: each query's weights sum to 1 over the keys it sees."):
        _wrong_gqa(axis=-2),
}


@exercise_check
def check_cached_gqa_self_attention(cls: type, seed: int = 0, hint: int = 1, *,
                                    verbose: bool = False) -> None:
    """cls(d_model, num_heads, num_kv_heads): causal grouped-query self-attention with RoPE and a
    key-value cache, with ``W_q`` (d_model -> d_model), ``W_k`` and ``W_v`` (d_model -> g * d_k)
    and ``W_o`` (d_model -> d_model), all ``nn.Linear`` without bias; ``forward(X, cache)`` takes
    new positions X (B, T_new, d_model) that follow the ``len(cache)`` positions of ``cache`` (a
    d2lh.KVCache of (B, g, T_seen, d_k)), appends their keys (rotated at their positions) and
    values, and returns (B, T_new, d_model). Compared over several steps, outputs and cache, with
    ``d2lh.MultiHeadAttention(..., num_kv_heads=g, rotary=True).step``."""
    cases = _gqa_cases(seeded_generator(seed))

    def learner(gqa, X, chunks):
        module = cls(gqa.d_model, gqa.num_heads, gqa.num_kv_heads)
        load_linear_weights(module, {name: getattr(gqa, name).weight
                                     for name in ("W_q", "W_k", "W_v", "W_o")},
                            note=f" (g * d_k = {gqa.num_kv_heads * gqa.d_k})")
        return outputs_and_cache(module.eval(), X, chunks)

    def reference(gqa, X, chunks):
        return outputs_and_cache(gqa.step, X, chunks)

    def outputs_and_cache(step, X, chunks):  # the outputs of all steps, then what was cached
        with torch.no_grad():
            outputs, cache = feed_in_chunks(step, X, chunks)
        return outputs, cache.keys, cache.values

    run_check("CachedGQASelfAttention", learner, cases, reference,
              hints=(N_("Result 0 holds the outputs of all steps side by side, results 1 and 2 the "
                        "keys and values cached at the end. At which positions are the new queries "
                        "and keys, which key-value head does query head i read, and which cached "
                        "positions may the i-th new position see?"),
                     N_("The new positions start at the number already cached; rotate the queries "
                        "and keys (not the values) at those positions, append the new keys and "
                        "values, let each group of h/g query heads read its key-value head, and "
                        "give the i-th new position all cached positions up to and including its "
                        "own."),
                     N_("offset = len(cache); project Q (B, h, T_new, d_k), K and V "
                        "(B, g, T_new, d_k); rotate Q and K (not V) with d2lh.apply_rotary at "
                        "positions offset .. offset + T_new - 1; cache.append(K, V); repeat the "
                        "cached keys and values for the h/g query heads of each group with "
                        "repeat_interleave(h // g, dim=1) (query head i reads key-value head "
                        "i // (h/g)); scale by sqrt(d_k); give the i-th new position the causal "
                        "length offset + i + 1 (d2lh.causal_valid_lens with offset); merge the "
                        "heads and apply W_o.")),
              hint=hint, mistakes=_CACHED_GQA_MISTAKES, verbose=verbose)


def _wrong_top_p(logits, top_p, keep="mass before < top_p", renormalise=True, order="descending",
                 softmax="stable", placed="back", cumulate="probabilities", divide_by="sum"):
    """Nucleus probabilities, right by default; each other value of an argument is a classic
    mistake. keep: which sorted tokens are kept, by the probability of those before them or up
    to them."""
    probs = {"stable": lambda: torch.softmax(logits, dim=-1),
             "over the batch": lambda: torch.softmax(logits, dim=0),
             "exp": lambda: torch.exp(logits) / torch.exp(logits).sum(dim=-1, keepdim=True)}[
        softmax]()
    if order == "vocabulary":  # not sorted at all
        sorted_probs, index = probs, torch.arange(probs.shape[-1]).expand_as(probs)
    else:
        sorted_probs, index = probs.sort(dim=-1, descending=order == "descending")
    mass = (sorted_probs if cumulate == "probabilities"
            else logits.gather(-1, index)).cumsum(dim=-1)  # up to and including each token
    before = mass - (sorted_probs if cumulate == "probabilities" else logits.gather(-1, index))
    kept_sorted = {"mass before < top_p": before < top_p, "mass < top_p": mass < top_p,
                   "mass <= top_p": mass <= top_p, "mass < top_p, the first forced":
                   (mass < top_p) | (torch.arange(mass.shape[-1]) == 0)}[keep]
    kept_sorted = kept_sorted.int().cumprod(dim=-1).bool()  # up to the first token not kept
    if placed == "sorted":
        out = sorted_probs * kept_sorted
    elif placed == "mask not moved":  # the keep mask, in sorted order, on unsorted probabilities
        out = probs * kept_sorted
    else:
        out = probs * torch.zeros_like(kept_sorted).scatter(-1, index, kept_sorted)
    if divide_by == "top_p":
        return out / top_p
    return out / out.sum(dim=-1, keepdim=True) if renormalise else out


def _right_after_a_softmax(result, logits, top_p) -> bool:
    """Whether the softmax of the result (logits or log-probabilities, -inf outside the nucleus)
    gives the expected probabilities."""
    result = torch.as_tensor(result).double()
    return (result.shape == logits.shape and torch.allclose(
        torch.softmax(result, dim=-1), next_token_probs(logits.double(), top_p=top_p),
        atol=1e-5))


def _nucleus_of_another_size(result, logits, top_p) -> bool:
    """Whether each row of the result is the probabilities of its m most probable tokens,
    renormalised, in place (for some m; m = 0: nothing kept, all 0, or NaN from 0 / 0), and some
    row's m is not the nucleus's."""
    result = torch.as_tensor(result).double()
    probs = torch.softmax(logits.double(), dim=-1)
    if result.shape != probs.shape or probs.dim() != 2:
        return False
    expected = next_token_probs(logits.double(), top_p=top_p)
    other = False
    for row, p, want in zip(result, probs, expected):
        if (bool(row.isnan().all()) or bool((row == 0).all())) and float(logits.abs().max()) < 50:
            other = True  # (with moderate logits: not the NaN of an overflowing exp)
            continue
        order = p.argsort(descending=True)
        for m in range(1, len(p) + 1):
            kept = torch.zeros_like(p).index_fill(0, order[:m], 1.0) * p
            if torch.allclose(row, kept / kept.sum(), atol=1e-5):
                other = other or (m != int((want > 0).sum()))
                break
        else:
            return False
    return other


_TOP_P_PROBS_MISTAKES = {
    N_("Your nucleus leaves out the token that crosses top_p: the nucleus includes it (its "
       "probabilities sum to at least top_p), so the most probable token is always kept."): tuple(
        partial(_wrong_top_p, keep=keep, renormalise=renormalise)
        for keep in ("mass < top_p", "mass <= top_p", "mass < top_p, the first forced")
        for renormalise in (True, False)),
    N_("Your kept probabilities are divided by top_p: divide them by their own sum, so that they "
       "sum to 1."): partial(_wrong_top_p, divide_by="top_p"),
    N_("Your kept probabilities are not renormalised: divide them by their sum, so that they sum "
       "to 1."): partial(_wrong_top_p, renormalise=False),
    N_("Your nucleus keeps the least probable tokens: sort from the most probable down."):
        (partial(_wrong_top_p, order="ascending"),
         partial(_wrong_top_p, order="ascending", renormalise=False)),
    N_("Your softmax overflows on large logits (exp of a large number is inf, and inf / inf NaN): "
       "subtract each row's largest logit first, as torch.softmax does."):
        partial(_wrong_top_p, softmax="exp"),
    N_("Your probabilities stay in sorted order: put each back at its token's place in the "
       "vocabulary."): (partial(_wrong_top_p, placed="sorted"),
                       partial(_wrong_top_p, placed="sorted", renormalise=False)),
    N_("Your keep mask is in sorted order but applied to the probabilities in vocabulary order: "
       "each token's decision must go back to that token's place."): (
        partial(_wrong_top_p, placed="mask not moved"),
        partial(_wrong_top_p, placed="mask not moved", renormalise=False)),
    N_("Your nucleus accumulates the logits: the nucleus is the fewest most probable tokens whose "
       "probabilities sum to top_p."): partial(_wrong_top_p, cumulate="logits"),
    N_("Your nucleus takes the tokens in vocabulary order: sort them by probability first, the "
       "most probable first."): tuple(
        partial(_wrong_top_p, order="vocabulary", renormalise=renormalise)
        for renormalise in (True, False)),
    N_("Your softmax runs over the batch: each row's probabilities are over the vocabulary, the "
       "last axis."): tuple(
        partial(_wrong_top_p, softmax="over the batch", renormalise=renormalise)
        for renormalise in (True, False)),
    N_("Your result turns into the right probabilities under a softmax: return the probabilities "
       "themselves, not logits or log-probabilities."): Symptom(_right_after_a_softmax),
    N_("Your nucleus holds the most probable tokens, renormalised, but not the right number of "
       "them: it is the fewest most probable tokens whose probabilities reach top_p together."):
        Symptom(_nucleus_of_another_size),
}


@exercise_check
def check_top_p_probs(fn: Callable, seed: int = 0, hint: int = 1, *,
                      verbose: bool = False) -> None:
    """fn(logits, top_p) -> probabilities (B, V): the softmax of the logits restricted to the
    nucleus, the fewest most probable tokens whose probabilities sum to at least top_p (0 < top_p
    <= 1), renormalised; 0 for every other token. As ``d2lh.next_token_probs(logits,
    top_p=top_p)``."""
    generator = seeded_generator(seed)
    fixed = [(N_("top_p = 1: every token"), (randn(generator, 2, 6), 1.0)),
             (N_("a tiny top_p: only the most probable token"), (randn(generator, 3, 5), 1e-3)),
             (N_("top_p = 0.9"), (2 * randn(generator, 2, 8), 0.9)),
             (N_("the most probable token alone reaches top_p in row 0"),
              (torch.tensor([[5.0, 1.0, 0.0, -1.0], [0.5, 0.4, 0.3, 0.2]]), 0.6)),
             (N_("large logits"), (500 + 100 * randn(generator, 2, 6), 0.5))]
    random = []
    for s in random_sizes(generator, 2, B=(1, 3), V=(3, 12)):
        top_p = round(random_floats(generator, 1, low=0.1, scale=0.85)[0], 2)  # before the logits
        random.append(("", (2 * randn(generator, s["B"], s["V"]), top_p)))
    cases = labelled(fixed + random,
                     lambda logits, top_p: f"logits {tuple(logits.shape)}, top_p={top_p}")
    run_check("top_p_probs", fn, cases,
              reference=lambda logits, top_p: next_token_probs(logits, top_p=top_p),
              hints=(N_("Sort each row's probabilities from the largest down: which tokens belong "
                        "to the nucleus, including the one that crosses top_p? Do the kept "
                        "probabilities sum to 1, and are they back at their tokens' places?"),
                     N_("From the softmax, sorted from the largest down, keep a token while the "
                        "probability of the tokens before it is below top_p (the token that "
                        "crosses it stays); then put the kept set back at its tokens' places and "
                        "renormalise."),
                     N_("probs = torch.softmax(logits, -1); sorted, order = probs.sort(-1, "
                        "descending=True); keep a sorted token when the probability of the tokens "
                        "before it, sorted.cumsum(-1) - sorted, is below top_p (so the token that "
                        "crosses top_p is kept and the most probable one always is); put the keep "
                        "mask back in vocabulary order (scatter with order), zero the others and "
                        "divide by the sum of what is kept.")),
              hint=hint, mistakes=_TOP_P_PROBS_MISTAKES, verbose=verbose)


MISTAKES = {"check_rotary_at_positions": _ROTARY_AT_POSITIONS_MISTAKES,
            "check_online_softmax_update": _ONLINE_SOFTMAX_UPDATE_MISTAKES,
            "check_cached_gqa_self_attention": _CACHED_GQA_MISTAKES,
            "check_top_p_probs": _TOP_P_PROBS_MISTAKES}  # the catalogues, for the tests
