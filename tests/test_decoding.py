"""Unit tests of d2lhelpers.decoding: greedy decoding and beam search (beam search finds better
sequences than greedy decoding, equals it at width 1, and gives the same result with and without
the key-value cache), the next-token logits with and without the cache, and sampling: filters that
map logits to logits, one softmax, generation from a language model."""

import math

import pytest
import torch
from torch import nn

import d2lhelpers as d2lh

# --------------------------------------------------------------------------------------------------
# Beam search
# --------------------------------------------------------------------------------------------------

BOS, EOS, A, B, C, D = range(6)


class _ZeroEncoder(nn.Module):
    def forward(self, src, src_valid_lens=None):
        return torch.zeros(src.shape[0], src.shape[1], 1)


class _NoState:
    """A decoding state with nothing to remember: the next token depends on the last one only."""

    def reorder(self, rows):
        pass


class _MarkovDecoder(nn.Module):
    """Next-token log-probabilities set by hand: they depend only on the previous token."""

    def __init__(self, table):
        super().__init__()
        self.register_buffer("log_table", table.log())

    def init_state(self, enc_outputs, src_valid_lens=None):
        return _NoState()

    def step(self, tokens, state):
        return self.log_table[tokens]  # (B, T) -> (B, T, V): logits = log-probabilities

    def forward(self, tokens, enc_outputs, src_valid_lens=None):
        return self.log_table[tokens]


class MarkovModel(nn.Module):
    """A stand-in for a translation model, with the same interface (encoder, decoder, forward)."""

    def __init__(self, rows: dict[int, dict[int, float]], V: int = 6):
        super().__init__()
        table = torch.zeros(V, V, dtype=torch.float64)
        for prev in range(V):
            given = rows.get(prev, {EOS: 0.95})
            rest = [v for v in range(V) if v not in given]
            table[prev] = (1 - sum(given.values())) / len(rest)  # the rest of the mass, spread
            for token, p in given.items():
                table[prev, token] = p
        self.encoder, self.decoder = _ZeroEncoder(), _MarkovDecoder(table.float())

    def forward(self, src, src_valid_lens, dec_input):
        return self.decoder(dec_input, self.encoder(src, src_valid_lens), src_valid_lens)


# Greedy takes A (0.5) then C (0.4) then <eos> (0.95): probability 0.19. B (0.4) then <eos> (0.9)
# has probability 0.36, but greedy never looks at B.
GREEDY_TRAP = {BOS: {A: 0.5, B: 0.4}, A: {C: 0.4, B: 0.3, EOS: 0.25}, B: {EOS: 0.9}}
SRC, SRC_LEN = torch.zeros(1, 3, dtype=torch.long), torch.tensor([3])


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_search_finds_a_more_likely_sequence_than_greedy(use_cache):
    model = MarkovModel(GREEDY_TRAP)
    greedy = d2lh.greedy_decode(model, SRC, SRC_LEN, BOS, EOS, max_len=5, use_cache=use_cache)
    assert greedy.tolist() == [[A, C, EOS]]
    beam = d2lh.beam_search(model, SRC, SRC_LEN, BOS, EOS, max_len=5, beam_size=2,
                            length_penalty=0.0, use_cache=use_cache)
    # B <eos> finished at step 2 and was carried over, unchanged, while A C went on for a step
    assert beam.tokens.tolist() == [[B, EOS, EOS]]
    assert beam.lengths.tolist() == [2]
    torch.testing.assert_close(beam.log_probs, torch.tensor([math.log(0.4 * 0.9)]))
    torch.testing.assert_close(beam.scores, beam.log_probs)  # alpha = 0: no length normalisation
    greedy_log_prob, greedy_length = d2lh.sequence_log_prob(model, SRC, SRC_LEN, greedy, BOS, EOS)
    torch.testing.assert_close(greedy_log_prob, torch.tensor([math.log(0.5 * 0.4 * 0.95)]))
    assert greedy_length.tolist() == [3] and beam.log_probs > greedy_log_prob


