"""The course's Transformer blocks compute the same functions as PyTorch's, never look at the future
or at padding, and decode with the key-value cache exactly as without it."""

import pytest
import torch
from torch import nn

import d2lhelpers as d2lh

D_MODEL, HEADS, FFN = 16, 4, 32


def padding_mask(valid_lens, length):
    """PyTorch's key_padding_mask: True where a key must be ignored."""
    return torch.arange(length)[None, :] >= valid_lens[:, None]


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_equals_torch_encoder_layer(norm_first):
    torch.manual_seed(0)
    ours = d2lh.EncoderBlock(D_MODEL, HEADS, FFN, dropout=0.0, norm_first=norm_first).double()
    theirs = nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, dropout=0.0, batch_first=True,
                                        norm_first=norm_first).double()
    assert d2lh.copy_to_torch_layer(ours, theirs) is theirs
    X = torch.randn(3, 7, D_MODEL, dtype=torch.float64)
    valid_lens = torch.tensor([7, 3, 5])
    expected = theirs(X, src_key_padding_mask=padding_mask(valid_lens, 7))
    torch.testing.assert_close(ours(X, valid_lens), expected)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_equals_torch_decoder_layer(norm_first):
    torch.manual_seed(1)
    ours = d2lh.DecoderBlock(D_MODEL, HEADS, FFN, dropout=0.0, norm_first=norm_first).double()
    theirs = nn.TransformerDecoderLayer(D_MODEL, HEADS, FFN, dropout=0.0, batch_first=True,
                                        norm_first=norm_first).double()
    d2lh.copy_to_torch_layer(ours, theirs)
    X = torch.randn(2, 6, D_MODEL, dtype=torch.float64)
    memory = torch.randn(2, 5, D_MODEL, dtype=torch.float64)
    src_valid_lens = torch.tensor([2, 5])
    causal = nn.Transformer.generate_square_subsequent_mask(6, dtype=torch.float64)
    expected = theirs(X, memory, tgt_mask=causal,
                      memory_key_padding_mask=padding_mask(src_valid_lens, 5))
    torch.testing.assert_close(ours(X, memory, src_valid_lens), expected)


@pytest.mark.parametrize("bias", [False, True])
def test_multihead_attention_copied_into_torch_computes_the_same(bias):
    torch.manual_seed(2)
    ours = d2lh.MultiHeadAttention(D_MODEL, HEADS, bias=bias).double()
    theirs = d2lh.copy_to_torch_layer(
        ours, nn.MultiheadAttention(D_MODEL, HEADS, bias=bias, batch_first=True).double())
    queries = torch.randn(2, 3, D_MODEL, dtype=torch.float64)
    keys = torch.randn(2, 5, D_MODEL, dtype=torch.float64)
    valid_lens = torch.tensor([2, 5])
    expected, _ = theirs(queries, keys, keys, key_padding_mask=padding_mask(valid_lens, 5))
    torch.testing.assert_close(ours(queries, keys, keys, valid_lens), expected)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
def test_pre_norm_transformer_stacks_equal_torch_transformer():
    torch.manual_seed(3)
    ours = d2lh.Transformer(11, 13, D_MODEL, HEADS, FFN, num_layers=2, dropout=0.0,
                            norm_first=True).double().eval()
    theirs = nn.Transformer(D_MODEL, HEADS, 2, 2, FFN, dropout=0.0, batch_first=True,
                            norm_first=True).double().eval()
    d2lh.copy_to_torch_layer(ours, theirs)
    src, src_valid_lens = torch.randint(0, 11, (2, 6)), torch.tensor([6, 4])
    tgt = torch.randint(0, 13, (2, 5))
    X_src, X_tgt = ours.encoder.embed(src), ours.decoder.embed(tgt)  # embeddings are ours alone
    memory_mask = padding_mask(src_valid_lens, 6)
    out = theirs(X_src, X_tgt, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5).double(),
                 src_key_padding_mask=memory_mask, memory_key_padding_mask=memory_mask)
    torch.testing.assert_close(ours(src, src_valid_lens, tgt), ours.decoder.output(out))


