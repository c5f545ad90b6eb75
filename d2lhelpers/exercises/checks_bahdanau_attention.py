"""The checks of notebook 08_bahdanau_attention's coding exercises: a GRU cell from PyTorch's
weights, and a decoder step with Luong's "general" attention."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from ..attention import masked_softmax, sequence_mask
from .cases import (labelled, mask_inverted, randn, random_lengths, random_sizes,
                    seeded_generator, seeded_module, size_text)
from .runner import N_, Symptom, exercise_check, run_check

__all__ = ["check_gru_cell", "check_luong_step"]


def _gru_cell(x, h, W_ih, W_hh, b_ih, b_hh):
    """The reference: ``nn.GRUCell`` holding these weights."""
    cell = nn.GRUCell(W_ih.shape[1], W_hh.shape[1]).to(x.dtype)
    with torch.no_grad():
        for name, value in (("weight_ih", W_ih), ("weight_hh", W_hh), ("bias_ih", b_ih),
                            ("bias_hh", b_hh)):
            getattr(cell, name).copy_(value)
        return cell(x, h)


# The classic mistakes, each as the function that makes it ----------------------------------------

def _wrong_gru_cell(x, h, W_ih, W_hh, b_ih, b_hh, order=(0, 1, 2), reset="on the projection",
                    update="keeps h", candidate=torch.tanh, biases=("ih", "hh"),
                    gate=torch.sigmoid, gates_from=("x", "h")):
    """A GRU cell, right by default; each other value of an argument is a classic mistake.
    order: which chunk of the stacked weights is taken as (reset, update, candidate); gate: the
    gates' activation; gates_from: the projections the gates add."""
    H = h.shape[1]
    x_part = x @ W_ih.T + (b_ih if "ih" in biases else 0)  # (B, 3H)
    h_part = h @ W_hh.T + (b_hh if "hh" in biases else 0)
    chunk = [lambda p, i=i: p[:, i * H:(i + 1) * H] for i in order]  # (B, H) each
    (i_r, i_z, i_n), (h_r, h_z, h_n) = ([c(p) for c in chunk] for p in (x_part, h_part))
    r = gate((i_r if "x" in gates_from else 0) + (h_r if "h" in gates_from else 0))
    z = gate((i_z if "x" in gates_from else 0) + (h_z if "h" in gates_from else 0))
    W_hn, b_hn = W_hh[order[2] * H:(order[2] + 1) * H], b_hh[order[2] * H:(order[2] + 1) * H]
    b_hn = b_hn if "hh" in biases else 0
    n = candidate({"on the projection": lambda: i_n + r * h_n,  # PyTorch: b_hn inside
                   "before the matrix": lambda: i_n + (r * h) @ W_hn.T + b_hn,  # Cho et al.
                   "not on the bias": lambda: i_n + r * (h @ W_hn.T) + b_hn,
                   "nowhere": lambda: i_n + h_n,
                   "on the input": lambda: r * i_n + h_n}[reset]())
    return {"keeps h": lambda: (1 - z) * n + z * h, "keeps n": lambda: z * n + (1 - z) * h,
            "ignored": lambda: n}[update]()


_GRU_CELL_MISTAKES = {
    N_("Your update gate keeps the candidate where it should keep the old state: with z = 1 the "
       "state must stay as it was."): partial(_wrong_gru_cell, update="keeps n"),
    N_("Your new state ignores the update gate: it mixes the candidate with the old state."):
        partial(_wrong_gru_cell, update="ignored"),
    N_("Your gates are taken from the stacked weights in another order: PyTorch stacks the rows of "
       "the reset gate, then the update gate, then the candidate."): tuple(
        partial(_wrong_gru_cell, order=order) for order in itertools.permutations(range(3))
        if order != (0, 1, 2)),
    N_("Your reset gate multiplies h before W_hn (Cho et al.'s form): PyTorch's reset gate "
       "multiplies the whole hidden projection W_hn h + b_hn."): partial(_wrong_gru_cell,
                                                                      reset="before the matrix"),
    N_("Your reset gate leaves out the bias b_hn: it multiplies the whole hidden projection, "
       "W_hn h + b_hn."): partial(_wrong_gru_cell, reset="not on the bias"),
    N_("Your reset gate multiplies the input's part of the candidate: it resets the state's part, "
       "W_hn h + b_hn."): partial(_wrong_gru_cell, reset="on the input"),
    N_("Your candidate ignores the reset gate: r scales the hidden projection inside the tanh."):
        partial(_wrong_gru_cell, reset="nowhere"),
    N_("Your candidate uses a sigmoid: the gates use sigmoids, the candidate a tanh."):
        partial(_wrong_gru_cell, candidate=torch.sigmoid),
    N_("Your candidate has no tanh: n is the tanh of the input part plus the reset hidden part."):
        partial(_wrong_gru_cell, candidate=lambda v: v),
    N_("Your cell leaves out the hidden biases b_hh: each gate adds both projections, their biases "
       "included."): partial(_wrong_gru_cell, biases=("ih",)),
    N_("Your cell leaves out the biases b_ih and b_hh: each gate adds both projections, their "
       "biases included."): partial(_wrong_gru_cell, biases=()),
    N_("Your cell leaves out the input biases b_ih: each gate adds both projections, their biases "
       "included."): partial(_wrong_gru_cell, biases=("hh",)),
    N_("Your gates use tanh: the reset and update gates are sigmoids (values in (0, 1)), only the "
       "candidate uses tanh."): partial(_wrong_gru_cell, gate=torch.tanh),
    N_("Your gates use one projection only: each gate adds the input's projection and the state's "
       "projection."): tuple(partial(_wrong_gru_cell, gates_from=(part,)) for part in ("x", "h")),
}


