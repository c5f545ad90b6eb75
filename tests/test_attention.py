"""Unit tests of d2lhelpers.attention: masks and valid lengths, masked softmax, the two scoring
layers, the fast path against the readable one, multi-head attention and its key-value cache,
grouped-query heads, the online softmax.

Property tests (hypothesis) draw shapes, valid lengths and scores; the layers are checked against
``torch.nn.functional.scaled_dot_product_attention`` (with ``enable_gqa`` for grouped heads),
``torch.nn.MultiheadAttention`` holding the same weights, and the worked example of notebook 03.
Host synchronisations are counted with the ``host_syncs`` fixture of ``conftest.py``.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
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
def raises(match, fn, *args, **kwargs):
    with pytest.raises(ValueError, match=match):
        fn(*args, **kwargs)


def test_masked_softmax_rejects_bad_input_with_the_shapes_in_the_message():
    X = torch.randn(2, 3, 4)
    raises(r"scores must have shape \(B, T_q, T_k\), got \(3, 4\)", d2lh.masked_softmax, X[0], None)
    raises(r"scores must be floating point, got dtype torch.int64", d2lh.masked_softmax,
           torch.ones(2, 3, 4, dtype=torch.long), None)
    raises(r"valid_lens must have shape \(B,\)=\(2,\) or \(B, T_q\)=\(2, 3\), got \(3,\)",
           d2lh.masked_softmax, X, torch.tensor([1, 2, 3]))
    raises(r"valid_lens must have shape .*\(2, 3\).*got \(2, 4\)", d2lh.masked_softmax, X,
           torch.ones(2, 4, dtype=torch.long))
    raises(r"valid_lens must be whole numbers in \[0, T_k=4\], got 5$", d2lh.masked_softmax, X,
           torch.tensor([1, 5]))
    raises(r"valid_lens must be whole numbers in \[0, T_k=4\], got -1$", d2lh.masked_softmax, X,
           torch.tensor([-1, 2]))
    raises(r"valid_lens must be whole numbers in \[0, T_k=4\], got \[-1, 7\]$",
           d2lh.masked_softmax, X, torch.tensor([[-1, 2, 7], [1, 1, 1]]))  # every bad value
    raises(r"whole numbers in \[0, T_k=4\], got 2.5$", d2lh.masked_softmax, X,
           torch.tensor([2.5, 1.0]))
    raises(r"whole numbers in \[0, T_k=4\], got nan$", d2lh.masked_softmax, X,
           torch.tensor([math.nan, 1.0]))
    raises(r"valid_lens must hold whole numbers, got dtype torch.bool", d2lh.masked_softmax, X,
           torch.tensor([True, False]))


def test_check_valid_lens_names_the_callers_argument_and_bounds():
    lens = torch.tensor([3, 1])
    assert d2lh.check_valid_lens(None, 2, 4, 5) is None
    assert torch.equal(d2lh.check_valid_lens(lens, 2, 4, 5), lens)
    assert d2lh.check_valid_lens([3, 1], 2, None, 3).tolist() == [3, 1]
    assert d2lh.check_valid_lens(lens, 2, None, 3, device="meta").device.type == "meta"
    raises(r"^src_valid_lens must be whole numbers in \[1, T_src=3\], got 0$", d2lh.check_valid_lens,
           torch.tensor([3, 0]), 2, None, 3, name="src_valid_lens", keys_name="T_src", minimum=1)
    raises(r"^src_valid_lens must be whole numbers in \[1, T_src=3\], got 4$", d2lh.check_valid_lens,
           torch.tensor([4, 1]), 2, None, 3, name="src_valid_lens", keys_name="T_src", minimum=1)
    # num_queries None: only one length per sequence is allowed
    raises(r"^src_valid_lens must have shape \(B,\)=\(2,\), got \(2, 4\)$", d2lh.check_valid_lens,
           torch.ones(2, 4, dtype=torch.long), 2, None, 3, name="src_valid_lens")
    raises(r"^lens must hold whole numbers, got dtype torch.complex64$", d2lh.check_valid_lens,
           torch.ones(2, dtype=torch.complex64), 2, None, 3, name="lens")


def test_check_valid_lens_reads_the_values_once(host_syncs):
    lens = torch.tensor([[1, 2, 3], [0, 4, 4]])
    assert host_syncs(d2lh.check_valid_lens, lens, 2, 3, 4) == 1
    assert host_syncs(d2lh.check_valid_lens, lens.double(), 2, 3, 4) == 1  # the whole-number check too
    assert host_syncs(d2lh.check_valid_lens, None, 2, 3, 4) == 0


def test_valid_lens_to_mask_rejects_bad_input():
    raises(r"valid_lens must have shape \(B,\) or \(B, T_q\), got \(\)", d2lh.valid_lens_to_mask,
           torch.tensor(3), 2, 4)
    raises(r"valid_lens must have shape .*got \(1, 2, 3\)", d2lh.valid_lens_to_mask,
           torch.ones(1, 2, 3, dtype=torch.long), 2, 4)
    raises(r"\(B, T_q\)=\(2, 3\).*got \(2, 2\)", d2lh.valid_lens_to_mask,
           torch.ones(2, 2, dtype=torch.long), 3, 4)
    raises(r"valid_lens must be whole numbers in \[0, T_k=4\], got 5$", d2lh.valid_lens_to_mask,
           torch.tensor([5]), 1, 4)


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
    raises(r"valid_lens must be whole numbers in \[0, T_k=5\], got 6$", layer, Q, K, V,
           torch.tensor([1, 6]))
    raises(r"queries must be floating point, got dtype torch.int64", layer, Q.long(), K, V)
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


# ------------------------------------------------------------------------------------------------
# MultiHeadAttention and KVCache, checked against torch.nn.MultiheadAttention holding the same
# weights (MultiHeadAttention.to_torch), plus the invariants that make masking and decoding with a
# key-value cache correct.

DTYPES_AND_TOLERANCES = [(torch.float32, 1e-5), (torch.float64, 1e-12)]


def make_pair(d_model, num_heads, dtype=torch.float32, bias=False, seed=0):
    """Our MultiHeadAttention and PyTorch's, holding the same weights, both in eval mode."""
    torch.manual_seed(seed)
    ours = d2lh.MultiHeadAttention(d_model, num_heads, bias=bias).to(dtype).eval()
    if bias:  # nn.Linear initialises biases; give them visible values anyway
        for layer in (ours.W_q, ours.W_k, ours.W_v, ours.W_o):
            nn.init.normal_(layer.bias)
    return ours, ours.to_torch()


