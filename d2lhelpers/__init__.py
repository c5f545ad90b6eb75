"""d2lhelpers: the companion package of the course on attention and Transformers.

In notebooks: ``import d2lhelpers as d2lh``. Each public name lives in the module of its concern;
modules load on first use so that ``import d2lhelpers`` stays quick (matplotlib, for instance, is
imported only when something is plotted).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    # basics
    "set_seed": "basics", "choose_device": "basics", "Timer": "basics",
    # plotting
    "use_svg_display": "plotting", "use_png_display": "plotting", "set_figsize": "plotting",
    "plot": "plotting", "show_heatmaps": "plotting", "LivePlot": "plotting",
    # attention
    "check_valid_lens": "attention", "valid_lens_to_mask": "attention",
    "masked_softmax": "attention", "DotProductAttention": "attention",
    "AdditiveAttention": "attention", "KVCache": "attention", "MultiHeadAttention": "attention",
    # positional encoding
    "PositionalEncoding": "positional",
    # transformer
    "PositionwiseFFN": "transformer", "AddNorm": "transformer", "EncoderBlock": "transformer",
    "TransformerEncoder": "transformer", "DecoderBlock": "transformer",
    "DecoderState": "transformer", "TransformerDecoder": "transformer",
    "Transformer": "transformer", "causal_valid_lens": "transformer",
    "copy_to_torch_layer": "transformer",
    # training and decoding
    "masked_cross_entropy": "training", "TrainingReport": "training",
    "train_seq2seq": "training", "greedy_decode": "training", "translate": "training",
    "held_out_bleu": "training", "transformer_lr": "training", "BeamSearchResult": "training",
    "beam_search": "training", "sequence_log_prob": "training",
    # data
    "data_dir": "data", "FRA_ENG_URL": "data", "FRA_ENG_SHA1": "data", "fra_eng_path": "data",
    "read_pairs": "data", "normalize": "data", "tokenize": "data", "Vocab": "data",
    "truncate_pad": "data", "split_held_out": "data", "TranslationData": "data",
    "load_translation_data": "data",
    # bleu
    "sentence_bleu": "bleu", "corpus_bleu": "bleu",
}

__all__ = sorted(_EXPORTS)


# modules reachable as attributes, e.g. d2lh.exercises.check_masked_softmax
_SUBMODULES = {"basics", "plotting", "attention", "positional", "transformer", "data", "training",
               "bleu", "exercises"}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'd2lhelpers' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | _SUBMODULES)
