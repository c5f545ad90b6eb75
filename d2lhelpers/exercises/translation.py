"""The checks of notebook 07_translation's coding exercises."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..decoding import greedy_decode
from ..transformer import Transformer
from .cases import case_label, randint, random_module, seeded_generator
from .runner import run_check

__all__ = ["check_cached_greedy_decode"]


def check_cached_greedy_decode(fn: Callable, seed: int = 0) -> None:
    """fn(model, src, src_valid_len, bos, eos, max_len) -> (B, T_out) greedy tokens, <bos> left
    out, as ``d2lh.greedy_decode`` gives them: the decoder fed the newest token only, with the
    state of ``model.decoder.init_state``; finished sentences keep emitting <eos>; the loop stops
    once every sentence has finished, or after max_len tokens."""
    generator = seeded_generator(seed)
    V_src, V_tgt, bos = 11, 13, 1
    cases = []
    for what, B, max_len, eos_kind, norm_first in [
            ("<eos> never comes: every sentence runs to max_len", 3, 6, "never", False),
            ("sentence 0 finishes at its first token, the others later or never", 4, 8, "early", False),
            ("a single sentence, pre-norm", 1, 7, "early", True),
            ("max_len = 1", 2, 1, "early", False),
            ("", 5, 9, "early", bool(randint(generator, 0, 1)))]:
        model = random_module(Transformer(V_src, V_tgt, d_model=8, num_heads=2, ffn_hidden=16,
                                          num_layers=2, dropout=0.0, norm_first=norm_first), generator)
        T_src = int(randint(generator, 2, 6))
        src = randint(generator, 3, V_src - 1, (B, T_src))
        src_valid_len = randint(generator, 1, T_src, (B,))
        if eos_kind == "never":
            eos = V_tgt  # one past the vocabulary: the model can never produce it
        else:  # the token sentence 0 produces first, so that it finishes at once
            eos = int(greedy_decode(model, src[:1], src_valid_len[:1], bos, V_tgt, 1)[0, 0])
        label = (f"B={B}, T_src={T_src}, src_valid_len={src_valid_len.tolist()}, bos={bos}, "
                 f"eos={eos}, max_len={max_len}")
        cases.append((case_label(what, label), (model, src, src_valid_len, bos, eos, max_len)))
    run_check("cached_greedy_decode", fn, cases, reference=greedy_decode,
              hint="encode once; state = model.decoder.init_state(enc_outputs, src_valid_len); at "
                   "each step feed only the newest tokens, (B, 1), to model.decoder.step(tokens, "
                   "state) and take the argmax of the last position; set the finished rows' token "
                   "to eos before appending; stop when all rows are finished. Return only the "
                   "generated tokens, without the <bos> column.")