def test_copy_to_torch_layer_rejects_mismatches():
    block = d2lh.EncoderBlock(D_MODEL, HEADS, FFN, norm_first=False)
    pre_norm = nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, batch_first=True, norm_first=True)
    with pytest.raises(ValueError, match="norm_first mismatch: ours False, theirs True"):
        d2lh.copy_to_torch_layer(block, pre_norm)
    with pytest.raises(ValueError, match=r"ours \(16, 32\), theirs \(16, 64\)"):
        d2lh.copy_to_torch_layer(block, nn.TransformerEncoderLayer(D_MODEL, HEADS, 64,
                                                                   batch_first=True))
    with pytest.raises(ValueError, match="num_heads=4"):
        d2lh.copy_to_torch_layer(d2lh.MultiHeadAttention(D_MODEL, HEADS),
                                 nn.MultiheadAttention(D_MODEL, 2, bias=False, batch_first=True))
    with pytest.raises(ValueError, match="post-norm"):
        d2lh.copy_to_torch_layer(small_model(), nn.Transformer(D_MODEL, HEADS, 2, 2, FFN,
                                                               batch_first=True))
    with pytest.raises(ValueError, match=r"pair \(EncoderBlock, TransformerDecoderLayer\)"):
        d2lh.copy_to_torch_layer(block, nn.TransformerDecoderLayer(D_MODEL, HEADS, FFN,
                                                                   batch_first=True))


def test_layer_norm_worked_example():
    add_norm = d2lh.AddNorm(2)
    out = add_norm(torch.tensor([[1.0, 2.0], [2.0, 3.0]]), torch.zeros_like)  # X + 0, normalised
    torch.testing.assert_close(out, torch.tensor([[-1.0, 1.0], [-1.0, 1.0]]), atol=1e-4, rtol=0)


def test_ffn_is_two_kernel_size_one_convolutions():
    ffn = d2lh.PositionwiseFFN(D_MODEL, FFN)
    conv1, conv2 = nn.Conv1d(D_MODEL, FFN, 1), nn.Conv1d(FFN, D_MODEL, 1)
    with torch.no_grad():
        conv1.weight.copy_(ffn.linear1.weight[:, :, None])
        conv1.bias.copy_(ffn.linear1.bias)
        conv2.weight.copy_(ffn.linear2.weight[:, :, None])
        conv2.bias.copy_(ffn.linear2.bias)
    X = torch.randn(2, 5, D_MODEL)
    by_conv = conv2(torch.relu(conv1(X.transpose(1, 2)))).transpose(1, 2)  # convs want (B, d, T)
    torch.testing.assert_close(ffn(X), by_conv)