def test_length_penalty_trades_total_for_mean_log_probability():
    # <eos> at once: 0.45 (mean log-probability per token -0.80); A B <eos>: 0.54 * 0.8 * 0.9 = 0.39
    # (lower in total, but -0.31 per token)
    model = MarkovModel({BOS: {EOS: 0.45, A: 0.54}, A: {B: 0.8, EOS: 0.15}, B: {EOS: 0.9}})
    total = d2lh.beam_search(model, SRC, SRC_LEN, BOS, EOS, 6, beam_size=2, length_penalty=0.0)
    mean = d2lh.beam_search(model, SRC, SRC_LEN, BOS, EOS, 6, beam_size=2, length_penalty=1.0)
    assert total.tokens[0, :1].tolist() == [EOS] and total.lengths.tolist() == [1]
    assert mean.tokens[0, :3].tolist() == [A, B, EOS] and mean.lengths.tolist() == [3]
    torch.testing.assert_close(mean.scores, torch.tensor([math.log(0.54 * 0.8 * 0.9) / 3]))


def test_beam_search_stops_at_max_len():
    model = MarkovModel({v: {A: 0.9} for v in range(6)})  # <eos> is never likely
    beam = d2lh.beam_search(model, SRC.repeat(2, 1), SRC_LEN.repeat(2), BOS, EOS, 4, beam_size=3)
    assert beam.tokens.tolist() == [[A] * 4] * 2 and beam.lengths.tolist() == [4, 4]


def random_model(norm_first=False, seed=0):
    torch.manual_seed(seed)
    model = d2lh.Transformer(9, 12, d_model=16, num_heads=2, ffn_hidden=32, num_layers=2,
                             dropout=0.0, norm_first=norm_first).eval()
    with torch.no_grad():  # sharper next-token distributions, and an <eos> that comes sometimes:
        model.decoder.output.weight *= 6  # the sentences of the batch end at different steps
        model.decoder.output.bias[EOS] += 2
    src = torch.randint(3, 9, (6, 5))
    return model, src, torch.tensor([5, 1, 3, 4, 2, 5])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_width_one_is_greedy_decoding(seed):
    model, src, src_valid_lens = random_model(seed=seed)
    greedy = d2lh.greedy_decode(model, src, src_valid_lens, BOS, EOS, max_len=10)
    beam = d2lh.beam_search(model, src, src_valid_lens, BOS, EOS, max_len=10, beam_size=1)
    assert torch.equal(beam.tokens, greedy)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("beam_size, alpha", [(2, 0.0), (3, 1.0), (5, 0.6)])
def test_beam_search_with_and_without_the_cache_agree(norm_first, beam_size, alpha):
    model, src, src_valid_lens = random_model(norm_first)
    cached = d2lh.beam_search(model, src, src_valid_lens, BOS, EOS, 10, beam_size, alpha)
    recomputed = d2lh.beam_search(model, src, src_valid_lens, BOS, EOS, 10, beam_size, alpha,
                                  use_cache=False)
    assert torch.equal(cached.tokens, recomputed.tokens)
    torch.testing.assert_close(cached.log_probs, recomputed.log_probs)
    assert torch.equal(cached.lengths, recomputed.lengths)


@pytest.mark.parametrize("beam_size, alpha", [(2, 0.0), (4, 1.0)])
def test_beam_search_reports_what_it_found(beam_size, alpha):
    model, src, src_valid_lens = random_model()
    beam = d2lh.beam_search(model, src, src_valid_lens, BOS, EOS, 10, beam_size, alpha)
    log_probs, lengths = d2lh.sequence_log_prob(model, src, src_valid_lens, beam.tokens, BOS, EOS)
    torch.testing.assert_close(beam.log_probs, log_probs)  # re-scored by teacher forcing
    assert torch.equal(beam.lengths, lengths)
    torch.testing.assert_close(beam.scores, log_probs / lengths.float() ** alpha)
    assert len(set(lengths.tolist())) > 1  # the sentences finished at different steps
    T_out = beam.tokens.shape[1]
    assert T_out == 10 and 10 in lengths.tolist()  # one never finished: the search ran 10 steps
    for row, length in zip(beam.tokens.tolist(), lengths.tolist()):
        assert EOS not in row[:length - 1]
        if length < T_out:  # after its <eos>, a finished row holds only <eos>
            assert set(row[length - 1:]) == {EOS}


