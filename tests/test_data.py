"""Unit tests of d2lhelpers.data, on tiny corpora written by the tests; no network is touched."""

from __future__ import annotations

import hashlib
import io
import os
import zipfile

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import d2lhelpers as d2lh
from d2lhelpers import data

PAIRS = [
    ("Go.", "Va !"),
    ("Hi.", "Salut !"),
    ("Run!", "Cours !"),
    ("Run!", "Courez !"),
    ("Wait!", "Attends !"),
    ("Wait!", "Attendez !"),
    ("I see.", "Je comprends."),
    ("I won!", "J'ai gagné !"),
    ("I'm OK.", "Je vais bien."),
    ("Go now.", "Va maintenant."),
    ("I see it.", "Je le vois."),
    ("I run now.", "Je cours maintenant."),
]


def write_corpus(path, pairs=PAIRS, trailing="\n\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{en}\t{fr}\n" for en, fr in pairs) + trailing, encoding="utf-8")
    return path


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to reach the network fails the test."""
    def refuse(url):
        raise AssertionError(f"network access attempted: {url}")
    monkeypatch.setattr(data, "_open_url", refuse)


# --- data directory and download ------------------------------------------------------------------

def test_data_dir_follows_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("D2LHELPERS_DATA_DIR", str(tmp_path / "somewhere"))
    assert data.data_dir() == tmp_path / "somewhere"
    monkeypatch.delenv("D2LHELPERS_DATA_DIR")
    monkeypatch.setattr(data.Path, "home", classmethod(lambda cls: tmp_path))
    assert data.data_dir() == tmp_path / ".cache" / "d2lhelpers"


def test_offline_copy_is_used_as_it_is_without_network(tmp_path, no_network, monkeypatch):
    path = write_corpus(tmp_path / "fra-eng" / "fra.txt")
    before = path.read_bytes()
    assert data.fra_eng_path(tmp_path) == path
    monkeypatch.setenv("D2LHELPERS_DATA_DIR", str(tmp_path))
    assert data.fra_eng_path() == path  # the default directory follows the environment
    assert path.read_bytes() == before  # not a byte changed, though its hash is not the archive's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fra-eng"]


def test_missing_file_without_download_says_where_to_put_it(tmp_path, no_network):
    with pytest.raises(FileNotFoundError, match="fra-eng") as info:
        data.fra_eng_path(tmp_path, download=False)
    assert str(tmp_path / "fra-eng" / "fra.txt") in str(info.value)


def make_archive(pairs=PAIRS) -> bytes:
    """A zip laid out like the real fra-eng.zip: fra-eng/fra.txt and fra-eng/_about.txt."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("fra-eng/_about.txt", "Tatoeba.org, CC-BY 2.0 France")
        zf.writestr("fra-eng/fra.txt", "".join(f"{en}\t{fr}\n" for en, fr in pairs))
    return buffer.getvalue()


