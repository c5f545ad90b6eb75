"""The English-French translation data: download and cache, read, normalise, vocabularies, batches.

Plain Python and PyTorch, no text library. The pipeline, in the order a notebook uses it::

    path = fra_eng_path()                      # explicit download, once; afterwards the cache
    pairs = read_pairs(path, num_lines=10_000) # [("Go.", "Va !"), ...]
    train, held_out = split_held_out([(normalize(en), normalize(fr)) for en, fr in pairs], 500)
    src_vocab = Vocab([tokenize(en) for en, _ in train], min_freq=2,
                      reserved_tokens=["<pad>", "<bos>", "<eos>"])
    ...

or all of it at once: ``data = load_translation_data()``, then
``for batch in data.train_loader(): ...``.

Shape legend: B batch, T time steps (``num_steps``: every sequence is truncated or padded to T).

Data: the sentence pairs of the Tatoeba project (CC-BY 2.0 France, Tatoeba.org and its
contributors, via www.manythings.org/anki), as packaged by *Dive into Deep Learning*
(``fra-eng.zip``). The archive is downloaded once into :func:`data_dir`, checked against its SHA-1
and written atomically; a copy of ``fra.txt`` placed there by hand (CI does so, with the first lines
of the real file) is used as it is.

What the defaults give on the copy CI uses (the first 13,718 lines of the real file, identical to
them but for no-break spaces; ``load_translation_data()`` reads the first 10,000 of them): 9,152
training pairs; 500 held-out English sentences with 842 French references (1 to 12 each, 1.68 on
average); a source vocabulary of 1,423 and a target vocabulary of 2,093 entries (``min_freq=2``,
counting ``<unk>``, ``<pad>``, ``<bos>``, ``<eos>``), so that 1.4% of the source and 4.7% of the
target tokens of the training pairs are ``<unk>``. The longest sentences have 6 source and 11 target
tokens: at ``num_steps=10`` no source sentence and 5 target sentences (0.05%) are truncated (lose at
least their ``<eos>``); at ``num_steps=8``, 0.8% would be.
"""

from __future__ import annotations

import collections
import hashlib
import os
import random
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from typing import NamedTuple

import torch

from .basics import check_int, offset_seed

__all__ = [
    "data_dir",
    "FRA_ENG_URL",
    "FRA_ENG_SHA1",
    "fra_eng_path",
    "read_pairs",
    "normalize",
    "tokenize",
    "Vocab",
    "truncate_pad",
    "split_held_out",
    "Batch",
    "TranslationData",
    "load_translation_data",
]

FRA_ENG_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
FRA_ENG_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

# --------------------------------------------------------------------------------------------------
# Download and cache
# --------------------------------------------------------------------------------------------------


