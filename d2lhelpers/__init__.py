"""d2lhelpers: the companion package of the course on attention and Transformers.

In notebooks: ``import d2lhelpers as d2lh``. Each public name lives in the module of its concern
and is imported here by name, so that editors and type checkers see them all:

- ``basics``: seeds, devices, a timer;
- ``plotting``: curves, attention heatmaps, a live training plot (the only module using matplotlib);
- ``attention``: masks, masked softmax, the scoring functions, multi-head attention, the
  key-value cache;
- ``positional``: the sinusoidal positional encoding;
- ``transformer``: the encoder-decoder Transformer, block by block;
- ``rnn``: the RNN (GRU) encoder-decoder with Bahdanau attention, the baseline;
- ``data``: the English-French pairs, vocabularies and batches;
- ``training``: the masked loss, the warm-up schedule, the training loop;
- ``decoding``: greedy decoding, beam search, translation and held-out BLEU;
- ``bleu``: BLEU, the teaching formula and the corpus score we report;
- ``decoder_only``: beyond 2017: rotary positions, grouped-query attention, online softmax, a
  decoder-only language model with its cache, sampling;
- ``exercises``: the checks of the notebooks' coding exercises (``d2lh.exercises.check_...``).
"""

from . import exercises
from .attention import (
    AdditiveAttention,
    DotProductAttention,
    KVCache,
    MultiHeadAttention,
    check_valid_lens,
    fused_attention,
    masked_softmax,
    sequence_mask,
    valid_lens_to_mask,
)
from .basics import Timer, check_int, choose_device, offset_seed, set_seed
from .bleu import BleuComparison, corpus_bleu, paired_bleu_test, sentence_bleu
from .data import (
    FRA_ENG_SHA1,
    FRA_ENG_URL,
    Batch,
    TranslationData,
    Vocab,
    data_dir,
    fra_eng_path,
    load_translation_data,
    normalize,
    read_pairs,
    split_held_out,
    tokenize,
    truncate_pad,
)
from .decoder_only import (
    DecoderOnlyBlock,
    DecoderOnlyLM,
    GroupedQueryAttention,
    LMState,
    RotaryEmbedding,
    TensorMemoryTracker,
    apply_rotary,
    generate,
    kv_cache_bytes,
    next_token_probs,
    online_softmax_attention,
    online_softmax_update,
    rotary_frequencies,
)
from .decoding import (
    Beams,
    BeamSearchResult,
    advance_beams,
    beam_search,
    greedy_decode,
    held_out_bleu,
    sequence_log_prob,
    translate,
)
from .plotting import (
    LivePlot,
    live_loss_plot,
    plot,
    set_figsize,
    show_heatmaps,
    use_png_display,
    use_svg_display,
)
from .positional import PositionalEncoding
from .rnn import BahdanauDecoder, BahdanauDecoderState, BahdanauSeq2Seq, GRUEncoder
from .training import TrainingReport, masked_cross_entropy, train_seq2seq, transformer_lr
from .transformer import (
    AddNorm,
    DecoderBlock,
    DecoderState,
    EncoderBlock,
    PositionwiseFFN,
    Transformer,
    TransformerDecoder,
    TransformerEncoder,
    causal_valid_lens,
    copy_to_torch_layer,
)

__version__ = "0.1.0"
