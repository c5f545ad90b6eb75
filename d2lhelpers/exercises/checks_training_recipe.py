"""The checks of notebook 09_training_recipe's coding exercises: label smoothing over the real
tokens only, and Adam's steps under a learning-rate schedule."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from .cases import (labelled, randint, randn, random_choice, random_lengths, random_sizes,
                    seeded_generator)
from .runner import N_, _, exercise_check, run_check

__all__ = ['check_real_token_smoothing', 'check_adam_steps']


def _real_token_smoothing(logits, targets, valid_lens, eps, real_tokens):
    """The reference: label smoothing that spreads eps over the real tokens only."""
    T = logits.shape[1]
    valid = torch.arange(T)[None, :] < valid_lens[:, None]  # (B, T)
    log_p = torch.log_softmax(logits[valid], dim=-1)  # (N_valid, V): padding never enters
    nll = -log_p.gather(1, targets[valid][:, None]).squeeze(1)  # (N_valid,)
    uniform = -log_p[:, real_tokens].mean(dim=-1)  # (N_valid,): -(1/|real|) sum over real tokens
    return ((1 - eps) * nll + eps * uniform).mean()


# The classic mistakes, each as the function that makes it ----------------------------------------

def _wrong_smoothing(logits, targets, valid_lens, eps, real_tokens, spread="real", divide="R",
                     log="log_softmax", padding="selected", weights="right", average="positions",
                     uniform_part="mean", target_in_uniform=True, target_weight="1 - eps",
                     eps_used=True):
    """Label smoothing over the real tokens, right by default; each other value of an argument
    is a classic mistake. log: an axis is that of a log_softmax over another axis than the last."""
    B, T, V = logits.shape
    eps = eps if eps_used else 0.0
    valid = torch.arange(T)[None, :] < valid_lens[:, None]  # (B, T)
    log_p = (torch.log(torch.softmax(logits, dim=-1)) if log == "log(softmax)"
             else torch.log_softmax(logits, dim=log if isinstance(log, int) else -1))  # (B, T, V)
    nll = -log_p.gather(2, targets[..., None]).squeeze(2)  # (B, T)
    over = {"real": real_tokens, "all": torch.ones(V, dtype=torch.bool),
            "not real": ~real_tokens, "after two": torch.arange(V) >= 2}[spread]
    if log == "dense":  # the target distribution written out: 0 * -inf is NaN
        q = over.to(log_p.dtype) * eps / over.sum()
        q = q.expand_as(log_p).scatter_add(2, targets[..., None],
                                           torch.full_like(nll[..., None], 1 - eps))
        losses = -(q * log_p).sum(dim=-1)
    else:
        chosen = over.expand_as(log_p).clone()
        if not target_in_uniform:  # eps over the real tokens other than the target
            chosen.scatter_(2, targets[..., None], False)
        total = log_p.masked_fill(~chosen, 0.0).sum(dim=-1)  # over the chosen tokens only
        count = {"R": chosen.sum(dim=-1), "V": torch.full_like(nll, V),
                 "R - 1": chosen.sum(dim=-1) - 1}[divide]
        uniform = {"mean": lambda: -total / count, "sum": lambda: -total,
                   "none": lambda: torch.zeros_like(nll),  # no uniform part at all
                   "the target's": lambda: nll / count,  # eps / R on the target alone
                   "the target's, in full": lambda: nll}[uniform_part]()
        keep, smooth = (1 - eps, eps) if weights == "right" else (eps, 1 - eps)
        keep = 1.0 if target_weight == "1" else keep
        losses = keep * nll + smooth * uniform  # (B, T)
    if padding == "multiplied":
        return (losses * valid).sum() / valid.sum()
    if padding == "kept":
        return losses.mean()
    if average == "sum":
        return losses[valid].sum()
    if average == "sentences":
        return torch.stack([losses[b, :int(valid_lens[b])].mean() for b in range(B)]).mean()
    return losses[valid].mean()


_REAL_TOKEN_SMOOTHING_MISTAKES = {
    N_("Your smoothing spreads eps over all V tokens: here it goes to the real tokens only, none "
       "to <pad> or <bos>."): (partial(_wrong_smoothing, spread="all"),
                           partial(_wrong_smoothing, spread="all", log="dense")),
    N_("Your uniform part divides by V: eps is shared by the R real tokens, so the sum over them "
       "is divided by R."): partial(_wrong_smoothing, divide="V"),
    N_("Your uniform part divides by R - 1: eps is shared by the R real tokens, the target "
       "included, so the sum over them is divided by R."): partial(_wrong_smoothing,
                                                                  divide="R - 1"),
    N_("Your uniform part is a sum over the real tokens: it is their mean (eps / R each)."):
        partial(_wrong_smoothing, uniform_part="sum"),
    N_("Your log-probabilities are the log of the softmax, which underflows to -inf for a very "
       "unlikely token: log_softmax computes them without that."): partial(_wrong_smoothing,
                                                                         log="log(softmax)"),
    N_("Your loss multiplies the target distribution by log p over every token: where a token is "
       "not real its -inf log-probability times 0 is NaN; sum over the real tokens only."):
        partial(_wrong_smoothing, log="dense"),
    N_("Your loss removes the padding by multiplying with a 0/1 mask: 0 * NaN is NaN; select the "
       "valid positions instead."): partial(_wrong_smoothing, padding="multiplied"),
    N_("Your loss averages over every position, padding included: only the valid positions count."):
        partial(_wrong_smoothing, padding="kept"),
    N_("Your loss is a sum over the valid positions: the exercise asks for their mean."):
        partial(_wrong_smoothing, average="sum"),
    N_("Your loss averages each sentence first, then the sentences: the mean is over all the valid "
       "positions together."): partial(_wrong_smoothing, average="sentences"),
    N_("Your weights are swapped: the target keeps 1 - eps and the uniform part gets eps."):
        partial(_wrong_smoothing, weights="swapped"),
    N_("Your target keeps its full weight: with smoothing it gets 1 - eps, and the real tokens "
       "share eps."): partial(_wrong_smoothing, target_weight="1"),
    N_("Your uniform part covers the tokens that are not real: it covers those where real_tokens "
       "is True."): partial(_wrong_smoothing, spread="not real"),
    N_("Your uniform part assumes that the first two tokens are the special ones: real_tokens says "
       "which tokens are real."): partial(_wrong_smoothing, spread="after two"),
    N_("Your uniform part leaves out the target: eps / R goes to every real token, the target "
       "included."): partial(_wrong_smoothing, target_in_uniform=False),
    N_("Your loss is the plain cross-entropy: with smoothing, the target keeps 1 - eps and the "
       "real tokens share eps."): partial(_wrong_smoothing, eps_used=False),
    N_("Your loss has no uniform part: besides (1 - eps) times the target's -log p, it adds eps "
       "times the mean of -log p over the real tokens."): partial(_wrong_smoothing,
                                                                 uniform_part="none"),
    N_("Your uniform part uses the target's log-probability alone: eps is spread over all the real "
       "tokens, so it takes the mean of -log p over them."): tuple(
        partial(_wrong_smoothing, uniform_part=part, target_weight=weight)
        for part in ("the target's", "the target's, in full") for weight in ("1", "1 - eps")
        if (part, weight) != ("the target's, in full", "1 - eps")),
    N_("Your log-probabilities are normalised over another axis than the vocabulary (the positions "
       "or the batch): log_softmax runs over the last axis."): tuple(
        partial(_wrong_smoothing, log=axis) for axis in (0, 1)),
}


@exercise_check
def check_real_token_smoothing(fn: Callable, seed: int = 0, hint: int = 1, *,
                               verbose: bool = False) -> None:
    """fn(logits, targets, valid_lens, eps, real_tokens) -> the label-smoothed cross-entropy whose
    uniform part covers the real tokens only: the target distribution at a position is
    (1 - eps) on the target plus eps / R on each of the R tokens where ``real_tokens`` (V,) is
    True, 0 on the others (<pad>, <bos>). logits (B, T, V), targets (B, T), valid_lens (B,);
    returns the mean over the valid positions, a scalar."""
    generator = seeded_generator(seed)

    def case(B, T, V, eps, num_special=2, valid_lens=None):
        logits = randn(generator, B, T, V)
        real = torch.ones(V, dtype=torch.bool)
        real[:num_special] = False  # tokens 0 .. num_special - 1 play <pad>, <bos>
        targets = randint(generator, num_special, V - 1, (B, T))  # valid targets are real tokens
        if valid_lens is None:
            valid_lens = random_lengths(generator, B, T)
            valid_lens[0] = T
        targets[torch.arange(T)[None, :] >= valid_lens[:, None]] = 0  # <pad> in the padding
        return logits, targets, valid_lens, eps, real

    fixed = []
    logits, targets, valid_lens, _eps, real = case(3, 5, 9, 0.1,
                                                   valid_lens=torch.tensor([5, 3, 4]))
    fixed.append((N_("every token real (the notebook's smoothing)"),
                  (logits, targets, valid_lens, 0.1, torch.ones(9, dtype=torch.bool))))
    fixed.append((N_("eps = 0 (plain cross-entropy)"), (logits, targets, valid_lens, 0.0, real)))
    fixed.append((N_("<pad> and <bos> not real"), (logits, targets, valid_lens, 0.1, real)))
    confident = torch.zeros(1, 1, 9)
    confident[0, 0, 4] = 200.0  # softmax underflows to 0 on every other token
    fixed.append((N_("a logit 200 above the others"),
                  (confident, torch.tensor([[4]]), torch.tensor([1]), 0.1, real)))
    never = logits.clone()
    never[..., ~real] = float("-inf")  # a model that can never output <pad> or <bos>
    fixed.append((N_("the logits "
                     "of <pad> and <bos> are -inf"), (never, targets, valid_lens, 0.1, real)))
    garbage = logits.clone()
    garbage[1, 3:] = float("nan")  # padding positions holding garbage
    fixed.append((N_("NaN logits in the padding"), (garbage, targets, valid_lens, 0.1, real)))
    random = [("", case(s["B"], s["T"], s["V"], 0.2, num_special=3))
              for s in random_sizes(generator, 2, B=(1, 4), T=(2, 7), V=(5, 20))]
    def details(logits, targets, valid_lens, eps, real):
        return _("logits {shape}, valid_lens {valid_lens}, eps={eps}, {real} real tokens of "
                 "{tokens}").format(shape=tuple(logits.shape), valid_lens=valid_lens.tolist(),
                                    eps=f"{eps:g}", real=int(real.sum()), tokens=len(real))

    cases = labelled(fixed + random, details)
    run_check("real_token_smoothing", fn, cases, reference=_real_token_smoothing,
              hints=(N_("Read the input your function failed on: a huge logit, -inf logits, NaN in "
                        "the padding? Each one trips a different step of the computation."),
                     N_("Work in log-probabilities from log_softmax; the uniform part averages "
                        "over the real tokens only (their number, not V); select the valid "
                        "positions rather than multiplying by a mask, so that NaN or -inf "
                        "elsewhere never enters."),
                     N_("log_p = torch.log_softmax(logits, dim=-1) (never log(softmax): it "
                        "underflows to -inf); the uniform part is the mean of -log_p over the real "
                        "tokens only (log_p[..., real_tokens].mean(-1): divide by their number, "
                        "not by V), so the -inf of a token that is not real never enters; keep the "
                        "valid positions by selecting them (torch.where or indexing), never by "
                        "multiplying with a 0/1 mask, since 0 * NaN is NaN.")),
              hint=hint, mistakes=_REAL_TOKEN_SMOOTHING_MISTAKES, verbose=verbose)


# adam_steps: Adam's update with a learning-rate schedule ------------------------------------------

class _Schedule:
    """A learning-rate schedule as the notebook writes them, a function of the update number
    s = 1, 2, ...: the paper's (warm-up over ``warmup`` updates, then 1/sqrt(s) decay), the same
    from its peak on (no warm-up), or constant. Shown by what it is in a failure's message."""

    def __init__(self, kind: str, lr: float, warmup: int = 1):
        self.kind, self.lr, self.warmup = kind, lr, warmup

    def __call__(self, step) -> float:
        if isinstance(step, torch.Tensor):
            step = step.item()
        if step != int(step) or step < 1:
            raise ValueError(_("the schedule counts updates from 1 (the first update is number "
                               "1), got {step}").format(step=repr(step)))
        if self.kind == "constant":
            return self.lr
        step = max(step, self.warmup) if self.kind == "no warm-up" else step
        return self.lr * min((step / self.warmup) ** -0.5, step / self.warmup)  # peak lr at warmup

    def __repr__(self) -> str:
        if self.kind == "constant":
            return _("constant {lr}").format(lr=f"{self.lr:g}")
        return {"warm-up": _("warm-up, peak {lr} at update {warmup}"),
                "no warm-up": _("no warm-up, peak {lr} at update {warmup}")}[self.kind].format(
            lr=f"{self.lr:g}", warmup=self.warmup)


