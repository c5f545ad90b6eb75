"""Training and decoding of sequence-to-sequence models: masked loss, the training loop, greedy
decoding with the key-value cache, translation and held-out BLEU.

Shapes: B batch, T time steps, V target vocabulary size. Taught in notebook 06_transformer.
"""

from __future__ import annotations

import itertools
import sys
import time
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "masked_cross_entropy",
    "TrainingReport",
    "train_seq2seq",
    "greedy_decode",
    "translate",
    "held_out_bleu",
]


def masked_cross_entropy(logits, targets, valid_lens, label_smoothing: float = 0.0):
    """Mean cross-entropy over the valid (non-padding) target positions.

    logits: (B, T, V), targets: (B, T) indices, valid_lens: (B,) number of valid positions per row.
    Padding positions contribute nothing, whatever their logits or targets.
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
    # cross_entropy wants the class axis second: (B, T, V) -> (B, V, T)
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none",
                             label_smoothing=label_smoothing)  # (B, T)
    return (losses * mask).sum() / mask.sum().clamp(min=1)


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


def train_seq2seq(model: nn.Module, data_loader, num_epochs: int | None = None, *, lr: float = 2e-3,
                  device=None, max_seconds: float | None = None, grad_clip: float = 1.0,
                  label_smoothing: float = 0.0, progress: bool = True,
                  plot: bool = True) -> TrainingReport:
    """Train an encoder-decoder with Adam and teacher forcing; return a :class:`TrainingReport`.

    data_loader yields ``(src, src_valid_len, dec_input, tgt, tgt_valid_len)`` (see
    :class:`~d2lhelpers.data.TranslationData`); ``model(src, src_valid_len, dec_input)`` returns
    logits (B, T, V). Stops after ``num_epochs`` epochs or, if given, once ``max_seconds`` of
    training have passed (checked after every step). Gradients are clipped to norm ``grad_clip``.
    Shows a progress bar and, with ``plot``, the loss per epoch (a live plot in Jupyter, a line per
    epoch elsewhere).
    """
    if num_epochs is None and max_seconds is None:
        raise ValueError("give num_epochs, max_seconds or both")
    from tqdm import tqdm  # a text bar: renders alike in Jupyter, on GitHub and in logs

    device = device or next(model.parameters()).device
    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
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


def translate(model, data, sentences, max_len: int | None = None, batch_size: int = 256,
              use_cache: bool = True) -> list[str]:
    """Translate English sentences (str or list of str) with greedy decoding; return French strings.

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
        predicted = greedy_decode(model, src.to(device), src_valid_len.to(device), bos, eos,
                                  max_len or data.num_steps, use_cache)
        out.extend(data.decode_target(row.tolist()) for row in predicted)
    return out[0] if single else out


def held_out_bleu(model, data, **translate_kwargs) -> float:
    """Corpus BLEU (0-100, sacrebleu) of greedy translations of the held-out source sentences,
    each scored against all of its reference translations."""
    from .bleu import corpus_bleu

    sources = list(data.held_out)
    if not sources:
        raise ValueError("data.held_out is empty: there are no held-out sentences to score")
    hypotheses = translate(model, data, sources, **translate_kwargs)
    return corpus_bleu(hypotheses, [data.held_out[s] for s in sources])
