import pytest
import torch
from torch.nn import functional as F

import d2lhelpers as d2lh
from d2lhelpers.data import TranslationData


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


def test_masked_cross_entropy_with_label_smoothing_matches_torch():
    logits, targets = torch.randn(3, 5, 7), torch.randint(0, 7, (3, 5))
    loss = d2lh.masked_cross_entropy(logits, targets, torch.tensor([5, 5, 5]), label_smoothing=0.1)
    expected = F.cross_entropy(logits.reshape(15, 7), targets.reshape(15), label_smoothing=0.1)
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize("valid_lens, message", [
    (torch.tensor([1, 2, 3]), r"shape \(B,\)=\(2,\)"),
    (torch.tensor([1, 5]), r"values in \[0, T=4\]"),
])
def test_masked_cross_entropy_rejects_bad_valid_lens(valid_lens, message):
    with pytest.raises(ValueError, match=message):
        d2lh.masked_cross_entropy(torch.randn(2, 4, 3), torch.zeros(2, 4, dtype=torch.long), valid_lens)


def test_masked_cross_entropy_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"logits \(2, 4, 3\) and targets \(2, 5\)"):
        d2lh.masked_cross_entropy(torch.randn(2, 4, 3), torch.zeros(2, 5, dtype=torch.long), [4, 4])


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