def random_qkv(B, T_q, T_k, d_model, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, T_q, d_model, generator=g, dtype=dtype),
            torch.randn(B, T_k, d_model, generator=g, dtype=dtype),
            torch.randn(B, T_k, d_model, generator=g, dtype=dtype))


def test_causal_valid_lens():
    assert d2lh.causal_valid_lens(2, 3).tolist() == [[1, 2, 3], [1, 2, 3]]
    assert d2lh.causal_valid_lens(1, 2, offset=4).tolist() == [[5, 6]]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_to_torch_builds_pytorchs_layer_with_a_copy_of_the_weights(dtype, bias):
    ours, theirs = make_pair(12, 3, dtype, bias=bias)
    assert isinstance(theirs, nn.MultiheadAttention) and theirs.batch_first
    assert (theirs.embed_dim, theirs.num_heads, theirs.in_proj_weight.dtype) == (12, 3, dtype)
    assert (theirs.in_proj_bias is not None) == bias and not theirs.training
    with torch.no_grad():  # a copy: changing ours afterwards leaves theirs as it was
        before = theirs.in_proj_weight.clone()
        ours.W_q.weight.add_(1)
    assert torch.equal(theirs.in_proj_weight, before)
    training = d2lh.MultiHeadAttention(12, 3, dropout=0.25).to_torch()
    assert training.training and training.dropout == 0.25  # the mode and the dropout are copied


@pytest.mark.parametrize("kwargs", [dict(num_kv_heads=1), dict(num_kv_heads=2),
                                    dict(rotary=True), dict(num_kv_heads=4, rotary=True)])
def test_to_torch_refuses_what_pytorchs_layer_cannot_compute(kwargs):
    layer = d2lh.MultiHeadAttention(16, 4, **kwargs)
    with pytest.raises(ValueError, match=r"nn.MultiheadAttention has no grouped-query heads or "
                                         r"RoPE; this layer has num_kv_heads=\d of num_heads=4"):
        layer.to_torch()
    assert d2lh.MultiHeadAttention(16, 4, num_kv_heads=4).to_torch().num_heads == 4  # g = h is fine