@pytest.mark.parametrize("kwargs, message", [
    (dict(beam_size=0), "beam_size must be a positive int, got 0"),
    (dict(length_penalty=-1.0), "length_penalty must be a finite number >= 0, got -1.0"),
    (dict(max_len=0), "max_len must be a positive int, got 0"),
    (dict(src_valid_lens=torch.tensor([1, 2])),
     r"^src_valid_lens must have shape \(B,\)=\(6,\), got \(2,\)$"),
    (dict(src_valid_lens=torch.tensor([5, 1, 3, 4, 2, 9])),
     r"^src_valid_lens must be whole numbers in \[0, T_src=5\], got 9$"),
    (dict(src=torch.zeros(6, 5)), r"^src must hold integer token indices, got dtype torch.float32$"),
])
def test_beam_search_rejects_bad_arguments(kwargs, message):
    model, src, src_valid_lens = random_model()
    arguments = dict(src=src, src_valid_lens=src_valid_lens, bos=BOS, eos=EOS, max_len=5) | kwargs
    with pytest.raises(ValueError, match=message):
        d2lh.beam_search(model, **arguments)


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_len=0), "max_len must be a positive int, got 0"),
    (dict(src_valid_lens=torch.tensor([1, 2])),
     r"^src_valid_lens must have shape \(B,\)=\(6,\), got \(2,\)$"),
    (dict(src_valid_lens=torch.tensor([5, 1, 3, 7, 2, 5])),
     r"^src_valid_lens must be whole numbers in \[0, T_src=5\], got 7$"),
    (dict(src_valid_lens=torch.tensor([5, 1, 3, 7, 2, 6])),
     r"^src_valid_lens must be whole numbers in \[0, T_src=5\], got \[7, 6\]$"),
    (dict(src=torch.zeros(5, dtype=torch.long)), r"^src must have shape \(B, T\), got \(5,\)$"),
    (dict(src=torch.zeros(6, 5)), r"^src must hold integer token indices, got dtype torch.float32$"),
    (dict(src=torch.zeros(6, 5, dtype=torch.float64)),
     r"^src must hold integer token indices, got dtype torch.float64$"),
    (dict(src=[[3, 4, 5]]), r"^src must be a tensor of token indices of shape \(B, T\), got list$"),
])
def test_greedy_decode_rejects_bad_arguments(kwargs, message):
    model, src, src_valid_lens = random_model()
    arguments = dict(src=src, src_valid_lens=src_valid_lens, bos=BOS, eos=EOS, max_len=5) | kwargs
    with pytest.raises(ValueError, match=message):
        d2lh.greedy_decode(model, **arguments)


def test_sequence_log_prob_counts_up_to_the_first_eos():
    model = MarkovModel(GREEDY_TRAP)
    tokens = torch.tensor([[A, C, EOS, B], [B, B, B, B]])
    log_probs, lengths = d2lh.sequence_log_prob(model, SRC.repeat(2, 1), SRC_LEN.repeat(2), tokens,
                                                BOS, EOS)
    assert lengths.tolist() == [3, 4]
    p_b_b = 0.1 / 5  # B -> B: B's leftover mass 0.1 spread over the 5 tokens other than <eos>
    torch.testing.assert_close(log_probs, torch.tensor([math.log(0.5 * 0.4 * 0.95),
                                                        math.log(0.4 * p_b_b ** 3)]))
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, T_out\) with B=2"):
        d2lh.sequence_log_prob(model, SRC.repeat(2, 1), SRC_LEN.repeat(2), tokens[:1], BOS, EOS)


def test_greedy_decoding_gives_the_same_tokens_with_and_without_the_cache():
    torch.manual_seed(0)
    model = d2lh.Transformer(9, 12, d_model=16, num_heads=2, ffn_hidden=32, num_layers=2).eval()
    src, src_valid_lens = torch.randint(3, 9, (4, 6)), torch.tensor([6, 1, 3, 5])
    with_cache = d2lh.greedy_decode(model, src, src_valid_lens, bos=1, eos=2, max_len=12)
    without = d2lh.greedy_decode(model, src, src_valid_lens, bos=1, eos=2, max_len=12, use_cache=False)
    assert torch.equal(with_cache, without)
    assert with_cache.shape[0] == 4 and with_cache.shape[1] <= 12
    # after a sequence's <eos>, its row only holds <eos>
    for row in with_cache.tolist():
        if 2 in row:
            assert set(row[row.index(2):]) == {2}


