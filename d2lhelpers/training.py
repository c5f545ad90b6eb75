"""Training and decoding of sequence-to-sequence models: masked loss, the training loop and the
paper's learning-rate schedule, greedy decoding and beam search with the key-value cache,
translation and held-out BLEU.

Shapes: B batch, T time steps, V target vocabulary size, k beam size. Taught in notebooks
06_transformer and 07_transformer_in_practice (schedule, beam search).
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "masked_cross_entropy",
    "TrainingReport",
    "transformer_lr",
    "train_seq2seq",
    "greedy_decode",
    "BeamSearchResult",
    "beam_search",
    "sequence_log_prob",
    "translate",
    "held_out_bleu",
]


def masked_cross_entropy(logits, targets, valid_lens, label_smoothing: float = 0.0):
    """Mean cross-entropy over the valid (non-padding) target positions.

    logits: (B, T, V), targets: (B, T) indices, valid_lens: (B,) number of valid positions per row.
    Padding positions contribute nothing, whatever their logits or targets. With
    ``label_smoothing`` eps the target distribution is (1 - eps) one-hot + eps / V uniform, as in
    ``torch.nn.functional.cross_entropy``.
    """
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must have shape (B, T, V) and targets (B, T), got logits {tuple(logits.shape)} "
            f"and targets {tuple(targets.shape)}"
        )
    B, T, _ = logits.shape
    valid_lens = torch.as_tensor(valid_lens, device=logits.device)
    if valid_lens.shape != (B,) or valid_lens.min() < 0 or valid_lens.max() > T:
        raise ValueError(f"valid_lens must have shape (B,)=({B},) with values in [0, T={T}], got "
                         f"shape {tuple(valid_lens.shape)} and values {valid_lens.tolist()}")
    mask = torch.arange(T, device=logits.device)[None, :] < valid_lens[:, None]  # (B, T)
    # Only the valid positions are scored, (B, T, V)[mask] -> (N_valid, V): whatever the padding
    # positions hold (even inf or NaN logits) never reaches the loss or its gradient, as it would
    # through a loss multiplied by a 0/1 mask (0 * inf = NaN).
    total = F.cross_entropy(logits[mask], targets[mask], reduction="sum",
                            label_smoothing=label_smoothing)
    return total / mask.sum().clamp(min=1)


@dataclass
class TrainingReport:
    """What a training run measured: the mean loss of each epoch, the target tokens seen, the
    seconds spent (training only) and so the throughput in target tokens per second."""

    epoch_losses: list[float] = field(default_factory=list)
    num_tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.num_tokens / self.seconds if self.seconds else 0.0


def transformer_lr(step: int, d_model: int, warmup_steps: int = 4000, factor: float = 1.0) -> float:
    """The learning rate of "Attention Is All You Need" for update number ``step`` (1, 2, ...):

        lr(step) = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

    It grows linearly for ``warmup_steps`` updates, peaks at ``step == warmup_steps`` with
    ``factor * (d_model * warmup_steps)^-0.5``, then decays as 1 / sqrt(step).

    With ``torch.optim.lr_scheduler.LambdaLR``, which counts updates from 0 and multiplies the
    optimizer's learning rate by the function's value, give the optimizer ``lr=1.0`` and shift the
    count by one::

        scheduler = LambdaLR(optimizer, lambda i: transformer_lr(i + 1, d_model, warmup_steps))

    In :func:`train_seq2seq`: ``lr=1.0, lr_schedule=functools.partial(transformer_lr,
    d_model=d_model, warmup_steps=warmup_steps)``.
    """
    for name, value in (("step", step), ("d_model", d_model), ("warmup_steps", warmup_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not factor > 0:
        raise ValueError(f"factor must be positive, got {factor!r}")
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def train_seq2seq(model: nn.Module, data_loader, num_epochs: int | None = None, *, lr: float = 2e-3,
                  device=None, max_seconds: float | None = None, grad_clip: float = 1.0,
                  label_smoothing: float = 0.0, progress: bool = True,
                  plot: bool = True,
                  lr_schedule: Callable[[int], float] | None = None) -> TrainingReport:
    """Train an encoder-decoder with Adam and teacher forcing; return a :class:`TrainingReport`.

    data_loader yields ``(src, src_valid_len, dec_input, tgt, tgt_valid_len)`` (see
    :class:`~d2lhelpers.data.TranslationData`); ``model(src, src_valid_len, dec_input)`` returns
    logits (B, T, V). Stops after ``num_epochs`` epochs or, if given, once ``max_seconds`` of
    training have passed (checked after every step). Gradients are clipped to norm ``grad_clip``.
    The learning rate is ``lr``, constant; with ``lr_schedule``, a function of the update number
    s = 1, 2, ..., update s uses ``lr * lr_schedule(s)`` (e.g. ``lr=1.0`` and
    :func:`transformer_lr`, the warm-up schedule of the paper). Shows a progress bar and, with
    ``plot``, the loss per epoch (a live plot in Jupyter, a line per epoch elsewhere).
    """
    if num_epochs is None and max_seconds is None:
        raise ValueError("give num_epochs, max_seconds or both")
    from tqdm import tqdm  # a text bar: renders alike in Jupyter, on GitHub and in logs

    device = device or next(model.parameters()).device
    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    # LambdaLR counts the updates made so far from 0; the schedule numbers updates from 1
    scheduler = (torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: lr_schedule(i + 1))
                 if lr_schedule is not None else None)
    report = TrainingReport()
    live = None
    if plot:
        from .plotting import LivePlot

        live = LivePlot(xlabel="epoch", legend=["train loss"], ylabel="loss")
    epochs = range(num_epochs) if num_epochs is not None else itertools.count()
    bar = tqdm(total=num_epochs, unit="epoch", disable=not progress, file=sys.stdout)
    for epoch in epochs:
        total_loss, total_tokens = 0.0, 0
        start = time.perf_counter()
        for src, src_valid_len, dec_input, tgt, tgt_valid_len in data_loader:
            src, src_valid_len, dec_input, tgt, tgt_valid_len = (
                t.to(device) for t in (src, src_valid_len, dec_input, tgt, tgt_valid_len))
            logits = model(src, src_valid_len, dec_input)
            loss = masked_cross_entropy(logits, tgt, tgt_valid_len, label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            tokens = int(tgt_valid_len.sum())
            total_loss, total_tokens = total_loss + loss.item() * tokens, total_tokens + tokens
            if max_seconds is not None and report.seconds + time.perf_counter() - start >= max_seconds:
                break
        report.seconds += time.perf_counter() - start
        report.num_tokens += total_tokens
        report.epoch_losses.append(total_loss / max(total_tokens, 1))
        bar.update(1)
        bar.set_postfix(loss=f"{report.epoch_losses[-1]:.3f}",
                        tokens_per_s=f"{report.tokens_per_second:,.0f}")
        if live is not None:
            live.add(epoch + 1, [report.epoch_losses[-1]])
        if max_seconds is not None and report.seconds >= max_seconds:
            break
    bar.close()
    model.eval()
    return report


@torch.no_grad()
def greedy_decode(model, src, src_valid_len, bos: int, eos: int, max_len: int, use_cache: bool = True):
    """Translate a batch greedily: at each step feed back the most likely token.

    src: (B, T_src), src_valid_len: (B,). Returns (B, T_out) predicted indices (``<bos>`` not
    included; after a sequence's ``<eos>`` its row continues with ``eos``), T_out <= max_len.
    With ``use_cache`` each step feeds only the newest token and every decoder block reuses the keys
    and values cached at earlier steps; without it, each step runs the decoder on the whole prefix.
    The two give the same tokens.
    """
    _check_decoding_inputs(src, src_valid_len, max_len)
    model.eval()
    enc_outputs = model.encoder(src, src_valid_len)
    B = src.shape[0]
    state = model.decoder.init_state(enc_outputs, src_valid_len) if use_cache else None
    tokens = torch.full((B, 1), bos, dtype=torch.long, device=src.device)  # starts with <bos>
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        if use_cache:
            logits = model.decoder(tokens[:, -1:], enc_outputs, src_valid_len, state)
        else:
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


def _check_decoding_inputs(src, src_valid_len, max_len=None) -> None:
    if src.dim() != 2 or torch.as_tensor(src_valid_len).shape != (src.shape[0],):
        raise ValueError(f"src must have shape (B, T_src) and src_valid_len (B,), got src "
                         f"{tuple(src.shape)} and src_valid_len "
                         f"{tuple(torch.as_tensor(src_valid_len).shape)}")
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)
                                or max_len < 1):
        raise ValueError(f"max_len must be a positive int, got {max_len!r}")


def _top_k_candidates(scores: torch.Tensor):
    """scores (B, k, V): every beam's every continuation -> the k best of each sentence, best first,
    as ``(values, parents, tokens)``, each (B, k): candidate c of a sentence's k*V is beam c // V
    extended by token c % V. The step of :func:`beam_search` that notebook 07's exercise writes."""
    B, k, V = scores.shape
    best = scores.reshape(B, k * V).topk(k, dim=-1)  # (B, k, V) -> (B, k*V) -> (B, k)
    return best.values, best.indices // V, best.indices % V


def _reorder_self_caches(state, rows: torch.Tensor) -> None:
    """Make row r of every self-attention cache in ``state`` a copy of row ``rows[r]``.

    rows: (B*k,) the parent beam of each surviving beam. A cache folds the h heads into the batch
    axis, (B*k*h, T, d_k) with row r's heads at r*h .. r*h + h - 1, so each row index becomes h.
    The encoder-decoder caches need no reordering: the k beams of a sentence hold the same encoder
    outputs, and a beam's parent is always a beam of the same sentence.
    """
    for cache in state.self_caches:
        h = cache.keys.shape[0] // rows.numel()
        index = (rows[:, None] * h + torch.arange(h, device=rows.device)).reshape(-1)  # (B*k*h,)
        cache.keys = cache.keys.index_select(0, index)
        cache.values = cache.values.index_select(0, index)


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
    _check_decoding_inputs(src, src_valid_len, max_len)
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive int, got {beam_size!r}")
    if not 0 <= length_penalty < float("inf"):
        raise ValueError(f"length_penalty must be a finite number >= 0, got {length_penalty!r}")
    model.eval()
    B, k, device = src.shape[0], beam_size, src.device
    src_valid_len = torch.as_tensor(src_valid_len, device=device)
    # rows b*k .. b*k + k - 1 are the beams of sentence b: (B, ...) -> (B*k, ...)
    enc_outputs = model.encoder(src, src_valid_len).repeat_interleave(k, dim=0)
    enc_valid_lens = src_valid_len.repeat_interleave(k, dim=0)
    state = model.decoder.init_state(enc_outputs, enc_valid_lens) if use_cache else None
    tokens = torch.full((B * k, 1), bos, dtype=torch.long, device=device)  # (B*k, 1): <bos>
    # The k beams start identical; only beam 0 is live at first, so that they do not stay copies.
    log_probs = torch.full((B, k), float("-inf"), device=device)
    log_probs[:, 0] = 0.0
    lengths = torch.zeros(B, k, dtype=torch.long, device=device)
    finished = torch.zeros(B, k, dtype=torch.bool, device=device)
    sentence_rows = torch.arange(B, device=device)[:, None] * k  # (B, 1): each sentence's beam 0
    for step in range(1, max_len + 1):
        if use_cache:
            logits = model.decoder(tokens[:, -1:], enc_outputs, enc_valid_lens, state)
        else:
            logits = model.decoder(tokens, enc_outputs, enc_valid_lens)
        step_log_probs = torch.log_softmax(logits[:, -1].float(), dim=-1)  # (B*k, V)
        V = step_log_probs.shape[-1]
        step_log_probs = step_log_probs.reshape(B, k, V)  # unfold the beams: (B, k, V)
        # A finished beam has one continuation, itself: <eos> again, at no cost.
        carry_over = torch.full_like(step_log_probs, float("-inf"))
        carry_over[..., eos] = 0.0
        step_log_probs = torch.where(finished[..., None], carry_over, step_log_probs)
        candidates = log_probs[..., None] + step_log_probs  # (B, k, V) total log-probabilities
        # (B, k) lengths of the candidates: a finished beam keeps its own
        candidate_lengths = torch.where(finished, lengths, step)
        normalised = candidates / candidate_lengths[..., None].float() ** length_penalty
        # the best k of each sentence's k*V candidates: which beam each extends, with which token
        _, parent, token = _top_k_candidates(normalised)
        log_probs = candidates.reshape(B, k * V).gather(1, parent * V + token)  # (B, k)
        lengths = candidate_lengths.gather(1, parent)
        finished = finished.gather(1, parent) | (token == eos)
        rows = (sentence_rows + parent).reshape(-1)  # (B*k,) the parents' rows in the batch
        tokens = torch.cat([tokens[rows], token.reshape(-1, 1)], dim=1)  # (B*k, step + 1)
        if use_cache:
            _reorder_self_caches(state, rows)
        if finished.all():
            break
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
    _check_decoding_inputs(src, src_valid_len)
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
    counted = torch.arange(T, device=tokens.device)[None, :] < lengths[:, None]  # (B, T)
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
    bos, eos = data.tgt_vocab["<bos>"], data.tgt_vocab["<eos>"]
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