@pytest.mark.parametrize("dtype,tol", DTYPES_AND_TOLERANCES)
@pytest.mark.parametrize("bias", [False, True])
def test_matches_pytorch_without_mask(dtype, tol, bias):
    ours, theirs = make_pair(12, 3, dtype, bias=bias)
    q, k, v = random_qkv(2, 5, 7, 12, dtype)
    out = ours(q, k, v)
    ref, ref_weights = theirs(q, k, v, need_weights=True, average_attn_weights=False)
    assert out.shape == (2, 5, 12) and out.dtype == dtype
    assert ours.attention_weights.shape == (2, 3, 5, 7)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    torch.testing.assert_close(ours.attention_weights, ref_weights, rtol=tol, atol=tol)
    torch.testing.assert_close(ours(q, k, v, need_weights=False), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,tol", DTYPES_AND_TOLERANCES)
@pytest.mark.parametrize("bias", [False, True])
def test_matches_pytorch_with_key_padding_mask(dtype, tol, bias):
    ours, theirs = make_pair(16, 4, dtype, bias=bias)
    q, k, v = random_qkv(3, 4, 6, 16, dtype)
    valid_lens = torch.tensor([2, 6, 3])
    out = ours(q, k, v, valid_lens)
    # PyTorch's key_padding_mask is True where a key must be ignored
    padding = torch.arange(6)[None, :] >= valid_lens[:, None]  # (B, T_k)
    ref, ref_weights = theirs(q, k, v, key_padding_mask=padding, need_weights=True,
                              average_attn_weights=False)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    torch.testing.assert_close(ours.attention_weights, ref_weights, rtol=tol, atol=tol)
    # masked keys get exactly zero weight, in every head
    assert torch.all(ours.attention_weights[0, :, :, 2:] == 0)
    assert torch.all(ours.attention_weights[2, :, :, 3:] == 0)
    torch.testing.assert_close(ours(q, k, v, valid_lens, need_weights=False), ref, rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("dtype,tol", DTYPES_AND_TOLERANCES)
def test_matches_pytorch_with_causal_mask(dtype, tol):
    ours, theirs = make_pair(16, 2, dtype)
    X, _, _ = random_qkv(2, 6, 6, 16, dtype)
    out = ours(X, X, X, d2lh.causal_valid_lens(2, 6))
    # PyTorch's boolean attn_mask is True where a query may NOT look: above the diagonal
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    ref, ref_weights = theirs(X, X, X, attn_mask=causal, need_weights=True,
                              average_attn_weights=False)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    torch.testing.assert_close(ours.attention_weights, ref_weights, rtol=tol, atol=tol)
    assert torch.all(torch.triu(ours.attention_weights, diagonal=1) == 0)
    # step() on a fresh cache is the same causal self-attention
    torch.testing.assert_close(ours.step(X, d2lh.KVCache()), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,tol", DTYPES_AND_TOLERANCES)
def test_matches_pytorch_with_per_query_lengths(dtype, tol):
    """2-D valid_lens that differ between sequences: a 3-D attn_mask, one per (sequence, head)."""
    ours, theirs = make_pair(8, 2, dtype)
    q, k, v = random_qkv(2, 3, 5, 8, dtype)
    valid_lens = torch.tensor([[1, 3, 5], [2, 2, 4]])
    out = ours(q, k, v, valid_lens)
    allowed = d2lh.valid_lens_to_mask(valid_lens, 3, 5)  # (B, T_q, T_k), True where allowed
    # PyTorch wants (B*h, T_q, T_k) with the heads of a sequence next to each other
    attn_mask = ~allowed.repeat_interleave(2, dim=0)
    ref, ref_weights = theirs(q, k, v, attn_mask=attn_mask, need_weights=True,
                              average_attn_weights=False)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    torch.testing.assert_close(ours.attention_weights, ref_weights, rtol=tol, atol=tol)


def test_masked_keys_and_values_never_leak():
    ours, _ = make_pair(8, 2)
    q, k, v = random_qkv(2, 3, 6, 8, torch.float32)
    valid_lens = torch.tensor([2, 4])
    out = ours(q, k, v, valid_lens)
    k2, v2 = k.clone(), v.clone()
    k2[0, 2:], v2[0, 2:] = 1e3, -1e3  # change only masked positions of sequence 0 ...
    k2[1, 4:] = torch.randn(2, 8)
    v2[1, 4:] = torch.randn(2, 8)  # ... and of sequence 1
    for need_weights in (True, False):
        torch.testing.assert_close(ours(q, k2, v2, valid_lens, need_weights), out, rtol=0,
                                   atol=1e-6)
    # a change in a valid position, by contrast, does change the output
    v2[0, 1] += 1
    assert not torch.allclose(ours(q, k2, v2, valid_lens)[0], out[0])


def test_a_future_token_never_changes_an_earlier_output():
    ours, _ = make_pair(8, 4)
    X, _, _ = random_qkv(1, 7, 7, 8, torch.float32)
    out = ours(X, X, X, d2lh.causal_valid_lens(1, 7))
    for t in range(6):
        Y = X.clone()
        Y[:, t + 1 :] = torch.randn(1, 6 - t, 8)  # rewrite every token after t
        changed = ours(Y, Y, Y, d2lh.causal_valid_lens(1, 7))
        torch.testing.assert_close(changed[:, : t + 1], out[:, : t + 1], rtol=0, atol=1e-6)
        assert not torch.allclose(changed[:, t + 1 :], out[:, t + 1 :])


def test_zero_valid_length_gives_zero_output_not_nan():
    ours, _ = make_pair(8, 2)
    q, k, v = random_qkv(2, 3, 4, 8, torch.float32)
    for need_weights in (True, False):
        out = ours(q, k, v, torch.tensor([0, 4]), need_weights)
        assert torch.all(out[0] == 0)  # no bias: attending to nothing gives W_o(0) = 0
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("dtype,tol", DTYPES_AND_TOLERANCES)
def test_kv_cache_step_by_step_equals_full_causal(dtype, tol, need_weights):
    ours, _ = make_pair(12, 3, dtype)
    X, _, _ = random_qkv(2, 6, 6, 12, dtype)
    full = ours(X, X, X, d2lh.causal_valid_lens(2, 6))
    full_weights = ours.attention_weights
    cache = d2lh.KVCache()
    assert len(cache) == 0
    for t in range(6):
        x_t = X[:, t : t + 1]  # the t-th token alone: (B, 1, d_model)
        new = ours.project_keys_values(x_t, x_t)
        cache.append(new.keys, new.values)
        step = ours.attend(x_t, cache, need_weights=need_weights)  # sees positions 0 .. t
        assert len(cache) == t + 1  # the cache grows by one position per step
        assert cache.keys.shape == cache.values.shape == (2, 3, t + 1, 4)  # (B, h, t+1, d_k)
        assert step.shape == (2, 1, 12)
        torch.testing.assert_close(step, full[:, t : t + 1], rtol=tol, atol=tol)
        if need_weights:
            torch.testing.assert_close(ours.attention_weights[..., 0, :],
                                       full_weights[:, :, t, : t + 1], rtol=tol, atol=tol)
        else:
            assert ours.attention_weights is None


def test_kv_cache_with_several_new_positions_and_a_mask():
    """Appending a chunk of 3 positions to a cache of 2, with causal lengths inside the chunk."""
    ours, _ = make_pair(8, 2)
    X, _, _ = random_qkv(1, 5, 5, 8, torch.float32)
    full = ours(X, X, X, d2lh.causal_valid_lens(1, 5))
    cache = d2lh.KVCache()
    outputs = []
    for chunk, lens in ((X[:, :2], d2lh.causal_valid_lens(1, 2)), (X[:, 2:], torch.tensor([[3, 4, 5]]))):
        new = ours.project_keys_values(chunk, chunk)
        cache.append(new.keys, new.values)
        outputs.append(ours.attend(chunk, cache, lens))
    assert len(cache) == 5
    torch.testing.assert_close(torch.cat(outputs, dim=1), full)
    # step() does the same: append the chunk's keys and values, then attend causally
    cache, stepped = d2lh.KVCache(), []
    for chunk in (X[:, :2], X[:, 2:]):
        stepped.append(ours.step(chunk, cache, need_weights=True))
    assert len(cache) == 5 and ours.attention_weights.shape == (1, 2, 3, 5)
    torch.testing.assert_close(torch.cat(stepped, dim=1), full)


def test_kv_cache_reorder_keeps_the_chosen_rows_in_order():
    ours, _ = make_pair(8, 2)
    X, _, _ = random_qkv(3, 4, 4, 8, torch.float32)
    cache = ours.project_keys_values(X, X)
    keys, values = cache.keys.clone(), cache.values.clone()
    rows = torch.tensor([2, 2, 0, 1])  # may repeat rows and change the batch size
    cache.reorder(rows)
    assert torch.equal(cache.keys, keys[rows]) and torch.equal(cache.values, values[rows])
    empty = d2lh.KVCache()
    empty.reorder(rows)  # nothing cached yet: nothing to do
    assert len(empty) == 0


@pytest.mark.parametrize("dtype,tol", DTYPES_AND_TOLERANCES)
def test_projected_keys_values_equal_passing_keys(dtype, tol):
    ours, _ = make_pair(16, 4, dtype)
    q, memory, _ = random_qkv(2, 5, 7, 16, dtype)
    valid_lens = torch.tensor([3, 7])
    direct = ours(q, memory, memory, valid_lens)
    cache = ours.project_keys_values(memory, memory)
    assert len(cache) == 7 and cache.keys.shape == (2, 4, 7, 4)
    via_cache = ours.attend(q, cache, valid_lens)
    torch.testing.assert_close(via_cache, direct, rtol=tol, atol=tol)
    assert len(cache) == 7  # attending over a projected memory does not append to it
    # one query at a time, as a decoder does, gives the same rows
    for t in range(5):
        row = ours.attend(q[:, t : t + 1], cache, valid_lens)
        torch.testing.assert_close(row, direct[:, t : t + 1], rtol=tol, atol=tol)


def test_shapes_and_heads_are_slices_of_the_projections():
    ours = d2lh.MultiHeadAttention(d_model=12, num_heads=3)
    assert (ours.d_model, ours.num_heads, ours.num_kv_heads, ours.d_k) == (12, 3, 3, 4)
    assert sum(p.numel() for p in ours.parameters()) == 4 * 12 * 12
    x = torch.arange(2 * 5 * 12.0).reshape(2, 5, 12)
    split = ours.split_heads(x)
    assert split.shape == (2, 3, 5, 4)  # (B, h, T, d_k)
    # head i of sequence b holds features i*d_k .. (i+1)*d_k - 1
    assert torch.equal(split[1, 2], x[1, :, 8:12])
    assert torch.equal(ours.merge_heads(split), x)
    q, k, v = random_qkv(2, 4, 9, 12, torch.float32)
    assert ours(q, k, v).shape == (2, 4, 12)
    assert ours.attention_weights.shape == (2, 3, 4, 9)  # need_weights=True is the default
    torch.testing.assert_close(ours.attention_weights.sum(-1), torch.ones(2, 3, 4))
    assert ours(q, k, v, need_weights=False).shape == (2, 4, 12)
    assert ours.attention_weights is None  # the fast path keeps none


def test_bad_inputs_raise_value_errors_with_the_shapes():
    def raises(match):
        return pytest.raises(ValueError, match=match)

    with raises("num_heads must divide d_model and num_kv_heads must divide num_heads, got "
                "d_model=10, num_heads=3, num_kv_heads=3"):
        d2lh.MultiHeadAttention(10, 3)
    with raises("d_model must be a positive int, got 0"):
        d2lh.MultiHeadAttention(0, 2)
    mha = d2lh.MultiHeadAttention(8, 2)
    q, k, v = random_qkv(2, 3, 4, 8, torch.float32)
    with raises(r"queries must have shape \(B, T, d_model=8\), got \(2, 3, 6\)"):
        mha(torch.zeros(2, 3, 6), k, v)
    with raises(r"keys must have shape \(B, T, d_model=8\), got \(2, 4, 5\)"):
        mha(q, torch.zeros(2, 4, 5), v)
    with raises(r"values must have shape \(B, T, d_model=8\), got \(2, 4, 7\)"):
        mha(q, k, torch.zeros(2, 4, 7))
    with raises(r"share the batch size B, got \(2, 3, 8\), \(1, 4, 8\)"):
        mha(q, k[:1], v[:1])
    with raises(r"same number of pairs T_k, got keys \(2, 4, 8\) and values \(2, 3, 8\)"):
        mha(q, k, v[:, :3])
    with raises(r"queries must be a 3-D tensor \(B, T, width\), got \(3, 8\)"):
        mha(q[0], k, v)
    with raises(r"keys must be floating point, got dtype torch.int64"):
        mha(q, k.long(), v)
    with raises(r"valid_lens must be whole numbers in \[0, T_k=4\], got 5$"):
        mha(q, k, v, torch.tensor([1, 5]))
    with raises(r"valid_lens must be whole numbers in \[0, T_k=4\], got -1$"):
        mha(q, k, v, torch.tensor([-1, 2]))
    with raises(r"valid_lens must have shape \(B,\)=\(2,\) or \(B, T_q\)=\(2, 3\), got \(3,\)"):
        mha(q, k, v, torch.tensor([1, 2, 3]))


def test_dropout_is_active_only_in_training():
    torch.manual_seed(0)
    mha = d2lh.MultiHeadAttention(8, 2, dropout=0.5)
    q, k, v = random_qkv(2, 3, 4, 8, torch.float32)
    for need_weights in (True, False):
        mha.eval()
        assert torch.equal(mha(q, k, v, None, need_weights), mha(q, k, v, None, need_weights))
        mha.train()
        assert not torch.equal(mha(q, k, v, None, need_weights), mha(q, k, v, None, need_weights))


def test_gradients_flow_to_every_projection():
    mha = d2lh.MultiHeadAttention(8, 2)
    q, k, v = random_qkv(2, 3, 4, 8, torch.float32)
    mha(q, k, v, torch.tensor([2, 4])).sum().backward()
    for name in ("W_q", "W_k", "W_v", "W_o"):
        grad = getattr(mha, name).weight.grad
        assert grad is not None and grad.abs().sum() > 0, name


def test_lengths_are_read_once_at_the_door_and_trusted_inside(host_syncs):
    torch.manual_seed(0)
    mha = d2lh.MultiHeadAttention(8, 2, num_kv_heads=1, rotary=True).eval()
    q, k, v = random_qkv(3, 4, 5, 8, torch.float32)
    lens, per_query = torch.tensor([5, 0, 2]), torch.tensor([[1, 2, 3, 4]] * 3)
    for need_weights in (True, False):
        assert host_syncs(mha, q, k, v, lens, need_weights) <= 1
        assert host_syncs(mha, q, k, v, per_query, need_weights) <= 1
        assert host_syncs(mha, q, k, v, None, need_weights) == 0
        cache = mha.project_keys_values(k, v)
        assert host_syncs(mha.attend, q, cache, lens, need_weights) == 0
        assert host_syncs(mha.step, q, d2lh.KVCache(), need_weights) == 0
        assert host_syncs(mha.step, q[:, :1], mha.project_keys_values(q, q), need_weights) == 0


# ------------------------------------------------------------------------------------------------
# Grouped-query attention: MultiHeadAttention with g = num_kv_heads key-value heads, each shared by
# h/g query heads, optionally with RoPE; checked against F.scaled_dot_product_attention with
# enable_gqa in float64. (apply_rotary, used by the reference, is checked against complex
# multiplication in tests/test_positional.py.)

F64 = torch.float64


def random_gqa(d_model, h, g, rotary=False, bias=False, seed=0):
    torch.manual_seed(seed)
    return d2lh.MultiHeadAttention(d_model, h, bias=bias, num_kv_heads=g,
                                   rotary=rotary).double().eval()


def reference_gqa(layer, queries, keys, values, valid_lens=None):
    """The layer's function written with PyTorch's fused attention and enable_gqa."""
    B, T_q, _ = queries.shape
    T_k = keys.shape[1]
    Q = layer.W_q(queries).view(B, T_q, layer.num_heads, layer.d_k).transpose(1, 2)
    K = layer.W_k(keys).view(B, T_k, layer.num_kv_heads, layer.d_k).transpose(1, 2)
    V = layer.W_v(values).view(B, T_k, layer.num_kv_heads, layer.d_k).transpose(1, 2)
    if layer.rotary is not None:
        Q = d2lh.apply_rotary(Q, torch.arange(T_q))
        K = d2lh.apply_rotary(K, torch.arange(T_k))
    mask = None if valid_lens is None else d2lh.valid_lens_to_mask(valid_lens, T_q, T_k)[:, None]
    heads = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, enable_gqa=True)
    return layer.W_o(heads.transpose(1, 2).reshape(B, T_q, -1))


def test_key_value_projections_have_g_heads():
    layer = d2lh.MultiHeadAttention(24, 6, num_kv_heads=2)
    assert (layer.num_heads, layer.num_kv_heads, layer.d_k) == (6, 2, 4)
    assert layer.W_q.weight.shape == layer.W_o.weight.shape == (24, 24)
    assert layer.W_k.weight.shape == layer.W_v.weight.shape == (2 * 4, 24)  # g * d_k outputs
    assert sum(p.numel() for p in layer.parameters()) == 2 * 24 * 24 + 2 * 8 * 24
    cache = layer.project_keys_values(torch.randn(3, 7, 24), torch.randn(3, 7, 24))
    assert cache.keys.shape == cache.values.shape == (3, 2, 7, 4)  # (B, g, T_k, d_k)


@pytest.mark.parametrize("h, g", [(4, 4), (4, 2), (4, 1), (6, 3)])
@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_gqa_equals_scaled_dot_product_attention_with_enable_gqa(h, g, rotary, need_weights):
    layer = random_gqa(24, h, g, rotary, bias=True)
    torch.manual_seed(2)
    queries, keys = torch.randn(3, 5, 24, dtype=F64), torch.randn(3, 7, 24, dtype=F64)
    values = torch.randn(3, 7, 24, dtype=F64)
    for valid_lens in (None, torch.tensor([7, 2, 0]), torch.tensor([[1, 2, 3, 4, 5]] * 3)):
        got = layer(queries, keys, values, valid_lens, need_weights=need_weights)
        torch.testing.assert_close(got, reference_gqa(layer, queries, keys, values, valid_lens))
        if need_weights:
            weights = layer.attention_weights
            assert weights.shape == (3, h, 5, 7)
            if valid_lens is not None and valid_lens.dim() == 1:
                assert torch.all(weights[2] == 0)  # no valid key: no weight, no NaN
                assert torch.all(weights[1, ..., 2:] == 0)
        else:
            assert layer.attention_weights is None


@pytest.mark.parametrize("lens", [None, torch.tensor([3, 0, 5]),
                                  torch.tensor([[1, 2, 3, 4], [0, 5, 5, 1], [2, 2, 0, 0]])],
                         ids=["no mask", "(B,) with a zero", "(B, T_q) with zeros"])
@pytest.mark.parametrize("h, g, rotary", [(3, 3, False), (4, 2, False), (4, 1, False),
                                          (2, 1, True)])
def test_fast_path_equals_readable_path_outputs_and_all_gradients(h, g, rotary, lens):
    torch.manual_seed(0)
    mha = d2lh.MultiHeadAttention(12, h, bias=True, num_kv_heads=g, rotary=rotary).double()
    results = []
    for need_weights in (True, False):
        mha.zero_grad()
        inputs = [torch.randn(3, T, 12, dtype=F64, generator=torch.Generator().manual_seed(T),
                              requires_grad=True) for T in (4, 5, 5)]  # queries, keys, values
        out = mha(*inputs, lens, need_weights=need_weights)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)).sum().backward()
        results.append((out, [p.grad.clone() for p in mha.parameters()] + [x.grad for x in inputs]))
    (readable, readable_grads), (fast, fast_grads) = results
    torch.testing.assert_close(fast, readable)
    assert len(fast_grads) == len(readable_grads) == 8 + 3  # W_q, W_k, W_v, W_o (weights, biases); inputs
    for fast_grad, readable_grad in zip(fast_grads, readable_grads):
        assert torch.isfinite(fast_grad).all()
        torch.testing.assert_close(fast_grad, readable_grad)
    if lens is not None:  # a query with no valid key: its heads give 0, so only W_o's bias is left
        no_key = (lens if lens.dim() == 2 else lens[:, None].expand(-1, 4)) == 0
        torch.testing.assert_close(fast[no_key], mha.W_o.bias.expand(int(no_key.sum()), -1))


