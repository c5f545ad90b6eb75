"""Unit tests of d2lhelpers.attention: masked softmax, valid lengths and the two scoring layers.

Property tests (hypothesis) draw shapes, valid lengths and scores; the layers are checked against
``torch.nn.functional.scaled_dot_product_attention`` and the worked example of notebook 03.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import d2lhelpers as d2lh

# Deterministic (the same examples on every run: CI does not flake), and no database left behind.
FAST = settings(max_examples=60, deadline=None, derandomize=True, database=None)


@st.composite
def scores_and_lens(draw, dtype=torch.float32, max_magnitude=100.0):
    """Scores (B, T_q, T_k) and valid lengths: None, (B,) or (B, T_q), zeros included."""
    B, T_q, T_k = draw(st.integers(1, 4)), draw(st.integers(1, 5)), draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    magnitude = draw(st.floats(0.01, max_magnitude))
    generator = torch.Generator().manual_seed(seed)
    scores = (magnitude * torch.randn(B, T_q, T_k, generator=generator)).to(dtype)
    kind = draw(st.sampled_from(["none", "per sequence", "per query"]))
    length = st.integers(0, T_k)
    if kind == "none":
        lens = None
    elif kind == "per sequence":
        lens = torch.tensor(draw(st.lists(length, min_size=B, max_size=B)))
    else:
        lens = torch.tensor(draw(st.lists(st.lists(length, min_size=T_q, max_size=T_q),
                                          min_size=B, max_size=B)))
    return scores, lens


def full_lens(scores, lens):
    """valid lengths as a (B, T_q) tensor, whatever form they were given in."""
    B, T_q, T_k = scores.shape
    if lens is None:
        return torch.full((B, T_q), T_k)
    return lens[:, None].expand(B, T_q) if lens.dim() == 1 else lens


# ----------------------------------------------------------------------------------- masked softmax
@FAST
@given(scores_and_lens())
def test_masked_softmax_rows_sum_to_one_masked_entries_exactly_zero(case):
    scores, lens = case
    weights = d2lh.masked_softmax(scores, lens)
    assert weights.shape == scores.shape
    lens = full_lens(scores, lens)
    mask = torch.arange(scores.shape[-1]) < lens[..., None]
    assert (weights[~mask] == 0).all()                       # exactly 0, not merely small
    assert (weights >= 0).all() and not weights.isnan().any()
    row_sums = weights.sum(-1)
    torch.testing.assert_close(row_sums[lens > 0], torch.ones_like(row_sums[lens > 0]))
    assert (weights[lens == 0] == 0).all()                   # length-0 rows are all zeros
    # the valid part is the plain softmax of the valid scores
    for b, i in torch.nonzero(lens > 0).tolist():
        n = lens[b, i]
        torch.testing.assert_close(weights[b, i, :n], torch.softmax(scores[b, i, :n], -1))


@FAST
@given(scores_and_lens())
def test_masked_softmax_does_not_modify_its_input(case):
    scores, lens = case
    original = scores.clone()
    d2lh.masked_softmax(scores, lens)
    assert torch.equal(scores, original)


@FAST
@given(scores_and_lens(max_magnitude=1e3), st.sampled_from([torch.float16, torch.bfloat16]))
def test_masked_softmax_half_precision_stays_finite(case, dtype):
    scores, lens = case
    weights = d2lh.masked_softmax(scores.to(dtype), lens)
    assert weights.dtype == dtype and weights.isfinite().all()
    lens = full_lens(scores, lens)
    assert (weights[lens == 0] == 0).all()
    # against float32 on the same (rounded) scores: only the softmax's own precision differs
    reference = d2lh.masked_softmax(scores.to(dtype).float(), lens)
    torch.testing.assert_close(weights.float(), reference, atol=1e-2, rtol=0)


@FAST
@given(scores_and_lens())
def test_masked_softmax_gradients_are_finite_with_zero_length_rows(case):
    scores, lens = case
    scores = scores.double().requires_grad_()
    weights = d2lh.masked_softmax(scores, lens)
    (weights * torch.randn_like(weights)).sum().backward()
    assert scores.grad.isfinite().all()
    mask = torch.arange(scores.shape[-1]) < full_lens(scores, lens)[..., None]
    assert (scores.grad[~mask] == 0).all()  # masked scores have no influence


def test_masked_softmax_facts_of_notebook_03():
    X = torch.rand(2, 2, 4, generator=torch.Generator().manual_seed(0))
    weights = d2lh.masked_softmax(X, torch.tensor([2, 3]))
    assert (weights != 0).sum(-1).tolist() == [[2, 2], [3, 3]]
    weights = d2lh.masked_softmax(X, torch.tensor([[1, 3], [2, 4]]))
    assert weights[0, 0].tolist() == [1.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2))


def test_masked_softmax_without_lengths_is_softmax_and_accepts_lists():
    X = torch.randn(2, 3, 4)
    assert torch.equal(d2lh.masked_softmax(X), torch.softmax(X, -1))
    torch.testing.assert_close(d2lh.masked_softmax(X, [2, 4]),
                               d2lh.masked_softmax(X, torch.tensor([2, 4])))
    torch.testing.assert_close(d2lh.masked_softmax(X, torch.tensor([2.0, 4.0])),
                               d2lh.masked_softmax(X, torch.tensor([2, 4])))


# --------------------------------------------------------------------------------- valid lengths
def test_valid_lens_to_mask_per_sequence_and_per_query():
    mask = d2lh.valid_lens_to_mask(torch.tensor([2, 0]), num_queries=3, num_keys=4)
    assert mask.dtype == torch.bool and mask.shape == (2, 3, 4)
    assert mask[0].tolist() == [[True, True, False, False]] * 3
    assert not mask[1].any()
    mask = d2lh.valid_lens_to_mask(torch.tensor([[1, 4], [0, 2]]), num_queries=2, num_keys=4)
    assert mask.tolist() == [[[True, False, False, False], [True, True, True, True]],
                             [[False, False, False, False], [True, True, False, False]]]


@FAST
@given(scores_and_lens())
def test_valid_lens_to_mask_marks_the_first_valid_len_keys(case):
    scores, lens = case
    if lens is None:
        return
    B, T_q, T_k = scores.shape
    mask = d2lh.valid_lens_to_mask(lens, T_q, T_k)
    assert mask.shape == (B, T_q, T_k)
    assert torch.equal(mask.sum(-1), full_lens(scores, lens))
    # the True entries come first in every row: no False before a True
    assert (mask[..., 1:] <= mask[..., :-1]).all()


# ------------------------------------------------------------------- dot-product attention vs torch
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("per_query", [False, True])
def test_dot_product_attention_matches_scaled_dot_product_attention(dtype, per_query):
    generator = torch.Generator().manual_seed(int(per_query))
    B, T_q, T_k, d, d_v = 3, 4, 6, 8, 5
    Q, K, V = (torch.randn(B, T_q, d, generator=generator, dtype=dtype),
               torch.randn(B, T_k, d, generator=generator, dtype=dtype),
               torch.randn(B, T_k, d_v, generator=generator, dtype=dtype))
    shape = (B, T_q) if per_query else (B,)
    lens = torch.randint(1, T_k + 1, shape, generator=generator)  # >= 1: see the next test for 0
    layer = d2lh.DotProductAttention(dropout=0.3).eval()
    ours = layer(Q, K, V, lens)
    mask = d2lh.valid_lens_to_mask(lens, T_q, T_k)
    theirs = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
    assert ours.dtype == dtype and ours.shape == (B, T_q, d_v)
    torch.testing.assert_close(ours, theirs)
    # the weights are stored (detached) and match the definition
    scores = Q @ K.transpose(1, 2) / math.sqrt(d)
    expected = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)
    torch.testing.assert_close(layer.attention_weights, expected)
    assert not layer.attention_weights.requires_grad
    # without valid lengths: no mask at all
    torch.testing.assert_close(layer(Q, K, V), F.scaled_dot_product_attention(Q, K, V))


def test_dot_product_attention_zero_length_rows_give_zero_output():
    Q, K, V = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 2)
    lens = torch.tensor([[0, 2, 5], [1, 0, 3]])
    out = d2lh.DotProductAttention()(Q, K, V, lens)
    assert not out.isnan().any()
    assert (out[0, 0] == 0).all() and (out[1, 1] == 0).all()


def test_dot_product_attention_worked_example():
    queries = torch.randn(2, 1, 2, generator=torch.Generator().manual_seed(0))
    keys = torch.ones(2, 10, 2)
    values = torch.arange(40, dtype=torch.float32).reshape(1, 10, 4).repeat(2, 1, 1)
    layer = d2lh.DotProductAttention(dropout=0.5).eval()
    out = layer(queries, keys, values, torch.tensor([2, 6]))
    torch.testing.assert_close(out, torch.tensor([[[2.0, 3, 4, 5]], [[10.0, 11, 12, 13]]]))


# ------------------------------------------------------------------------------ additive attention
def test_additive_attention_worked_example_of_notebook_03():
    torch.manual_seed(0)
    queries = torch.normal(0, 1, (2, 1, 20))
    keys = torch.ones((2, 10, 2))
    values = torch.arange(40, dtype=torch.float32).reshape(1, 10, 4).repeat(2, 1, 1)
    layer = d2lh.AdditiveAttention(query_size=20, key_size=2, num_hiddens=8, dropout=0.1).eval()
    out = layer(queries, keys, values, torch.tensor([2, 6]))
    torch.testing.assert_close(out, torch.tensor([[[2.0, 3, 4, 5]], [[10.0, 11, 12, 13]]]))
    uniform = torch.zeros(2, 1, 10)
    uniform[0, 0, :2], uniform[1, 0, :6] = 1 / 2, 1 / 6
    torch.testing.assert_close(layer.attention_weights, uniform)


@pytest.mark.parametrize("lens", [None, torch.tensor([5, 0, 2]),
                                  torch.tensor([[1, 2], [5, 5], [0, 3]])])
def test_additive_attention_shapes_and_definition(lens):
    torch.manual_seed(1)
    B, T_q, T_k, q_size, k_size, H, d_v = 3, 2, 5, 7, 3, 6, 4
    layer = d2lh.AdditiveAttention(q_size, k_size, H).eval()
    Q, K, V = torch.randn(B, T_q, q_size), torch.randn(B, T_k, k_size), torch.randn(B, T_k, d_v)
    out = layer(Q, K, V, lens)
    assert out.shape == (B, T_q, d_v)
    assert layer.attention_weights.shape == (B, T_q, T_k)
    # definition: a(q, k) = w_v^T tanh(W_q q + W_k k), one pair at a time
    scores = torch.empty(B, T_q, T_k)
    for b in range(B):
        for i in range(T_q):
            for j in range(T_k):
                hidden = torch.tanh(layer.W_q.weight @ Q[b, i] + layer.W_k.weight @ K[b, j])
                scores[b, i, j] = layer.w_v.weight[0] @ hidden
    expected = d2lh.masked_softmax(scores, lens)
    torch.testing.assert_close(layer.attention_weights, expected)
    torch.testing.assert_close(out, expected @ V)


def test_dropout_acts_only_in_training_and_weights_are_stored_before_it():
    torch.manual_seed(2)
    layer = d2lh.AdditiveAttention(3, 3, 4, dropout=0.5)
    Q, K, V = torch.randn(2, 4, 3), torch.randn(2, 6, 3), torch.randn(2, 6, 2)
    outputs = [layer(Q, K, V) for _ in range(5)]
    assert any(not torch.equal(outputs[0], out) for out in outputs[1:])
    torch.testing.assert_close(layer.attention_weights.sum(-1), torch.ones(2, 4))  # pre-dropout
    layer.eval()
    assert torch.equal(layer(Q, K, V), layer(Q, K, V))


def test_gradients_reach_every_parameter():
    layer = d2lh.AdditiveAttention(3, 2, 4)
    Q, K, V = torch.randn(2, 1, 3), torch.randn(2, 5, 2), torch.randn(2, 5, 3)
    out = layer(Q, K, V, torch.tensor([2, 0]))
    out.sum().backward()
    for name, parameter in layer.named_parameters():
        assert parameter.grad is not None and parameter.grad.isfinite().all(), name
        assert parameter.grad.abs().sum() > 0, name


# ------------------------------------------------------------------------------------- bad input
def raises(match, fn, *args):
    with pytest.raises(ValueError, match=match):
        fn(*args)


def test_masked_softmax_rejects_bad_input_with_the_shapes_in_the_message():
    X = torch.randn(2, 3, 4)
    raises(r"scores must have shape \(B, T_q, T_k\), got \(3, 4\)", d2lh.masked_softmax, X[0], None)
    raises(r"valid_lens must have shape .*got \(3,\)", d2lh.masked_softmax, X,
           torch.tensor([1, 2, 3]))
    raises(r"valid_lens must have shape .*\(2, 3\).*got \(2, 4\)", d2lh.masked_softmax, X,
           torch.ones(2, 4, dtype=torch.long))
    raises(r"valid_lens must lie in \[0, T_k=4\], got values from 1 to 5", d2lh.masked_softmax, X,
           torch.tensor([1, 5]))
    raises(r"valid_lens must lie in \[0, T_k=4\], got values from -1", d2lh.masked_softmax, X,
           torch.tensor([-1, 2]))
    raises(r"whole numbers of keys, got \[2.5, 1.0\]", d2lh.masked_softmax, X,
           torch.tensor([2.5, 1.0]))
    raises(r"whole numbers of keys", d2lh.masked_softmax, X, torch.tensor([math.nan, 1.0]))
    raises(r"must hold numbers, got dtype torch.bool", d2lh.masked_softmax, X,
           torch.tensor([True, False]))


def test_valid_lens_to_mask_rejects_bad_input():
    raises(r"valid_lens must have shape \(B,\) or \(B, T_q\), got \(\)", d2lh.valid_lens_to_mask,
           torch.tensor(3), 2, 4)
    raises(r"valid_lens must have shape .*got \(1, 2, 3\)", d2lh.valid_lens_to_mask,
           torch.ones(1, 2, 3, dtype=torch.long), 2, 4)
    raises(r"\(B, T_q\)=\(2, 3\).*got \(2, 2\)", d2lh.valid_lens_to_mask,
           torch.ones(2, 2, dtype=torch.long), 3, 4)
    raises(r"valid_lens must lie in \[0, T_k=4\]", d2lh.valid_lens_to_mask, torch.tensor([5]), 1, 4)


@pytest.mark.parametrize("make_layer", [lambda: d2lh.DotProductAttention(),
                                        lambda: d2lh.AdditiveAttention(4, 4, 3)],
                         ids=["dot product", "additive"])
def test_layers_reject_bad_input_with_the_shapes_in_the_message(make_layer):
    layer = make_layer()
    Q, K, V = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    raises(r"queries must be a 3-D tensor \(B, T, width\), got \(3, 4\)", layer, Q[0], K, V)
    raises(r"keys must be a 3-D tensor .*got list", layer, Q, [[1.0]], V)
    raises(r"share the batch size B, got \(2, 3, 4\), \(3, 5, 4\) and \(2, 5, 6\)", layer,
           Q, torch.randn(3, 5, 4), V)
    raises(r"same number of pairs T_k, got keys \(2, 5, 4\) and values \(2, 4, 6\)", layer,
           Q, K, torch.randn(2, 4, 6))
    raises(r"valid_lens must lie in \[0, T_k=5\], got values from 1 to 6", layer, Q, K, V,
           torch.tensor([1, 6]))
    raises(r"valid_lens must have shape .*\(B, T_q\)=\(2, 3\).*got \(2, 5\)", layer, Q, K, V,
           torch.ones(2, 5, dtype=torch.long))


def test_width_mismatches_are_named():
    raises(r"same width d for a dot product, got queries \(2, 3, 4\) and keys \(2, 5, 3\)",
           d2lh.DotProductAttention(), torch.randn(2, 3, 4), torch.randn(2, 5, 3),
           torch.randn(2, 5, 1))
    layer = d2lh.AdditiveAttention(query_size=4, key_size=3, num_hiddens=2)
    raises(r"queries must have width 4, got shape \(2, 3, 5\)", layer,
           torch.randn(2, 3, 5), torch.randn(2, 5, 3), torch.randn(2, 5, 1))
    raises(r"keys must have width 3, got shape \(2, 5, 4\)", layer,
           torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 1))


# ------------------------------------------------------------------------------------------------
# The fast path (fused_attention, need_weights=False) against the readable path, in float64:
# the same outputs and the same gradients, for every mask form, rows with valid length 0 included.


@st.composite
def qkv_and_lens(draw):
    """queries (B, T_q, d), keys (B, T_k, d), values (B, T_k, d_v) in float64, and valid lengths of
    every form: None, (B,) or (B, T_q), with zeros."""
    scores, lens = draw(scores_and_lens(dtype=torch.float64, max_magnitude=3.0))
    B, T_q, T_k = scores.shape
    d, d_v = draw(st.integers(1, 8)), draw(st.integers(1, 5))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))

    def tensor(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64, requires_grad=True)

    return tensor(B, T_q, d), tensor(B, T_k, d), tensor(B, T_k, d_v), lens


def outputs_and_gradients(attend, queries, keys, values):
    """attend's output, and the gradients of a fixed random function of it w.r.t. its inputs."""
    out = attend(queries, keys, values)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    grads = torch.autograd.grad((out * weights).sum(), (queries, keys, values))
    return out, grads