@exercise_check
def check_gru_cell(fn: Callable, seed: int = 0, hint: int = 1, *,
                   verbose: bool = False) -> None:
    """fn(x, h, W_ih, W_hh, b_ih, b_hh) -> the new state h' (B, H) of a GRU cell, in PyTorch's
    layout: x (B, d_in), h (B, H), W_ih (3H, d_in) and W_hh (3H, H) stacking the reset, update and
    candidate rows in that order, b_ih and b_hh (3H,)::

        r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
        z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
        n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
        h' = (1 - z) * n + z * h
    """
    generator = seeded_generator(seed)

    def weights(d_in, H, dtype=torch.float32):
        return (randn(generator, 3 * H, d_in, dtype=dtype), randn(generator, 3 * H, H, dtype=dtype),
                randn(generator, 3 * H, dtype=dtype), randn(generator, 3 * H, dtype=dtype))

    def case(B, d_in, H, dtype=torch.float32, h=None):
        x = randn(generator, B, d_in, dtype=dtype)
        h = randn(generator, B, H, dtype=dtype) if h is None else h
        return (x, h, *weights(d_in, H, dtype))

    # the gates pushed to 0 or 1 first: there a mistake shows as a wrong behaviour with a name
    keep = case(3, 2, 3)
    keep[4][3:6] = 20.0  # b_iz: the update gate z is 1, so h' = h
    fixed = [(N_("update gate z = 1 (the state is kept)"), keep)]
    reset = case(2, 3, 3)
    reset[4][:3] = -20.0  # b_ir: the reset gate r is 0, so n = tanh(W_in x + b_in)
    fixed.append((N_("reset gate r = 0 (the candidate ignores h)"), reset))
    replace = case(3, 2, 3)
    replace[4][3:6] = -20.0  # z = 0: h' = n, the candidate
    fixed.append((N_("update gate z = 0 (the state is replaced)"), replace))
    fixed.append((N_("the first step, h = 0"), case(2, 3, 4, h=torch.zeros(2, 4))))
    fixed.append(("", case(2, 3, 4)))
    fixed.append(("float64", case(2, 3, 2, dtype=torch.float64)))
    random = [("", case(s["B"], s["d_in"], s["H"]))
              for s in random_sizes(generator, 2, B=(1, 4), d_in=(1, 6), H=(1, 6))]
    cases = labelled(fixed + random,
                     lambda x, h, *weights: f"B={x.shape[0]}, d_in={x.shape[1]}, H={h.shape[1]}")
    run_check("gru_cell", fn, cases, reference=_gru_cell,
              hints=(N_("Recall the GRU's equations: which gate resets what, and where does each "
                        "bias go? PyTorch stacks the three gates' weights in one matrix, in a "
                        "fixed order."),
                     N_("PyTorch's order is reset, update, candidate, H columns each, in both W_ih "
                        "and W_hh. The reset gate scales the hidden state's projection inside the "
                        "candidate, its bias included; the update gate mixes the candidate with "
                        "the old state, keeping the old state where it is 1."),
                     N_("split the projections x @ W_ih.T + b_ih and h @ W_hh.T + b_hh into three "
                        "chunks of H columns each, in the order reset, update, candidate "
                        "(.chunk(3, dim=-1)); r and z add the two projections' chunks; in the "
                        "candidate the reset gate multiplies the whole hidden projection, bias "
                        "b_hn included: n = tanh(i_n + r * h_n); the update gate keeps the old "
                        "state: h' = (1 - z) * n + z * h.")),
              hint=hint, mistakes=_GRU_CELL_MISTAKES, verbose=verbose)