@pytest.mark.parametrize("lens", [None, torch.tensor([6, 3]),
                                  torch.tensor([[1, 2, 3, 4, 5], [6, 0, 2, 2, 1]])])
@pytest.mark.parametrize("need_weights", [True, False])
def test_as_many_key_value_heads_as_query_heads_is_plain_multi_head_attention(lens, need_weights):
    """g = h: head i attends with its own slices of W_q, W_k and W_v (the definition, one head at a
    time with DotProductAttention), the heads are concatenated, then W_o."""
    torch.manual_seed(3)
    h, d_k = 4, 4
    layer = d2lh.MultiHeadAttention(16, h, bias=True, num_kv_heads=h).double().eval()
    X, Y = torch.randn(2, 5, 16, dtype=F64), torch.randn(2, 6, 16, dtype=F64)
    heads, weights = [], []
    for i in range(h):
        rows = slice(i * d_k, (i + 1) * d_k)  # head i's rows of each projection
        q, k, v = (F.linear(x, W.weight[rows], W.bias[rows])
                   for x, W in ((X, layer.W_q), (Y, layer.W_k), (Y, layer.W_v)))
        attention = d2lh.DotProductAttention()
        heads.append(attention(q, k, v, lens))
        weights.append(attention.attention_weights)
    expected = layer.W_o(torch.cat(heads, dim=-1))
    torch.testing.assert_close(layer(X, Y, Y, lens, need_weights), expected)
    if need_weights:
        torch.testing.assert_close(layer.attention_weights, torch.stack(weights, dim=1))
    # the default (num_kv_heads=None) is this layer, and so is PyTorch's with the same weights
    default = d2lh.MultiHeadAttention(16, h, bias=True).double().eval()
    default.load_state_dict(layer.state_dict())
    torch.testing.assert_close(default(X, Y, Y, lens, need_weights), expected)
    if lens is None or lens.dim() == 1:
        padding = None if lens is None else torch.arange(6)[None, :] >= lens[:, None]
        theirs, _ = layer.to_torch()(X, Y, Y, key_padding_mask=padding)
        torch.testing.assert_close(theirs, expected)


