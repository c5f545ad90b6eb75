"""Unit tests of d2lhelpers.training: the masked (label-smoothed) loss ignores padding, stays finite
and is what it claims to be; the warm-up learning-rate schedule follows its formula; the training
loop takes an optimiser, a scheduler and a per-epoch callback, stops at its time budget, and learns
a toy translation."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import d2lhelpers as d2lh
from d2lhelpers.data import TranslationData


# --------------------------------------------------------------------------------------------------
# The masked loss
# --------------------------------------------------------------------------------------------------


def test_masked_cross_entropy_ignores_padding():
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 4, 6), torch.randint(0, 6, (2, 4))
    valid_lens = torch.tensor([4, 2])
    loss = d2lh.masked_cross_entropy(logits, targets, valid_lens)
    valid = torch.cat([torch.arange(4), 4 + torch.arange(2)])  # flat indices of valid positions
    expected = F.cross_entropy(logits.reshape(8, 6)[valid], targets.reshape(8)[valid])
    torch.testing.assert_close(loss, expected)
    # whatever the padding positions hold, the loss stays the same
    logits2, targets2 = logits.clone(), targets.clone()
    logits2[1, 2:] = 100 * torch.randn(2, 6)
    targets2[1, 2:] = 0
    torch.testing.assert_close(d2lh.masked_cross_entropy(logits2, targets2, valid_lens), loss)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_masked_cross_entropy_is_exactly_the_loss_of_the_valid_rows(eps):
    # the rows are picked with index_select (fast backward); the loss and its gradient are the
    # very numbers of boolean indexing, logits[mask], bit for bit, so training runs are unchanged
    torch.manual_seed(3)
    logits, targets = torch.randn(16, 7, 50), torch.randint(0, 50, (16, 7))
    valid_lens = torch.randint(1, 8, (16,))
    ours, theirs = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss = d2lh.masked_cross_entropy(ours, targets, valid_lens, eps)
    loss.backward()
    mask = torch.arange(7)[None, :] < valid_lens[:, None]
    expected = F.cross_entropy(theirs[mask], targets[mask], reduction="sum",
                               label_smoothing=eps) / mask.sum()
    expected.backward()
    assert torch.equal(loss, expected) and torch.equal(ours.grad, theirs.grad)


def test_masked_cross_entropy_with_label_smoothing_matches_torch():
    logits, targets = torch.randn(3, 5, 7), torch.randint(0, 7, (3, 5))
    loss = d2lh.masked_cross_entropy(logits, targets, torch.tensor([5, 5, 5]), label_smoothing=0.1)
    expected = F.cross_entropy(logits.reshape(15, 7), targets.reshape(15), label_smoothing=0.1)
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize("valid_lens, message", [
    (torch.tensor([1, 2, 3]), r"^valid_lens must have shape \(B,\)=\(2,\), got \(3,\)$"),
    (torch.tensor([[1, 2], [3, 4]]), r"^valid_lens must have shape \(B,\)=\(2,\), got \(2, 2\)$"),
    (torch.tensor([1, 5]), r"^valid_lens must be whole numbers in \[0, T=4\], got 5$"),
    (torch.tensor([-1, 2]), r"^valid_lens must be whole numbers in \[0, T=4\], got -1$"),
    (torch.tensor([1.5, 2.0]), r"^valid_lens must be whole numbers in \[0, T=4\], got 1.5$"),
])
def test_masked_cross_entropy_rejects_bad_valid_lens(valid_lens, message):
    with pytest.raises(ValueError, match=message):
        d2lh.masked_cross_entropy(torch.randn(2, 4, 3), torch.zeros(2, 4, dtype=torch.long), valid_lens)


def test_masked_cross_entropy_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"logits \(2, 4, 3\) and targets \(2, 5\)"):
        d2lh.masked_cross_entropy(torch.randn(2, 4, 3), torch.zeros(2, 5, dtype=torch.long), [4, 4])


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


def test_paper_adam_is_the_papers_adam_at_the_schedules_rate_from_update_one():
    schedule = lambda s: d2lh.transformer_lr(s, 16, warmup_steps=3)  # noqa: E731
    torch.manual_seed(0)
    ours, reference = nn.Parameter(torch.randn(5)), nn.Parameter(torch.zeros(5))
    reference.data.copy_(ours.data)
    optimizer, scheduler = d2lh.paper_adam([ours], schedule)
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    assert optimizer.defaults["fused"]  # one kernel, as train_seq2seq's default on the CPU
    by_hand = torch.optim.Adam([reference], lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    by_hand_scheduler = torch.optim.lr_scheduler.LambdaLR(by_hand, lambda i: schedule(i + 1))
    for step in range(1, 8):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(schedule(step))
        grad = torch.randn(5)
        for parameter, opt, sched in ((ours, optimizer, scheduler),
                                      (reference, by_hand, by_hand_scheduler)):
            parameter.grad = grad.clone()
            opt.step()
            sched.step()
        torch.testing.assert_close(ours.data, reference.data)


@pytest.mark.parametrize("kwargs, message", [
    (dict(step=0, d_model=8), "step must be a positive int, got 0"),
    (dict(step=1, d_model=8, warmup_steps=0), "warmup_steps must be a positive int, got 0"),
    (dict(step=1.5, d_model=8), "step must be a positive int, got 1.5"),
    (dict(step=1, d_model=8, factor=-1.0), "factor must be positive, got -1.0"),
])
def test_schedule_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        d2lh.transformer_lr(**kwargs)


# --------------------------------------------------------------------------------------------------
# The training loop
# --------------------------------------------------------------------------------------------------


def tiny_data():
    """A toy 'translation': each French sentence spells the English words in capitals, then
    repeats the first (four tokens, so that BLEU has a 4-gram to count)."""
    words = ["cat", "dog", "sun", "sea", "red", "big"]
    pairs = [(f"{a} {b} .", f"{a.upper()} {b.upper()} {a.upper()} .") for a in words for b in words]
    held_out = {"cat dog .": ["CAT DOG CAT ."], "sun sea .": ["SUN SEA SUN .", "SUN SEA !"]}
    return TranslationData(pairs, held_out, batch_size=12, num_steps=6, min_freq=1)


def test_training_learns_a_toy_translation_and_decodes_it():
    d2lh.set_seed(0)
    data = tiny_data()
    model = d2lh.Transformer(len(data.src_vocab), len(data.tgt_vocab), d_model=32, num_heads=2,
                             ffn_hidden=64, num_layers=1, dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    report = d2lh.train_seq2seq(model, data.train_loader(), num_epochs=40, optimizer=optimizer,
                                progress=False)
    assert len(report.epoch_losses) == 40
    assert report.epoch_losses[-1] < 0.1 < 2.0 < report.epoch_losses[0]
    assert report.num_tokens == 40 * int(data.tgt_valid_lens.sum()) and report.tokens_per_second > 0
    assert d2lh.translate(model, data, "Red big.") == "RED BIG RED ."  # input normalised first
    assert d2lh.translate(model, data, ["cat dog .", "sun sea ."]) == ["CAT DOG CAT .", "SUN SEA SUN ."]
    assert d2lh.held_out_bleu(model, data) == pytest.approx(100.0)
    # beam search through the same preprocessing
    assert d2lh.translate(model, data, ["Red big.", "sun sea ."], beam_size=3) == [
        "RED BIG RED .", "SUN SEA SUN ."]
    assert d2lh.held_out_bleu(model, data, beam_size=2) == pytest.approx(100.0)


def test_training_stops_at_the_time_budget():
    data = tiny_data()
    model = d2lh.Transformer(len(data.src_vocab), len(data.tgt_vocab), d_model=16, num_heads=2,
                             ffn_hidden=16, num_layers=1)
    report = d2lh.train_seq2seq(model, data.train_loader(), max_seconds=0.0, progress=False)
    assert len(report.epoch_losses) == 1 and report.num_tokens < int(data.tgt_valid_lens.sum())
    with pytest.raises(ValueError, match="num_epochs, max_seconds"):
        d2lh.train_seq2seq(model, data.train_loader())


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


def test_train_seq2seq_lr_sets_the_default_optimizers_learning_rate():
    data = tiny_copy_data()
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(d2lh.Transformer(len(data.src_vocab), len(data.tgt_vocab), d_model=8,
                                       num_heads=2, ffn_hidden=8, num_layers=1, dropout=0.0))
    d2lh.train_seq2seq(models[0], data.train_loader(), 1, lr=0.01, progress=False)
    optimizer = torch.optim.Adam(models[1].parameters(), lr=0.01, fused=True)
    d2lh.train_seq2seq(models[1], data.train_loader(), 1, optimizer=optimizer, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters()))
    with pytest.raises(ValueError, match="lr or an optimizer"):
        d2lh.train_seq2seq(models[0], data.train_loader(), 1, lr=0.01, optimizer=optimizer)


def test_train_seq2seq_trains_every_epoch_in_training_mode_even_after_an_evaluating_callback():
    data = tiny_copy_data()
    torch.manual_seed(0)
    model = d2lh.Transformer(len(data.src_vocab), len(data.tgt_vocab), d_model=8, num_heads=2,
                             ffn_hidden=8, num_layers=1, dropout=0.5)
    modes = []  # the model's mode at each forward pass
    model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    d2lh.train_seq2seq(model, data.train_loader(), 2, progress=False,
                       on_epoch_end=lambda report: model.eval())  # as held_out_bleu leaves it
    assert modes == [True] * 8  # 2 epochs of 4 updates, dropout on in both
    assert not model.training  # left in eval mode