def test_decoding_reads_the_source_lengths_once_at_the_encoder(host_syncs):
    """The lengths and the source's token ids are checked where they enter the model (one read
    each); the decoding loop adds no read of them (it reads one value per step: whether every row
    has finished; the tokens it feeds are its own, whose range the decoder's step does not read)."""
    model, src, src_valid_lens = random_model()
    with torch.no_grad():
        assert host_syncs(model.encoder, src, src_valid_lens) == 2
    for max_len in (1, 4):
        assert host_syncs(d2lh.greedy_decode, model, src, src_valid_lens, BOS, EOS,
                          max_len) <= 2 + max_len


# --------------------------------------------------------------------------------------------------
# The next-token logits, with and without the key-value cache
# --------------------------------------------------------------------------------------------------


def seq2seq_next_logits(model, src, src_valid_lens, use_cache):
    enc_outputs = model.encoder(src, src_valid_lens)
    return d2lh.NextLogits(model.decoder.step,
                           lambda: model.decoder.init_state(enc_outputs, src_valid_lens), use_cache)


def transformer_case():
    torch.manual_seed(7)
    model = d2lh.Transformer(9, 12, d_model=16, num_heads=2, ffn_hidden=32, num_layers=2,
                             dropout=0.0).double().eval()
    src, src_valid_lens = torch.randint(3, 9, (3, 5)), torch.tensor([5, 2, 4])
    return (lambda use_cache: seq2seq_next_logits(model, src, src_valid_lens, use_cache),
            lambda tokens, rows: model(src[rows], src_valid_lens[rows], tokens))


def bahdanau_case():
    torch.manual_seed(8)
    model = d2lh.BahdanauSeq2Seq(9, 12, embed_size=8, num_hiddens=16, num_layers=2,
                                 dropout=0.0).double().eval()
    src, src_valid_lens = torch.randint(3, 9, (3, 5)), torch.tensor([5, 2, 4])
    return (lambda use_cache: seq2seq_next_logits(model, src, src_valid_lens, use_cache),
            lambda tokens, rows: model(src[rows], src_valid_lens[rows], tokens))


def language_model_case():
    torch.manual_seed(9)
    model = d2lh.DecoderOnlyLM(12, d_model=16, num_heads=4, num_kv_heads=2, ffn_hidden=32,
                               num_layers=2, dropout=0.0).double().eval()
    return (lambda use_cache: d2lh.NextLogits(model.step, model.init_state, use_cache),
            lambda tokens, rows: model(tokens))


@pytest.mark.parametrize("case", [transformer_case, bahdanau_case, language_model_case],
                         ids=["Transformer", "BahdanauSeq2Seq", "DecoderOnlyLM"])
def test_next_logits_with_and_without_the_cache_agree_before_and_after_reorder(case):
    make_next_logits, teacher_forcing = case()
    cached, recomputed = make_next_logits(True), make_next_logits(False)
    tokens = torch.randint(0, 12, (3, 9), generator=torch.Generator().manual_seed(0))
    rows = torch.arange(3)
    # a first chunk of 2 tokens, then one at a time, then 2 at once (the cache takes any chunk)
    for t in (2, 3, 4, 6):
        logits = cached(tokens[:, :t])
        assert logits.shape == (len(rows), 12)
        torch.testing.assert_close(recomputed(tokens[:, :t]), logits)
        torch.testing.assert_close(teacher_forcing(tokens[:, :t], rows)[:, -1], logits)
    # keep rows 2, 0, 0 (as beam search keeps its best beams), then go on from there
    reorder = torch.tensor([2, 0, 0])
    for next_logits in (cached, recomputed):
        next_logits.reorder(reorder)
    rows, tokens = rows[reorder], tokens[reorder]
    tokens[1, 6:] = (tokens[1, 6:] + 1) % 12  # the two copies of row 0 now continue differently
    for t in (7, 9):
        logits = cached(tokens[:, :t])
        assert logits.shape == (3, 12)
        torch.testing.assert_close(recomputed(tokens[:, :t]), logits)
        torch.testing.assert_close(teacher_forcing(tokens[:, :t], rows)[:, -1], logits)
    assert not torch.allclose(logits[1], logits[2])


