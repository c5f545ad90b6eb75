"""The checks of notebook 07_translation's coding exercises: greedy decoding with the cache, and the
log-probability of given translations."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..decoding import greedy_decode, sequence_log_prob
from ..transformer import Transformer
from .cases import case_label, randint, random_lengths, seeded_generator, seeded_module
from .runner import run_check

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


def check_cached_greedy_decode(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(model, src, src_valid_lens, bos, eos, max_len) -> (B, T_out) greedy tokens, <bos> left
    out, as ``d2lh.greedy_decode`` gives them: the decoder fed the newest token only, with the
    state of ``model.decoder.init_state``; finished sentences keep emitting <eos>; the loop stops
    once every sentence has finished, or after max_len tokens."""
    generator = seeded_generator(seed)
    V_tgt, bos = 13, 1
    cases = []
    for what, B, max_len, finishing, norm_first in [
            ("<eos> never comes: every sentence runs to max_len", 3, 6, False, False),
            ("sentence 0 finishes at its first token, the others later or never", 4, 8, True, False),
            ("a single sentence, pre-norm", 1, 7, True, True),
            ("max_len = 1", 2, 1, True, False),
            ("", 5, 9, True, bool(randint(generator, 0, 1)))]:
        if finishing:
            model, src, src_valid_lens, eos = _finishing_case(generator, B, max_len, norm_first,
                                                             bos, V_tgt)
        else:
            model = _random_translator(generator, norm_first)
            src, src_valid_lens = _random_source(generator, B, 5)
            eos = V_tgt  # one past the vocabulary: the model can never produce it
        label = (f"B={B}, src {tuple(src.shape)}, src_valid_lens={src_valid_lens.tolist()}, bos={bos}, "
                 f"eos={eos}, max_len={max_len}")
        cases.append((case_label(what, label), (model, src, src_valid_lens, bos, eos, max_len)))
    run_check("cached_greedy_decode", fn, cases, reference=greedy_decode,
              hints=("Compare the number of tokens you return with the expected number: when does "
                     "the loop stop, and what do finished sentences emit meanwhile?",
                     "Encode once; state = model.decoder.init_state(enc_outputs, src_valid_lens); at "
                     "each step feed only the newest tokens, (B, 1), to model.decoder.step(tokens, "
                     "state) and take the argmax of the last position; set the finished rows' token "
                     "to eos before appending; stop when all rows are finished. Return only the "
                     "generated tokens, without the <bos> column."),
              hint=hint)


def check_translation_log_prob(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(model, src, src_valid_lens, tokens, bos, eos) -> (log_probs, lengths), each (B,): the
    log-probability log P(y | x) that the model gives each row of ``tokens`` (B, T_out, no <bos>),
    by teacher forcing, counting each row up to its first <eos> included (all T_out tokens if it
    has none), and those lengths; as ``d2lh.sequence_log_prob``."""
    generator = seeded_generator(seed)
    bos, eos = 1, 2
    cases = []
    for what, B, T_out, norm_first in [("one sentence without <eos>", 1, 4, False),
                                       ("rows ending at different places, some without <eos>", 4, 6, False),
                                       ("pre-norm", 3, 5, True),
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
                  hints=("Which tokens does the decoder see when it predicts tokens[:, t]? And which "
                         "tokens of a row belong to the translation?",
                         "Feed the decoder <bos> followed by tokens[:, :-1] (shifted right), take "
                         "log_softmax of the logits, gather the log-probability of each given token, "
                         "and sum over the positions up to the first <eos>, included (all of them if "
                         "the row has none), selecting them with a mask rather than multiplying. "
                         "Return the sums and the lengths counted."),
                  hint=hint)
