"""Training sequence-to-sequence models: the masked (label-smoothed) loss, the paper's warm-up
learning-rate schedule, and the training loop with teacher forcing.

Shapes: B batch, T time steps, V target vocabulary size. Taught in notebooks 06_transformer
(the loop, the loss) and 09_training_recipe (label smoothing, the schedule, the paper's optimiser
settings). Decoding lives in :mod:`d2lhelpers.decoding`.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from .attention import check_valid_lens, sequence_mask
from .basics import check_int
from .data import Batch

__all__ = [
    "masked_cross_entropy",
    "TrainingReport",
    "transformer_lr",
    "paper_adam",
    "train_seq2seq",
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
    valid_lens = check_valid_lens(valid_lens, B, None, T, keys_name="T", device=logits.device)
    mask = sequence_mask(valid_lens, T)  # (B, T)
    # Only the valid positions are scored, (B * T, V) -> (N_valid, V): whatever the padding
    # positions hold (even inf or NaN logits) never reaches the loss or its gradient, as it would
    # through a loss multiplied by a 0/1 mask (0 * inf = NaN). The rows of logits[mask], selected
    # with index_select: the same numbers, but its backward (index_add) is several times faster on
    # a CPU than boolean indexing's (an accumulating index_put), a tenth of a small model's update.
    rows = mask.flatten().nonzero().squeeze(1)  # (N_valid,) indices into B * T
    total = F.cross_entropy(logits.flatten(0, 1).index_select(0, rows),
                            targets.flatten().index_select(0, rows), reduction="sum",
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

    and pass both to :func:`train_seq2seq` (``optimizer=..., scheduler=...``); :func:`paper_adam`
    builds the two.
    """
    for name, value in (("step", step), ("d_model", d_model), ("warmup_steps", warmup_steps)):
        check_int(value, name)
    if not factor > 0:
        raise ValueError(f"factor must be positive, got {factor!r}")
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def _can_fuse(devices) -> bool | None:
    """Whether Adam's fused kernel serves every one of ``devices`` (the CPU and CUDA have it);
    None lets PyTorch choose elsewhere (MPS, for instance)."""
    return all(torch.device(d).type in ("cpu", "cuda") for d in devices) or None


def paper_adam(parameters, schedule: Callable[[int], float]):
    """The paper's optimiser: Adam with beta1 = 0.9, beta2 = 0.98 and eps = 1e-9 whose learning rate
    at update number s = 1, 2, ... is ``schedule(s)`` (e.g. a :func:`transformer_lr`). Returns
    ``(optimizer, scheduler)`` for :func:`train_seq2seq`.

    The optimizer's own rate is 1.0, and ``LambdaLR`` (which counts updates from 0 and multiplies
    that rate by its function's value) gets ``lambda i: schedule(i + 1)``. Fused (one kernel for
    all parameters, as :func:`train_seq2seq`'s default) when the parameters are on the CPU or a
    CUDA device: move the model to its device first.
    """
    parameters = list(parameters)
    optimizer = torch.optim.Adam(parameters, lr=1.0, betas=(0.9, 0.98), eps=1e-9,
                                 fused=_can_fuse(p.device for p in parameters))
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: schedule(i + 1))


def train_seq2seq(model: nn.Module, data_loader, num_epochs: int | None = None, *,
                  optimizer: torch.optim.Optimizer | None = None, lr: float | None = None,
                  scheduler=None, label_smoothing: float = 0.0, grad_clip: float = 1.0,
                  max_seconds: float | None = None, device=None, progress: bool = True,
                  on_epoch_end: Callable[[TrainingReport], None] | None = None) -> TrainingReport:
    """Train an encoder-decoder with teacher forcing; return a :class:`TrainingReport`.

    data_loader yields batches ``(src, src_valid_lens, dec_input, tgt, tgt_valid_lens)`` (a
    :class:`~d2lhelpers.data.Batch`, e.g. from ``TranslationData.train_loader()``);
    ``model(src, src_valid_lens, dec_input)`` returns logits (B, T, V), scored by
    :func:`masked_cross_entropy` (with ``label_smoothing``). Each update: zero the gradients,
    backward, clip the gradient norm to ``grad_clip``, ``optimizer.step()``, then
    ``scheduler.step()`` if a scheduler is given.

    optimizer: by default ``torch.optim.Adam(model.parameters(), lr=lr)`` (``lr`` 2e-3 if not given;
    ``fused=True`` on the CPU and CUDA, the same algorithm in one kernel for all parameters); pass
    your own for other settings (e.g. the paper's betas and eps, with a ``LambdaLR`` scheduler of
    :func:`transformer_lr`). Stops after ``num_epochs`` epochs or, if given, once ``max_seconds``
    of training have passed (checked after every update). Shows a progress bar (``progress``);
    ``on_epoch_end(report)`` is called after every epoch, e.g. with
    :func:`~d2lhelpers.plotting.live_loss_plot` to draw the loss as it falls; it may evaluate the
    model (training mode is switched on again before every epoch). The model is left in eval mode.
    """
    if num_epochs is None and max_seconds is None:
        raise ValueError("give num_epochs, max_seconds or both")
    if optimizer is not None and lr is not None:
        raise ValueError("give lr or an optimizer (which has its own learning rate), not both")
    from tqdm import tqdm  # a text bar: renders alike in Jupyter, on GitHub and in logs

    device = device or next(model.parameters()).device
    model.to(device).train()
    if optimizer is None:  # fused: one kernel updates every parameter tensor at once
        optimizer = torch.optim.Adam(model.parameters(), lr=2e-3 if lr is None else lr,
                                     fused=_can_fuse([device]))
    report = TrainingReport()
    epochs = range(num_epochs) if num_epochs is not None else itertools.count()
    bar = tqdm(total=num_epochs, unit="epoch", disable=not progress, file=sys.stdout)
    for _ in epochs:
        model.train()  # again each epoch: on_epoch_end may have evaluated (which switches to eval)
        # summed on the device, read once per epoch: no synchronisation at every update
        total_loss = total_tokens = torch.zeros((), device=device)
        start = time.perf_counter()
        for batch in data_loader:
            batch = Batch(*batch).to(device)
            logits = model(batch.src, batch.src_valid_lens, batch.dec_input)
            loss = masked_cross_entropy(logits, batch.tgt, batch.tgt_valid_lens, label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            tokens = batch.tgt_valid_lens.sum()
            total_loss, total_tokens = total_loss + loss.detach() * tokens, total_tokens + tokens
            if max_seconds is not None and report.seconds + time.perf_counter() - start >= max_seconds:
                break
        report.seconds += time.perf_counter() - start
        report.num_tokens += int(total_tokens)
        report.epoch_losses.append(total_loss.item() / max(int(total_tokens), 1))
        bar.update(1)
        bar.set_postfix(loss=f"{report.epoch_losses[-1]:.3f}",
                        tokens_per_s=f"{report.tokens_per_second:,.0f}")
        if on_epoch_end is not None:
            on_epoch_end(report)
        if max_seconds is not None and report.seconds >= max_seconds:
            break
    bar.close()
    model.eval()
    return report