def _adam_steps(grads, schedule, betas, eps):
    """The reference: torch.optim.Adam at lr=1, its rate multiplied by the schedule through
    LambdaLR as section 3 of the notebook sets it up, on a parameter receiving ``grads``."""
    parameter = torch.zeros(grads.shape[1:], dtype=grads.dtype, requires_grad=True)
    optimizer = torch.optim.Adam([parameter], lr=1.0, betas=betas, eps=eps, foreach=False)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: schedule(i + 1))
    steps = []
    for gradient in grads:
        before = parameter.detach().clone()
        parameter.grad = gradient.clone()
        optimizer.step()
        scheduler.step()
        steps.append(parameter.detach() - before)
    return torch.stack(steps)  # (S, n)


def _wrong_adam_steps(grads, schedule, betas, eps, correct="both", eps_at="outside",
                      square="g * g", root=True, average="right", swap_betas=False,
                      memory="kept", direction="descent", rate="schedule(s)", returned="steps"):
    """Adam's steps, right by default; each other value of an argument is a classic mistake."""
    beta1, beta2 = betas[::-1] if swap_betas else betas
    m, v, steps = torch.zeros_like(grads[0]), torch.zeros_like(grads[0]), []
    for s, g in enumerate(grads, start=1):
        lr = schedule(s + 1) if rate == "schedule(s + 1)" else schedule(s)
        if rate == "scales the gradients":
            g = lr * g
        if memory == "afresh":
            m, v = torch.zeros_like(g), torch.zeros_like(g)
        g2 = {"g * g": g * g, "g": g}[square]
        if average == "swapped":  # the new gradient weighted beta, the past 1 - beta
            m, v = (1 - beta1) * m + beta1 * g, (1 - beta2) * v + beta2 * g2
        else:
            m, v = beta1 * m + (1 - beta1) * g, beta2 * v + (1 - beta2) * g2
        power = s - 1 if correct == "from 0" else s
        m_hat = m / (1 - beta1 ** power) if correct in ("both", "m only", "from 0") else m
        v_hat = v / (1 - beta2 ** power) if correct in ("both", "v only", "from 0") else v
        denominator = {"outside": (v_hat.sqrt() if root else v_hat) + eps,
                       "inside": (v_hat + eps).sqrt(), "none": v_hat.sqrt()}[eps_at]
        step = m_hat / denominator
        step = step if rate == "scales the gradients" else lr * step
        steps.append(-step if direction == "descent" else step)
    steps = torch.stack(steps)
    return steps.cumsum(dim=0) if returned == "parameters" else steps