# --------------------------------------------------------------------------------------------------
# Sampling: filters that map logits to logits, then one softmax; generation
# --------------------------------------------------------------------------------------------------

LOGITS = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 1.0, 1.5]])


def kept_and_excluded(filtered, logits, scale=1.0):
    """Assert that ``filtered`` holds -inf where it excludes a token and ``logits / scale`` where
    it keeps one; return the boolean mask of kept tokens."""
    assert filtered.shape == logits.shape and filtered.dtype == logits.dtype
    kept = filtered != -math.inf
    torch.testing.assert_close(filtered[kept], logits[kept] / scale)
    return kept


def test_scale_by_temperature_divides_the_logits():
    for temperature in (0.5, 1, 2.0, 1e-3):
        kept = kept_and_excluded(d2lh.scale_by_temperature(LOGITS, temperature), LOGITS, temperature)
        assert kept.all()
    assert torch.equal(d2lh.scale_by_temperature(LOGITS, 1.0), LOGITS)


def test_temperature_zero_keeps_only_the_first_highest_logit():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 1.0, 3.0]])  # row 1: a tie at 3.0
    greedy = d2lh.scale_by_temperature(logits, 0)
    kept = kept_and_excluded(greedy, logits)  # the kept logit is unchanged
    assert kept.tolist() == [[True, False, False, False], [False, True, False, False]]
    assert torch.equal(d2lh.next_token_probs(logits, temperature=0),
                       torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0]]))


def test_top_k_filter_keeps_the_k_highest_logits():
    top2 = d2lh.top_k_filter(LOGITS, 2)
    kept = kept_and_excluded(top2, LOGITS)
    assert kept.tolist() == [[True, True, False, False], [False, True, False, True]]
    assert torch.equal(d2lh.top_k_filter(LOGITS, 4), LOGITS)
    assert torch.equal(d2lh.top_k_filter(LOGITS, 10), LOGITS)  # k >= V keeps everything
    ties = torch.tensor([[1.0, 3.0, 1.0, 0.0]])  # ties at the k-th value are all kept
    assert (d2lh.top_k_filter(ties, 2) != -math.inf).tolist() == [[True, True, True, False]]


def test_top_p_filter_keeps_the_nucleus():
    probs = torch.tensor([[0.5, 0.05, 0.3, 0.15], [0.25, 0.25, 0.25, 0.25]])
    logits = probs.log()
    # row 0: 0.5, then 0.5 + 0.3 = 0.8 >= 0.75: tokens 0 and 2 kept; row 1: three tokens reach 0.75
    kept = kept_and_excluded(d2lh.top_p_filter(logits, 0.75), logits)
    assert kept[0].tolist() == [True, False, True, False] and int(kept[1].sum()) == 3
    kept = kept_and_excluded(d2lh.top_p_filter(logits, 0.4), logits)
    assert kept[0].tolist() == [True, False, False, False]  # the most probable token alone
    assert torch.equal(d2lh.top_p_filter(logits, 1.0), logits)
    # the nucleus is taken of the distribution the logits give, whatever their offset
    torch.testing.assert_close(d2lh.top_p_filter(logits + 7.0, 0.75), d2lh.top_p_filter(logits, 0.75) + 7.0)


