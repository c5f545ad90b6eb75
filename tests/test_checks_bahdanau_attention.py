"""The checks of notebook 08_bahdanau_attention
(d2lhelpers/exercises/checks_bahdanau_attention.py): right and plausible wrong answers (see
checks_common.py) to a GRU cell and a Luong decoder step, written independently of the
references."""

from __future__ import annotations

import torch

from checks_common import CheckTests
from d2lhelpers.exercises import checks_bahdanau_attention


def gru_cell(x, h, W_ih, W_hh, b_ih, b_hh, order=(0, 1, 2), swap_update=False, reset="outside",
             candidate=torch.tanh, hidden_bias=True, input_bias=True, no_update=False,
             gate=torch.sigmoid, gates_see_h=True):
    """A GRU cell, right by default; each option away from its default is one plausible mistake."""
    H = h.shape[1]

    def chunks(W, b, v):  # (B, 3H) projections, split as (reset, update, candidate)
        p = v @ W.T + (b if (hidden_bias or W is W_ih) and (input_bias or W is W_hh) else 0)
        parts = [p[:, i * H:(i + 1) * H] for i in range(3)]
        return [parts[i] for i in order]

    i_r, i_z, i_n = chunks(W_ih, b_ih, x)
    h_r, h_z, h_n = chunks(W_hh, b_hh, h)
    if not gates_see_h:  # the gates from the input alone
        h_r, h_z = 0, 0
    r, z = gate(i_r + h_r), gate(i_z + h_z)
    if reset == "outside":  # PyTorch: r multiplies the whole hidden projection, b_hn included
        n = candidate(i_n + r * h_n)
    elif reset == "before the matrix":  # Cho et al. (2014): W_hn (r * h) + b_hn
        n = candidate(i_n + (r * h) @ W_hh[2 * H:].T + b_hh[2 * H:])
    elif reset == "nowhere":
        n = candidate(i_n + h_n)
    elif reset == "on the input":
        n = candidate(r * i_n + h_n)
    else:  # "not on the bias": r * (W_hn h) + b_hn
        n = candidate(i_n + r * (h @ W_hh[2 * H:].T) + b_hh[2 * H:])
    if no_update:
        return n
    if swap_update:
        return z * n + (1 - z) * h
    return (1 - z) * n + z * h


def luong_step(embedded, hidden, enc_outputs, valid_lens, cell, W_a, W_c, query="new", mask=True,
               order="context first", squash=True, transpose=False, return_old=False,
               softmax_dim=-1, fill=float("-inf"), scale=1.0, keep_query_axis=False,
               dot=False, return_attentional=False, padding_of=lambda t, n: t >= n):
    """A Luong decoder step, right by default; each option away from its default is a mistake.
    padding_of(position, valid length): where the mask hides the source."""
    new_hidden = cell(embedded, hidden)
    q = new_hidden if query == "new" else hidden  # "previous": Bahdanau's order
    W = W_a.T if transpose else W_a
    if dot:
        scores = torch.einsum("bh,bth->bt", q, enc_outputs) / scale
    else:
        scores = torch.einsum("bh,hk,btk->bt", q, W, enc_outputs) / scale  # (B, T_src): q W h_j
    if mask:
        T = enc_outputs.shape[1]
        padding = padding_of(torch.arange(T)[None, :], valid_lens[:, None])
        scores = scores.masked_fill(padding, fill)
    weights = torch.softmax(scores, dim=softmax_dim)
    context = torch.einsum("bt,bth->bh", weights, enc_outputs)
    pair = [context, new_hidden] if order == "context first" else [new_hidden, context]
    attentional = W_c(torch.cat(pair, dim=-1))
    if squash:
        attentional = torch.tanh(attentional)
    state = hidden if return_old else attentional if return_attentional else new_hidden
    return attentional, state, weights[:, None] if keep_query_axis else weights


def zeroed_after_softmax(embedded, hidden, enc_outputs, valid_lens, cell, W_a, W_c):
    """The softmax over every source position, then the padding's weights set to 0."""
    s = cell(embedded, hidden)
    weights = torch.softmax(torch.einsum("bh,hk,btk->bt", s, W_a, enc_outputs), dim=-1)
    weights = weights * (torch.arange(enc_outputs.shape[1])[None, :] < valid_lens[:, None])
    context = torch.einsum("bt,bth->bh", weights, enc_outputs)
    return torch.tanh(W_c(torch.cat([context, s], dim=-1))), s, weights


