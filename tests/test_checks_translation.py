"""The checks of notebook 07_translation (d2lhelpers/exercises/checks_translation.py): right and
plausible wrong answers (see checks_common.py), each factory right by default and a mistake with
one flag flipped."""

from __future__ import annotations

import torch

from checks_common import CheckTests
from d2lhelpers.exercises import checks_translation


def cached_greedy_decode(keep_bos=False, stop_early=True, fill_eos=True, feed_prefix=False):
    """Greedy decoding with the cache, right by default; each flag flipped is a plausible mistake."""

    @torch.no_grad()
    def decode(model, src, src_valid_lens, bos, eos, max_len):
        model.eval()
        state = model.decoder.init_state(model.encoder(src, src_valid_lens), src_valid_lens)
        tokens = torch.full((src.shape[0], 1), bos)
        finished = torch.zeros(src.shape[0], dtype=torch.bool)
        for _ in range(max_len):
            fed = tokens if feed_prefix else tokens[:, -1:]  # the whole prefix: the cache doubles up
            next_token = model.decoder.step(fed, state)[:, -1].argmax(dim=-1)
            if fill_eos:
                next_token = next_token.masked_fill(finished, eos)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            finished |= next_token == eos
            if stop_early and finished.all():
                break
        return tokens if keep_bos else tokens[:, 1:]

    return decode


def translation_log_prob(shift=True, stop_at_eos=True, include_eos=True):
    """Scoring given translations by teacher forcing, right by default; a flag off is a mistake."""

    @torch.no_grad()
    def score(model, src, src_valid_lens, tokens, bos, eos):
        B, T = tokens.shape
        dec_input = torch.cat([torch.full((B, 1), bos), tokens[:, :-1]], dim=1) if shift else tokens
        log_p = torch.log_softmax(model(src, src_valid_lens, dec_input), dim=-1)
        token_log_p = log_p.gather(2, tokens[..., None]).squeeze(2)  # (B, T)
        is_eos = tokens == eos
        first = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), T)  # index of <eos>
        lengths = torch.where(is_eos.any(dim=1), first + int(include_eos), T) if stop_at_eos \
            else torch.full((B,), T)
        counted = torch.arange(T)[None, :] < lengths[:, None]
        return torch.where(counted, token_log_p, 0.0).sum(dim=1), lengths

    return score


CHECKS = {
    "check_cached_greedy_decode": (cached_greedy_decode(), {
        "<bos> kept": (cached_greedy_decode(keep_bos=True), "expected shape"),
        "never stops early": (cached_greedy_decode(stop_early=False), "expected shape"),
        "finished sentences not held at <eos>": (cached_greedy_decode(fill_eos=False),
                                                 "values differ"),
        "the whole prefix fed with the cache": (cached_greedy_decode(feed_prefix=True), "on input"),
    }),
    "check_translation_log_prob": (translation_log_prob(), {
        "not shifted right (each token sees itself)": (translation_log_prob(shift=False),
                                                       "values differ"),
        "counts past the first <eos>": (translation_log_prob(stop_at_eos=False), "values differ"),
        "<eos> left out": (translation_log_prob(include_eos=False), "values differ"),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_translation
