"""The checks of notebook 07_translation (d2lhelpers/exercises/checks_translation.py): right and
plausible wrong answers (see checks_common.py), each factory right by default and a mistake with
one flag flipped."""

from __future__ import annotations

import torch

from checks_common import CheckTests
from d2lhelpers.exercises import checks_translation


def cached_greedy_decode(keep_bos=False, stop_early=True, fill_eos=True, feed_prefix=False,
                         stop_at_first=False, fresh_state=False, extra=0, drop_last_eos=False,
                         argmax_dim=-1, source_lens=True):
    """Greedy decoding with the cache, right by default; each flag flipped is a plausible mistake."""

    @torch.no_grad()
    def decode(model, src, src_valid_lens, bos, eos, max_len):
        model.eval()
        lens = src_valid_lens if source_lens else None
        state = model.decoder.init_state(model.encoder(src, lens), lens)
        tokens = torch.full((src.shape[0], 1), bos)
        finished = torch.zeros(src.shape[0], dtype=torch.bool)
        for _ in range(max_len + extra):
            if fresh_state:  # a new state every step: the decoder sees one token
                state = model.decoder.init_state(model.encoder(src, src_valid_lens), src_valid_lens)
            fed = tokens if feed_prefix else tokens[:, -1:]  # the whole prefix: the cache doubles up
            logits = model.decoder.step(fed, state)
            next_token = (logits[:, -1].argmax(dim=-1) if argmax_dim == -1
                          else logits.argmax(dim=argmax_dim)[:, 0])
            if fill_eos:
                next_token = next_token.masked_fill(finished, eos)
            if drop_last_eos and (finished | (next_token == eos)).all():
                break
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            finished |= next_token == eos
            if stop_early and (finished.any() if stop_at_first else finished.all()):
                break
        return tokens if keep_bos else tokens[:, 1:]

    return decode


def translation_log_prob(shift=True, stop_at_eos=True, include_eos=True, mean=False,
                         dim=-1, last_eos=False, report_T=False, score_input=False,
                         one_past=False, raw_logits=False, source_lens=True):
    """Scoring given translations by teacher forcing, right by default; a flag off is a mistake."""

    @torch.no_grad()
    def score(model, src, src_valid_lens, tokens, bos, eos):
        B, T = tokens.shape
        dec_input = torch.cat([torch.full((B, 1), bos), tokens[:, :-1]], dim=1) if shift else tokens
        logits = model(src, src_valid_lens if source_lens else None, dec_input)
        log_p = logits if raw_logits else torch.log_softmax(logits, dim=dim)
        scored = dec_input if score_input else tokens
        token_log_p = log_p.gather(2, scored[..., None]).squeeze(2)  # (B, T)
        is_eos = tokens == eos
        first = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), T)  # index of <eos>
        if last_eos:  # the index of the last <eos>
            first = torch.where(is_eos.any(dim=1), T - 1 - is_eos.flip(1).int().argmax(dim=1), T)
        lengths = torch.where(is_eos.any(dim=1), first + int(include_eos), T) if stop_at_eos \
            else torch.full((B,), T)
        counted = torch.arange(T)[None, :] < lengths[:, None] + int(one_past)
        total = torch.where(counted, token_log_p, 0.0).sum(dim=1)
        return (total / lengths if mean else total), (torch.full((B,), T) if report_T else lengths)

    return score


CHECKS = {
    "check_cached_greedy_decode": (cached_greedy_decode(), {
        "<bos> kept": (cached_greedy_decode(keep_bos=True), "expected shape", "start with <bos>"),
        "never stops early": (cached_greedy_decode(stop_early=False), "expected shape",
                              "runs to max_len"),
        "stops when one sentence finishes": (cached_greedy_decode(stop_at_first=True),
                                             "expected shape", "first sentence finishes"),
        "the last <eos> dropped": (cached_greedy_decode(drop_last_eos=True), "expected shape",
                                   "stops before appending"),
        "finished sentences not held at <eos>": (cached_greedy_decode(fill_eos=False),
                                                 "differ", "go on with other tokens"),
        "the whole prefix fed with the cache": (cached_greedy_decode(feed_prefix=True), "on input",
                                                "whole prefix"),
        "a fresh state every step": (cached_greedy_decode(fresh_state=True), "on input",
                                     "fresh state"),
        "one step too many": (cached_greedy_decode(extra=1), "expected shape",
                              "one token too many"),
        "argmax over the position axis": (
            cached_greedy_decode(argmax_dim=1), "differ", "over the positions"),
        "src_valid_lens left out": (cached_greedy_decode(source_lens=False), "on input",
                                    "ignores src_valid_lens"),
        "one step too many and <bos> kept": (cached_greedy_decode(extra=1, keep_bos=True),
                                             "expected shape", None),
    }),
    "check_translation_log_prob": (translation_log_prob(), {
        "not shifted right (each token sees itself)": (translation_log_prob(shift=False),
                                                       "differ", "not shifted right"),
        "counts past the first <eos>": (translation_log_prob(stop_at_eos=False), "differ",
                                        "after the first <eos>"),
        "up to the last <eos>": (translation_log_prob(last_eos=True), "differ", "the last <eos>"),
        "<eos> left out": (translation_log_prob(include_eos=False), "differ",
                           "leave out the <eos>"),
        "the input tokens scored": (translation_log_prob(score_input=True), "differ",
                                    "decoder's input tokens"),
        "the mean log-probability": (translation_log_prob(mean=True), "differ", "averaged"),
        "softmax over the positions": (translation_log_prob(dim=1), "differ", "over the positions"),
        "lengths one too many": (
            lambda *a: (lambda sums, lengths: (sums, lengths + 1))(*translation_log_prob()(*a)),
            "result 1 of the tuple", "Your lengths are off by one"),
        "lengths T_out": (translation_log_prob(report_T=True), "result 1 of the tuple",
                          "Your lengths are T_out"),
        "one position past the first <eos>": (translation_log_prob(one_past=True), "differ",
                                              "positions off by one"),
        "the raw logits gathered": (translation_log_prob(raw_logits=True), "differ",
                                    "not log-probabilities"),
        "src_valid_lens left out": (translation_log_prob(source_lens=False), "differ",
                                    "ignores src_valid_lens"),
        "probabilities instead of log-probabilities": (
            lambda *a: tuple(x.exp() if i == 0 else x for i, x in
                             enumerate(translation_log_prob()(*a))), "differ", None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_translation