def _adam(**mistake):
    return partial(_wrong_adam_steps, **mistake)


_ADAM_STEPS_MISTAKES = {
    N_("Your steps go up the gradient: an update moves the parameters against it, -lr * m_hat / "
       "(sqrt(v_hat) + eps)."): _adam(direction="ascent"),
    N_("Your result is the parameters after each update, the steps added up: the exercise asks for "
       "each update's own step."): _adam(returned="parameters"),
    N_("Your running means start afresh at every update: m and v carry over from one update to the "
       "next, that is what makes them running means."): _adam(memory="afresh"),
    N_("Your running means give the new gradient the weight beta: beta is the weight of the past "
       "(m_s = beta1 m_{s-1} + (1 - beta1) g_s), close to 1 for a long memory."):
        _adam(average="swapped"),
    N_("Your betas are swapped: beta1 averages the gradients, beta2 their squares."):
        _adam(swap_betas=True),
    N_("Your second running mean averages the gradients, not their squares."): _adam(square="g"),
    N_("Your steps have no bias correction: m and v start at 0, so early on they are too small; "
       "dividing by 1 - beta^s undoes that."): _adam(correct="none"),
    N_("Your steps correct the bias of the gradients' mean only: the mean of their squares starts "
       "at 0 too and needs its own correction, 1 - beta2^s."): _adam(correct="m only"),
    N_("Your steps correct the bias of the squares' mean only: the gradients' mean starts at 0 too "
       "and needs its own correction, 1 - beta1^s."): _adam(correct="v only"),
    N_("Your bias correction counts the updates from 0: at update s it divides by 1 - beta^s with "
       "s = 1 for the first update, never by 1 - beta^0 = 0."): _adam(correct="from 0"),
    N_("Your step divides by the mean of the squares itself: it divides by its square root, so "
       "that the step no longer depends on the gradients' scale."): _adam(root=False),
    N_("Your eps is inside the square root: it is added to sqrt(v_hat), where it only keeps the "
       "division finite."): _adam(eps_at="inside"),
    N_("Your step has no eps: where a gradient has always been 0, m_hat / sqrt(v_hat) is 0 / 0."):
        _adam(eps_at="none"),
    N_("Your update s uses the learning rate of update s + 1: the schedule counts updates from 1, "
       "as your loop does; LambdaLR's shift by one is for LambdaLR only."):
        _adam(rate="schedule(s + 1)"),
    N_("Your learning rate scales the gradients before Adam averages them: Adam divides by their "
       "size, so the rate must multiply the step itself."): _adam(rate="scales the gradients"),
}


