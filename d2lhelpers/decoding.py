"""Decoding: the loops that turn a trained model's next-token scores into sequences.

- For an encoder-decoder (translation): greedy decoding and beam search (with the key-value
  cache), scoring given outputs by teacher forcing, translating sentences, BLEU on the held-out
  sentences. They work with any model that offers, as
  :class:`~d2lhelpers.transformer.Transformer` and :class:`~d2lhelpers.rnn.BahdanauSeq2Seq` do:
  ``model(src, src_valid_lens, dec_input)`` -> logits (B, T, V) (teacher forcing);
  ``model.encoder(src, src_valid_lens)`` -> encoder outputs (the encoder checks the lengths);
  ``model.decoder.init_state(enc_outputs, src_valid_lens)`` -> a decoding state with
  ``state.reorder(rows)``; and ``model.decoder.step(tokens, state)`` -> the logits of the new
  positions, the state remembering what it has seen.
- For a decoder-only language model (:class:`~d2lhelpers.decoder_only.DecoderOnlyLM`, with
  ``init_state()`` and ``step(tokens, state)``): sampling, whose filters (temperature, top-k,
  top-p) map logits to logits and are applied in turn before one softmax
  (:func:`next_token_probs`), and :func:`generate`.

Every loop asks one object for the next token's logits, :class:`NextLogits`, which feeds the model
only the new tokens when it keeps a key-value cache, and the whole prefix again when it does not:
the loops never branch on the cache.

Shapes: B batch, T time steps, V vocabulary size, k beam size. Taught in notebooks
06_transformer (the cache), 07_translation (greedy decoding), 10_decoding (beam search, the
cache's speed-up) and 12_decoder_only_lm (sampling).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch

from .attention import sequence_mask
from .basics import check_int, check_tokens

__all__ = [
    "NextLogits",
    "greedy_decode",
    "BeamSearchResult",
    "Beams",
    "advance_beams",
    "beam_search",
    "sequence_log_prob",
    "translate",
    "held_out_bleu",
    "scale_by_temperature",
    "top_k_filter",
    "top_p_filter",
    "next_token_probs",
    "generate",
]


class NextLogits:
    """The logits of the next token after each row's tokens so far: the one step every decoding
    loop takes, with or without a key-value cache.

    ``step(new_tokens (B, T_new), state)`` -> logits (B, T_new, V) advances a decoding state;
    ``init_state()`` makes the state before any token (e.g. ``model.decoder.step`` and a function
    returning ``model.decoder.init_state(enc_outputs, src_valid_lens)``, or a language model's
    ``step`` and ``init_state``). Calling ``next_logits(tokens)`` with the tokens so far (B, T)
    returns (B, V). With ``use_cache`` only the tokens not fed before are fed, one state keeping
    the keys and values of the others; without, all T tokens are fed again to a fresh state. The
    two give the same logits (up to rounding). :meth:`reorder` keeps rows of the batch (beam search).
    """

    def __init__(self, step: Callable, init_state: Callable, use_cache: bool = True) -> None:
        self.step, self.init_state, self.use_cache = step, init_state, use_cache
        self.state = init_state() if use_cache else None
        self.num_fed = 0  # tokens of each row the cached state has seen
        self.rows = None  # without a cache: the reorders so far, composed

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.use_cache:
            new, self.num_fed = tokens[:, self.num_fed:], tokens.shape[1]
            return self.step(new, self.state)[:, -1]
        state = self.init_state()  # the whole prefix again, from the start
        if self.rows is not None:
            state.reorder(self.rows)
        return self.step(tokens, state)[:, -1]

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep the rows ``rows`` (B_new,) of the batch, in that order: row r becomes old row
        ``rows[r]`` (see the states' ``reorder``)."""
        if self.use_cache:
            self.state.reorder(rows)
        else:
            self.rows = rows if self.rows is None else self.rows[rows]