class FakeNetwork:
    """Stands in for data._open_url: serves ``payload``, optionally failing after one chunk."""

    def __init__(self, payload: bytes, fail_after_first_chunk: BaseException | None = None):
        self.payload, self.failure, self.calls = payload, fail_after_first_chunk, []

    def __call__(self, url):
        self.calls.append(url)
        network = self

        class Response(io.BytesIO):
            def read(self, size=-1):
                if network.failure is not None and self.tell() > 0:
                    raise network.failure
                # half the payload per read, so that an interruption hits a half-written file
                return super().read(max(1, len(network.payload) // 2))

        return Response(self.payload)


def test_download_checks_the_hash_then_caches_and_reuses(tmp_path, monkeypatch):
    archive = make_archive()
    monkeypatch.setattr(data, "FRA_ENG_SHA1", hashlib.sha1(archive).hexdigest())
    network = FakeNetwork(archive)
    monkeypatch.setattr(data, "_open_url", network)
    (tmp_path / "fra-eng.zip").write_bytes(b"a damaged archive")  # fails the hash: downloaded anew

    path = data.fra_eng_path(tmp_path)
    assert path == tmp_path / "fra-eng" / "fra.txt"
    assert network.calls == [data.FRA_ENG_URL]
    assert data.read_pairs(path) == PAIRS
    assert (tmp_path / "fra-eng.zip").read_bytes() == archive
    assert not list(tmp_path.rglob("*.part"))

    assert data.fra_eng_path(tmp_path) == path  # cached: no second download
    path.unlink()  # the text file lost, the checked archive still there: extracted again, offline
    assert data.fra_eng_path(tmp_path) == path
    assert network.calls == [data.FRA_ENG_URL]


def test_checksum_mismatch_names_both_hashes_and_caches_nothing(tmp_path, monkeypatch):
    archive = make_archive()
    monkeypatch.setattr(data, "_open_url", FakeNetwork(archive))
    with pytest.raises(RuntimeError) as info:
        data.fra_eng_path(tmp_path)
    message = str(info.value)
    assert data.FRA_ENG_SHA1 in message and hashlib.sha1(archive).hexdigest() in message
    assert list(tmp_path.rglob("*")) == []  # no archive, no text file, no temporary file


@pytest.mark.parametrize("failure", [ConnectionResetError("peer reset"), KeyboardInterrupt()])
def test_interrupted_download_leaves_no_cache_entry(tmp_path, monkeypatch, failure):
    archive = make_archive()
    monkeypatch.setattr(data, "FRA_ENG_SHA1", hashlib.sha1(archive).hexdigest())
    seen_partial = []

    class Interrupted(FakeNetwork):
        def __call__(self, url):
            # the temporary file is open already
            seen_partial.append(list(tmp_path.glob(".fra-eng.zip.*.part")))
            return super().__call__(url)

    monkeypatch.setattr(data, "_open_url", Interrupted(archive, fail_after_first_chunk=failure))
    with pytest.raises(type(failure)):
        data.fra_eng_path(tmp_path)
    assert seen_partial and seen_partial[0], "the download should write to a temporary file"
    assert list(tmp_path.rglob("*")) == []
    with pytest.raises(FileNotFoundError):
        data.fra_eng_path(tmp_path, download=False)

    monkeypatch.setattr(data, "_open_url", FakeNetwork(archive))  # the next attempt succeeds
    assert data.read_pairs(data.fra_eng_path(tmp_path)) == PAIRS


# --- reading --------------------------------------------------------------------------------------

def test_read_pairs_keeps_two_fields_and_ignores_trailing_blank_lines(tmp_path):
    path = tmp_path / "pairs.txt"
    path.write_text(
        "Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272\nHi.\tSalut !\r\n\n \n",
        encoding="utf-8",
    )
    assert data.read_pairs(path) == [("Go.", "Va !"), ("Hi.", "Salut !")]
    assert data.read_pairs(write_corpus(tmp_path / "c.txt"), num_lines=3) == PAIRS[:3]


def test_malformed_line_names_file_and_line_number(tmp_path):
    path = tmp_path / "broken.txt"
    path.write_text("Go.\tVa !\nHi. Salut !\nRun!\tCours !\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.txt, line 2\b"):
        data.read_pairs(path)
    path.write_text("Go.\tVa !\n\nRun!\tCours !\n", encoding="utf-8")  # a blank line in the middle
    with pytest.raises(ValueError, match=r"broken\.txt, line 2\b"):
        data.read_pairs(path)
    with pytest.raises(ValueError, match="num_lines"):
        data.read_pairs(path, num_lines=0)


# --- normalising and tokenising -------------------------------------------------------------------

def test_normalize_and_tokenize():
    assert data.normalize("Go.") == "go ."
    assert data.normalize("J'ai gagné\u202f!") == "j'ai gagné !"
    assert data.normalize("Bonjour,\xa0Tom\u202f!") == "bonjour , tom !"
    assert data.normalize("Wait!Go?") == "wait !go ?"  # a space goes before punctuation only
    assert data.normalize("  Hi  there .  ") == "hi there ."
    assert data.normalize("...") == ". . ."
    assert data.tokenize("j'ai gagné !") == ["j'ai", "gagné", "!"]
    assert data.tokenize("") == []


@given(st.text(alphabet="aB ,.!?\xa0\u202f\t'é", max_size=30))
@settings(max_examples=200, deadline=None)
def test_normalize_is_idempotent_and_tokens_have_no_spaces(text):
    once = data.normalize(text)
    assert data.normalize(once) == once
    assert once == once.lower() and "\xa0" not in once and "\u202f" not in once
    assert all(token and " " not in token for token in data.tokenize(once))
    assert " ".join(data.tokenize(once)) == once


# --- vocabulary -----------------------------------------------------------------------------------

def test_vocab_order_unk_and_reserved():
    sentences = [["b", "a", "c"], ["a", "b"], ["d", "a", "<eos>"]]
    vocab = data.Vocab(sentences, reserved_tokens=["<pad>", "<bos>", "<eos>"])
    # <unk>, reserved in the given order, then a (3), b (2), then c and d (1 each) alphabetically;
    # "<eos>" met in the text is not added twice
    assert vocab.idx_to_token == ["<unk>", "<pad>", "<bos>", "<eos>", "a", "b", "c", "d"]
    assert len(vocab) == 8 and vocab.unk == 0
    assert vocab["a"] == 4 and vocab["never seen"] == 0
    assert vocab[["d", "zzz", "<pad>"]] == [7, 0, 1]
    assert vocab.to_tokens([4, 0, 7]) == ["a", "<unk>", "d"]
    assert vocab.to_tokens(torch.tensor([5, 6])) == ["b", "c"] and vocab.to_tokens(1) == "<pad>"
    assert data.Vocab(["x", "y", "x"]).idx_to_token == ["<unk>", "x", "y"]  # a flat token list
    assert data.Vocab(list(reversed(sentences))).idx_to_token == data.Vocab(sentences).idx_to_token
    with pytest.raises(ValueError, match="out of range"):
        vocab.to_tokens(8)


def test_vocab_min_freq():
    sentences = [["a", "b", "a"], ["a", "c", "b"]]
    assert data.Vocab(sentences, min_freq=2).idx_to_token == ["<unk>", "a", "b"]
    assert data.Vocab(sentences, min_freq=3, reserved_tokens=["<pad>"]).idx_to_token == [
        "<unk>", "<pad>", "a"]
    assert data.Vocab(sentences, min_freq=2)["c"] == 0  # rare tokens map to <unk>
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match="min_freq"):
            data.Vocab(sentences, min_freq=bad)
    with pytest.raises(ValueError, match="reserved_tokens"):
        data.Vocab(sentences, reserved_tokens=["<unk>"])
    with pytest.raises(ValueError, match="tokenize"):
        data.Vocab("a b c")


def test_truncate_pad():
    assert data.truncate_pad([5, 6, 7], 5, 1) == [5, 6, 7, 1, 1]
    assert data.truncate_pad([5, 6, 7], 2, 1) == [5, 6]
    assert data.truncate_pad([5, 6, 7], 3, 1) == [5, 6, 7]
    assert data.truncate_pad([], 2, 0) == [0, 0]
    with pytest.raises(ValueError, match="num_steps"):
        data.truncate_pad([1], 0, 0)


# --- held-out split -------------------------------------------------------------------------------

def test_split_holds_out_sources_with_all_their_translations():
    pairs = PAIRS + [("RUN !", "Fuyez !")]
    train, held_out = data.split_held_out(pairs, num_held_out=4, seed=1)
    assert len(held_out) == 4
    normalised = [(data.normalize(en), data.normalize(fr)) for en, fr in pairs]
    assert len(train) + sum(len(refs) for refs in held_out.values()) == len(normalised)
    for src, refs in held_out.items():
        assert refs == [fr for en, fr in normalised if en == src]  # all of them, in order
    assert not {src for src, _ in train} & set(held_out)
    if "run !" in held_out:  # "Run!" and "RUN !" are one source sentence once normalised
        assert held_out["run !"] == ["cours !", "courez !", "fuyez !"]
    assert data.split_held_out(PAIRS, 4, seed=1) == data.split_held_out(PAIRS, 4, seed=1)
    assert len({frozenset(data.split_held_out(PAIRS, 4, seed=s)[1]) for s in range(10)}) > 1
    with pytest.raises(ValueError, match="num_held_out"):
        data.split_held_out(PAIRS, 11)  # only 10 distinct sources


@given(
    st.lists(st.tuples(st.sampled_from(["a.", "A.", "b!", "b !", "c", "c d", "e?"]),
                       st.sampled_from(["x", "y", "z ."])), min_size=1, max_size=25),
    st.integers(0, 10), st.integers(0, 3),
)
@settings(max_examples=150, deadline=None)
def test_split_never_leaks_a_held_out_source_into_training(pairs, num_held_out, seed):
    num_sources = len({data.normalize(en) for en, _ in pairs})
    num_held_out = min(num_held_out, num_sources)
    train, held_out = data.split_held_out(pairs, num_held_out, seed=seed)
    assert len(held_out) == num_held_out
    assert all(src not in held_out for src, _ in train)
    assert all(refs and len(set(refs)) == len(refs) for refs in held_out.values())
    assert len(train) + sum(1 for en, _ in pairs if data.normalize(en) in held_out) == len(pairs)


# --- tensors and batches --------------------------------------------------------------------------

def test_translation_data_batches(tmp_path, no_network):
    path = write_corpus(tmp_path / "fra.txt")
    d = data.load_translation_data(batch_size=4, num_steps=4, num_lines=None, num_held_out=2,
                                   min_freq=1, seed=0, path=path)
    assert len(d) + sum(len(r) for r in d.held_out.values()) == len(PAIRS) and len(d.held_out) == 2
    pad, bos, eos = (d.tgt_vocab[t] for t in ("<pad>", "<bos>", "<eos>"))
    assert (pad, bos, eos) == (1, 2, 3) and d.src_vocab["<eos>"] == 3

    batches = list(d.train_loader())
    assert sum(len(b[0]) for b in batches) == len(d)
    src, src_valid_lens, dec_input, tgt, tgt_valid_lens = batches[0]
    assert src.shape == dec_input.shape == tgt.shape == (4, 4)
    assert src_valid_lens.shape == tgt_valid_lens.shape == (4,)
    assert all(t.dtype == torch.long for t in batches[0])
    for x, valid_len in ((src, src_valid_lens), (tgt, tgt_valid_lens)):
        assert torch.equal(valid_len, (x != pad).sum(dim=1))
        positions = torch.arange(4)[None, :]
        # padding only after the valid part
        assert torch.equal(x == pad, positions >= valid_len[:, None])
    assert torch.equal(dec_input[:, 0], torch.full((4,), bos))  # teacher forcing: <bos>, then ...
    assert torch.equal(dec_input[:, 1:], tgt[:, :-1])  # ... the target shifted right by one step

    # row by row: tokens, then <eos>, then padding, or cut at num_steps (losing the <eos>)
    for i, (en, fr) in enumerate(d.train_pairs):
        for sentence, vocab, x, valid_len in ((en, d.src_vocab, d.src, d.src_valid_lens),
                                              (fr, d.tgt_vocab, d.tgt, d.tgt_valid_lens)):
            expected = (vocab[data.tokenize(sentence)] + [eos])[:4]
            assert x[i, :valid_len[i]].tolist() == expected and valid_len[i] == len(expected)
    assert d.tgt_valid_lens.max() == 4 and (d.tgt == eos).sum() < len(d)  # some targets were cut

    # the loader is shuffled, reproducibly
    orders = [torch.cat([b[0] for b in d.train_loader()]) for _ in range(2)]
    assert torch.equal(orders[0], orders[1]) and not torch.equal(orders[0], d.src)
    assert torch.equal(torch.cat([b[0] for b in d.train_loader(shuffle=False)]), d.src)


def bucketing_data(seed=0):
    """Pairs of many lengths (1 to 8 source words, 1 to 9 target words), some cut at num_steps."""
    words = ["go", "run", "see", "win", "wait", "now", "it", "home"]
    pairs = [(" ".join(words[i % 8:i % 8 + 1 + i % 7] + ["."]),
              " ".join(["je"] + words[:1 + (5 * i) % 9]) + " !") for i in range(40)]
    return data.TranslationData(pairs, batch_size=6, num_steps=8, min_freq=1, seed=seed)


def rows_of(batches):
    """Every row of the batches as its valid source and target tokens, in order of appearance."""
    return [(tuple(b.src[i, :b.src_valid_lens[i]].tolist()), tuple(b.tgt[i, :b.tgt_valid_lens[i]].tolist()))
            for b in batches for i in range(len(b.src))]


def test_bucketed_batches_hold_every_pair_once_per_epoch_trimmed_to_their_longest_row():
    d = bucketing_data()
    all_rows = sorted(rows_of([data.Batch(d.src, d.src_valid_lens, d.dec_input, d.tgt, d.tgt_valid_lens)]))
    loader = d.train_loader(bucket=True)
    assert len(loader) == 7  # 40 pairs in batches of 6
    for _ in range(3):  # three epochs
        batches = list(loader)
        assert len(batches) == 7 and sorted(rows_of(batches)) == all_rows
        for b in batches:
            T_src, T_tgt = int(b.src_valid_lens.max()), int(b.tgt_valid_lens.max())
            assert b.src.shape == (len(b.src), T_src) and T_src <= d.num_steps
            assert b.tgt.shape == b.dec_input.shape == (len(b.src), T_tgt) and T_tgt <= d.num_steps
            assert torch.equal(b.dec_input[:, 1:], b.tgt[:, :-1])  # still shifted by one step
            assert (b.dec_input[:, 0] == d.tgt_vocab.bos).all()
        # neighbours by length: the (target, source) lengths of two batches never interleave
        keys = [sorted(zip(b.tgt_valid_lens.tolist(), b.src_valid_lens.tolist())) for b in batches]
        spans = sorted((k[0], k[-1]) for k in keys)
        assert all(high <= next_low for (_, high), (next_low, _) in zip(spans, spans[1:]))
    assert max(len(set(b.tgt_valid_lens.tolist())) for b in batches) < len(set(d.tgt_valid_lens.tolist()))


def test_bucketed_order_repeats_with_the_seed_and_changes_every_epoch():
    def epochs(seed, n=3):
        loader = bucketing_data(seed).train_loader(bucket=True)
        return [rows_of(loader) for _ in range(n)]

    first = epochs(seed=0)
    assert first == epochs(seed=0)  # the same sequence of epochs on every run
    assert first[0] != first[1] != first[2] and first[0] != first[2]  # a new order each epoch
    assert first != epochs(seed=1)
    # which pairs share a batch changes too, not only the order of the batches
    loader = bucketing_data().train_loader(bucket=True)
    compositions = [{frozenset(rows_of([b])) for b in loader} for _ in range(2)]
    assert compositions[0] != compositions[1]
    # without shuffling: short pairs first, the same every time
    fixed = bucketing_data().train_loader(bucket=True, shuffle=False)
    lengths = [(int(t), int(s)) for b in fixed for t, s in zip(b.tgt_valid_lens, b.src_valid_lens)]
    assert lengths == sorted(lengths) and rows_of(fixed) == rows_of(fixed)


def test_unbucketed_batches_keep_their_full_width():
    d = bucketing_data()
    assert all(b.src.shape[1] == b.tgt.shape[1] == d.num_steps for b in d.train_loader())
    assert torch.equal(torch.cat([b.src for b in d.train_loader(shuffle=False)]), d.src)


@pytest.mark.parametrize("kwargs, message", [
    (dict(bucket="yes"), "bucket must be True or False, got 'yes'"),
    (dict(bucket=1), "bucket must be True or False, got 1"),
    (dict(batch_size=0), "batch_size must be a positive int, got 0"),
    (dict(batch_size=2.5), "batch_size must be a positive int, got 2.5"),
])
def test_train_loader_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        bucketing_data().train_loader(**kwargs)


def test_trimmed_batch_drops_only_columns_of_padding():
    d = bucketing_data()
    full = data.Batch(d.src[:5], d.src_valid_lens[:5], d.dec_input[:5], d.tgt[:5], d.tgt_valid_lens[:5])
    trimmed = full.trimmed()
    T_src, T_tgt = trimmed.src.shape[1], trimmed.tgt.shape[1]
    assert (T_src, T_tgt) == (int(full.src_valid_lens.max()), int(full.tgt_valid_lens.max()))
    assert (full.src[:, T_src:] == d.src_vocab.pad).all() and (full.tgt[:, T_tgt:] == d.tgt_vocab.pad).all()
    assert torch.equal(trimmed.src, full.src[:, :T_src]) and torch.equal(trimmed.tgt, full.tgt[:, :T_tgt])
    assert torch.equal(trimmed.dec_input, full.dec_input[:, :T_tgt])
    assert all(torch.equal(a, b) for a, b in zip(trimmed.trimmed(), trimmed))  # idempotent


def test_vocabularies_come_from_training_pairs_only(tmp_path):
    pairs = PAIRS + [("Zebra.", "Zèbre.")]
    for seed in range(30):  # find a seed that holds "zebra ." out
        train, held_out = data.split_held_out(pairs, 3, seed=seed)
        if "zebra ." in held_out:
            break
    d = data.TranslationData(train, held_out, batch_size=2, num_steps=5, min_freq=1, seed=seed)
    assert "zebra" not in d.src_vocab and "zèbre" not in d.tgt_vocab
    src, valid_len = d.encode_source("Zebra.")
    assert src.shape == (1, 5) and valid_len.tolist() == [3]
    assert src[0].tolist() == [d.src_vocab.unk, d.src_vocab["."], d.src_vocab["<eos>"], 1, 1]
    src, valid_len = d.encode_source(["Go.", "I see it now."])
    assert src.shape == (2, 5) and valid_len.tolist() == [3, 5]


def test_decode_target_stops_at_eos():
    d = data.TranslationData([(data.normalize(en), data.normalize(fr)) for en, fr in PAIRS],
                             num_steps=6, min_freq=1)
    v = d.tgt_vocab
    assert d.decode_target([v["<bos>"], v["va"], v["!"], v["<eos>"], v["je"], v["<pad>"]]) == "va !"
    assert d.decode_target(torch.tensor(v[["je", "comprends", "."]])) == "je comprends ."
    assert "TranslationData(" in repr(d)
    with pytest.raises(ValueError, match="num_steps"):
        data.TranslationData(d.train_pairs, num_steps=1)
    with pytest.raises(ValueError, match="train_pairs"):
        data.TranslationData([])


def test_public_names_are_exported():
    for name in data.__all__:
        assert getattr(d2lh, name) is getattr(data, name)


def test_documented_numbers_of_the_head_file():
    """The numbers data.py's docstring states for CI's copy of the first lines of the real file."""
    path = data.data_dir() / "fra-eng" / "fra.txt"
    if not path.is_file() or os.path.getsize(path) != 487_131:
        pytest.skip(f"CI's copy of fra-head.txt is not at {path}")
    d = data.load_translation_data(download=False)
    refs = [len(r) for r in d.held_out.values()]
    assert (len(d), len(d.held_out), sum(refs), max(refs)) == (9152, 500, 842, 12)
    assert (len(d.src_vocab), len(d.tgt_vocab)) == (1423, 2093)
    num_truncated = [sum(len(data.tokenize(s)) + 1 > 10 for s in column)
                     for column in zip(*d.train_pairs, strict=True)]
    assert num_truncated == [0, 5]
    assert d.src.shape == d.tgt.shape == (9152, 10)


def test_normalize_turns_the_typographic_apostrophe_into_the_plain_one():
    # some French references write j’ai, others j'ai: one spelling, so that BLEU matches them
    assert d2lh.normalize("J\u2019ai faim.") == d2lh.normalize("J'ai faim.") == "j'ai faim ."