def data_dir() -> Path:
    """The cache directory: ``$D2LHELPERS_DATA_DIR`` if set, else ``~/.cache/d2lhelpers``."""
    env = os.environ.get("D2LHELPERS_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "d2lhelpers"


def _open_url(url: str):
    """The one place that touches the network (tests replace it). Returns a readable response."""
    return urllib.request.urlopen(url, timeout=60)  # noqa: S310 (a fixed http(s) address)


def _remove_quietly(path) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _digest_of_file(path: Path, algorithm: str = "sha1") -> str:
    """The hex digest of a file, read in 1 MiB chunks (``algorithm``: a name hashlib knows)."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _download(url: str, sha1: str, dest: Path) -> Path:
    """Download ``url`` to ``dest``, atomically, after checking its SHA-1.

    The bytes go to a temporary file beside ``dest``, which replaces ``dest`` only once the whole
    download has arrived and its hash matches. On any failure (network error, interruption, hash
    mismatch) the temporary file is removed and nothing counts as cached.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        digest = hashlib.sha1()
        with os.fdopen(fd, "wb") as f, _open_url(url) as response:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                f.write(chunk)
        if digest.hexdigest() != sha1:
            raise RuntimeError(
                f"SHA-1 mismatch for {url}: expected {sha1}, got {digest.hexdigest()}. Nothing was "
                f"cached. Try again later, or place the file at {dest} by hand."
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a cache is readable like any download
        os.replace(tmp, dest)
    except BaseException:
        _remove_quietly(tmp)
        raise
    return dest


def _extract_member(archive: Path, basename: str, dest: Path) -> Path:
    """Extract the member of ``archive`` whose file name is ``basename`` to ``dest``, atomically."""
    with zipfile.ZipFile(archive) as zf:
        members = [m for m in zf.namelist() if m.rsplit("/", 1)[-1] == basename]
        if not members:
            raise RuntimeError(f"{archive} holds no {basename!r}; its members: {zf.namelist()}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out, zf.open(members[0]) as src:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
            os.chmod(tmp, 0o644)
            os.replace(tmp, dest)
        except BaseException:
            _remove_quietly(tmp)
            raise
    return dest


def fra_eng_path(directory=None, download: bool = True) -> Path:
    """Path of the English-French pairs ``<directory>/fra-eng/fra.txt``, downloading them if needed.

    directory: the cache directory, :func:`data_dir` by default.
    If the file exists it is used as it is (an offline copy placed by hand, or an earlier download).
    Otherwise, with ``download=True``, the archive ``fra-eng.zip`` is fetched from
    :data:`FRA_ENG_URL`, checked against :data:`FRA_ENG_SHA1` (a mismatch raises ``RuntimeError``
    naming both hashes and caches nothing), kept as ``<directory>/fra-eng.zip``, and ``fra.txt`` is
    extracted from it. Both files are written to a temporary file first and renamed into place, so
    an interrupted download never leaves a cache entry. With ``download=False`` a missing file
    raises ``FileNotFoundError`` saying where to put it.
    """
    directory = data_dir() if directory is None else Path(directory).expanduser()
    path = directory / "fra-eng" / "fra.txt"
    if path.is_file():
        return path
    if not download:
        raise FileNotFoundError(
            f"No English-French data at {path}. Place fra.txt (tab-separated English-French pairs, "
            f"e.g. extracted from {FRA_ENG_URL}) there, or call fra_eng_path(download=True)."
        )
    archive = directory / "fra-eng.zip"
    if not (archive.is_file() and _digest_of_file(archive) == FRA_ENG_SHA1):
        _download(FRA_ENG_URL, FRA_ENG_SHA1, archive)
    return _extract_member(archive, "fra.txt", path)


# --------------------------------------------------------------------------------------------------
# Reading and normalising
# --------------------------------------------------------------------------------------------------


def read_pairs(path, num_lines: int | None = None) -> list[tuple[str, str]]:
    """Read ``English<TAB>French`` lines into a list of ``(english, french)`` pairs.

    num_lines: read only the first ``num_lines`` pairs (all of them if ``None``).
    Some versions of the Tatoeba/manythings file carry further tab-separated columns (attribution);
    only the first two fields are kept. Blank lines at the end of the file are ignored; any other
    line without a tab raises ``ValueError`` naming the file and the line number (counted from 1).
    """
    if num_lines is not None:
        check_int(num_lines, "num_lines")
    path = Path(path)
    pairs: list[tuple[str, str]] = []
    blank_lines: list[int] = []  # blank lines seen since the last pair: fine only at the end
    with open(path, encoding="utf-8-sig") as f:
        for line_number, line in enumerate(f, start=1):
            if num_lines is not None and len(pairs) >= num_lines:
                break
            line = line.rstrip("\r\n")
            if not line.strip():
                blank_lines.append(line_number)
                continue
            if blank_lines:
                raise ValueError(
                    f"{path}, line {blank_lines[0]}: blank line before the end of the file"
                )
            fields = line.split("\t")
            if len(fields) < 2:
                raise ValueError(
                    f"{path}, line {line_number}: expected 'English<TAB>French', found no tab in "
                    f"{line[:60]!r}"
                )
            pairs.append((fields[0], fields[1]))
    return pairs


def normalize(text: str) -> str:
    """Normalise a sentence for tokenisation.

    Replaces no-break spaces (U+00A0, U+202F) by spaces and the typographic apostrophe (U+2019,
    which some French references use) by ``'``, collapses runs of white space into one space and
    strips the ends, lower-cases, and inserts a space before ``, . ! ?`` when no space precedes it:
    ``"Go.\u202fNow!"`` -> ``"go . now !"``, ``"J\u2019ai"`` -> ``"j'ai"``. Applying it twice changes
    nothing.
    """
    text = text.replace("\u202f", " ").replace("\xa0", " ").replace("\u2019", "'")
    text = " ".join(text.split()).lower()
    out = [
        " " + char if i > 0 and char in ",.!?" and text[i - 1] != " " else char
        for i, char in enumerate(text)
    ]
    return "".join(out)


def tokenize(text: str) -> list[str]:
    """Split a normalised sentence on spaces: ``"go ."`` -> ``["go", "."]`` (no empty tokens)."""
    return [token for token in text.split(" ") if token]


# --------------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------------


class Vocab:
    """A vocabulary: token <-> index.

    tokens_or_sentences: a list of tokens, or a list of sentences (each a list of tokens).
    min_freq: tokens seen fewer times are left out (they map to ``<unk>``); a non-negative int.
    reserved_tokens: e.g. ``["<pad>", "<bos>", "<eos>"]``, kept whatever their frequency.

    Order of indices: ``<unk>`` is always 0, then the reserved tokens in the order given, then the
    other tokens by decreasing frequency, ties broken alphabetically (a deterministic order).

    >>> vocab = Vocab([["a", "b", "a"]], reserved_tokens=["<pad>"])
    >>> vocab.idx_to_token
    ['<unk>', '<pad>', 'a', 'b']
    >>> vocab[["a", "zzz"]]
    [2, 0]
    """

    def __init__(self, tokens_or_sentences: Iterable = (), min_freq: int = 1,
                 reserved_tokens: Sequence[str] = ()) -> None:
        check_int(min_freq, "min_freq", minimum=0)
        if isinstance(tokens_or_sentences, str):
            raise ValueError(
                "tokens_or_sentences must be a list of tokens or of token lists, got a single "
                f"string {tokens_or_sentences[:40]!r}; tokenize it first"
            )
        reserved_tokens = list(reserved_tokens)
        if len(set(reserved_tokens)) != len(reserved_tokens) or UNK in reserved_tokens:
            raise ValueError(
                f"reserved_tokens must be distinct and must not hold {UNK!r} (always index 0), "
                f"got {reserved_tokens}"
            )
        counter: collections.Counter = collections.Counter()
        for item in tokens_or_sentences:
            if isinstance(item, str):
                counter[item] += 1
            else:
                counter.update(item)
        self.token_freqs = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
        special = {UNK, *reserved_tokens}
        self.idx_to_token = [UNK, *reserved_tokens] + [
            token for token, freq in self.token_freqs if freq >= min_freq and token not in special
        ]
        self.token_to_idx = {token: idx for idx, token in enumerate(self.idx_to_token)}

    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __contains__(self, token) -> bool:
        return token in self.token_to_idx

    def __getitem__(self, tokens):
        """Index of a token (``<unk>``'s for an unknown one), or a list of indices for a list."""
        if isinstance(tokens, (list, tuple)):
            return [self[token] for token in tokens]
        return self.token_to_idx.get(tokens, self.unk)

    def to_tokens(self, indices):
        """Token of an index, or a list of tokens for a list (or 1-d tensor) of indices."""
        if isinstance(indices, torch.Tensor):
            indices = indices.tolist()
        if isinstance(indices, (list, tuple)):
            return [self.to_tokens(index) for index in indices]
        if not 0 <= indices < len(self):
            raise ValueError(f"index {indices} out of range for a vocabulary of size {len(self)}")
        return self.idx_to_token[indices]

    @property
    def unk(self) -> int:
        """Index of ``<unk>``: 0."""
        return 0

    def _reserved(self, token: str) -> int:
        if token not in self.token_to_idx:
            raise ValueError(f"this vocabulary has no {token!r}: give it in reserved_tokens")
        return self.token_to_idx[token]

    @property
    def pad(self) -> int:
        """Index of ``<pad>``, which fills sequences up to a common length."""
        return self._reserved(PAD)

    @property
    def bos(self) -> int:
        """Index of ``<bos>``, the decoder's first input."""
        return self._reserved(BOS)

    @property
    def eos(self) -> int:
        """Index of ``<eos>``, which ends every sentence."""
        return self._reserved(EOS)

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, first={self.idx_to_token[:8]})"


def truncate_pad(indices: Sequence[int], num_steps: int, pad_index: int) -> list[int]:
    """``indices`` cut to ``num_steps`` items, or padded to that length with ``pad_index``."""
    check_int(num_steps, "num_steps")
    indices = list(indices[:num_steps])
    return indices + [pad_index] * (num_steps - len(indices))


# --------------------------------------------------------------------------------------------------
# Held-out split
# --------------------------------------------------------------------------------------------------


def split_held_out(pairs: Sequence[tuple[str, str]], num_held_out: int, seed: int = 0):
    """Hold out ``num_held_out`` distinct source sentences, with ALL their translations.

    pairs: ``(source, target)`` sentences, raw or normalised (they are normalised here).
    Returns ``(train_pairs, held_out)``: ``train_pairs`` the normalised pairs whose source was not
    held out, in their original order; ``held_out`` a dict mapping each held-out normalised source
    to the list of its distinct normalised reference translations (in order of appearance). No
    held-out source appears in ``train_pairs``, with any translation. The choice depends only on
    ``seed`` and the pairs.
    """
    check_int(num_held_out, "num_held_out", minimum=0)
    normalised = [(normalize(src), normalize(tgt)) for src, tgt in pairs]
    sources = list(dict.fromkeys(src for src, _ in normalised))  # distinct, in order of appearance
    if num_held_out > len(sources):
        raise ValueError(
            f"num_held_out={num_held_out} exceeds the {len(sources)} distinct source sentences"
        )
    chosen = set(random.Random(seed).sample(sources, num_held_out))
    held_out: dict[str, list[str]] = {src: [] for src in sources if src in chosen}
    train_pairs = []
    for src, tgt in normalised:
        if src in chosen:
            if tgt not in held_out[src]:
                held_out[src].append(tgt)
        else:
            train_pairs.append((src, tgt))
    return train_pairs, held_out


# --------------------------------------------------------------------------------------------------
# Tensors and batches
# --------------------------------------------------------------------------------------------------


class Batch(NamedTuple):
    """A batch of sentence pairs for teacher forcing; shapes (B, T), (B,), (B, T), (B, T), (B,).

    src: source indices; src_valid_lens: their non-pad counts; dec_input: the decoder's input,
    ``<bos>`` then the target shifted right; tgt: the target indices to predict; tgt_valid_lens:
    their non-pad counts."""

    src: torch.Tensor
    src_valid_lens: torch.Tensor
    dec_input: torch.Tensor
    tgt: torch.Tensor
    tgt_valid_lens: torch.Tensor

    def to(self, device) -> Batch:
        """The same batch on ``device``."""
        return Batch(*(t.to(device) for t in self))

    def trimmed(self) -> Batch:
        """The same batch without the columns that are padding in every row: ``src`` cut to its
        longest source, ``dec_input`` and ``tgt`` to their longest target, shapes (B, T_src), (B,),
        (B, T_tgt), (B, T_tgt), (B,). The models and the masked loss give the rows the same
        outputs and losses (padding is masked; the decoder is causal), at less cost."""
        T_src, T_tgt = int(self.src_valid_lens.max()), int(self.tgt_valid_lens.max())
        return Batch(self.src[:, :T_src], self.src_valid_lens, self.dec_input[:, :T_tgt],
                     self.tgt[:, :T_tgt], self.tgt_valid_lens)


class BatchLoader:
    """Iterates over rows of the given tensors in batches of :class:`Batch`, in a new random order
    each time it is iterated (each epoch) when ``shuffle``; the orders repeat from run to run,
    being drawn from a generator seeded once with ``seed``.

    With ``lengths`` (N,), the batches are bucketed by length: each epoch the rows are shuffled,
    then sorted by ``lengths`` (a stable sort, so rows of equal length stay in random order), cut
    into batches of neighbours, and the batches are shuffled. Each batch is then
    :meth:`Batch.trimmed` to its longest row, so that it carries little padding.
    """

    def __init__(self, tensors: Sequence[torch.Tensor], batch_size: int, shuffle: bool, seed: int,
                 lengths: torch.Tensor | None = None):
        self.tensors, self.batch_size, self.shuffle = tensors, batch_size, shuffle
        self.lengths = lengths
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        """Number of batches per epoch (the last one may be smaller)."""
        return -(-len(self.tensors[0]) // self.batch_size)

    def _shuffled(self, n: int) -> torch.Tensor:
        return torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)

    def __iter__(self):
        order = self._shuffled(len(self.tensors[0]))
        if self.lengths is None:
            for rows in order.split(self.batch_size):
                yield Batch(*(t[rows] for t in self.tensors))
            return
        order = order[torch.sort(self.lengths[order], stable=True).indices]  # short rows first
        batches = order.split(self.batch_size)
        for i in self._shuffled(len(batches)):
            yield Batch(*(t[batches[i]] for t in self.tensors)).trimmed()


class TranslationData:
    """Training pairs as tensors, their vocabularies, and the held-out sentences.

    Built from normalised ``train_pairs`` (see :func:`load_translation_data`). The vocabularies come
    from the training pairs only, with reserved tokens ``<pad>``, ``<bos>``, ``<eos>``. Every
    sentence is tensorised once, here:

    - ``src``: (N, T) source indices, ``<eos>`` appended, then truncated or padded to T = num_steps;
    - ``src_valid_lens``: (N,) number of non-pad tokens of each row of ``src`` (``<eos>`` included);
    - ``tgt``: (N, T) target indices, built the same way; ``tgt_valid_lens``: (N,);
    - ``dec_input``: (N, T) the decoder's input for teacher forcing: ``<bos>`` then ``tgt[:, :-1]``.

    A sentence longer than T - 1 tokens loses its ``<eos>`` (and tokens past T).
    ``held_out`` maps each held-out normalised source sentence to its list of references.
    """

    def __init__(self, train_pairs: Sequence[tuple[str, str]],
                 held_out: dict[str, list[str]] | None = None, *, batch_size: int = 128,
                 num_steps: int = 10, min_freq: int = 2, seed: int = 0) -> None:
        check_int(batch_size, "batch_size")
        check_int(num_steps, "num_steps", minimum=2)
        if not train_pairs:
            raise ValueError("train_pairs is empty")
        self.train_pairs = list(train_pairs)
        self.held_out = dict(held_out or {})
        self.batch_size, self.num_steps, self.seed = batch_size, num_steps, seed
        src_sentences = [tokenize(src) for src, _ in self.train_pairs]
        tgt_sentences = [tokenize(tgt) for _, tgt in self.train_pairs]
        reserved = [PAD, BOS, EOS]
        self.src_vocab = Vocab(src_sentences, min_freq=min_freq, reserved_tokens=reserved)
        self.tgt_vocab = Vocab(tgt_sentences, min_freq=min_freq, reserved_tokens=reserved)
        self.src, self.src_valid_lens = self._tensorise(src_sentences, self.src_vocab)
        self.tgt, self.tgt_valid_lens = self._tensorise(tgt_sentences, self.tgt_vocab)
        bos = torch.full((len(self.tgt), 1), self.tgt_vocab.bos, dtype=torch.long)
        self.dec_input = torch.cat([bos, self.tgt[:, :-1]], dim=1)  # shift right by one step

    def _tensorise(self, sentences: list[list[str]], vocab: Vocab):
        """(N, T) indices with ``<eos>`` appended then truncated/padded, and (N,) valid lengths."""
        pad, eos, index = vocab.pad, vocab.eos, vocab.token_to_idx.get
        rows = [
            truncate_pad([index(token, vocab.unk) for token in tokens] + [eos], self.num_steps, pad)
            for tokens in sentences
        ]
        array = torch.tensor(rows, dtype=torch.long).reshape(len(rows), self.num_steps)
        return array, (array != pad).sum(dim=1)

    def __len__(self) -> int:
        """Number of training pairs."""
        return len(self.train_pairs)

    def train_loader(self, batch_size: int | None = None, shuffle: bool = True,
                     bucket: bool = False) -> BatchLoader:
        """The training pairs in batches of ``batch_size`` (default ``self.batch_size``), each a
        :class:`Batch` with shapes (B, T), (B,), (B, T), (B, T), (B,).

        Shuffled, each epoch in a new order, by a generator seeded with ``self.seed`` (plus the
        seed offset of a robustness run, see :func:`~d2lhelpers.basics.offset_seed`): the sequence
        of epochs is the same on every run.

        With ``bucket``, each batch holds pairs of similar lengths (sorted by target length, then
        source length; pairs of equal lengths are drawn at random) and is trimmed to its longest
        source and target: shapes (B, T_src), (B,), (B, T_tgt), (B, T_tgt), (B,) with T_src,
        T_tgt <= T, so padding costs little. Every pair still comes once per epoch, and the order
        of the batches is shuffled each epoch.
        """
        if batch_size is not None:
            check_int(batch_size, "batch_size")
        if not isinstance(bucket, bool):
            raise ValueError(f"bucket must be True or False, got {bucket!r}")
        # lexicographic (target length, source length) as one integer
        lengths = self.tgt_valid_lens * (self.num_steps + 1) + self.src_valid_lens if bucket else None
        return BatchLoader([self.src, self.src_valid_lens, self.dec_input, self.tgt, self.tgt_valid_lens],
                           batch_size or self.batch_size, shuffle, offset_seed(self.seed), lengths)

    def encode_source(self, sentences):
        """Source tensor and valid lengths for one sentence (a str) or a list of sentences.

        Each sentence is normalised, tokenised, given its ``<eos>`` and truncated/padded to T.
        Returns ``(src, src_valid_lens)`` of shapes (N, T) and (N,), N = 1 for a single sentence.
        """
        if isinstance(sentences, str):
            sentences = [sentences]
        return self._tensorise([tokenize(normalize(s)) for s in sentences], self.src_vocab)

    def decode_target(self, indices) -> str:
        """Target indices (a list or 1-d tensor) -> sentence.

        Stops at the first ``<eos>`` and leaves out ``<bos>`` and ``<pad>``.
        """
        if isinstance(indices, int):
            indices = [indices]
        tokens = []
        for token in self.tgt_vocab.to_tokens(indices):
            if token == EOS:
                break
            if token not in (BOS, PAD):
                tokens.append(token)
        return " ".join(tokens)

    def __repr__(self) -> str:
        return (
            f"TranslationData({len(self)} training pairs, {len(self.held_out)} held-out sources, "
            f"src_vocab={len(self.src_vocab)}, tgt_vocab={len(self.tgt_vocab)}, "
            f"num_steps={self.num_steps}, batch_size={self.batch_size})"
        )


def load_translation_data(batch_size: int = 128, num_steps: int = 10,
                          num_lines: int | None = 10_000, num_held_out: int = 500,
                          min_freq: int = 2, seed: int = 0, directory=None, path=None,
                          download: bool = True) -> TranslationData:
    """Read, normalise and split the English-French pairs; return a :class:`TranslationData`.

    Reads the first ``num_lines`` pairs of ``path`` (by default :func:`fra_eng_path` of
    ``directory``, which downloads the data once if it is not in the cache and ``download`` is
    true), normalises them, holds out ``num_held_out`` source sentences with all their translations
    (:func:`split_held_out`, seeded with ``seed``), and builds vocabularies and tensors from the
    training pairs only. See the module's docstring for what the defaults give.
    """
    if path is None:
        path = fra_eng_path(directory, download=download)
    pairs = read_pairs(path, num_lines=num_lines)
    train_pairs, held_out = split_held_out(pairs, num_held_out, seed=seed)
    return TranslationData(train_pairs, held_out, batch_size=batch_size, num_steps=num_steps,
                           min_freq=min_freq, seed=seed)