@FAST
@given(qkv_and_lens())
def test_fast_path_equals_readable_path_outputs_and_gradients(case):
    queries, keys, values, lens = case
    attention = d2lh.DotProductAttention()
    readable = outputs_and_gradients(lambda q, k, v: attention(q, k, v, lens), queries, keys, values)
    fast = outputs_and_gradients(lambda q, k, v: attention(q, k, v, lens, need_weights=False),
                                 queries, keys, values)
    assert attention.attention_weights is None  # the fast path keeps no weights
    torch.testing.assert_close(fast[0], readable[0])
    for fast_grad, readable_grad in zip(fast[1], readable[1]):
        assert torch.isfinite(fast_grad).all()
        torch.testing.assert_close(fast_grad, readable_grad)
    if lens is not None:  # a query with no valid key gets 0 on both paths, never NaN
        no_key = (lens if lens.dim() == 2 else lens[:, None].expand(-1, queries.shape[1])) == 0
        assert torch.all(fast[0][no_key] == 0)


@pytest.mark.parametrize("lens", [None, torch.tensor([3, 0, 5]),
                                  torch.tensor([[1, 2, 3, 4], [0, 5, 5, 1], [2, 2, 0, 0]])])
def test_multihead_fast_path_equals_readable_path_with_parameter_gradients(lens):
    torch.manual_seed(0)
    mha = d2lh.MultiHeadAttention(12, 3, bias=True).double()
    queries, keys = torch.randn(3, 4, 12, dtype=torch.float64), torch.randn(3, 5, 12, dtype=torch.float64)
    results = []
    for need_weights in (True, False):
        mha.zero_grad()
        out = mha(queries, keys, keys, lens, need_weights=need_weights)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)).sum().backward()
        results.append((out, [p.grad.clone() for p in mha.parameters()]))
    (readable, readable_grads), (fast, fast_grads) = results
    torch.testing.assert_close(fast, readable)
    for fast_grad, readable_grad in zip(fast_grads, readable_grads):
        torch.testing.assert_close(fast_grad, readable_grad)


def test_fused_attention_is_pytorchs_kernel_with_the_course_mask_convention():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 6, 5), torch.randn(2, 3, 6, 7)  # (B, h, T, d)
    lens = torch.tensor([[1, 4, 6, 2], [6, 6, 3, 5]])  # (B, T_q), no zeros: PyTorch's result is finite
    mask = d2lh.valid_lens_to_mask(lens, 4, 6)[:, None]  # (B, 1, T_q, T_k), broadcast over heads
    torch.testing.assert_close(d2lh.fused_attention(q, k, v, lens),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    torch.testing.assert_close(d2lh.fused_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))
    assert torch.all(d2lh.fused_attention(q, k, v, torch.tensor([0, 6]))[0] == 0)


def test_sequence_mask_is_the_one_padding_mask():
    mask = d2lh.sequence_mask(torch.tensor([1, 3, 0]), 4)
    assert mask.tolist() == [[True, False, False, False], [True, True, True, False],
                             [False, False, False, False]]
    per_query = d2lh.sequence_mask(torch.tensor([[2, 0], [4, 1]]), 3)  # any leading shape
    assert per_query.shape == (2, 2, 3) and per_query[1, 0].tolist() == [True, True, True]
