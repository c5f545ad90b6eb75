"""Unit tests of d2lhelpers.rnn, the RNN encoder-decoder with Bahdanau attention: shapes, the step
equals its definition, padding never changes the output, decoding step by step equals teacher
forcing, the decoders of d2lhelpers.decoding and the training loop serve it, bad input is named as
the caller named it, and the source lengths are read once, where they enter."""

import pytest
import torch

import d2lhelpers as d2lh

SRC_V, TGT_V, E, H = 11, 13, 8, 12
BOS, EOS = 1, 2


def small_model(num_layers=1, seed=0, sharpen=False):
    torch.manual_seed(seed)
    model = d2lh.BahdanauSeq2Seq(SRC_V, TGT_V, embed_size=E, num_hiddens=H, num_layers=num_layers,
                                 dropout=0.0).eval()
    if sharpen:  # outputs that depend on the source, sharper, with an <eos> that comes sometimes
        with torch.no_grad():
            for parameter in model.parameters():
                parameter *= 3
            model.decoder.output.weight *= 5 / 3
            model.decoder.output.bias[EOS] += 2
    return model


def batch(B=3, T_src=6, T_tgt=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, SRC_V, (B, T_src), generator=g)
    src_valid_lens = torch.tensor([T_src, 2, 4, 1, 5, 3][:B])
    return src, src_valid_lens, torch.randint(0, TGT_V, (B, T_tgt), generator=g)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_shapes(num_layers):
    model = small_model(num_layers)
    src, src_valid_lens, tgt = batch()
    enc = model.encoder(src, src_valid_lens)
    assert enc.shape == (3, 6, H)  # (B, T_src, H)
    state = model.decoder.init_state(enc, src_valid_lens)
    assert state.hidden.shape == (num_layers, 3, H)  # (L, B, H)
    assert model(src, src_valid_lens, tgt).shape == (3, 5, TGT_V)  # (B, T_tgt, V)
    assert model.decoder.attention_weights.shape == (3, 5, 6)  # (B, T_tgt, T_src)
    assert model.decoder.step(tgt[:, :1], state).shape == (3, 1, TGT_V)
    assert model.decoder.attention_weights.shape == (3, 1, 6)  # the weights of the last call


@pytest.mark.parametrize("num_layers", [1, 2])
def test_one_step_is_attention_with_the_previous_state_as_query_then_the_gru(num_layers):
    model = small_model(num_layers)
    src, src_valid_lens, tgt = batch()
    decoder = model.decoder
    with torch.no_grad():
        enc = model.encoder(src, src_valid_lens)
        # s_0 = tanh(W_s h_last), h_last: the encoder's output at each sentence's last valid token
        h_last = torch.stack([enc[b, n - 1] for b, n in enumerate(src_valid_lens.tolist())])
        s = torch.tanh(decoder.W_s(h_last)).reshape(3, num_layers, H).transpose(0, 1)
        state = decoder.init_state(enc, src_valid_lens)
        torch.testing.assert_close(state.hidden, s)
        for t in range(tgt.shape[1]):
            query = s[-1][:, None]  # (B, 1, H): the top layer's previous state
            context = decoder.attention(query, enc, enc, src_valid_lens)  # (B, 1, H)
            x = torch.cat([decoder.embedding(tgt[:, t:t + 1]), context], dim=-1)  # (B, 1, E + H)
            out, s = decoder.rnn(x, s)
            expected = decoder.output(torch.cat([out, context, decoder.embedding(tgt[:, t:t + 1])],
                                                dim=-1))  # (B, 1, V) from [s_i; c_i; e(y_{i-1})]
            torch.testing.assert_close(decoder.step(tgt[:, t:t + 1], state), expected)
            torch.testing.assert_close(state.hidden, s)


def test_the_encoder_is_an_embedding_then_a_gru():
    model = small_model(num_layers=2)
    src, src_valid_lens, _ = batch()
    with torch.no_grad():
        expected, _ = model.encoder.rnn(model.encoder.embedding(src))
        torch.testing.assert_close(model.encoder(src, src_valid_lens), expected)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_source_padding_never_changes_the_output(num_layers):
    model = small_model(num_layers)
    src, src_valid_lens, tgt = batch()
    with torch.no_grad():
        logits = model(src, src_valid_lens, tgt)
        weights = model.decoder.attention_weights
        other = src.clone()
        other[1, 2:] = (other[1, 2:] + 5) % SRC_V  # other tokens where sentence 1 is padding
        torch.testing.assert_close(model(other, src_valid_lens, tgt), logits)
        longer = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)  # 4 more pad columns
        torch.testing.assert_close(model(longer, src_valid_lens, tgt), logits)
        torch.testing.assert_close(model.decoder.attention_weights[..., :6], weights)
    assert torch.all(model.decoder.attention_weights[..., 6:] == 0)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_decoding_step_by_step_equals_teacher_forcing(num_layers):
    model = small_model(num_layers)
    src, src_valid_lens, tgt = batch(T_tgt=7)
    with torch.no_grad():
        enc = model.encoder(src, src_valid_lens)
        full = model.decoder(tgt, enc, src_valid_lens)
        full_weights = model.decoder.attention_weights
        state = model.decoder.init_state(enc, src_valid_lens)
        steps, weights = [], []
        for t in range(7):
            steps.append(model.decoder.step(tgt[:, t:t + 1], state))
            weights.append(model.decoder.attention_weights)
        torch.testing.assert_close(torch.cat(steps, dim=1), full)
        torch.testing.assert_close(torch.cat(weights, dim=1), full_weights)
        # in chunks of any size, too: 3 positions, then 4
        state = model.decoder.init_state(enc, src_valid_lens)
        chunks = [model.decoder.step(tgt[:, :3], state), model.decoder.step(tgt[:, 3:], state)]
        torch.testing.assert_close(torch.cat(chunks, dim=1), full)


