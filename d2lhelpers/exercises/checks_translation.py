"""The checks of notebook 07_translation's coding exercises: greedy decoding with the cache, and the
log-probability of given translations."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from ..attention import sequence_mask
from ..decoding import greedy_decode, sequence_log_prob
from ..transformer import Transformer
from .cases import case_label, randint, random_lengths, seeded_generator, seeded_module
from .runner import N_, exercise_check, run_check

__all__ = ["check_cached_greedy_decode", "check_translation_log_prob"]


def _random_translator(generator, norm_first: bool) -> Transformer:
    """A small Transformer with seeded weights whose outputs depend on its inputs (LayerNorms and
    the output bias as after initialisation, so that no bias drowns the tokens' differences)."""
    model = seeded_module(generator, Transformer, 11, 13, d_model=8, num_heads=2, ffn_hidden=16,
                          num_layers=2, dropout=0.0, norm_first=norm_first)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
        model.decoder.output.bias.zero_()
    return model


def _random_source(generator, B: int, T_src: int):
    """Source sentences (B, T_src) of tokens 3 .. 10, and their valid lengths (B,)."""
    return randint(generator, 3, 10, (B, T_src)), random_lengths(generator, B, T_src)


def _finishing_case(generator, B: int, max_len: int, norm_first: bool, bos: int, V_tgt: int):
    """A model, a batch and an <eos> such that sentence 0 produces <eos> first and, left to
    itself, something else right after (so that a finished sentence must be made to repeat
    <eos>), and at least one sentence does not produce <eos> at its first step."""
    for _ in range(50):
        model = _random_translator(generator, norm_first)
        T_src = int(randint(generator, 2, 6))
        src, src_valid_lens = _random_source(generator, B, T_src)
        free = greedy_decode(model, src, src_valid_lens, bos, V_tgt, max(max_len, 2))  # no <eos>
        eos = int(free[0, 0])
        if free[0, 1] != eos and (B == 1 or bool((free[1:, 0] != eos).any())):
            return model, src, src_valid_lens, eos
    raise RuntimeError("no suitable random model found: change the seed")


# The classic mistakes, each as the function that makes it ----------------------------------------

@torch.no_grad()
def _wrong_greedy_decode(model, src, src_valid_lens, bos, eos, max_len, keep_bos=False,
                         stop="all finished", hold_eos=True, feed="newest", steps=0,
                         argmax_over=-1, lens_in=("encoder", "state")):
    """Greedy decoding with the cache, right by default; each other value of an argument is a
    classic mistake. feed: "prefix" feeds every token so far to the cached state at each step,
    "fresh state" feeds the newest token to a new state each time. steps: tokens more (or fewer)
    than max_len at most. argmax_over: the axis of the logits (B, T_fed, V) the argmax runs over;
    lens_in: where src_valid_lens is passed."""
    model.eval()
    enc_outputs = model.encoder(src, src_valid_lens if "encoder" in lens_in else None)
    state = model.decoder.init_state(enc_outputs, src_valid_lens if "state" in lens_in else None)
    tokens = torch.full((src.shape[0], 1), bos)
    finished = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len + steps):
        if feed == "fresh state":
            state = model.decoder.init_state(enc_outputs, src_valid_lens)
        fed = tokens if feed == "prefix" else tokens[:, -1:]
        logits = model.decoder.step(fed, state)  # (B, T_fed, V)
        new = (logits[:, -1].argmax(dim=-1) if argmax_over == -1  # (B,)
               else logits.argmax(dim=argmax_over)[:, -1])
        if hold_eos:
            new = new.masked_fill(finished, eos)
        ending = finished | (new == eos)
        if stop == "before the last <eos>" and ending.all():
            break
        tokens, finished = torch.cat([tokens, new[:, None]], dim=1), ending
        if (stop == "all finished" and finished.all()) or (stop == "any finished"
                                                           and finished.any()):
            break
    return tokens if keep_bos else tokens[:, 1:]