def _luong_step(embedded, hidden, enc_outputs, valid_lens, cell, W_a, W_c):
    """The reference: the RNN step first, then attention with the new state as the query."""
    hidden = cell(embedded, hidden)  # (B, H): s_i
    scores = ((hidden @ W_a)[:, None] @ enc_outputs.transpose(1, 2))  # (B, 1, T_src): s_i W_a h_j
    weights = masked_softmax(scores, valid_lens)  # (B, 1, T_src)
    context = (weights @ enc_outputs).squeeze(1)  # (B, H)
    attentional = torch.tanh(W_c(torch.cat([context, hidden], dim=-1)))  # (B, H)
    return attentional, hidden, weights.squeeze(1)


def _wrong_luong_step(embedded, hidden, enc_outputs, valid_lens, cell, W_a, W_c, query="new",
                      mask="lengths", order="context first", squash=True, transpose=False,
                      state="new", axis=-1, scale=False, weights_shape="(B, T_src)",
                      score="general", shift=0):
    """One Luong step, right by default; each other value of an argument is a classic mistake.
    score "dot": s_i h_j without W_a; shift: the mask keeps valid_len + shift positions."""
    new = cell(embedded, hidden)  # (B, H)
    q = new if query == "new" else hidden
    W = torch.eye(W_a.shape[0], dtype=W_a.dtype) if score == "dot" else W_a
    scores = (q @ (W.T if transpose else W))[:, None] @ enc_outputs.transpose(1, 2)
    if scale:
        scores = scores / math.sqrt(W_a.shape[0])
    scores = scores.squeeze(1)  # (B, T_src)
    if mask == "lengths":
        scores = scores.masked_fill(~sequence_mask(valid_lens + shift, scores.shape[1]),
                                    -math.inf)
    elif mask == "zero":  # the padding's scores set to 0, not -inf
        scores = scores.masked_fill(~sequence_mask(valid_lens, scores.shape[1]), 0.0)
    weights = torch.softmax(scores, dim=axis)  # (B, T_src)
    if mask == "after":  # the padding's weights zeroed after the softmax, not renormalised
        weights = weights * sequence_mask(valid_lens, scores.shape[1])
    context = (weights[:, None] @ enc_outputs).squeeze(1)  # (B, H)
    pair = [context, new] if order == "context first" else [new, context]
    attentional = W_c(torch.cat(pair, dim=-1))
    attentional = torch.tanh(attentional) if squash else attentional
    weights = weights[:, None] if weights_shape == "(B, 1, T_src)" else weights
    return attentional, {"new": new, "old": hidden, "attentional": attentional}[state], weights


def _inverted_mask(result, embedded, hidden, enc_outputs, valid_lens, *modules) -> bool:
    """Whether the weights are those of an inverted mask (see :func:`_inverted`)."""
    weights = torch.as_tensor(result[2]).double()
    allowed = sequence_mask(valid_lens, enc_outputs.shape[1])
    if weights.shape != allowed.shape:
        return False
    return mask_inverted(weights, allowed)


_LUONG_STEP_MISTAKES = {
    N_("Your query is the previous state (Bahdanau's order): Luong attends after the RNN step, "
       "with the new state s_i as the query."): partial(_wrong_luong_step, query="previous"),
    N_("Your weights give weight to the padding: the softmax must be masked to the valid source "
       "positions."): partial(_wrong_luong_step, mask="none"),
    N_("Your padding's scores are set to 0, which still gives it weight: masked scores must become "
       "-inf (weight 0)."): partial(_wrong_luong_step, mask="zero"),
    N_("Your weights are zeroed on the padding after the softmax, without renormalising: they no "
       "longer sum to 1 (mask the scores before the softmax)."): partial(_wrong_luong_step,
                                                                       mask="after"),
    N_("Your concatenation puts the state first: W_c takes [c_i; s_i], the context first."):
        partial(_wrong_luong_step, order="state first"),
    N_("Your attentional vector has no tanh: it is tanh(W_c [c_i; s_i])."):
        partial(_wrong_luong_step, squash=False),
    N_("Your W_a is transposed: the score is s_i W_a h_j, the state on W_a's left."):
        partial(_wrong_luong_step, transpose=True),
    N_("Your scores are divided by sqrt(H): Luong's general score is s_i W_a h_j, unscaled."):
        partial(_wrong_luong_step, scale=True),
    N_("You return the previous state: the second result is the new state s_i."):
        partial(_wrong_luong_step, state="old"),
    N_("Your softmax normalises over the batch: each sentence's weights sum to 1 over its source "
       "positions."): (partial(_wrong_luong_step, axis=0),
                      partial(_wrong_luong_step, axis=0, mask="none")),
    N_("Your weights keep the query axis, (B, 1, T_src): the exercise returns them as (B, T_src)."):
        partial(_wrong_luong_step, weights_shape="(B, 1, T_src)"),
    N_("Your scores leave out W_a (a dot product s_i h_j): Luong's general score is s_i W_a h_j."):
        partial(_wrong_luong_step, score="dot"),
    N_("You return the attentional vector as the state: the second result is the RNN's new state "
       "s_i, the cell's output."): partial(_wrong_luong_step, state="attentional"),
    N_("Your mask is inverted: the weights go to the padding and none to the valid source "
       "positions."): Symptom(_inverted_mask),
    N_("Your mask is off by one: a sentence's weights cover exactly its first valid_len source "
       "positions."): tuple(partial(_wrong_luong_step, shift=shift) for shift in (1, -1)),
}