def test_state_reorders_its_rows():
    model = small_model(num_layers=2)
    src, src_valid_lens, tgt = batch()
    with torch.no_grad():
        enc = model.encoder(src, src_valid_lens)
        state = model.decoder.init_state(enc, src_valid_lens)
        model.decoder.step(tgt[:, :3], state)
        rows = torch.tensor([1, 1, 0, 2])  # two copies of sentence 1, then sentences 0 and 2
        reference = model.decoder.init_state(enc[rows], src_valid_lens[rows])
        model.decoder.step(tgt[rows, :3], reference)
        state.reorder(rows)
        assert state.src_valid_lens.tolist() == [2, 2, 6, 4]
        torch.testing.assert_close(state.hidden, reference.hidden)
        token = torch.randint(0, TGT_V, (4, 1))
        torch.testing.assert_close(model.decoder.step(token, state),
                                   model.decoder.step(token, reference))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_width_one_is_greedy_decoding(seed):
    model = small_model(num_layers=2, seed=seed, sharpen=True)
    src, src_valid_lens, _ = batch(B=6)
    greedy = d2lh.greedy_decode(model, src, src_valid_lens, BOS, EOS, max_len=10)
    beam = d2lh.beam_search(model, src, src_valid_lens, BOS, EOS, max_len=10, beam_size=1)
    assert torch.equal(beam.tokens, greedy)
    recomputed = d2lh.greedy_decode(model, src, src_valid_lens, BOS, EOS, max_len=10,
                                    use_cache=False)
    assert torch.equal(recomputed, greedy)


@pytest.mark.parametrize("beam_size, alpha", [(2, 0.0), (4, 0.6)])
def test_beam_search_with_and_without_the_state_agree_and_report_what_they_found(beam_size, alpha):
    model = small_model(num_layers=2, seed=2, sharpen=True)
    src, src_valid_lens, _ = batch(B=6)
    stepped = d2lh.beam_search(model, src, src_valid_lens, BOS, EOS, 10, beam_size, alpha)
    recomputed = d2lh.beam_search(model, src, src_valid_lens, BOS, EOS, 10, beam_size, alpha,
                                  use_cache=False)
    assert torch.equal(stepped.tokens, recomputed.tokens)
    torch.testing.assert_close(stepped.log_probs, recomputed.log_probs)
    log_probs, lengths = d2lh.sequence_log_prob(model, src, src_valid_lens, stepped.tokens, BOS, EOS)
    torch.testing.assert_close(stepped.log_probs, log_probs)  # re-scored by teacher forcing
    assert torch.equal(stepped.lengths, lengths)
    assert len(set(lengths.tolist())) > 1  # the sentences finished at different steps


def test_attention_weights_are_kept_for_plotting():
    model = small_model()
    src, src_valid_lens, tgt = batch()
    with torch.no_grad():
        model(src, src_valid_lens, tgt)
    weights = model.decoder.attention_weights
    assert weights.shape == (3, 5, 6) and not weights.requires_grad
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(3, 5))  # a distribution per step
    for b, n in enumerate(src_valid_lens.tolist()):
        assert torch.all(weights[b, :, n:] == 0)  # no weight on the padding


def test_gradients_reach_every_parameter():
    model = small_model(num_layers=2).train()
    src, src_valid_lens, tgt = batch()
    model(src, src_valid_lens, tgt).sum().backward()
    missing = [name for name, p in model.named_parameters()
               if p.grad is None or not torch.any(p.grad != 0)]
    assert not missing