_CACHED_GREEDY_DECODE_MISTAKES = {
    N_("Your tokens start with <bos>: the exercise returns the generated tokens only, <bos> left "
       "out."): partial(_wrong_greedy_decode, keep_bos=True),
    N_("Your loop runs to max_len even after every sentence has produced <eos>: it stops as soon "
       "as all have finished."): partial(_wrong_greedy_decode, stop="never"),
    N_("Your loop stops when the first sentence finishes: it stops when every sentence has "
       "produced <eos>."): partial(_wrong_greedy_decode, stop="any finished"),
    N_("Your loop stops before appending the <eos> that finishes the last sentence: that <eos> is "
       "part of the output."): partial(_wrong_greedy_decode, stop="before the last <eos>"),
    N_("Your finished sentences go on with other tokens: once a sentence has produced <eos>, it "
       "keeps emitting <eos>."): (partial(_wrong_greedy_decode, hold_eos=False),
                                 partial(_wrong_greedy_decode, hold_eos=False, stop="never")),
    N_("Your steps feed the whole prefix to a state that remembers it already: with the cache, "
       "feed only the newest token."): partial(_wrong_greedy_decode, feed="prefix"),
    N_("Your steps start from a fresh state each time, so the decoder sees only the newest token: "
       "make the state once, before the loop, and keep feeding it."):
        partial(_wrong_greedy_decode, feed="fresh state"),
    N_("Your loop makes one token too many or too few: at most max_len tokens, <bos> not "
       "counted."): (
        partial(_wrong_greedy_decode, steps=1), partial(_wrong_greedy_decode, steps=-1)),
    N_("Your argmax runs over the positions: each step's next token is the argmax over the "
       "vocabulary, the last axis of the logits."): partial(_wrong_greedy_decode, argmax_over=1),
    N_("Your decoding ignores src_valid_lens: the encoder and the decoder's state both need them, "
       "so that the source's padding gets no attention."): tuple(
        partial(_wrong_greedy_decode, lens_in=lens_in)
        for lens_in in ((), ("encoder",), ("state",))),
}


def _remembering_case(generator, B: int, max_len: int, bos: int, V_tgt: int):
    """A model and a batch whose greedy tokens depend on the earlier tokens: a decoder that sees
    only the newest token (a fresh state at every step) would give other tokens. (Small random
    models often repeat one token, whatever came before.)"""
    for _ in range(50):
        model = _random_translator(generator, False)
        src, src_valid_lens = _random_source(generator, B, 5)
        tokens = greedy_decode(model, src, src_valid_lens, bos, V_tgt, max_len)  # no <eos>
        forgetful = _wrong_greedy_decode(model, src, src_valid_lens, bos, V_tgt, max_len,
                                         feed="fresh state")
        if not torch.equal(tokens, forgetful):
            return model, src, src_valid_lens
    raise RuntimeError("no suitable random model found: change the seed")


@exercise_check
def check_cached_greedy_decode(fn: Callable, seed: int = 0, hint: int = 1, *,
                               verbose: bool = False) -> None:
    """fn(model, src, src_valid_lens, bos, eos, max_len) -> (B, T_out) greedy tokens, <bos> left
    out, as ``d2lh.greedy_decode`` gives them: the decoder fed the newest token only, with the
    state of ``model.decoder.init_state``; finished sentences keep emitting <eos>; the loop stops
    once every sentence has finished, or after max_len tokens."""
    generator = seeded_generator(seed)
    V_tgt, bos = 13, 1
    cases = []
    for what, B, max_len, finishing, norm_first in [
            (N_("<eos> never comes: every sentence runs to max_len"), 3, 6, False, False),
            (N_("sentence 0 finishes at its first token, the others later or never"), 4, 8, True,
             False),
            (N_("a single sentence, pre-norm"), 1, 7, True, True),
            (N_("max_len = 1"), 2, 1, True, False),
            ("", 5, 9, True, bool(randint(generator, 0, 1)))]:
        if finishing:
            model, src, src_valid_lens, eos = _finishing_case(generator, B, max_len, norm_first,
                                                             bos, V_tgt)
        else:
            model = _random_translator(generator, norm_first)
            src, src_valid_lens = _random_source(generator, B, 5)
            eos = V_tgt  # one past the vocabulary: the model can never produce it
        label = (f"B={B}, src {tuple(src.shape)}, src_valid_lens={src_valid_lens.tolist()}, "
                 f"bos={bos}, eos={eos}, max_len={max_len}")
        cases.append((case_label(what, label), (model, src, src_valid_lens, bos, eos, max_len)))
    model, src, src_valid_lens = _remembering_case(generator, 3, 8, bos, V_tgt)  # the last draws
    cases.append((case_label(N_("each token depends on the ones before it"),
                             f"B=3, src {tuple(src.shape)}, src_valid_lens="
                             f"{src_valid_lens.tolist()}, bos={bos}, eos={V_tgt}, max_len=8"),
                  (model, src, src_valid_lens, bos, V_tgt, 8)))
    run_check("cached_greedy_decode", fn, cases, reference=greedy_decode,
              hints=(N_("Compare the number of tokens you return with the expected number: when "
                        "does the loop stop, and what do finished sentences emit meanwhile?"),
                     N_("Encode the source once and start the decoder's state from it; each step "
                        "feeds the newest token of each row only, takes the most probable next "
                        "token, makes it <eos> in the rows already finished, and the loop ends "
                        "when every row is."),
                     N_("Encode once; state = model.decoder.init_state(enc_outputs, "
                        "src_valid_lens); at each step feed only the newest tokens, (B, 1), to "
                        "model.decoder.step(tokens, state) and take the argmax of the last "
                        "position; set the finished rows' token to eos before appending; stop when "
                        "all rows are finished. Return only the generated tokens, without the "
                        "<bos> column.")),
              hint=hint, mistakes=_CACHED_GREEDY_DECODE_MISTAKES, verbose=verbose)