@exercise_check
def check_adam_steps(fn: Callable, seed: int = 0, hint: int = 1, *,
                     verbose: bool = False) -> None:
    """fn(grads, schedule, betas, eps) -> steps (S, n): the change Adam makes to a parameter at
    each of S updates, the parameter (n,) receiving the gradient grads[s - 1] at update s, with
    the learning rate schedule(s) (s counted from 1) and betas = (beta1, beta2). Compared with
    ``torch.optim.Adam`` at lr=1 driven by ``LambdaLR(optimizer, lambda i: schedule(i + 1))``."""
    generator = seeded_generator(seed)
    paper = (0.9, 0.98)

    def rows(*values):
        return torch.tensor(values, dtype=torch.float64)

    fixed = [
        (N_("one update: every parameter moves by the learning rate"),
         (rows([0.05, -2.0, 300.0]), _Schedule("constant", 0.1), paper, 1e-9)),
        (N_("a parameter whose gradient is always 0"),
         (rows([0.5, 0.0], [-1.0, 0.0], [2.0, 0.0]), _Schedule("constant", 0.1), paper, 1e-9)),
        (N_("tiny gradients (1e-10), below eps"),
         (rows([1e-10, -3e-10], [2e-10, -1e-10]), _Schedule("constant", 0.1), paper, 1e-9)),
        (N_("PyTorch's default betas (0.9, 0.999), gradients that flip sign"),
         (rows([1.0, -0.5], [-1.0, 0.5], [1.0, 0.5], [-1.0, -0.5]),
          _Schedule("constant", 0.05), (0.9, 0.999), 1e-8)),
    ]
    grads = randn(generator, 6, 3, dtype=torch.float64) * rows([1e-3, 1.0, 1e3])
    fixed.append((N_("the warm-up schedule, gradients of sizes 1e-3, 1 and 1e3"),
                  (grads, _Schedule("warm-up", 0.03, warmup=3), paper, 1e-9)))
    fixed.append((N_("the same gradients times 1e-3, as clipping would scale them"),
                  (grads * 1e-3, _Schedule("warm-up", 0.03, warmup=3), paper, 1e-9)))
    random = []
    for s in random_sizes(generator, 2, S=(2, 8), n=(1, 4), warmup=(1, 4)):
        kind = random_choice(generator, ("warm-up", "no warm-up"))
        grads = randn(generator, s["S"], s["n"], dtype=torch.float64)
        random.append(("", (grads, _Schedule(kind, 0.02, s["warmup"]), paper, 1e-9)))

    def details(grads, schedule, betas, eps):
        return (f"grads {tuple(grads.shape)}, schedule={schedule!r}, betas={betas}, "
                f"eps={eps:g}")

    cases = labelled(fixed + random, details)
    run_check("adam_steps", fn, cases, reference=_adam_steps, atol=1e-10, rtol=1e-5,
              hints=(N_("Keep m and v from one update to the next, and count the updates from 1: "
                        "the bias correction and the schedule both use that count."),
                     N_("m and v start at 0 and carry over; at update s (from 1) both are "
                        "bias-corrected by 1 - beta ** s, and the step is minus the schedule's "
                        "learning rate at s times m_hat / (sqrt(v_hat) + eps)."),
                     N_("m = v = zeros (n,); for s = 1 .. S with g = grads[s - 1]: m = beta1 * m + "
                        "(1 - beta1) * g, v = beta2 * v + (1 - beta2) * g * g; m_hat = m / (1 - "
                        "beta1 ** s), v_hat = v / (1 - beta2 ** s); step = -schedule(s) * m_hat / "
                        "(v_hat.sqrt() + eps); stack the S steps.")),
              hint=hint, mistakes=_ADAM_STEPS_MISTAKES, verbose=verbose)


MISTAKES = {"check_real_token_smoothing": _REAL_TOKEN_SMOOTHING_MISTAKES,
            "check_adam_steps": _ADAM_STEPS_MISTAKES}  # the catalogue, for the tests
