"""The checks of notebook 13_what_heads_learn's coding exercises: the induction score of any
sequence's attention weights, and a layer's output with one head taken out."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from ..attention import KVCache, MultiHeadAttention, causal_valid_lens, masked_softmax
from .cases import case_label, randint, randn, random_sizes, seeded_generator, seeded_module
from .runner import N_, Symptom, exercise_check, run_check

__all__ = ["check_induction_score", "check_head_ablation"]


# The induction score -----------------------------------------------------------------------------

def _induction_score(weights, tokens, target=1, queries="with an earlier copy",
                     occurrences="all", average="pooled", read="rows", copies="earlier",
                     combine="sum"):
    """Per head (h,), the weight a query puts on the tokens that followed the earlier copies of
    its own token, averaged over the queries whose token occurred earlier; right by default, each
    other value of an argument is a classic mistake. target: the key's offset from the earlier
    copy (1: the token after it; 0: the copy itself; -1: the token before it); queries "all":
    every query in the average; occurrences "last" or "first": one earlier copy only; average
    "per sequence": each sequence's mean first; read "columns": the weights transposed; copies
    "anywhere": copies later in the sequence count too; combine "max": the largest weight on the
    tokens after the copies instead of their sum."""
    B, h, T, _ = weights.shape
    if read == "columns":
        weights = weights.transpose(-2, -1)
    positions = torch.arange(T)
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, T_q, T_k): the same token
    earlier = same & (positions[None, :] < positions[:, None])  # key s before query t
    if copies == "anywhere":
        earlier = same & (positions[None, :] != positions[:, None])
    if occurrences != "all":
        index = torch.arange(T).expand(B, T, T)
        masked = torch.where(earlier, index, -1 if occurrences == "last" else T)
        chosen = masked.amax(-1) if occurrences == "last" else masked.amin(-1)  # (B, T)
        earlier = earlier & (index == chosen[..., None])
    targets = torch.zeros_like(earlier)  # (B, T_q, T_k): key s + target for every earlier s
    if target >= 0:
        targets[:, :, target:] = earlier[:, :, :T - target]
    else:
        targets[:, :, :target] = earlier[:, :, -target:]
    counted = earlier.any(-1)  # (B, T): queries whose token occurred before
    if queries == "all":
        counted = torch.ones_like(counted)
    on_targets = weights * targets[:, None].to(weights.dtype)
    per_query = on_targets.amax(-1) if combine == "max" else on_targets.sum(-1)  # (B, h, T)
    per_query = per_query * counted[:, None].to(weights.dtype)
    if average == "per sequence":
        return (per_query.sum(-1) / counted.sum(-1, keepdim=True)).mean(0)
    return per_query.sum((0, 2)) / counted.sum()


def _heads_averaged(result, weights, tokens) -> bool:
    """Whether the result is the mean over the heads of the right scores (a number, or repeated
    for every head)."""
    expected = _induction_score(weights, tokens)
    got = torch.as_tensor(result, dtype=expected.dtype)
    return (got.numel() in (1, expected.numel())
            and bool(torch.allclose(got.flatten(), expected.mean().expand(got.numel()),
                                    atol=1e-5)))


_INDUCTION_SCORE_MISTAKES = {
    N_("Your score reads the weight on the earlier copy of the token itself (a duplicate-token "
       "score): an induction head looks one step further, at the token that came after the copy."):
        partial(_induction_score, target=0),
    N_("Your score reads the weight on the token before the earlier copy: an induction head looks "
       "at the token after it."): partial(_induction_score, target=-1),
    N_("Your average runs over every query: only the queries whose token occurred earlier in the "
       "sequence have a copy to look for."): partial(_induction_score, queries="all"),
    N_("Your score counts only the most recent earlier copy: a token seen twice before has two "
       "tokens that followed it, and the weight on both counts."):
        partial(_induction_score, occurrences="last"),
    N_("Your score counts only the first earlier copy: a token seen twice before has two tokens "
       "that followed it, and the weight on both counts."):
        partial(_induction_score, occurrences="first"),
    N_("Your score counts copies that come later in the sequence: a query can look back only, so "
       "only the copies before it (s < t) count."): partial(_induction_score, copies="anywhere"),
    N_("Your score takes the largest weight on the tokens after the earlier copies: a query's "
       "score is their sum."): partial(_induction_score, combine="max"),
    N_("Your score averages each sequence first: average over all the counted queries of the "
       "batch together, so that each query weighs the same."):
        partial(_induction_score, average="per sequence"),
    N_("Your score reads the weights transposed: weights[b, i, t, s] is the weight query t puts on "
       "key s (rows are queries)."): partial(_induction_score, read="columns"),
    N_("Your score is averaged over the heads: return one score per head, shape (h,)."):
        Symptom(_heads_averaged),
}


def _causal_weights(generator, B, h, T, sharpness=2.0):
    """Random causal attention weights (B, h, T, T): each row sums to 1 over keys 0 .. t."""
    scores = sharpness * randn(generator, B * h, T, T)
    return masked_softmax(scores, causal_valid_lens(B * h, T)).reshape(B, h, T, T)


def _ideal_heads(tokens_first_half):
    """A repeated sequence (1, 2L) and weights (1, 2, 2L, 2L): head 0 on the previous token,
    head 1 an exact induction head on the second half (uniform over 0 .. t on the first)."""
    L = tokens_first_half.shape[-1]
    tokens = torch.cat([tokens_first_half, tokens_first_half])[None]
    T = 2 * L
    previous = torch.zeros(T, T)
    previous[0, 0] = 1.0
    previous[torch.arange(1, T), torch.arange(T - 1)] = 1.0
    induction = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    induction[L:] = 0.0
    induction[torch.arange(L, T), torch.arange(1, L + 1)] = 1.0
    return torch.stack([previous, induction])[None], tokens


@exercise_check
def check_induction_score(fn: Callable, seed: int = 0, hint: int = 1, *,
                          verbose: bool = False) -> None:
    """fn(weights, tokens) -> scores (h,): for each head, the attention weight a query puts on
    the tokens that followed the earlier occurrences of its own token (summed over them), averaged
    over every query of the batch whose token occurred earlier in its sequence. weights
    (B, h, T, T), rows (queries) summing to 1; tokens (B, T)."""
    generator = seeded_generator(seed)
    distinct = torch.randperm(20, generator=generator)[:6]
    fixed = [(N_("a repeated sequence: a previous-token head and an exact induction head"),
              _ideal_heads(distinct)),
             (N_("a token seen twice before (token 3 at positions 0 and 2)"),
              (_causal_weights(generator, 1, 2, 6), torch.tensor([[3, 1, 3, 4, 3, 1]]))),
             (N_("the same token twice in a row"),
              (_causal_weights(generator, 1, 1, 5), torch.tensor([[2, 2, 0, 1, 2]]))),
             (N_("two sequences, one with many repeats, one with few"),
              (_causal_weights(generator, 2, 2, 8),
               torch.tensor([[0, 1, 0, 1, 0, 1, 0, 1], [5, 6, 7, 8, 9, 4, 3, 5]])))]
    random = []
    for s in random_sizes(generator, 3, B=(1, 3), h=(1, 3), T=(4, 10), V=(2, 5)):
        tokens = randint(generator, 0, s["V"] - 1, (s["B"], s["T"]))
        tokens[0, -1] = tokens[0, 0]  # at least one token with an earlier copy
        random.append(("", (_causal_weights(generator, s["B"], s["h"], s["T"]), tokens)))
    cases = [(case_label(what, f"weights {tuple(w.shape)}, tokens {t.tolist()}"), (w, t))
             for what, (w, t) in fixed + random]
    run_check("general_induction_score", fn, cases, reference=_induction_score,
              hints=(N_("For a query t, which keys hold the tokens that followed the earlier "
                        "copies of token t? Which queries count in the average, and is it one "
                        "score per head?"),
                     N_("Compare every query's token with every earlier token (s < t) of its own "
                        "sequence; move each match one key to the right; the query's score is the "
                        "weight its row puts on those keys. Average over the queries that have a "
                        "match, all sequences together, separately for each head."),
                     N_("same = tokens[:, :, None] == tokens[:, None, :] (B, T_q, T_k); keep s < t "
                        "(torch.tril(..., diagonal=-1)); shift it one key to the right (key s + "
                        "1); sum weights * shifted over the keys, (B, h, T); average over the "
                        "queries with some earlier copy (same & s < t, any over the keys), batch "
                        "and positions together, one score per head.")),
              hint=hint, mistakes=_INDUCTION_SCORE_MISTAKES, verbose=verbose)


# A head taken out --------------------------------------------------------------------------------

def _without_head(attention, X, head, zero="W_o's input", which="head", mask="causal",
                  project=True, rotate=True, replace="zeros"):
    """Causal self-attention of ``attention`` on X (B, T, d_model), with ``head``'s output zeroed
    before W_o; right by default, each other value of an argument is a classic mistake. zero:
    "W_o's output" (the head's slice of the output features), "queries" (the head's queries
    zeroed: uniform attention); rotate False: no rotary positions; replace "mean" or "batch
    mean": the head's output replaced by its mean over the positions (and the batch: mean
    ablation), not zeroed; which: "strided" (features head::h), "all but" (every other head
    zeroed), "next" (head + 1); mask None: no causal mask; project False: W_o left out."""
    B, T, d_model = X.shape
    h, d_k = attention.num_heads, attention.d_k
    chosen = (head + 1) % h if which == "next" else head
    Q = attention.split_heads(attention.W_q(X))  # (B, h, T, d_k)
    K = attention.split_heads(attention.W_k(X))
    Vs = attention.split_heads(attention.W_v(X))
    if attention.rotary is not None and rotate:
        Q, K = attention.rotary(Q), attention.rotary(K)
    if zero == "queries":
        Q = Q.clone()
        Q[:, chosen] = 0.0
    scores = (Q @ K.transpose(-2, -1) / d_k ** 0.5).flatten(0, 1)  # (B*h, T, T)
    lens = causal_valid_lens(B * h, T) if mask == "causal" else None
    heads = masked_softmax(scores, lens).unflatten(0, (B, h)) @ Vs  # (B, h, T, d_k)
    merged = attention.merge_heads(heads)  # (B, T, h*d_k)
    keep = torch.ones(h * d_k)
    if which == "strided":
        keep[chosen::h] = 0.0
    elif which == "all but":
        keep.zero_()
        keep[chosen * d_k:(chosen + 1) * d_k] = 1.0
    else:
        keep[chosen * d_k:(chosen + 1) * d_k] = 0.0
    if zero == "W_o's input" and replace != "zeros":
        axes = (1,) if replace == "mean" else (0, 1)
        merged = merged * keep + merged.mean(axes, keepdim=True) * (1 - keep)
    elif zero == "W_o's input":
        merged = merged * keep
    if not project:
        return merged
    out = attention.W_o(merged)
    return out * keep if zero == "W_o's output" else out


def _whole_layer(attention, X, head):
    """The layer with every head, nothing taken out."""
    return attention.step(X, KVCache())


_HEAD_ABLATION_MISTAKES = {
    N_("Your layer still has every head: its output is the whole layer's."): _whole_layer,
    N_("Your zeros land after W_o, on the head's slice of the output features: a head's output is "
       "zeroed where it enters W_o, in W_o's input (the heads side by side), before the projection "
       "mixes the heads."): partial(_without_head, zero="W_o's output"),
    N_("Your queries and keys are not rotated: the notebook's layers apply rotary positions "
       "(attention.rotary) to both before the scores."): partial(_without_head, rotate=False),
    N_("Your head still writes: zeroing its queries (or its scores) makes its attention uniform, "
       "an average of the values, not nothing."): partial(_without_head, zero="queries"),
    N_("Your zeros take every h-th feature: head i owns the contiguous features i*d_k .. "
       "(i+1)*d_k - 1 of W_o's input."): partial(_without_head, which="strided"),
    N_("Your layer keeps only that head: the others stay, and the head asked for goes."):
        partial(_without_head, which="all but"),
    N_("Your head's output is replaced by its mean (mean ablation): the task takes the head out, "
       "its output set to 0."): (partial(_without_head, replace="mean"),
                                partial(_without_head, replace="batch mean")),
    N_("Your zeroed head is the next one: heads are numbered from 0."):
        partial(_without_head, which="next"),
    N_("Your attention sees the future: the layer is causal, query t reads keys 0 .. t."):
        partial(_without_head, mask=None),
    N_("Your result skips W_o: return what the layer returns, the heads (one zeroed) projected by "
       "W_o."): partial(_without_head, project=False),
}


@exercise_check
def check_head_ablation(fn: Callable, seed: int = 0, hint: int = 1, *,
                        verbose: bool = False) -> None:
    """fn(attention, X, head) -> (B, T, d_model): what ``attention.step(X, d2lh.KVCache())``
    returns (the causal self-attention of a ``d2lh.MultiHeadAttention`` on X (B, T, d_model)) when
    head ``head`` writes nothing: its output, features head*d_k .. (head+1)*d_k - 1 of W_o's
    input, set to 0. Must leave ``attention`` as it was."""
    generator = seeded_generator(seed)
    fixed = [(N_("rotary positions, as in the notebook's model"), dict(h=2, d_k=4, B=2, T=5),
              True, 1),
             (N_("head 0 of 4, no rotation"), dict(h=4, d_k=2, B=1, T=6), False, 0),
             (N_("the last of 3 heads"), dict(h=3, d_k=2, B=2, T=4), True, 2),
             (N_("one position"), dict(h=2, d_k=2, B=1, T=1), False, 1)]
    for s in random_sizes(generator, 2, h=(2, 4), half_d_k=(1, 3), B=(1, 3), T=(2, 7)):
        head = int(randint(generator, 0, s["h"] - 1))
        fixed.append(("", dict(h=s["h"], d_k=2 * s["half_d_k"], B=s["B"], T=s["T"]), True, head))
    cases = []
    for what, s, rotary, head in fixed:
        d_model = s["h"] * s["d_k"]
        attention = seeded_module(generator, MultiHeadAttention, d_model, s["h"], rotary=rotary)
        X = randn(generator, s["B"], s["T"], d_model)
        label = (f"d_model={d_model}, h={s['h']}, d_k={s['d_k']}, X {tuple(X.shape)}, "
                 f"rotary={rotary}, head={head}")
        cases.append((case_label(what, label), (attention, X, head)))
    run_check("without_head", fn, cases, reference=_without_head,
              hints=(N_("Where do the heads' outputs sit side by side before they are mixed? Set "
                        "the part "
                        "that belongs to the head asked for to 0 there, and nowhere else."),
                     N_("Head i owns features i*d_k .. (i+1)*d_k - 1 of W_o's input (B, T, h*d_k). "
                        "Zero them there on the way in (a hook you remove afterwards), or subtract "
                        "the head's own term from the whole layer's output; leave attention's "
                        "weights and hooks as they were."),
                     N_("W_o's input (B, T, h*d_k) holds head i in features i*d_k .. (i+1)*d_k - "
                        "1: either multiply it by a mask there (a forward pre-hook on "
                        "attention.W_o, removed afterwards), or compute the whole layer and "
                        "subtract the head's term, heads[:, i] @ W_o.weight[:, i*d_k:(i+1)*d_k].T, "
                        "with the head's output from its weights (attention.step(X, "
                        "d2lh.KVCache(), need_weights=True) keeps them in "
                        "attention.attention_weights) and its values.")),
              hint=hint, mistakes=_HEAD_ABLATION_MISTAKES, verbose=verbose)


MISTAKES = {"check_induction_score": _INDUCTION_SCORE_MISTAKES,
            "check_head_ablation": _HEAD_ABLATION_MISTAKES}  # the catalogues, for the tests