def _encoder_decoder_logits(model, src, src_valid_lens, use_cache: bool) -> NextLogits:
    """Encode ``src`` once (the encoder checks ``src`` and ``src_valid_lens``) and return the
    next-token logits of the decoder, starting from its initial state."""
    enc_outputs = model.encoder(src, src_valid_lens)
    return NextLogits(model.decoder.step,
                      lambda: model.decoder.init_state(enc_outputs, src_valid_lens), use_cache)


@torch.no_grad()
def greedy_decode(model, src, src_valid_lens, bos: int, eos: int, max_len: int,
                  use_cache: bool = True):
    """Translate a batch greedily: at each step feed back the most likely token.

    src: (B, T_src), src_valid_lens: (B,). Returns (B, T_out) predicted indices (``<bos>`` not
    included; after a sequence's ``<eos>`` its row continues with ``eos``), T_out <= max_len.
    With ``use_cache`` each step feeds only the newest token and every decoder block reuses the keys
    and values cached at earlier steps; without it, each step runs the decoder on the whole prefix.
    The two give the same tokens.
    """
    check_int(max_len, "max_len")
    model.eval()
    next_logits = _encoder_decoder_logits(model, src, src_valid_lens, use_cache)
    B = src.shape[0]
    tokens = torch.full((B, 1), bos, dtype=torch.long, device=src.device)  # starts with <bos>
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        next_token = next_logits(tokens).argmax(dim=-1)  # (B,)
        next_token = next_token.masked_fill(finished, eos)  # finished rows keep emitting <eos>
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        finished |= next_token == eos
        if finished.all():
            break
    return tokens[:, 1:]


class BeamSearchResult(NamedTuple):
    """The best hypothesis :func:`beam_search` found for each of the B source sentences.

    tokens: (B, T_out) indices, laid out as :func:`greedy_decode`'s (``<bos>`` not included; after
    a hypothesis's ``<eos>`` its row continues with ``eos``). scores: (B,) the length-normalised
    score log P / length^alpha that the search ranks by. log_probs: (B,) the total log-probability
    log P(y | x) of the hypothesis, its ``<eos>`` included. lengths: (B,) its number of tokens,
    ``<eos>`` included (T_out if it never ended).
    """

    tokens: torch.Tensor
    scores: torch.Tensor
    log_probs: torch.Tensor
    lengths: torch.Tensor


def _length_normalised(log_probs: torch.Tensor, lengths: torch.Tensor,
                       length_penalty: float) -> torch.Tensor:
    """The score beam search ranks by: log P / length^alpha, alpha = ``length_penalty``."""
    return log_probs / lengths.to(log_probs.dtype) ** length_penalty


class Beams(NamedTuple):
    """The k beams of each of B sentences during beam search, each field (B, k): the total
    log-probability of each beam (``-inf`` for a beam not started), its length in tokens
    (``<eos>`` included), and whether it has produced ``<eos>``."""

    log_probs: torch.Tensor
    lengths: torch.Tensor
    finished: torch.Tensor


def advance_beams(beams: Beams, step_log_probs: torch.Tensor, eos: int,
                  length_penalty: float = 0.6):
    """One step of beam search: extend every beam by every token and keep each sentence's k best.

    step_log_probs: (B, k, V), the log-probabilities of the next token after each beam. A finished
    beam has one continuation, itself, at no cost and with its length unchanged; an unfinished one
    grows by one token. Candidates are ranked by log P / length^alpha (alpha = ``length_penalty``).
    Returns ``(beams, parents, tokens)``: the new :class:`Beams`, best first, and for each (B, k)
    the beam it extends and the token it adds. The step that notebook 10_decoding's exercise writes.
    """
    B, k, V = step_log_probs.shape
    carry_over = torch.full_like(step_log_probs, float("-inf"))
    carry_over[..., eos] = 0.0  # a finished beam continues with <eos>, at no cost
    step_log_probs = torch.where(beams.finished[..., None], carry_over, step_log_probs)
    candidates = beams.log_probs[..., None] + step_log_probs  # (B, k, V) total log-probabilities
    lengths = torch.where(beams.finished, beams.lengths, beams.lengths + 1)  # (B, k) candidates'
    scores = _length_normalised(candidates, lengths[..., None], length_penalty)
    # each sentence's k best of its k*V candidates: candidate c is beam c // V with token c % V
    best = scores.reshape(B, k * V).topk(k, dim=-1).indices  # (B, k)
    parents, tokens = best // V, best % V
    new = Beams(candidates.reshape(B, k * V).gather(1, best), lengths.gather(1, parents),
                beams.finished.gather(1, parents) | (tokens == eos))
    return new, parents, tokens


