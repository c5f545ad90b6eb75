"""The paper's training recipe and decoding: label smoothing stays finite and is what it claims to
be, the warm-up learning-rate schedule follows its formula, and beam search finds better sequences
than greedy decoding, equals it at width 1, and gives the same result with and without the
key-value cache."""

import functools
import math

import pytest
import torch
from torch import nn

import d2lhelpers as d2lh

# --------------------------------------------------------------------------------------------------
# Label smoothing
# --------------------------------------------------------------------------------------------------


def smoothed_loss_by_hand(logits, targets, valid_lens, eps):
    """Cross-entropy against (1 - eps) one-hot + eps / V uniform, averaged over valid positions."""
    B, T, V = logits.shape
    total, count = 0.0, 0
    for b in range(B):
        for t in range(int(valid_lens[b])):
            log_p = torch.log_softmax(logits[b, t].double(), dim=-1)
            q = torch.full((V,), eps / V, dtype=torch.float64)
            q[targets[b, t]] += 1 - eps
            total, count = total - (q * log_p).sum(), count + 1
    return total / count


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.4])
def test_label_smoothing_is_cross_entropy_against_the_smoothed_distribution(eps):
    torch.manual_seed(0)
    logits, targets = torch.randn(3, 5, 7), torch.randint(0, 7, (3, 5))
    valid_lens = torch.tensor([5, 2, 0])
    loss = d2lh.masked_cross_entropy(logits, targets, valid_lens, label_smoothing=eps)
    expected = smoothed_loss_by_hand(logits, targets, valid_lens, eps)
    torch.testing.assert_close(loss.double(), expected)


def test_label_smoothing_zero_is_plain_cross_entropy():
    torch.manual_seed(1)
    logits, targets = torch.randn(2, 4, 6), torch.randint(0, 6, (2, 4))
    valid_lens = torch.tensor([3, 4])
    valid = torch.arange(4)[None, :] < valid_lens[:, None]
    nll = -torch.log_softmax(logits, dim=-1).gather(2, targets[..., None]).squeeze(2)  # (B, T)
    torch.testing.assert_close(d2lh.masked_cross_entropy(logits, targets, valid_lens, 0.0),
                               nll[valid].mean())


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("fill", [float("inf"), float("-inf"), float("nan"), 1e30])
def test_padding_never_makes_the_loss_or_its_gradient_infinite(eps, fill):
    torch.manual_seed(2)
    logits, targets = torch.randn(2, 4, 6), torch.randint(0, 6, (2, 4))
    valid_lens = torch.tensor([4, 2])
    clean = d2lh.masked_cross_entropy(logits, targets, valid_lens, eps)
    dirty = logits.clone()
    dirty[1, 2:] = fill  # padding positions of sequence 1 hold garbage
    dirty.requires_grad_(True)
    loss = d2lh.masked_cross_entropy(dirty, targets, valid_lens, eps)
    loss.backward()
    torch.testing.assert_close(loss, clean)
    assert torch.isfinite(dirty.grad).all()
    assert torch.all(dirty.grad[1, 2:] == 0)  # padding gets no gradient


@pytest.mark.parametrize("scale", [1e3, 1e6, 1e30])
def test_label_smoothing_stays_finite_on_extreme_logits(scale):
    torch.manual_seed(3)
    logits = (torch.randn(2, 3, 5) * scale).requires_grad_(True)
    targets = torch.randint(0, 5, (2, 3))
    loss = d2lh.masked_cross_entropy(logits, targets, torch.tensor([3, 3]), label_smoothing=0.1)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()


def test_smoothed_loss_is_smallest_at_the_smoothed_distribution():
    eps, V = 0.1, 5
    targets = torch.tensor([[2]])
    q = torch.full((V,), eps / V)
    q[2] += 1 - eps
    # logits equal to log q predict exactly the smoothed target: the gradient vanishes there...
    logits = q.log().reshape(1, 1, V).requires_grad_(True)
    loss = d2lh.masked_cross_entropy(logits, targets, torch.tensor([1]), eps)
    loss.backward()
    torch.testing.assert_close(logits.grad, torch.zeros_like(logits.grad), atol=1e-6, rtol=0)
    # ... and the loss there is the entropy of q, above 0: a one-hot prediction cannot reach it
    torch.testing.assert_close(loss, -(q * q.log()).sum())
    confident = torch.tensor([[[0.0, 0.0, 20.0, 0.0, 0.0]]])
    assert d2lh.masked_cross_entropy(confident, targets, torch.tensor([1]), eps) > loss


# --------------------------------------------------------------------------------------------------
# The warm-up learning-rate schedule
# --------------------------------------------------------------------------------------------------