def small_model(norm_first=False):
    torch.manual_seed(0)
    return d2lh.Transformer(11, 13, d_model=D_MODEL, num_heads=HEADS, ffn_hidden=FFN, num_layers=2,
                            dropout=0.0, norm_first=norm_first).eval()


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoding_with_the_cache_equals_recomputing(norm_first, need_weights):
    model = small_model(norm_first)
    src, src_valid_lens = torch.randint(0, 11, (3, 6)), torch.tensor([6, 2, 4])
    tgt = torch.randint(0, 13, (3, 7))
    enc = model.encoder(src, src_valid_lens)
    full = model.decoder(tgt, enc, src_valid_lens)
    state = model.decoder.init_state(enc, src_valid_lens)
    # the encoder-decoder caches are filled when the state is made, once
    assert state.num_decoded == 0 and all(len(cache) == 6 for cache in state.cross_caches)
    steps = []
    for t in range(7):
        steps.append(model.decoder.step(tgt[:, t:t + 1], state, need_weights))
        assert state.num_decoded == t + 1  # the cache grows by one position per step
        assert all(len(cache) == t + 1 for cache in state.self_caches)
        assert all(len(cache) == 6 for cache in state.cross_caches)  # fixed at T_src
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_decoder_state_reorders_every_cache_and_the_source_lengths():
    model = small_model()
    src, src_valid_lens = torch.randint(0, 11, (2, 6)), torch.tensor([6, 2])
    enc = model.encoder(src, src_valid_lens)
    state = model.decoder.init_state(enc, src_valid_lens)
    model.decoder.step(torch.randint(0, 13, (2, 3)), state)
    rows = torch.tensor([1, 1, 0])  # three rows: two copies of sentence 1, then sentence 0
    state.reorder(rows)
    assert state.src_valid_lens.tolist() == [2, 2, 6]
    # each row continues as its source row would have: the same logits for the same next token
    reference = model.decoder.init_state(enc[rows], src_valid_lens[rows])
    prefix = torch.randint(0, 13, (2, 3))
    fresh = model.decoder.init_state(enc, src_valid_lens)
    model.decoder.step(prefix, fresh)
    model.decoder.step(prefix[rows], reference)
    fresh.reorder(rows)
    token = torch.randint(0, 13, (3, 1))
    torch.testing.assert_close(model.decoder.step(token, fresh), model.decoder.step(token, reference))


def test_fast_and_readable_paths_give_the_same_logits():
    model = small_model().double()
    src, src_valid_lens = torch.randint(0, 11, (3, 6)), torch.tensor([6, 1, 4])
    tgt = torch.randint(0, 13, (3, 5))
    torch.testing.assert_close(model(src, src_valid_lens, tgt, need_weights=True),
                               model(src, src_valid_lens, tgt))
    assert all(w is None for w in model.encoder.attention_weights)  # the fast path keeps none


def test_causal_mask_never_leaks_the_future():
    model = small_model()
    src, src_valid_lens = torch.randint(0, 11, (2, 5)), torch.tensor([5, 3])
    tgt = torch.randint(0, 13, (2, 8))
    changed = tgt.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 13  # change every token from position 5 on
    before = model(src, src_valid_lens, tgt)
    after = model(src, src_valid_lens, changed)
    torch.testing.assert_close(before[:, :5], after[:, :5])  # earlier outputs unchanged
    assert not torch.allclose(before[:, 5:], after[:, 5:])


def test_source_padding_never_changes_the_output():
    model = small_model()
    src, src_valid_lens = torch.randint(0, 11, (2, 6)), torch.tensor([3, 6])
    tgt = torch.randint(0, 13, (2, 4))
    other = src.clone()
    other[0, 3:] = (other[0, 3:] + 5) % 11  # different tokens where sequence 0 is padding
    torch.testing.assert_close(model(src, src_valid_lens, tgt), model(other, src_valid_lens, tgt))


def test_attention_weights_are_kept_for_every_block():
    model = small_model()
    src, src_valid_lens = torch.randint(0, 11, (2, 6)), torch.tensor([3, 6])
    model(src, src_valid_lens, torch.randint(0, 13, (2, 4)), need_weights=True)
    assert [w.shape for w in model.encoder.attention_weights] == [(2, HEADS, 6, 6)] * 2
    for self_weights, cross_weights in model.decoder.attention_weights:
        assert self_weights.shape == (2, HEADS, 4, 4) and cross_weights.shape == (2, HEADS, 4, 6)
        assert torch.all(self_weights.triu(diagonal=1) == 0)  # nothing from the future
        assert torch.all(cross_weights[0, :, :, 3:] == 0)  # nothing from source padding


def test_causal_valid_lens():
    assert d2lh.causal_valid_lens(2, 3).tolist() == [[1, 2, 3], [1, 2, 3]]
    assert d2lh.causal_valid_lens(1, 2, offset=4).tolist() == [[5, 6]]


def test_tokens_must_be_a_matrix():
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, T\), got \(5,\)"):
        small_model().encoder(torch.zeros(5, dtype=torch.long))