@torch.no_grad()
def beam_search(model, src, src_valid_lens, bos: int, eos: int, max_len: int, beam_size: int = 4,
                length_penalty: float = 0.6, use_cache: bool = True) -> BeamSearchResult:
    """Translate a batch with beam search: keep the ``beam_size`` best hypotheses at every step.

    src: (B, T_src), src_valid_lens: (B,). Every sentence gets k = ``beam_size`` beams, decoded
    together as a batch of B*k rows. At each step every unfinished beam is extended by every token
    of the vocabulary (k*V candidates per sentence); a finished beam (it has produced ``<eos>``)
    stays a candidate as it is. The k candidates with the best length-normalised score

        score(y) = log P(y | x) / length(y)^alpha,   alpha = ``length_penalty``,

    survive, length(y) counting the tokens generated, ``<eos>`` included. alpha = 0 ranks by the
    total log-probability (which favours short outputs: every token lowers it); alpha = 1 by the
    mean log-probability per token. The search stops once every beam of every sentence is finished,
    or after ``max_len`` steps; each sentence then returns its best-scoring beam. With
    ``beam_size=1`` this is exactly :func:`greedy_decode`. With ``use_cache`` the decoder runs on
    the newest tokens only and its key-value caches are reordered with the surviving beams;
    without, each step recomputes the whole prefix. Returns a :class:`BeamSearchResult`.
    """
    check_int(max_len, "max_len")
    check_int(beam_size, "beam_size")
    if not 0 <= length_penalty < math.inf:
        raise ValueError(f"length_penalty must be a finite number >= 0, got {length_penalty!r}")
    model.eval()
    B, k, device = src.shape[0], beam_size, src.device
    next_logits = _encoder_decoder_logits(model, src, src_valid_lens, use_cache)
    # rows b*k .. b*k + k - 1 are the beams of sentence b: (B, ...) -> (B*k, ...)
    next_logits.reorder(torch.arange(B, device=device).repeat_interleave(k))
    tokens = torch.full((B * k, 1), bos, dtype=torch.long, device=device)  # (B*k, 1): <bos>
    # The k beams start identical; only beam 0 is live at first, so that they do not stay copies.
    log_probs = torch.full((B, k), -math.inf, device=device)
    log_probs[:, 0] = 0.0
    zeros = torch.zeros(B, k, dtype=torch.long, device=device)
    beams = Beams(log_probs, zeros, zeros.bool())
    sentence_rows = torch.arange(B, device=device)[:, None] * k  # (B, 1): each sentence's beam 0
    for _ in range(max_len):
        step_log_probs = torch.log_softmax(next_logits(tokens).float(), dim=-1)  # (B*k, V)
        beams, parents, token = advance_beams(beams, step_log_probs.unflatten(0, (B, k)), eos,
                                              length_penalty)
        rows = (sentence_rows + parents).reshape(-1)  # (B*k,) the parents' rows in the batch
        tokens = torch.cat([tokens[rows], token.reshape(-1, 1)], dim=1)  # (B*k, step + 1)
        next_logits.reorder(rows)  # each surviving beam continues from its parent's state
        if beams.finished.all():
            break
    scores = _length_normalised(beams.log_probs, beams.lengths, length_penalty)  # (B, k)
    choice = scores.argmax(dim=1)  # (B,) each sentence's best beam
    best_rows = sentence_rows.squeeze(1) + choice
    pick = choice[:, None]  # (B, 1) to gather one beam per sentence
    return BeamSearchResult(tokens[best_rows, 1:], scores.gather(1, pick).squeeze(1),
                            beams.log_probs.gather(1, pick).squeeze(1),
                            beams.lengths.gather(1, pick).squeeze(1))