def test_train_seq2seq_translate_and_held_out_bleu_serve_it():
    pairs = [(f"word{i} .", f"c'est le mot{i} !") for i in range(12)] * 2  # 4 tokens: BLEU > 0
    held_out = {"word3 .": ["c'est le mot3 !"], "word5 .": ["c'est le mot5 !"]}  # known pairs
    data = d2lh.TranslationData(pairs, held_out, batch_size=8, num_steps=6, min_freq=1)
    torch.manual_seed(0)
    model = d2lh.BahdanauSeq2Seq(len(data.src_vocab), len(data.tgt_vocab), embed_size=16,
                                 num_hiddens=32, dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    report = d2lh.train_seq2seq(model, data.train_loader(), 40, optimizer=optimizer, progress=False)
    assert report.epoch_losses[-1] < 0.1 * report.epoch_losses[0]
    assert d2lh.translate(model, data, ["word7 .", "word3 ."]) == ["c'est le mot7 !",
                                                                   "c'est le mot3 !"]
    assert d2lh.translate(model, data, "word9 .", beam_size=3) == "c'est le mot9 !"
    assert d2lh.held_out_bleu(model, data) == pytest.approx(100.0)


@pytest.mark.parametrize("call, message", [
    (lambda m, src, n, tgt: m(src, n[:2], tgt),
     r"^src_valid_lens must have shape \(B,\)=\(3,\), got \(2,\)$"),
    (lambda m, src, n, tgt: m(src, n[:, None].expand(3, 5), tgt),
     r"^src_valid_lens must have shape \(B,\)=\(3,\), got \(3, 5\)$"),
    (lambda m, src, n, tgt: m(src, torch.tensor([6, 7, 1]), tgt),
     r"^src_valid_lens must be whole numbers in \[1, T_src=6\], got 7$"),
    (lambda m, src, n, tgt: m(src, torch.tensor([6, 0, 1]), tgt),  # the decoder starts from the
     r"^src_valid_lens must be whole numbers in \[1, T_src=6\], got 0$"),  # last source token
    (lambda m, src, n, tgt: m(src, torch.tensor([6.0, 2.5, 1.0]), tgt),
     r"^src_valid_lens must be whole numbers in \[1, T_src=6\], got 2.5$"),
    (lambda m, src, n, tgt: m(src, torch.tensor([True, True, False]), tgt),
     r"^src_valid_lens must hold whole numbers, got dtype torch.bool$"),
    (lambda m, src, n, tgt: m(src[0], n, tgt), r"^src must have shape \(B, T\), got \(6,\)$"),
    (lambda m, src, n, tgt: m(src.float(), n, tgt),
     r"^src must hold integer token indices, got dtype torch.float32$"),
    (lambda m, src, n, tgt: m(src, n, tgt.float()),
     r"^dec_input must hold integer token indices, got dtype torch.float32$"),
    (lambda m, src, n, tgt: m(src, n, tgt[0]), r"^dec_input must have shape \(B, T\), got \(5,\)$"),
    (lambda m, src, n, tgt: m.decoder.step(tgt.double(), m.decoder.init_state(m.encoder(src, n), n)),
     r"^tokens must hold integer token indices, got dtype torch.float64$"),
    (lambda m, src, n, tgt: m.decoder(tgt, torch.zeros(3, 6, H + 1), n),
     r"enc_outputs must have shape \(B, T_src, H=12\), got \(3, 6, 13\)"),
    (lambda m, src, n, tgt: m.decoder.step(tgt[:2], m.decoder.init_state(m.encoder(src, n), n)),
     r"tokens have batch size 2 but the state holds 3 rows \(hidden \(1, 3, 12\)\)"),
    (lambda m, src, n, tgt: d2lh.greedy_decode(m, src.float(), n, BOS, EOS, 5),
     r"^src must hold integer token indices, got dtype torch.float32$"),
    (lambda m, src, n, tgt: d2lh.greedy_decode(m, src, torch.tensor([6, 2, 8]), BOS, EOS, 5),
     r"^src_valid_lens must be whole numbers in \[1, T_src=6\], got 8$"),
    (lambda m, src, n, tgt: d2lh.beam_search(m, src, torch.tensor([6, 2, 8]), BOS, EOS, 5),
     r"^src_valid_lens must be whole numbers in \[1, T_src=6\], got 8$"),
])
def test_bad_input_is_named(call, message):
    model = small_model()
    src, src_valid_lens, tgt = batch()
    with pytest.raises(ValueError, match=message):
        call(model, src, src_valid_lens, tgt)


def test_source_lengths_may_be_any_whole_numbers():
    """As everywhere in the package, lengths may come as a list or as whole floating-point numbers
    (the door checks that they are whole)."""
    model = small_model(num_layers=2)
    src, src_valid_lens, tgt = batch()
    with torch.no_grad():
        expected = model(src, src_valid_lens, tgt)
        for other in (src_valid_lens.tolist(), src_valid_lens.float(), src_valid_lens.int()):
            torch.testing.assert_close(model(src, other, tgt), expected)
    greedy = d2lh.greedy_decode(model, src, src_valid_lens, BOS, EOS, max_len=6)
    assert torch.equal(d2lh.greedy_decode(model, src, src_valid_lens.double(), BOS, EOS, 6), greedy)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_the_source_lengths_are_read_once_where_they_enter(host_syncs, num_layers):
    model = small_model(num_layers)
    src, src_valid_lens, tgt = batch()
    # the lengths, the ids of src, and those of dec_input (smallest and largest; checked by the
    # model and by its decoder, so that an error names the caller's argument), one read each
    assert host_syncs(model, src, src_valid_lens, tgt) <= 4
    with torch.no_grad():
        enc = model.encoder(src, src_valid_lens)
        assert host_syncs(model.decoder, tgt, enc, src_valid_lens) == 1  # the ids; lengths trusted
        state = model.decoder.init_state(enc, src_valid_lens)
        assert host_syncs(model.decoder.step, tgt[:, :1], state) == 0