CHECKS = {
    "check_gru_cell": (gru_cell, {
        "update gate on the wrong side: z * n + (1 - z) * h": (
            lambda *a: gru_cell(*a, swap_update=True), "update gate z = 1", "keeps the candidate"),
        "no update gate": (lambda *a: gru_cell(*a, no_update=True), "update gate z = 1",
                           "ignores the update gate"),
        "gates taken in the order (update, reset, candidate)": (
            lambda *a: gru_cell(*a, order=(1, 0, 2)), "differ", "another order"),
        "gates taken in the order (candidate, reset, update)": (
            lambda *a: gru_cell(*a, order=(2, 0, 1)), "differ", "another order"),
        "reset gate applied before W_hn (Cho et al.'s form)": (
            lambda *a: gru_cell(*a, reset="before the matrix"), "reset gate r = 0",
            "before W_hn"),
        "reset gate not applied to b_hn": (
            lambda *a: gru_cell(*a, reset="not on the bias"), "reset gate r = 0",
            "leaves out the bias b_hn"),
        "reset gate forgotten": (lambda *a: gru_cell(*a, reset="nowhere"), "reset gate r = 0",
                                 "ignores the reset gate"),
        "reset gate on the input's part": (lambda *a: gru_cell(*a, reset="on the input"),
                                           "reset gate r = 0", "input's part"),
        "no biases": (lambda *a: gru_cell(*a, hidden_bias=False, input_bias=False), "differ",
                      "biases b_ih and b_hh"),
        "sigmoid for the candidate": (
            lambda *a: gru_cell(*a, candidate=torch.sigmoid), "differ", "uses a sigmoid"),
        "no tanh for the candidate": (lambda *a: gru_cell(*a, candidate=lambda v: v), "differ",
                                      "has no tanh"),
        "hidden biases forgotten": (
            lambda *a: gru_cell(*a, hidden_bias=False), "differ", "hidden biases"),
        "input biases forgotten": (
            lambda *a: gru_cell(*a, input_bias=False), "differ", "input biases"),
        "tanh for the gates": (lambda *a: gru_cell(*a, gate=torch.tanh), "differ",
                               "gates use tanh"),
        "gates from the input alone": (lambda *a: gru_cell(*a, gates_see_h=False), "differ",
                                       "one projection only"),
        "the reset gate on the wrong side and the update gate swapped": (
            lambda *a: gru_cell(*a, reset="before the matrix", swap_update=True), "differ", None),
    }),
    "check_luong_step": (luong_step, {
        "the previous state as the query (Bahdanau's order)": (
            lambda *a: luong_step(*a, query="previous"), "differ", "previous state (Bahdanau"),
        "the padding not masked": (
            lambda *a: luong_step(*a, mask=False), "on input padding holds large values",
            "give weight to the padding"),
        "the padding's scores set to 0": (lambda *a: luong_step(*a, fill=0.0), "differ",
                                          "set to 0"),
        "the padding zeroed after the softmax": (zeroed_after_softmax, "padding holds large values",
                                                 "zeroed on the padding after the softmax"),
        "[s; c] instead of [c; s]": (
            lambda *a: luong_step(*a, order="state first"), "result 0 of the tuple",
            "state first"),
        "tanh forgotten": (lambda *a: luong_step(*a, squash=False), "result 0 of the tuple",
                           "no tanh"),
        "W_a transposed": (lambda *a: luong_step(*a, transpose=True), "differ", "transposed"),
        "scaled by sqrt(H)": (lambda *a: luong_step(*a, scale=a[1].shape[1] ** 0.5), "differ",
                              "sqrt(H)"),
        "the old state returned": (
            lambda *a: luong_step(*a, return_old=True), "result 1 of the tuple",
            "return the previous state"),
        "softmax over the batch": (
            lambda *a: luong_step(*a, softmax_dim=0), "differ", "over the batch"),
        "weights (B, 1, T_src)": (lambda *a: luong_step(*a, keep_query_axis=True),
                                  "result 2 of the tuple: expected shape", "keep the query axis"),
        "the dot score, W_a left out": (lambda *a: luong_step(*a, dot=True), "differ",
                                        "leave out W_a"),
        "the attentional vector returned as the state": (
            lambda *a: luong_step(*a, return_attentional=True), "result 1 of the tuple",
            "attentional vector as the state"),
        "the mask inverted": (lambda *a: luong_step(*a, padding_of=lambda t, n: t < n),
                              "on input", "mask is inverted"),
        "the mask one position too long": (
            lambda *a: luong_step(*a, padding_of=lambda t, n: t > n), "on input", "off by one"),
        "no attention: the context is the mean of the encoder outputs": (
            lambda e, h, enc, lens, cell, W_a, W_c: (
                torch.tanh(W_c(torch.cat([enc.mean(1), cell(e, h)], -1))), cell(e, h),
                torch.full(enc.shape[:2], 1 / enc.shape[1])), "differ", None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_bahdanau_attention


def test_the_right_answers_agree_with_pytorch():
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(3, 5)
    x, h = torch.randn(4, 3), torch.randn(4, 5)
    with torch.no_grad():
        torch.testing.assert_close(
            gru_cell(x, h, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh), cell(x, h))
    # the Luong step with W_a = identity and a single valid token attends only to that token
    enc = torch.randn(2, 4, 5)
    W_c = torch.nn.Linear(10, 5)
    with torch.no_grad():
        _, s, weights = luong_step(torch.randn(2, 3), h[:2], enc, torch.tensor([1, 1]), cell,
                                   torch.eye(5), W_c)
    assert torch.equal(weights, torch.tensor([[1.0, 0, 0, 0]] * 2))