@exercise_check
def check_luong_step(fn: Callable, seed: int = 0, hint: int = 1, *,
                     verbose: bool = False) -> None:
    """fn(embedded, hidden, enc_outputs, valid_lens, cell, W_a, W_c) -> (attentional, hidden,
    weights): one decoder step with Luong et al.'s (2015) "general" attention, which attends
    *after* the RNN step, with the new state as the query::

        s_i = cell(embedded, hidden)                        # nn.GRUCell(E, H): (B, H)
        alpha_ij = masked softmax over j of s_i W_a h_j     # W_a (H, H), valid_lens (B,)
        c_i = sum_j alpha_ij h_j                            # (B, H)
        attentional = tanh(W_c [c_i; s_i])                  # W_c: nn.Linear(2H, H)

    embedded (B, E), hidden (B, H), enc_outputs (B, T_src, H). Returns attentional (B, H), the
    new state s_i (B, H) and the weights (B, T_src)."""
    generator = seeded_generator(seed)

    def case(B, E, H, T_src, lengths=None, garbage=False):
        cell = seeded_module(generator, nn.GRUCell, E, H)
        W_c = seeded_module(generator, nn.Linear, 2 * H, H)
        W_a = randn(generator, H, H) / H ** 0.5
        enc_outputs = randn(generator, B, T_src, H)
        valid_lens = (random_lengths(generator, B, T_src) if lengths is None
                      else torch.tensor(lengths))
        if garbage:  # large values where a sentence is padding: the mask must keep them out
            padding = torch.arange(T_src)[None, :] >= valid_lens[:, None]
            enc_outputs[padding] = 50.0
        return (randn(generator, B, E), randn(generator, B, H), enc_outputs, valid_lens, cell, W_a,
                W_c)

    def details(embedded, hidden, enc_outputs, valid_lens, *modules):
        (B, E), (T_src, H) = embedded.shape, enc_outputs.shape[1:]
        return f"{size_text(dict(B=B, E=E, H=H, T_src=T_src))}, valid_lens={valid_lens.tolist()}"

    fixed = [("", case(2, 3, 4, 5, [5, 5])),
             (N_("padding holds large values"), case(3, 2, 4, 6, [6, 2, 4], garbage=True)),
             (N_("one valid source token"), case(2, 3, 3, 4, [1, 1])),
             (N_("a batch of one"), case(1, 4, 5, 3, [3]))]
    random = [("", case(s["B"], s["E"], s["H"], s["T_src"]))
              for s in random_sizes(generator, 2, B=(1, 4), E=(1, 5), H=(2, 6), T_src=(1, 6))]
    cases = labelled(fixed + random, details)
    with torch.no_grad():
        run_check("luong_step", fn, cases, reference=_luong_step,
                  hints=(N_("In Luong's attention the RNN steps first, and its new state is the "
                            "query. Check the order of the steps, and of what you concatenate."),
                         N_("Run the cell on the embedded token first; score the encoder outputs "
                            "against the new state through W_a, with the padding masked; the "
                            "context is the weighted sum of the encoder outputs; the attentional "
                            "state is tanh of W_c applied to the context and the new state side by "
                            "side, context first."),
                         N_("first s = cell(embedded, hidden); then use the NEW s as the query: "
                            "scores (B, 1, T_src) = (s @ W_a)[:, None] @ enc_outputs.transpose(1, "
                            "2); d2lh.masked_softmax(scores, valid_lens) keeps the padding out; "
                            "the context is weights @ enc_outputs; concatenate the context first, "
                            "then s (torch.cat([c, s], dim=-1)), apply W_c and tanh; return "
                            "(attentional, s, weights (B, T_src)).")),
                  hint=hint, mistakes=_LUONG_STEP_MISTAKES, verbose=verbose)


MISTAKES = {"check_gru_cell": _GRU_CELL_MISTAKES,
            "check_luong_step": _LUONG_STEP_MISTAKES}  # the catalogues, for the tests