@torch.no_grad()
def sequence_log_prob(model, src, src_valid_lens, tokens, bos: int, eos: int):
    """Score given outputs with teacher forcing: log P(y | x) and length of each row of ``tokens``.

    src: (B, T_src), src_valid_lens: (B,), tokens: (B, T_out) as :func:`greedy_decode` and
    :func:`beam_search` return them (no ``<bos>``). A row counts up to its first ``<eos>``,
    included (all T_out tokens if it has none). Returns ``(log_probs, lengths)``, both (B,).
    """
    check_tokens(tokens, "tokens")
    if tokens.shape[0] != check_tokens(src, "src").shape[0]:
        raise ValueError(f"tokens must have shape (B, T_out) with B={src.shape[0]} (the rows of "
                         f"src), got {tuple(tokens.shape)}")
    model.eval()
    B, T = tokens.shape
    bos_column = torch.full((B, 1), bos, dtype=torch.long, device=tokens.device)
    dec_input = torch.cat([bos_column, tokens[:, :-1]], dim=1)  # shift right: <bos> first
    log_p = torch.log_softmax(model(src, src_valid_lens, dec_input).float(), dim=-1)  # (B, T, V)
    token_log_p = log_p.gather(2, tokens[..., None]).squeeze(2)  # (B, T) of the given tokens
    is_eos = tokens == eos
    # position of the first <eos> + 1, or T when a row never ends
    lengths = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1) + 1, T)
    counted = sequence_mask(lengths, T)  # (B, T)
    return torch.where(counted, token_log_p, 0.0).sum(dim=1), lengths  # select, never multiply


def translate(model, data, sentences, max_len: int | None = None, batch_size: int = 256,
              use_cache: bool = True, beam_size: int = 1,
              length_penalty: float = 0.6) -> list[str]:
    """Translate English sentences (str or list of str); return French strings.

    Greedy decoding, or with ``beam_size`` > 1 :func:`beam_search` (``length_penalty`` being its
    alpha).
    ``data`` is the :class:`~d2lhelpers.data.TranslationData` the model was trained on (its
    vocabularies and preprocessing). ``max_len`` defaults to ``data.num_steps``.
    """
    single = isinstance(sentences, str)
    sentences = [sentences] if single else list(sentences)
    device = next(model.parameters()).device
    bos, eos = data.tgt_vocab.bos, data.tgt_vocab.eos
    out = []
    for start in range(0, len(sentences), batch_size):
        src, src_valid_lens = data.encode_source(sentences[start:start + batch_size])
        src, src_valid_lens = src.to(device), src_valid_lens.to(device)
        steps = max_len or data.num_steps
        if beam_size == 1:
            predicted = greedy_decode(model, src, src_valid_lens, bos, eos, steps, use_cache)
        else:
            predicted = beam_search(model, src, src_valid_lens, bos, eos, steps, beam_size,
                                    length_penalty, use_cache).tokens
        out.extend(data.decode_target(row.tolist()) for row in predicted)
    return out[0] if single else out


def held_out_bleu(model, data, **translate_kwargs) -> float:
    """Corpus BLEU (0-100, sacrebleu) of the translations of the held-out source sentences, each
    scored against all of its reference translations. Greedy decoding unless ``translate_kwargs``
    ask for beam search (e.g. ``beam_size=4``)."""
    from .bleu import corpus_bleu

    sources = list(data.held_out)
    if not sources:
        raise ValueError("data.held_out is empty: there are no held-out sentences to score")
    hypotheses = translate(model, data, sources, **translate_kwargs)
    return corpus_bleu(hypotheses, [data.held_out[s] for s in sources])


