"""Unit tests of d2lhelpers.transformer: the course's Transformer blocks compute the same functions as
PyTorch's layers built from them (``to_torch``), never look at the future or at padding, decode with
the key-value cache exactly as without it, and read the source lengths once, where they enter."""

import pytest
import torch
from torch import nn

import d2lhelpers as d2lh

D_MODEL, HEADS, FFN = 16, 4, 32


def padding_mask(valid_lens, length):
    """PyTorch's key_padding_mask: True where a key must be ignored."""
    return torch.arange(length)[None, :] >= valid_lens[:, None]


DTYPES = [torch.float32, torch.float64]


def visible_biases(module):
    """Give every bias and LayerNorm weight a visible random value (they start at 0 and 1), so that
    a parameter copied to the wrong place would show; return the module."""
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if name.endswith("bias") or ".norm" in name or "final_norm" in name:
                parameter.normal_()
    return module


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_to_torch_computes_the_same_function(norm_first, dtype):
    torch.manual_seed(0)
    ours = visible_biases(d2lh.EncoderBlock(D_MODEL, HEADS, FFN, dropout=0.1,
                                            norm_first=norm_first)).to(dtype).eval()
    theirs = ours.to_torch()
    assert isinstance(theirs, nn.TransformerEncoderLayer) and not theirs.training
    assert theirs.norm_first == norm_first and theirs.self_attn.batch_first
    assert theirs.linear1.weight.dtype == dtype and theirs.dropout.p == 0.1
    X = torch.randn(3, 7, D_MODEL, dtype=dtype)
    valid_lens = torch.tensor([7, 3, 5])
    expected = theirs(X, src_key_padding_mask=padding_mask(valid_lens, 7))
    for need_weights in (False, True):
        torch.testing.assert_close(ours(X, valid_lens, need_weights), expected)
    torch.testing.assert_close(ours(X), theirs(X))
    assert d2lh.EncoderBlock(D_MODEL, HEADS, FFN).to_torch().training  # the mode is copied too


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_to_torch_computes_the_same_function(norm_first, dtype):
    torch.manual_seed(1)
    ours = visible_biases(d2lh.DecoderBlock(D_MODEL, HEADS, FFN, dropout=0.1,
                                            norm_first=norm_first)).to(dtype).eval()
    theirs = ours.to_torch()
    assert isinstance(theirs, nn.TransformerDecoderLayer) and not theirs.training
    assert theirs.norm_first == norm_first and theirs.linear1.weight.dtype == dtype
    X = torch.randn(2, 6, D_MODEL, dtype=dtype)
    memory = torch.randn(2, 5, D_MODEL, dtype=dtype)
    src_valid_lens = torch.tensor([2, 5])
    causal = nn.Transformer.generate_square_subsequent_mask(6, dtype=dtype)
    expected = theirs(X, memory, tgt_mask=causal,
                      memory_key_padding_mask=padding_mask(src_valid_lens, 5))
    for need_weights in (False, True):
        torch.testing.assert_close(ours(X, memory, src_valid_lens, need_weights), expected)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
@pytest.mark.parametrize("dtype", DTYPES)
def test_pre_norm_transformer_to_torch_computes_the_same_function(dtype):
    torch.manual_seed(3)
    ours = visible_biases(d2lh.Transformer(11, 13, D_MODEL, HEADS, FFN, num_layers=2, dropout=0.1,
                                           norm_first=True)).to(dtype).eval()
    theirs = ours.to_torch()
    assert isinstance(theirs, nn.Transformer) and not theirs.training
    assert len(theirs.encoder.layers) == len(theirs.decoder.layers) == 2
    assert all(layer.norm_first for layer in [*theirs.encoder.layers, *theirs.decoder.layers])
    src, src_valid_lens = torch.randint(0, 11, (2, 6)), torch.tensor([6, 4])
    tgt = torch.randint(0, 13, (2, 5))
    with torch.no_grad():
        X_src, X_tgt = ours.encoder.embed(src), ours.decoder.embed(tgt)  # embeddings are ours alone
    memory_mask = padding_mask(src_valid_lens, 6)
    out = theirs(X_src, X_tgt, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5, dtype=dtype),
                 src_key_padding_mask=memory_mask, memory_key_padding_mask=memory_mask)
    for need_weights in (False, True):
        torch.testing.assert_close(ours(src, src_valid_lens, tgt, need_weights),
                                   ours.decoder.output(out))


def test_to_torch_refuses_a_post_norm_transformer():
    with pytest.raises(ValueError, match=r"this Transformer is post-norm \(norm_first=False\).*"
                                         r"build it with norm_first=True"):
        small_model(norm_first=False).to_torch()


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


