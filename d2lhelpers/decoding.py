"""Decoding a trained encoder-decoder: greedy decoding and beam search (with the key-value cache),
scoring given outputs, translating sentences, and BLEU on the held-out sentences.

The functions work with any model that offers, as :class:`~d2lhelpers.transformer.Transformer` does:
``model.encoder(src, src_valid_len)`` -> encoder outputs; ``model.decoder(tokens, enc_outputs,
src_valid_len)`` -> logits (B, T, V) for a whole prefix (teacher forcing);
``model.decoder.init_state(enc_outputs, src_valid_len)`` -> a decoding state with
``state.reorder(rows)``; and ``model.decoder.step(tokens, state)`` -> the logits of the new
positions, the state remembering what it has seen.

Shapes: B batch, T time steps, V target vocabulary size, k beam size. Taught in notebooks
06_transformer (greedy decoding, the cache) and 07_transformer_in_practice (beam search).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .attention import sequence_mask
from .basics import check_int

__all__ = [
    "greedy_decode",
    "BeamSearchResult",
    "Beams",
    "advance_beams",
    "beam_search",
    "sequence_log_prob",
    "translate",
    "held_out_bleu",
]


@torch.no_grad()
def greedy_decode(model, src, src_valid_len, bos: int, eos: int, max_len: int, use_cache: bool = True):
    """Translate a batch greedily: at each step feed back the most likely token.

    src: (B, T_src), src_valid_len: (B,). Returns (B, T_out) predicted indices (``<bos>`` not
    included; after a sequence's ``<eos>`` its row continues with ``eos``), T_out <= max_len.
    With ``use_cache`` each step feeds only the newest token and every decoder block reuses the keys
    and values cached at earlier steps; without it, each step runs the decoder on the whole prefix.
    The two give the same tokens.
    """
    src_valid_len = _check_decoding_inputs(src, src_valid_len, max_len)
    model.eval()
    enc_outputs = model.encoder(src, src_valid_len)
    B = src.shape[0]
    state = model.decoder.init_state(enc_outputs, src_valid_len) if use_cache else None
    tokens = torch.full((B, 1), bos, dtype=torch.long, device=src.device)  # starts with <bos>
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        if use_cache:  # only the newest token; the state holds the rest
            logits = model.decoder.step(tokens[:, -1:], state)
        else:  # the whole prefix again
            logits = model.decoder(tokens, enc_outputs, src_valid_len)
        next_token = logits[:, -1].argmax(dim=-1)  # (B,)
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


def _check_decoding_inputs(src, src_valid_len, max_len=None) -> torch.Tensor:
    """Check src (B, T_src) and src_valid_len (B,); return the lengths as a tensor on src's device."""
    src_valid_len = torch.as_tensor(src_valid_len, device=src.device)
    if src.dim() != 2 or src_valid_len.shape != (src.shape[0],):
        raise ValueError(f"src must have shape (B, T_src) and src_valid_len (B,), got src "
                         f"{tuple(src.shape)} and src_valid_len {tuple(src_valid_len.shape)}")
    if max_len is not None:
        check_int(max_len, "max_len")
    return src_valid_len


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
    the beam it extends and the token it adds. The step that notebook 09's exercise writes.
    """
    B, k, V = step_log_probs.shape
    carry_over = torch.full_like(step_log_probs, float("-inf"))
    carry_over[..., eos] = 0.0  # a finished beam continues with <eos>, at no cost
    step_log_probs = torch.where(beams.finished[..., None], carry_over, step_log_probs)
    candidates = beams.log_probs[..., None] + step_log_probs  # (B, k, V) total log-probabilities
    lengths = torch.where(beams.finished, beams.lengths, beams.lengths + 1)  # (B, k) candidates'
    scores = candidates / lengths[..., None].float() ** length_penalty
    # each sentence's k best of its k*V candidates: candidate c is beam c // V with token c % V
    best = scores.reshape(B, k * V).topk(k, dim=-1).indices  # (B, k)
    parents, tokens = best // V, best % V
    new = Beams(candidates.reshape(B, k * V).gather(1, best), lengths.gather(1, parents),
                beams.finished.gather(1, parents) | (tokens == eos))
    return new, parents, tokens


@torch.no_grad()
def beam_search(model, src, src_valid_len, bos: int, eos: int, max_len: int, beam_size: int = 4,
                length_penalty: float = 0.6, use_cache: bool = True) -> BeamSearchResult:
    """Translate a batch with beam search: keep the ``beam_size`` best hypotheses at every step.

    src: (B, T_src), src_valid_len: (B,). Every sentence gets k = ``beam_size`` beams, decoded
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
    src_valid_len = _check_decoding_inputs(src, src_valid_len, max_len)
    check_int(beam_size, "beam_size")
    if not 0 <= length_penalty < float("inf"):
        raise ValueError(f"length_penalty must be a finite number >= 0, got {length_penalty!r}")
    model.eval()
    B, k, device = src.shape[0], beam_size, src.device
    enc_outputs = model.encoder(src, src_valid_len)
    # rows b*k .. b*k + k - 1 are the beams of sentence b: (B, ...) -> (B*k, ...)
    beam_rows = torch.arange(B, device=device).repeat_interleave(k)  # (B*k,): each beam's sentence
    if use_cache:
        state = model.decoder.init_state(enc_outputs, src_valid_len)
        state.reorder(beam_rows)  # each sentence's state, once per beam
    else:
        enc_outputs, enc_valid_lens = enc_outputs[beam_rows], src_valid_len[beam_rows]
    tokens = torch.full((B * k, 1), bos, dtype=torch.long, device=device)  # (B*k, 1): <bos>
    # The k beams start identical; only beam 0 is live at first, so that they do not stay copies.
    log_probs = torch.full((B, k), float("-inf"), device=device)
    log_probs[:, 0] = 0.0
    zeros = torch.zeros(B, k, dtype=torch.long, device=device)
    beams = Beams(log_probs, zeros, zeros.bool())
    sentence_rows = torch.arange(B, device=device)[:, None] * k  # (B, 1): each sentence's beam 0
    for _ in range(max_len):
        if use_cache:
            logits = model.decoder.step(tokens[:, -1:], state)
        else:
            logits = model.decoder(tokens, enc_outputs, enc_valid_lens)
        step_log_probs = torch.log_softmax(logits[:, -1].float(), dim=-1)  # (B*k, V)
        beams, parents, token = advance_beams(beams, step_log_probs.unflatten(0, (B, k)), eos,
                                              length_penalty)
        rows = (sentence_rows + parents).reshape(-1)  # (B*k,) the parents' rows in the batch
        tokens = torch.cat([tokens[rows], token.reshape(-1, 1)], dim=1)  # (B*k, step + 1)
        if use_cache:
            state.reorder(rows)  # each surviving beam continues from its parent's caches
        if beams.finished.all():
            break
    log_probs, lengths = beams.log_probs, beams.lengths
    scores = log_probs / lengths.float() ** length_penalty  # (B, k)
    choice = scores.argmax(dim=1)  # (B,) each sentence's best beam
    best_rows = sentence_rows.squeeze(1) + choice
    pick = choice[:, None]  # (B, 1) to gather one beam per sentence
    return BeamSearchResult(tokens[best_rows, 1:], scores.gather(1, pick).squeeze(1),
                            log_probs.gather(1, pick).squeeze(1),
                            lengths.gather(1, pick).squeeze(1))


@torch.no_grad()
def sequence_log_prob(model, src, src_valid_len, tokens, bos: int, eos: int):
    """Score given outputs with teacher forcing: log P(y | x) and length of each row of ``tokens``.

    src: (B, T_src), src_valid_len: (B,), tokens: (B, T_out) as :func:`greedy_decode` and
    :func:`beam_search` return them (no ``<bos>``). A row counts up to its first ``<eos>``,
    included (all T_out tokens if it has none). Returns ``(log_probs, lengths)``, both (B,).
    """
    src_valid_len = _check_decoding_inputs(src, src_valid_len)
    if tokens.dim() != 2 or tokens.shape[0] != src.shape[0]:
        raise ValueError(f"tokens must have shape (B, T_out) with B={src.shape[0]}, got "
                         f"{tuple(tokens.shape)}")
    model.eval()
    B, T = tokens.shape
    bos_column = torch.full((B, 1), bos, dtype=torch.long, device=tokens.device)
    dec_input = torch.cat([bos_column, tokens[:, :-1]], dim=1)  # shift right: <bos> first
    log_p = torch.log_softmax(model(src, src_valid_len, dec_input).float(), dim=-1)  # (B, T, V)
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
        src, src_valid_len = data.encode_source(sentences[start:start + batch_size])
        src, src_valid_len = src.to(device), src_valid_len.to(device)
        steps = max_len or data.num_steps
        if beam_size == 1:
            predicted = greedy_decode(model, src, src_valid_len, bos, eos, steps, use_cache)
        else:
            predicted = beam_search(model, src, src_valid_len, bos, eos, steps, beam_size,
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