# --------------------------------------------------------------------------------------------------
# Sampling from a language model
# --------------------------------------------------------------------------------------------------


def _check_logits(logits) -> None:
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or not logits.is_floating_point():
        seen = (f"dtype {logits.dtype}, shape {tuple(logits.shape)}"
                if isinstance(logits, torch.Tensor) else type(logits).__name__)
        raise ValueError(f"logits must be a floating-point tensor of shape (B, V), got {seen}")


def scale_by_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits (B, V) / temperature: below 1 sharpens the distribution, above 1 flattens it.
    ``temperature=0`` is greedy: the highest logit (the first one if several tie) is kept as it is,
    every other set to -inf."""
    if (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
            or not 0 <= temperature < math.inf):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if temperature == 0:
        best = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        return torch.full_like(logits, -math.inf).scatter(-1, best, logits.gather(-1, best))
    return logits / temperature


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` highest logits of each row (ties at the k-th value all kept); set the others
    to -inf."""
    check_int(k, "top_k")
    if k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k, dim=-1).values[:, -1:]  # (B, 1): the k-th highest logit
    return logits.masked_fill(logits < kth, -math.inf)


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the nucleus of each row (Holtzman et al. 2020): the fewest most probable tokens whose
    probabilities sum to at least ``p``; set the others' logits to -inf."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        raise ValueError(f"top_p must be a number in (0, 1], got {p!r}")
    sorted_probs, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs  # probability of the tokens ahead
    keep_sorted = before < p  # the token that crosses p is the last one kept
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, -math.inf)


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None) -> torch.Tensor:
    """The distribution sampling draws the next token from: logits (B, V) -> probabilities (B, V).

    The filters in turn, :func:`scale_by_temperature`, then :func:`top_k_filter` if ``top_k`` is
    given, then :func:`top_p_filter` if ``top_p`` is given, each mapping logits to logits; then
    one softmax. Excluded tokens get probability 0, the kept ones share 1.
    """
    _check_logits(logits)
    logits = scale_by_temperature(logits, temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return torch.softmax(logits, dim=-1)


@torch.no_grad()
def generate(model, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, eos: int | None = None,
             use_cache: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
    """Continue each prompt (B, T_prompt) by up to ``max_new_tokens`` tokens; return them (B, T_new).

    Each next token is drawn from :func:`next_token_probs` (``temperature=0``: greedy; ``top_k``,
    ``top_p``), with ``generator`` (on the prompt's device) for reproducible draws. After a row's
    ``eos`` (if given) it keeps emitting ``eos``; generation stops once every row has. With
    ``use_cache`` the prompt is fed once and then only the newest token, the model's state keeping
    the keys and values of earlier positions; without it, the whole sequence is fed again at every
    step (:class:`NextLogits`). The two give the same tokens (up to the rounding of the logits).
    """
    check_int(max_new_tokens, "max_new_tokens")
    check_tokens(prompt, "prompt", getattr(model, "vocab_size", None))
    next_token_probs(torch.zeros(1, 2), temperature, top_k, top_p)  # checks the settings once
    model.eval()
    next_logits = NextLogits(model.step, model.init_state, use_cache)
    sequence = prompt
    finished = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)
    for _ in range(max_new_tokens):
        probs = next_token_probs(next_logits(sequence), temperature, top_k, top_p)  # (B, V)
        if temperature == 0:  # probs is one-hot: the draw is its argmax, without drawing
            token = probs.argmax(dim=-1)  # (B,)
        else:
            token = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (B,)
        if eos is not None:
            token = token.masked_fill(finished, eos)
            finished |= token == eos
        sequence = torch.cat([sequence, token[:, None]], dim=1)
        if eos is not None and finished.all():
            break
    return sequence[:, prompt.shape[1]:]