@torch.no_grad()
def _wrong_log_prob(model, src, src_valid_lens, tokens, bos, eos, shift=True, count="to the first",
                    reduce="sum", softmax_dim=-1, lengths_of="counted", scored="tokens",
                    window=(0, 0), normalise="log_softmax", source_lens=True):
    """log P(tokens | src) and lengths by teacher forcing, right by default; each other value of
    an argument is a classic mistake. count: which positions of a row count; window: the counted
    positions' first index, and how many past the last one; normalise: what turns the logits into
    the scores summed."""
    model.eval()
    B, T = tokens.shape
    dec_input = torch.cat([torch.full((B, 1), bos), tokens[:, :-1]], dim=1) if shift else tokens
    logits = model(src, src_valid_lens if source_lens else None, dec_input)
    log_p = {"log_softmax": lambda: torch.log_softmax(logits, dim=softmax_dim),
             "none": lambda: logits,
             "softmax": lambda: torch.softmax(logits, dim=softmax_dim)}[normalise]()
    scored = tokens if scored == "tokens" else dec_input  # the input: the tokens shifted
    token_log_p = log_p.gather(2, scored[..., None]).squeeze(2)  # (B, T)
    is_eos = tokens == eos
    first = torch.where(is_eos.any(1), is_eos.int().argmax(1), T)  # the first <eos>, or T
    last = torch.where(is_eos.any(1), T - 1 - is_eos.flip(1).int().argmax(1), T)
    lengths = {"to the first": torch.where(is_eos.any(1), first + 1, T),
               "before the first": first, "all": torch.full((B,), T),
               "to the last": torch.where(is_eos.any(1), last + 1, T)}[count]
    counted = sequence_mask(lengths + window[1], T) & (torch.arange(T) >= window[0])
    sums = torch.where(counted, token_log_p, 0.0).sum(dim=1)
    if reduce == "mean":
        sums = sums / lengths.clamp(min=1)
    right = torch.where(is_eos.any(1), first + 1, T)
    return sums, {"counted": lengths, "T": torch.full((B,), T), "right": right,
                  "one more": right + 1, "one fewer": right - 1}[lengths_of]