@pytest.mark.parametrize("temperature", [0, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("top_k", [None, 1, 2, 3])
@pytest.mark.parametrize("top_p", [None, 0.3, 0.75, 1.0])
def test_next_token_probs_is_the_softmax_of_the_filters_applied_in_turn(temperature, top_k, top_p):
    logits = torch.randn(5, 7, generator=torch.Generator().manual_seed(0)) * 2
    filtered = d2lh.scale_by_temperature(logits, temperature)
    if top_k is not None:
        filtered = d2lh.top_k_filter(filtered, top_k)
    if top_p is not None:
        filtered = d2lh.top_p_filter(filtered, top_p)
    probs = d2lh.next_token_probs(logits, temperature, top_k, top_p)
    torch.testing.assert_close(probs, torch.softmax(filtered, dim=-1))
    assert torch.all((probs == 0) == (filtered == -math.inf))  # excluded: probability exactly 0
    torch.testing.assert_close(probs.sum(dim=-1), torch.ones(5))


def test_next_token_probs_temperature_and_top_k():
    logits = LOGITS
    torch.testing.assert_close(d2lh.next_token_probs(logits), torch.softmax(logits, dim=-1))
    torch.testing.assert_close(d2lh.next_token_probs(logits, temperature=0.5),
                               torch.softmax(2 * logits, dim=-1))
    top2 = d2lh.next_token_probs(logits, top_k=2)
    assert torch.equal(top2 > 0, torch.tensor([[True, True, False, False], [False, True, False, True]]))
    torch.testing.assert_close(top2.sum(dim=-1), torch.ones(2))
    torch.testing.assert_close(top2[0, :2], torch.softmax(logits[0, :2], dim=-1))
    torch.testing.assert_close(d2lh.next_token_probs(logits, top_k=10), torch.softmax(logits, -1))
    hot, cold = (d2lh.next_token_probs(logits, temperature=t).max(dim=-1).values for t in (2.0, 0.5))
    assert torch.all(hot < torch.softmax(logits, -1).max(dim=-1).values) and torch.all(cold > hot)


def test_next_token_probs_top_p_and_both_filters():
    probs = torch.tensor([[0.5, 0.05, 0.3, 0.15], [0.25, 0.25, 0.25, 0.25]])
    logits = probs.log()
    got = d2lh.next_token_probs(logits, top_p=0.75)
    torch.testing.assert_close(got[0], torch.tensor([0.5, 0, 0.3, 0]) / 0.8)
    assert int((got[1] > 0).sum()) == 3
    torch.testing.assert_close(d2lh.next_token_probs(logits, top_p=0.4)[0], torch.tensor([1.0, 0, 0, 0]))
    torch.testing.assert_close(d2lh.next_token_probs(logits, top_p=1.0), probs)
    # with top_k, the nucleus is taken among the k kept tokens, after renormalising them
    both = d2lh.next_token_probs(logits, top_k=2, top_p=0.6)  # row 0: 0.5/0.8, 0.3/0.8 -> 0.625
    torch.testing.assert_close(both[0], torch.tensor([1.0, 0, 0, 0]))


TEMPERATURE_MESSAGE = r"^temperature must be a finite number >= 0, got "


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=-1.0), TEMPERATURE_MESSAGE + r"-1.0$"),
    (dict(temperature=math.nan), TEMPERATURE_MESSAGE + r"nan$"),
    (dict(temperature=math.inf), TEMPERATURE_MESSAGE + r"inf$"),
    (dict(temperature=-math.inf), TEMPERATURE_MESSAGE + r"-inf$"),
    (dict(temperature=True), TEMPERATURE_MESSAGE + r"True$"),
    (dict(temperature="1"), TEMPERATURE_MESSAGE + r"'1'$"),
    (dict(top_k=0), r"^top_k must be a positive int, got 0$"),
    (dict(top_k=2.0), r"^top_k must be a positive int, got 2.0$"),
    (dict(top_p=0.0), r"^top_p must be a number in \(0, 1\], got 0.0$"),
    (dict(top_p=1.5), r"^top_p must be a number in \(0, 1\], got 1.5$"),
    (dict(top_p=math.nan), r"^top_p must be a number in \(0, 1\], got nan$"),
])
def test_sampling_settings_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        d2lh.next_token_probs(LOGITS, **kwargs)
    with pytest.raises(ValueError, match=message):  # before generate feeds the model anything
        d2lh.generate(small_lm(), torch.zeros(2, 3, dtype=torch.long), 4, **kwargs)


@pytest.mark.parametrize("temperature", [math.nan, math.inf])
def test_the_filter_itself_rejects_a_temperature_that_is_not_finite(temperature):
    with pytest.raises(ValueError, match=TEMPERATURE_MESSAGE + str(temperature)):
        d2lh.scale_by_temperature(LOGITS, temperature)