def test_tokens_must_be_a_matrix():
    with pytest.raises(ValueError, match=r"^src must have shape \(B, T\), got \(5,\)$"):
        small_model().encoder(torch.zeros(5, dtype=torch.long))
    model = small_model()
    state = model.decoder.init_state(model.encoder(torch.zeros(3, 4, dtype=torch.long)))
    with pytest.raises(ValueError, match=r"^tokens must have shape \(B, T\), got \(3, 1, 1\)$"):
        model.decoder.step(torch.zeros(3, 1, 1, dtype=torch.long), state)
    with pytest.raises(ValueError, match=r"^tokens must hold integer token indices, got dtype "
                                         r"torch.float32$"):
        model.decoder.step(torch.zeros(3, 1), state)


_g = torch.Generator().manual_seed(4)
SRC, SRC_VALID_LENS, DEC_INPUT = (torch.randint(0, 11, (3, 6), generator=_g),
                                  torch.tensor([6, 2, 4]), torch.randint(0, 13, (3, 5), generator=_g))


@pytest.mark.parametrize("call, message", [
    (lambda m: m(SRC.float(), SRC_VALID_LENS, DEC_INPUT),
     r"^src must hold integer token indices, got dtype torch.float32$"),
    (lambda m: m(SRC[0], SRC_VALID_LENS, DEC_INPUT), r"^src must have shape \(B, T\), got \(6,\)$"),
    (lambda m: m(SRC, SRC_VALID_LENS, DEC_INPUT.float()),
     r"^dec_input must hold integer token indices, got dtype torch.float32$"),
    (lambda m: m(SRC, torch.tensor([6, 7, 4]), DEC_INPUT),
     r"^src_valid_lens must be whole numbers in \[0, T_src=6\], got 7$"),
    (lambda m: m(SRC, torch.tensor([9, 2, -1]), DEC_INPUT),
     r"^src_valid_lens must be whole numbers in \[0, T_src=6\], got \[9, -1\]$"),
    (lambda m: m(SRC, torch.tensor([6, 2.5, 4]), DEC_INPUT),
     r"^src_valid_lens must be whole numbers in \[0, T_src=6\], got 2.5$"),
    (lambda m: m(SRC, SRC_VALID_LENS[:2], DEC_INPUT),
     r"^src_valid_lens must have shape \(B,\)=\(3,\), got \(2,\)$"),
    (lambda m: m(SRC, SRC_VALID_LENS[:, None].expand(3, 6), DEC_INPUT),  # one length per sentence
     r"^src_valid_lens must have shape \(B,\)=\(3,\), got \(3, 6\)$"),
    (lambda m: m.encoder(SRC, torch.tensor([6, 7, 4])),
     r"^src_valid_lens must be whole numbers in \[0, T_src=6\], got 7$"),
])
def test_bad_input_is_named_as_the_caller_named_it(call, message):
    with pytest.raises(ValueError, match=message):
        call(small_model())


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_the_source_lengths_are_read_once_where_they_enter(host_syncs, need_weights, norm_first):
    """The encoder checks src_valid_lens (one read of their values) and the ids of src; the model
    and the decoder check those of dec_input (one read each: the smallest and largest id, so that
    an error names the argument the caller passed); the blocks and the decoder's step trust them,
    so a forward waits for the device at most four times, on either attention path."""
    model = small_model(norm_first)
    src, src_valid_lens, tgt = SRC, SRC_VALID_LENS, DEC_INPUT
    assert host_syncs(model, src, src_valid_lens, tgt, need_weights) <= 4
    assert host_syncs(model, src, None, tgt, need_weights) <= 3
    torch.manual_seed(5)
    training = d2lh.Transformer(11, 13, D_MODEL, HEADS, FFN, num_layers=2, dropout=0.1,
                                norm_first=norm_first).train()  # with dropout: the same
    assert host_syncs(training, src, src_valid_lens, tgt, need_weights) <= 4
    X, memory = torch.randn(3, 5, D_MODEL), torch.randn(3, 6, D_MODEL)
    assert host_syncs(model.encoder.blocks[0], memory, src_valid_lens, need_weights) == 0
    assert host_syncs(model.decoder.blocks[0], X, memory, src_valid_lens, need_weights) == 0
    assert host_syncs(model.decoder.blocks[0], X, memory, None, need_weights) == 0
    with torch.no_grad():
        state = model.decoder.init_state(model.encoder(src, src_valid_lens), src_valid_lens)
        assert host_syncs(model.decoder.step, tgt[:, :2], state, need_weights) == 0
        assert host_syncs(model.decoder.step, tgt[:, 2:3], state, need_weights) == 0