_TRANSLATION_LOG_PROB_MISTAKES = {
    N_("Your decoder input is not shifted right: to predict tokens[:, t] the decoder sees <bos> "
       "and the tokens before t, never token t itself."): partial(_wrong_log_prob, shift=False),
    N_("Your log-probabilities count the tokens after the first <eos>: a row ends at its first "
       "<eos>."): (partial(_wrong_log_prob, count="all"),
                  partial(_wrong_log_prob, count="all", lengths_of="right")),
    N_("Your log-probabilities count up to the last <eos>: a row ends at its first one."):
        partial(_wrong_log_prob, count="to the last"),
    N_("Your log-probabilities leave out the <eos> itself: a row counts up to its first <eos>, "
       "included (the model is scored for ending there)."):
        partial(_wrong_log_prob, count="before the first"),
    N_("Your log-probabilities are averaged over the tokens: log P(y | x) is their sum."):
        partial(_wrong_log_prob, reduce="mean"),
    N_("Your log-probabilities are those of the decoder's input tokens (<bos> and the tokens "
       "before t): position t predicts tokens[:, t] itself."):
        partial(_wrong_log_prob, scored="input"),
    N_("Your softmax normalises over the positions: each position's log-probabilities are over the "
       "vocabulary, the last axis."): partial(_wrong_log_prob, softmax_dim=1),
    N_("Your lengths are T_out for every row: a row's length counts its tokens up to its first "
       "<eos>, included."): partial(_wrong_log_prob, lengths_of="T"),
    N_("Your lengths are off by one: a row's length counts its tokens up to its first <eos>, that "
       "<eos> included."): (partial(_wrong_log_prob, lengths_of="one more"),
                           partial(_wrong_log_prob, lengths_of="one fewer")),
    N_("Your log-probabilities count the positions off by one: a row counts its positions from the "
       "first up to its first <eos>, both included."): tuple(
        partial(_wrong_log_prob, window=window) for window in ((1, 0), (0, 1), (1, 1))),
    N_("Your scores are not log-probabilities (the raw logits, or probabilities): take the "
       "log_softmax of the logits over the vocabulary."): tuple(
        partial(_wrong_log_prob, normalise=normalise) for normalise in ("none", "softmax")),
    N_("Your model ignores src_valid_lens: the source's padding must get no attention."):
        partial(_wrong_log_prob, source_lens=False),
}


@exercise_check
def check_translation_log_prob(fn: Callable, seed: int = 0, hint: int = 1, *,
                               verbose: bool = False) -> None:
    """fn(model, src, src_valid_lens, tokens, bos, eos) -> (log_probs, lengths), each (B,): the
    log-probability log P(y | x) that the model gives each row of ``tokens`` (B, T_out, no <bos>),
    by teacher forcing, counting each row up to its first <eos> included (all T_out tokens if it
    has none), and those lengths; as ``d2lh.sequence_log_prob``."""
    generator = seeded_generator(seed)
    bos, eos = 1, 2
    cases = []
    for what, B, T_out, norm_first in [(N_("one sentence without <eos>"), 1, 4, False),
                                       (N_("rows ending at different places, some without "
                                           "<eos>"), 4, 6, False),
                                       (N_("pre-norm"), 3, 5, True),
                                       ("", 5, 7, bool(randint(generator, 0, 1)))]:
        model = _random_translator(generator, norm_first)
        src, src_valid_lens = _random_source(generator, B, 5)
        tokens = randint(generator, 3, 12, (B, T_out))
        for row in range(1, B):  # row 0 never ends; the others end somewhere, padded after <eos>
            end = int(randint(generator, 0, T_out - 1))
            tokens[row, end:] = eos
            if row % 2:  # some rows hold other tokens after their <eos>, which must not count
                tokens[row, end + 1:] = randint(generator, 3, 12, (T_out - end - 1,))
        label = (f"B={B}, tokens {tuple(tokens.shape)} = {tokens.tolist()}, bos={bos}, eos={eos}, "
                 f"src_valid_lens={src_valid_lens.tolist()}")
        cases.append((case_label(what, label), (model, src, src_valid_lens, tokens, bos, eos)))
    with torch.no_grad():
        run_check("translation_log_prob", fn, cases, reference=sequence_log_prob,
                  hints=(N_("Which tokens does the decoder see when it predicts tokens[:, t]? And "
                            "which tokens of a row belong to the translation?"),
                         N_("Teacher forcing: the decoder reads <bos> and the tokens before "
                            "position t to predict token t; add the log-probabilities the model "
                            "gives the given tokens, over the positions up to the first <eos>, "
                            "that one included."),
                         N_("Feed the decoder <bos> followed by tokens[:, :-1] (shifted right), "
                            "take log_softmax of the logits, gather the log-probability of each "
                            "given token, and sum over the positions up to the first <eos>, "
                            "included (all of them if the row has none), selecting them with a "
                            "mask rather than multiplying. Return the sums and the lengths "
                            "counted.")),
                  hint=hint, mistakes=_TRANSLATION_LOG_PROB_MISTAKES, verbose=verbose)


MISTAKES = {"check_cached_greedy_decode": _CACHED_GREEDY_DECODE_MISTAKES,
            "check_translation_log_prob": _TRANSLATION_LOG_PROB_MISTAKES}  # for the tests