def test_query_heads_of_a_group_share_their_key_value_head():
    layer = random_gqa(8, 4, 2)
    X = torch.randn(1, 3, 8, dtype=F64)
    with torch.no_grad():  # give query heads 0 and 1 the same projection: same group, same weights
        layer.W_q.weight[2:4] = layer.W_q.weight[0:2]
        layer.W_q.weight[4:6] = layer.W_q.weight[0:2]  # head 2, in the other group
    layer(X, X, X, need_weights=True)
    w = layer.attention_weights[0]
    torch.testing.assert_close(w[0], w[1])
    assert not torch.allclose(w[0], w[2])


@pytest.mark.parametrize("h, g", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("chunks", [(1, 1, 1, 1, 1, 1), (2, 3, 1), (6,)])
def test_gqa_step_with_a_cache_equals_causal_attention_over_everything(h, g, chunks):
    layer = random_gqa(8, h, g, rotary=True)
    X = torch.randn(2, 6, 8, dtype=F64)
    causal = d2lh.causal_valid_lens(2, 6)
    expected = reference_gqa(layer, X, X, X, causal)
    cache, outputs, start = d2lh.KVCache(), [], 0
    for size in chunks:
        outputs.append(layer.step(X[:, start:start + size], cache))
        start += size
        assert cache.keys.shape == (2, g, start, 2)  # (B, g, T_seen, d_k): g heads, not h
    torch.testing.assert_close(torch.cat(outputs, dim=1), expected)
    assert layer.attention_weights is None  # step takes the fast path by default
    torch.testing.assert_close(layer.step(X, d2lh.KVCache(), need_weights=True), expected)
    assert layer.attention_weights.shape == (2, h, 6, 6)


@pytest.mark.parametrize("call, message", [
    (lambda: d2lh.MultiHeadAttention(12, 4, num_kv_heads=3),
     "num_kv_heads must divide num_heads, got d_model=12, num_heads=4, num_kv_heads=3"),
    (lambda: d2lh.MultiHeadAttention(10, 4, num_kv_heads=2),
     "num_heads must divide d_model .*got d_model=10, num_heads=4, num_kv_heads=2"),
    (lambda: d2lh.MultiHeadAttention(8, 2, num_kv_heads=0), "num_kv_heads must be a positive int, got 0"),
    (lambda: d2lh.MultiHeadAttention(8, 2, rotary=True, rotary_base=1.0), "base must be a number > 1"),
    (lambda: d2lh.MultiHeadAttention(6, 2, rotary=True), "d_k must be even .*got d_k=3"),
    (lambda: d2lh.MultiHeadAttention(8, 2, num_kv_heads=1)(
        torch.zeros(1, 3, 8), torch.zeros(1, 4, 6), torch.zeros(1, 4, 6)),
     r"keys must have shape \(B, T, d_model=8\), got \(1, 4, 6\)"),
    (lambda: d2lh.MultiHeadAttention(8, 2, num_kv_heads=1)(
        torch.zeros(1, 3, 8), torch.zeros(1, 4, 8), torch.zeros(1, 4, 8), torch.tensor([5])),
     r"valid_lens must be whole numbers in \[0, T_k=4\], got 5$"),
])
def test_gqa_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_kv_cache_bytes_counts_keys_and_values_of_every_layer():
    assert d2lh.kv_cache_bytes(32, 8, 128, num_tokens=4096, batch_size=2) == \
        2 * 32 * 8 * 128 * 4096 * 2 * 2
    assert d2lh.kv_cache_bytes(1, 1, 4, num_tokens=0) == 0
    # what a grouped cache really holds: (B, g, T, d_k) keys and values, float32
    cache = d2lh.MultiHeadAttention(16, 4, num_kv_heads=2).project_keys_values(
        torch.randn(5, 7, 16), torch.randn(5, 7, 16))
    held = sum(t.numel() * t.element_size() for t in (cache.keys, cache.values))
    assert held == d2lh.kv_cache_bytes(1, 2, 4, num_tokens=7, batch_size=5, bytes_per_number=4)
    with pytest.raises(ValueError, match="num_kv_heads must be a positive int, got 0"):
        d2lh.kv_cache_bytes(2, 0, 4)


# ------------------------------------------------------------------------------------------------
# The online softmax: attention block by block, never holding the T_q x T_k weights


@pytest.mark.parametrize("heads", [False, True])
@pytest.mark.parametrize("block_size", [1, 3, 4, 64])
def test_online_softmax_attention_equals_fused_attention(heads, block_size):
    torch.manual_seed(4)
    lead = (3, 2) if heads else (3,)
    Q, K = torch.randn(*lead, 5, 6, dtype=F64), torch.randn(*lead, 9, 6, dtype=F64)
    V = torch.randn(*lead, 9, 4, dtype=F64) * 3
    lens_cases = [None, torch.tensor([9, 4, 0]), torch.tensor([[1, 3, 5, 7, 9], [2, 2, 0, 9, 1],
                                                               [9, 9, 9, 9, 9]])]
    for lens in lens_cases:
        got = d2lh.online_softmax_attention(Q, K, V, lens, block_size=block_size)
        torch.testing.assert_close(got, d2lh.fused_attention(Q, K, V, lens))
        mask = None
        if lens is not None:
            mask = d2lh.valid_lens_to_mask(lens, 5, 9)
            mask = mask[:, None] if heads else mask
        torch.testing.assert_close(got, F.scaled_dot_product_attention(Q, K, V, attn_mask=mask))
        assert torch.isfinite(got).all()


def test_online_softmax_survives_scores_that_overflow_a_plain_exp():
    q = torch.full((1, 1, 2), 300.0)
    k = torch.tensor([[[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]])  # scores ~ 400 .. 1300: exp overflows
    v = torch.tensor([[[1.0], [2.0], [3.0]]])
    assert not torch.isfinite(torch.exp(q @ k.transpose(1, 2))).all()
    torch.testing.assert_close(d2lh.online_softmax_attention(q, k, v, block_size=1),
                               F.scaled_dot_product_attention(q, k, v))


def test_online_softmax_update_step_by_step():
    scores = torch.tensor([[0.5, -math.inf, 2.0, 1.0]], dtype=F64)  # one query, four keys
    values = torch.tensor([[1.0], [10.0], [2.0], [3.0]], dtype=F64)
    m, l, acc = (torch.tensor([[-math.inf]], dtype=F64), torch.zeros(1, 1, dtype=F64),
                 torch.zeros(1, 1, dtype=F64))
    # a block with only a masked key: nothing changes, nothing becomes NaN
    m, l, acc = d2lh.online_softmax_update(m, l, acc, scores[:, 1:2], values[1:2])
    assert m.item() == -math.inf and l.item() == 0 and acc.item() == 0
    for j in (0, 2, 3):
        m, l, acc = d2lh.online_softmax_update(m, l, acc, scores[:, j:j + 1], values[j:j + 1])
        seen = scores[:, :j + 1]
        assert m.item() == seen.max().item()
        torch.testing.assert_close(l, torch.exp(seen - m).sum(dim=-1, keepdim=True))
    torch.testing.assert_close(acc / l, torch.softmax(scores, dim=-1) @ values)


def test_online_softmax_bad_input_raises():
    Q, K, V = torch.zeros(2, 3, 4), torch.zeros(2, 5, 4), torch.zeros(2, 5, 2)
    with pytest.raises(ValueError, match="do not fit"):
        d2lh.online_softmax_attention(Q, torch.zeros(2, 5, 3), V)
    with pytest.raises(ValueError, match="block_size must be a positive int, got 0"):
        d2lh.online_softmax_attention(Q, K, V, block_size=0)
    with pytest.raises(ValueError, match=r"valid_lens must be whole numbers in \[0, T_k=5\], got 6$"):
        d2lh.online_softmax_attention(Q, K, V, torch.tensor([6, 1]))
    with pytest.raises(ValueError, match=r"got keys \(2, 5\)"):
        d2lh.online_softmax_attention(Q, K[..., 0], V)


@pytest.mark.parametrize("name", ["queries", "keys", "values"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_online_softmax_rejects_integer_tensors(name, dtype):
    """Integer inputs would make the scores, the running maximum and the sums integers: silently
    wrong attention, hence a clear error that names the tensor and its dtype."""
    tensors = {"queries": torch.ones(2, 3, 4), "keys": torch.ones(2, 5, 4),
               "values": torch.ones(2, 5, 2)}
    tensors[name] = tensors[name].to(dtype)
    with pytest.raises(ValueError, match=rf"^{name} must be floating point, got dtype {dtype}$"):
        d2lh.online_softmax_attention(**tensors)


def test_online_softmax_holds_less_than_the_weights_and_grows_linearly():
    peaks = {}
    for T in (512, 1024):
        Q = K = V = torch.randn(1, T, 8)
        with d2lh.TensorMemoryTracker() as naive:
            d2lh.DotProductAttention()(Q, K, V)
        with d2lh.TensorMemoryTracker() as online:
            d2lh.online_softmax_attention(Q, K, V, block_size=32)
        peaks[T] = naive.peak_bytes, online.peak_bytes
        assert naive.peak_bytes >= T * T * 4 and naive.peak_bytes > 8 * online.peak_bytes
    assert peaks[1024][0] > 3.5 * peaks[512][0] and peaks[1024][1] < 2.5 * peaks[512][1]
