"""Exercises: the automatic checks of the notebooks' coding exercises.

In a notebook, a coding exercise is a function the learner writes, with the solution between
nbgrader's markers, followed by a check cell that calls one of the checks below::

    def sparsemax(scores):
        ### BEGIN SOLUTION
        ...
        ### END SOLUTION

    d2lh.exercises.check_sparsemax(sparsemax)

A check builds its own inputs (seeded random shapes and edge cases), runs the learner's function on
each, and compares the result with a reference computed by the package (or a short formula). On
failure it names the mistake when it recognises it (each check holds a catalogue of the classic
mistakes of its exercise, ``MISTAKES`` in its module, recognised by what the learner's function
returns on every case), says which input failed, what was expected and what came back, summarised
to fit on a screen (``verbose=True`` shows the values in full), and gives a hint; on success it
prints one line. It raises :class:`ExerciseCheckFailed`, an ``AssertionError``, so that
nbgrader counts a failed check as a failed test. ``seed`` draws other random cases; ``hint=2``
adds a step to the first nudge, and the last step (``hint=3``) gives the answer. A function that
changes what it was given (a tensor, a layer's weights or hooks) fails and is told so. In a
teaching notebook the call has ``model_answer=True``: the model answer is checked, and the check
prints one line saying so, never a verdict the reader did not earn. The hidden tests (between
``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``, only in nbgrader's source notebooks,
which ``python -m exercise_authoring source`` writes from the teaching notebooks) run each check
again with ``seed=1`` through :func:`~.runner.check_afresh`, from a private copy of the package
that nothing the learner's code patched can reach; they print nothing when they pass (the visible
check has said "Correct" already).

In a student copy the solution is a stub that raises :class:`~.stubs.NotWrittenYet`; a check
that meets it says "not implemented yet", and any other cell that calls the function says, in two
lines, which function to write where.

Each concern in its place: :mod:`.runner` runs a check and words its failures; :mod:`.cases`
draws the inputs (and holds what several checks share to build them); one module per notebook,
``checks_<topic>`` (e.g. :mod:`.checks_attention_scoring` for notebook 03_attention_scoring),
holds that notebook's checks and what is specific to its exercises. The prefix keeps them apart
from the package's modules of the same topic (``d2lhelpers.transformer`` holds the Transformer,
``d2lhelpers.exercises.checks_transformer`` the checks of notebook 06_transformer); and
:mod:`.stubs` holds what the stubs raise. Student copies and nbgrader metadata are written by a
separate package, ``exercise_authoring``, which needs no torch.
"""

from __future__ import annotations

from .checks_queries_keys_values import check_lookup, check_cross_attention
from .checks_nadaraya_watson import check_kernel_as_attention, check_loo_error
from .checks_attention_scoring import check_sliding_window_weights, check_sparsemax
from .checks_multihead_attention import (check_per_head_weights, check_to_torch_multihead,
                                         check_packed_self_attention)
from .checks_positional_encoding import (check_sinusoidal_table, check_offset_attention,
                                         check_relative_self_attention)
from .checks_transformer import (check_sublayer_parameters, check_default_init_stds,
                                 check_transformer_multiply_adds, check_cached_block_step)
from .checks_translation import check_cached_greedy_decode, check_translation_log_prob
from .checks_bahdanau_attention import check_gru_cell, check_luong_step
from .checks_training_recipe import check_adam_steps, check_real_token_smoothing
from .checks_decoding import check_advance_beams, check_follow_parents
from .checks_beyond_2017 import (check_cached_gqa_self_attention, check_online_softmax_update,
                                 check_rotary_at_positions, check_top_p_probs)
from .checks_heads import check_head_ablation, check_induction_score
from .runner import ExerciseCheckFailed, Symptom, language, run_check, set_language
from .stubs import NotWrittenYet

__all__ = [
    "ExerciseCheckFailed",
    "NotWrittenYet",
    "Symptom",
    "run_check",
    "language",
    "set_language",
    "check_lookup",
    "check_cross_attention",
    "check_kernel_as_attention",
    "check_loo_error",
    "check_sliding_window_weights",
    "check_sparsemax",
    "check_per_head_weights",
    "check_to_torch_multihead",
    "check_packed_self_attention",
    "check_sinusoidal_table",
    "check_offset_attention",
    "check_relative_self_attention",
    "check_sublayer_parameters",
    "check_default_init_stds",
    "check_transformer_multiply_adds",
    "check_cached_block_step",
    "check_cached_greedy_decode",
    "check_translation_log_prob",
    "check_real_token_smoothing",
    "check_adam_steps",
    "check_advance_beams",
    "check_follow_parents",
    "check_gru_cell",
    "check_luong_step",
    "check_rotary_at_positions",
    "check_online_softmax_update",
    "check_cached_gqa_self_attention",
    "check_top_p_probs",
    "check_induction_score",
    "check_head_ablation",
]