@pytest.mark.parametrize("logits, message", [
    (LOGITS[0], r"got dtype torch.float32, shape \(4,\)$"),
    (LOGITS[None], r"got dtype torch.float32, shape \(1, 2, 4\)$"),
    (LOGITS.long(), r"got dtype torch.int64, shape \(2, 4\)$"),
    (LOGITS.tolist(), r"got list$"),
])
def test_next_token_probs_rejects_logits_that_are_not_a_float_matrix(logits, message):
    with pytest.raises(ValueError, match=r"^logits must be a floating-point tensor of shape \(B, V\), "
                                         + message):
        d2lh.next_token_probs(logits)


def small_lm(num_kv_heads=2, seed=6):
    torch.manual_seed(seed)
    return d2lh.DecoderOnlyLM(30, d_model=16, num_heads=4, num_kv_heads=num_kv_heads,
                              ffn_hidden=32, num_layers=2, dropout=0.0).eval()


def test_generate_with_and_without_cache_greedy_and_sampled():
    model = small_lm()
    prompt = torch.randint(30, (4, 3))
    cached = d2lh.generate(model, prompt, 12, temperature=0)
    assert cached.shape == (4, 12)
    assert torch.equal(cached, d2lh.generate(model, prompt, 12, temperature=0, use_cache=False))
    assert torch.equal(cached, d2lh.generate(model, prompt, 12, top_k=1))  # top-1 is greedy
    assert torch.equal(cached, d2lh.generate(model, prompt, 12, top_p=1e-6))  # so is a tiny nucleus
    draws = [d2lh.generate(model, prompt, 12, temperature=1.5,
                           generator=torch.Generator().manual_seed(0)) for _ in range(2)]
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], cached)
    cached_draw = d2lh.generate(model, prompt, 12, temperature=1.5, use_cache=False,
                                generator=torch.Generator().manual_seed(0))
    assert torch.equal(cached_draw, draws[0])  # the same draws from the same distributions
    # greedy continuation equals the argmax of teacher forcing on the generated sequence
    sequence = torch.cat([prompt, cached], dim=1)
    with torch.no_grad():
        assert torch.equal(model(sequence)[:, 2:-1].argmax(dim=-1), cached)


def test_generate_keeps_finished_rows_at_eos_and_stops():
    model = small_lm()
    prompt = torch.randint(30, (3, 2))
    free = d2lh.generate(model, prompt, 6, temperature=0)
    eos = int(free[0, 1])  # row 0 produces it at its second token
    out = d2lh.generate(model, prompt, 50, temperature=0, eos=eos)
    assert torch.all(out[0, 1:] == eos)
    for row in range(3):
        produced = (out[row] == eos).nonzero()
        if len(produced):
            assert torch.all(out[row, produced[0, 0]:] == eos)
    assert out.shape[1] == 50 or torch.all((out == eos).any(dim=1))


@pytest.mark.parametrize("prompt, message", [
    (torch.zeros(3, 0, dtype=torch.long),
     r"^prompt must hold at least one token per row, got shape \(3, 0\)$"),
    (torch.zeros(2, 3), r"^prompt must hold integer token indices, got dtype torch.float32$"),
    (torch.zeros(2, 3, dtype=torch.float16),
     r"^prompt must hold integer token indices, got dtype torch.float16$"),
    (torch.zeros(3, dtype=torch.long), r"^prompt must have shape \(B, T\), got \(3,\)$"),
    ([[1, 2, 3]], r"^prompt must be a tensor of token indices of shape \(B, T\), got list$"),
    (torch.tensor([[1, 30, 2]]), r"^prompt must be token ids in \[0, vocab_size=30\), got 30$"),
    (torch.tensor([[1, -1, 2]]), r"^prompt must be token ids in \[0, vocab_size=30\), got -1$"),
])
def test_generate_rejects_a_bad_prompt_naming_it(prompt, message):
    with pytest.raises(ValueError, match=message):
        d2lh.generate(small_lm(), prompt, 5)
    with pytest.raises(ValueError, match=r"^max_new_tokens must be a positive int, got 0$"):
        d2lh.generate(small_lm(), torch.zeros(2, 3, dtype=torch.long), 0)