def test_schedule_follows_the_formula():
    d_model, warmup = 512, 4000
    for step in (1, 10, 3999, 4000, 4001, 100_000):
        expected = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
        assert d2lh.transformer_lr(step, d_model, warmup) == pytest.approx(expected, rel=1e-12)
    assert d2lh.transformer_lr(1, 512, 4000) == pytest.approx(512 ** -0.5 * 4000 ** -1.5)
    assert d2lh.transformer_lr(100, 64, 10, factor=2.0) == pytest.approx(2 * 64 ** -0.5 * 0.1)


@pytest.mark.parametrize("warmup", [1, 7, 400])
def test_schedule_rises_linearly_peaks_at_warmup_then_decays(warmup):
    lrs = [d2lh.transformer_lr(s, 64, warmup) for s in range(1, 4 * warmup + 2)]
    peak = max(range(len(lrs)), key=lrs.__getitem__) + 1
    assert peak == warmup
    assert lrs[warmup - 1] == pytest.approx((64 * warmup) ** -0.5)
    assert all(a < b for a, b in zip(lrs[:warmup - 1], lrs[1:warmup]))  # up, strictly
    assert all(a > b for a, b in zip(lrs[warmup - 1:], lrs[warmup:]))  # then down, strictly
    for s in range(1, warmup + 1):  # linear during warm-up
        assert lrs[s - 1] == pytest.approx(s * lrs[0])


def test_schedule_with_lambda_lr_sets_the_optimizer_learning_rate():
    parameter = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: d2lh.transformer_lr(i + 1, 16, warmup_steps=3))
    for step in range(1, 8):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(d2lh.transformer_lr(step, 16, 3))
        optimizer.step()
        scheduler.step()


@pytest.mark.parametrize("kwargs, message", [
    (dict(step=0, d_model=8), "step must be a positive int, got 0"),
    (dict(step=1, d_model=8, warmup_steps=0), "warmup_steps must be a positive int, got 0"),
    (dict(step=1.5, d_model=8), "step must be a positive int, got 1.5"),
    (dict(step=1, d_model=8, factor=-1.0), "factor must be positive, got -1.0"),
])
def test_schedule_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        d2lh.transformer_lr(**kwargs)


def tiny_copy_data():
    words = ["a", "b", "c", "d"]
    pairs = [(f"{x} {y}", f"{x} {y}") for x in words for y in words]
    return d2lh.TranslationData(pairs, batch_size=4, num_steps=4, min_freq=1)


def test_train_seq2seq_takes_an_optimizer_and_steps_the_scheduler_once_per_update():
    data = tiny_copy_data()  # 16 pairs in batches of 4: 4 updates per epoch
    torch.manual_seed(0)
    model = d2lh.Transformer(len(data.src_vocab), len(data.tgt_vocab), d_model=8, num_heads=2,
                             ffn_hidden=8, num_layers=1, dropout=0.0)
    before = [p.detach().clone() for p in model.parameters()]
    seen = []

    def frozen(i):  # learning rate 0: nothing may change
        seen.append(i)
        return 0.0

    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, frozen)
    epochs = []
    d2lh.train_seq2seq(model, data.train_loader(), 2, optimizer=optimizer, scheduler=scheduler,
                       progress=False, on_epoch_end=lambda report: epochs.append(report.epoch_losses[:]))
    assert seen == list(range(9))  # LambdaLR asks for update 0's rate up front, then one per update
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert optimizer.state and all(s["step"] == 8 for s in optimizer.state.values())  # ours was used
    assert [len(losses) for losses in epochs] == [1, 2]  # the callback sees the report after each epoch
    # with the paper's schedule the parameters do move
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: d2lh.transformer_lr(i + 1, d_model=8, warmup_steps=4))
    d2lh.train_seq2seq(model, data.train_loader(), 1, optimizer=optimizer, scheduler=scheduler,
                       progress=False)
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


# --------------------------------------------------------------------------------------------------
# Beam search
# --------------------------------------------------------------------------------------------------

BOS, EOS, A, B, C, D = range(6)


class _ZeroEncoder(nn.Module):
    def forward(self, src, valid_lens=None):
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
    (dict(src_valid_lens=torch.tensor([1, 2])), r"src_valid_lens \(2,\)"),
])
def test_beam_search_rejects_bad_arguments(kwargs, message):
    model, src, src_valid_lens = random_model()
    arguments = dict(src=src, src_valid_lens=src_valid_lens, bos=BOS, eos=EOS, max_len=5) | kwargs
    with pytest.raises(ValueError, match=message):
        d2lh.beam_search(model, **arguments)


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_len=0), "max_len must be a positive int, got 0"),
    (dict(src_valid_lens=torch.tensor([1, 2])), r"src_valid_lens \(2,\)"),
    (dict(src=torch.zeros(5, dtype=torch.long)), r"src must have shape \(B, T_src\).*got src \(5,\)"),
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
