"""Do the notebooks' assertions hold on other seeds and thread counts, not only on the run we stored?

    python benchmarks/robustness.py                         # every notebook, seeds 0-4, 1 and 2 threads
    python benchmarks/robustness.py notebooks/09_training_recipe.ipynb --seeds 0 1 --threads 1
    python benchmarks/robustness.py --json results.json     # also keep the raw results

Each notebook is executed top to bottom (plain execution, as a learner would run it: no comparison
with the stored outputs) once per perturbation:

- seed offset s: ``D2LHELPERS_SEED_OFFSET=s``, which ``d2lh.set_seed`` adds to every seed, so that
  model initialisations, batch orders and sampled data all change (s = 0 is the stored run);
- threads t: ``OMP_NUM_THREADS=t``, which changes the order of floating-point sums inside PyTorch's
  kernels, so that the same seed follows a slightly different training trajectory.

It prints two Markdown tables: notebook x perturbation -> "pass", or the assertion that failed;
and, per notebook, the quantities its assertions are about (``WATCHED`` below), for every run, so
that the margin of each claim can be read off. Run it on an otherwise idle machine, with
``D2LHELPERS_DATA_DIR`` pointing at the data as ``.ci/run`` sets it.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import sys
import time

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}

# The quantities behind each notebook's stochastic assertions: name -> a Python expression evaluated
# in the notebook's kernel after the run (also after a failed run, for what exists by then).
# Each name says which bound the notebook asserts. Notebook 01 draws nothing at random: no entry.
WATCHED: dict[str, dict[str, str]] = {
    "02_nadaraya_watson": {
        "NW error / average error (< 0.75)": "error(y_hat_nw) / error(y_hat_avg)",
        "training error rises with the width (smallest step > 0)":
            "min(b - a for a, b in zip(train_errors, train_errors[1:]))",
        "narrow: training error / noise (< 1)": "tr_n / noise",
        "narrow: validation / training error (> 2)": "va_n / tr_n",
        "narrow minus best validation error (> 0)": "va_n - va_b",
        "wide: training error / noise (> 2)": "tr_w / noise",
        "wide / best validation error (> 2)": "va_w / va_b",
        "best width (> 0.05, < 1)": "best",
        "shrinking width: smallest fall of the error (> 0)":
            "min(a - b for a, b in zip(shrinking_errors, shrinking_errors[1:]))",
        "shrinking width: first / last error (> 8)": "shrinking_errors[0] / shrinking_errors[-1]",
        "width 1: last / second error (> 0.8)": "fixed_errors[-1] / fixed_errors[1]",
        "last error, width 1 / shrinking (> 5)": "fixed_errors[-1] / shrinking_errors[-1]",
        "grid index of the lowest leave-one-out loss (1 .. 9)": "lowest",
        "learned w (> 1)": "w_learned",
        "final loss minus the grid's lowest (<= 0.005)": "losses[-1] - min(loss_loo)",
        "largest weight, learned / w = 1 (> 1)":
            "largest_weight(weights_param) / largest_weight(weights_nw)",
        "roughness, learned / w = 1 (> 2)": "roughness(y_hat_param) / roughness(y_hat_nw)",
        "learned width / mean spacing of the training inputs (> 1)": "(1 / w_learned) / (5 / n_train)",
        "largest weight of the edge rows minus the middle rows' (> 0)":
            "min(_largest[0], _largest[-1]) - _largest[10:40].max()",
        "10 draws: largest error difference learned - w = 1 (< 0)": "differences.max()",
        "10 draws: upper end of its 95% interval (< 0)": "high",
        "10 draws: smallest learned w (> 1)": "ws.min()",
        "10 draws: smallest roughness ratio (> 2)": "roughness_ratios.min()",
        "exercise 1: mean best w, n = 500 / n = 50 (> 1)": "best_w[500].mean() / best_w[50].mean()",
        "exercise 3: learned loss minus the grid's lowest (<= 0.005)":
            "error_learned - search_errors[i_search]",
    },
    "03_attention_scoring": {
        "dot-product example: largest |weight - 1/6| on the valid keys (> 0.05)":
            "departure_from_uniform",
        "dropout: largest |mean - x| in standard errors (<= 5)":
            "((mean - x).abs()[:6] / std_error[:6]).max()",
        "nn.Dropout: largest |mean - x| in standard errors (<= 5)":
            "((dropout_draws.mean(dim=0) - x).abs()[:6] / std_error[:6]).max()",
        "Var(q.k) / d: largest deviation from 1, in tolerances (< 1)":
            "max(abs(v / d - 1) / (5 * math.sqrt((2 + 6 / d) / num_pairs)) "
            "for v, d in zip(unscaled['variance'], dims))",
        "gradient reaching q, unscaled minus scaled, smallest over d (> 0)":
            "min(a - b for a, b in zip(query_gradient['unscaled'], "
            "query_gradient['scaled by 1/sqrt(d)']))",
        "unscaled: mean largest weight at d = 1024 (> 0.95)": "unscaled['max weight'][-1]",
        "unscaled: smallest rise of the largest weight (> 0)":
            "min(b - a for a, b in zip(unscaled['max weight'], unscaled['max weight'][1:]))",
        "unscaled: smallest fall of the Jacobian norm (> 0)":
            "min(a - b for a, b in zip(unscaled['jacobian norm'], unscaled['jacobian norm'][1:]))",
        "unscaled: Jacobian norm d = 1024 / d = 4 (< 0.2)":
            "unscaled['jacobian norm'][-1] / unscaled['jacobian norm'][0]",
        "scaled: range of the largest weight (< 0.05)":
            "max(scaled['max weight']) - min(scaled['max weight'])",
        "scaled: Jacobian norm largest / smallest (< 1.1)":
            "max(scaled['jacobian norm']) / min(scaled['jacobian norm'])",
        "Jacobian norm at d = 1024, scaled / unscaled (> 5)":
            "scaled['jacobian norm'][-1] / unscaled['jacobian norm'][-1]",
        "predicting 0: test MSE (0.9 .. 1.1)": "predict_zero_mse()",
        "softmax: largest test MSE (< 0.05)": "mse['softmax'].max()",
        "softmax: smallest retrieval accuracy (> 0.95)": "table['softmax']['accuracy'].min()",
        "alternatives: smallest MSE / largest softmax MSE (> 3)":
            "min(mse[name].min() for name in alternatives) / mse['softmax'].max()",
        "paired differences from softmax: smallest mean / standard error (> 10)":
            "min(paired_z.values())",
        "no normalisation: smallest MSE / largest of the others (> 1.2)":
            "mse['none'].min() / max(mse[name].max() for name in alternatives[:-1])",
        "all: smallest share of right arg-max (> 0.95)":
            "min(table[name]['arg-max right'].min() for name in mse)",
        "softmax: smallest weight on the right key (> 0.95)": "table['softmax']['right weight'].min()",
        "sigmoid: smallest |sum of the weights - 1| (> 0.05)":
            "abs(table['sigmoid']['weight sum'] - 1).min()",
        "exercise 5, sparsemax: largest test MSE (< 0.05)": "sparse['test MSE'].max()",
        "exercise 5, sparsemax: largest MSE / smallest of the alternatives (< 1/3)":
            "sparse['test MSE'].max() / best_alternative",
        "exercise 5, |mean paired difference from softmax| / softmax's mean MSE (< 0.5)":
            "abs(sparse_excess.mean()) / mse['softmax'].mean()",
        "exercise 6, sigmoid b = 0: smallest test MSE / predicting 0 (> 1)":
            "sigmoid_0['test MSE'].min() / predict_zero_mse()",
        "exercise 6, sigmoid b = 0: smallest sum of the weights (> 2)": "sigmoid_0['weight sum'].min()",
        "exercise 6, sigmoid b = 0: smallest share of right arg-max (> 0.9)":
            "sigmoid_0['arg-max right'].min()",
        "exercise 6, softmax(0.1 s) minus softmax, smallest over seeds (> 0)":
            "(softmax_01['test MSE'] - mse['softmax']).min()",
        "exercise 6, softmax(0.1 s): largest MSE / smallest of the alternatives (< 1)":
            "softmax_01['test MSE'].max() / min(mse[name].min() for name in alternatives)",
    },
    "04_multihead_attention": {
        "random heads: largest |weight - 1/T| (< 0.05)": "(w - 1 / T).abs().max()",
        "random heads: largest difference between heads 0 and 1 (> 0)":
            "(w[0, 0] - w[0, 1]).abs().max()",
        "time of 64 heads / 1 head, readable path (> 1.5)": "readable[64]",
        "readable minus fused ratio of 64 heads to 1 (> 0)": "readable[64] - fused[64]",
    },
    "05_self_attention_positional_encoding": {
        "with positions: lowest accuracy on length 16 (> 0.95)":
            "min(in_length[name, s] for name in ('sinusoidal', 'learned') for s in seeds)",
        "no positions: highest accuracy on length 16 (< 0.5)":
            "max(in_length['none', s] for s in seeds)",
        "no positions: lowest accuracy on length 16 (> 0.125)":
            "min(in_length['none', s] for s in seeds)",
        "learned, positions 16-63: highest accuracy (< 0.094)": "unseen_accuracy['learned'].max()",
        "sinusoidal, positions 16-63: lowest accuracy (> 0.125)":
            "unseen_accuracy['sinusoidal'].min()",
        "sinusoidal, positions 16-63: highest accuracy (< 0.6)":
            "unseen_accuracy['sinusoidal'].max()",
        "sinusoidal minus no positions, 16-63: smallest (> 0)": "gains['none'].min()",
        "sinusoidal minus learned, 16-63: lower end of the 95% interval (> 0.1)":
            "intervals['learned'].low",
        "sinusoidal, mean curve on 16-63: lowest (< 0.2)": "sinusoidal_curve.min()",
        "sinusoidal, mean curve on 16-63: highest (> 0.5)": "sinusoidal_curve.max()",
        "sinusoidal, mean curve on 16-63: position of the highest (> 30)":
            "sinusoidal_curve.argmax().item() + 16",
        "sinusoidal, mean curve: positions 1-11 minus 12-15 (> 0.1)":
            "(lambda c: (c[:11].mean() - c[11:15].mean()).item())"
            "(per_position['sinusoidal'].mean(dim=0))",
        "sinusoidal: accuracy at length 16 minus on positions 1-15 of 64 (> 0)":
            "min(in_length['sinusoidal', s] - seen_accuracy['sinusoidal'][k].item() "
            "for k, s in enumerate(seeds))",
        "64 tokens: lowest weight of queries 1-15 on keys 16-63 (> 0.2)": "min(weight_on_new)",
        "64 tokens: smallest drop of the weight on the previous token (> 0.1)":
            "min(a - b for a, b in zip(weight_on_previous[16], weight_on_previous[64]))",
        "keys 16-63 masked: lowest accuracy on positions 1-15 (> 0.95)": "min(masked_accuracy)",
        "keys 16-63 masked: largest |accuracy on 1-15 - on length 16| (< 0.02)":
            "max(abs(m - in_length['sinusoidal', s]) for m, s in zip(masked_accuracy, seeds))",
        "relative bias: largest |accuracy 16-63 - accuracy 1-15| (< 0.05)":
            "(relative_unseen - relative_seen).abs().max()",
        "relative bias minus sinusoidal, 16-63: smallest (> 0.3)":
            "(relative_unseen - unseen_accuracy['sinusoidal']).min()",
        "relative bias: length 16 minus positions 1-15 of 64: smallest (> 0.05)":
            "(relative_in_length - relative_seen).min()",
        "random offset, 16-63: lowest accuracy (> 0.8)": "variants['random offset'].min()",
        "random offset minus random lengths, 16-63: smallest (> 0.3)":
            "(variants['random offset'] - variants['random lengths']).min()",
        "random lengths minus fixed length, 16-63: |mean| (< 0.1)":
            "abs(changes['random lengths'].mean())",
        "random offset, positions 1-15 of 64 tokens: highest accuracy (< 0.95)":
            "variants_seen['random offset'].max()",
        "random offset minus fixed length, positions 1-15 of 64: |mean| (< 0.1)":
            "abs(variants_seen['random offset'].mean() - seen_accuracy['sinusoidal'].mean())",
        "exercise 1: causal self-attention, shuffled vs in order: largest difference (> 1e-3)":
            "gap",
    },
    "06_transformer": {
        "post-norm stream: largest |std - 1| (< 0.01)": "(post_stds - 1).abs().max()",
        "pre-norm stream: smallest growth per layer (> 0)": "(pre_stds[1:] - pre_stds[:-1]).min()",
        "pre-norm stream: largest relative gap to sqrt(1 + layer) (< 0.15)":
            "((pre_stds - torch.sqrt(1.0 + layers)).abs() / torch.sqrt(1.0 + layers)).max()",
        "scaled embedding: |std - 1| (< 0.05)": "abs((table * math.sqrt(16)).std() - 1)",
        "embedding table: |std - 1/4| (< 0.02)": "abs(table.std() - 0.25)",
        "W_q = W_k: share of tokens whose top score is their own (> 0.5)": "shared_self",
        "separate: share of tokens whose top score is their own (< 0.25)": "separate_self",
        "exercise 2: std of a default FFN's output (0.15 .. 0.4)": "ffn_std",
        "exercise 2: pre-norm at layer 24, default / unit-scale FFNs (< 0.5)":
            "default_pre[-1] / pre_stds[-1]",
        "exercise 2: pre-norm, largest relative gap to sqrt(1 + s^2 l) (< 0.15)":
            "((default_pre - torch.sqrt(1 + ffn_std ** 2 * layer)).abs()"
            " / torch.sqrt(1 + ffn_std ** 2 * layer)).max()",
        "exercise 2: post-norm, largest |std - 1| (< 0.01)": "(default_post - 1).abs().max()",
    },
    "07_translation": {
        "padding share, padded to 10 (> 0.4)": "plain_padding",
        "padding share, bucketed (< 0.05)": "bucket_padding",
        "positions per epoch, bucketed / padded (0.4 .. 0.6)": "bucket_positions / plain_positions",
        "first epoch loss (> 3.0)": "report.epoch_losses[0]",
        "last epoch loss (< 1.5)": "report.epoch_losses[-1]",
        "held-out BLEU (> 20)": "bleu",
        "held-out BLEU: smallest rise from one epoch to the next (> 0)":
            "min(b - a for a, b in zip(held_out_bleus, held_out_bleus[1:]))",
        "95% interval: low end / 10 x best baseline (> 1)":
            "low / (10 * max(copy_bleu, constant_bleu))",
        "95% interval width (< 15)": "high - low",
        "cross-attention: smallest mean largest weight of a head (> 0.5)":
            "peak.mean(dim=-1).min().item()",
        "cross-attention: share not moving back minus chance (> 0.1)":
            "(onward.mean() - chance).item()",
        "exercise 1: late loss |pre-norm - post-norm| (< 0.15)":
            "abs(late_loss('pre-norm, 2 blocks') - late_loss(base))",
        "exercise 1: late loss, 4 blocks - higher of the 2-block models (> 0.05)":
            "late_loss(deep) - two_blocks",
        "exercise 1: operations per update, 4 blocks / 2 (1.3 .. 2)": "flop_ratio",
        "exercise 1: time per update, 4 blocks / 2 (not asserted)": "time_ratio",
        "exercise 2: smallest late loss gap, unscaled - scaled (> 0.2)":
            "min(u - s for u, s in zip(unscaled_losses[-3:], scaled_losses[-3:]))",
        "exercise 2: embedding norm after 30 updates / positional norm (< 0.25)":
            "frequent_norm() / position_norm",
        "exercise 4: BLEU gain over the second half of the epochs (> 0)": "late",
        "exercise 4: BLEU on training minus held-out sentences (> 10)": "seen_bleu - bleu",
        "exercise 4: held-out BLEU without minus with <unk> (> 5)":
            "bleu_where(False) - bleu_where(True)",
        "training target tokens/s (not asserted)": "report.tokens_per_second",
        "training seconds (not asserted)": "report.seconds",
    },
    "08_bahdanau_attention": {
        "toy: largest |untrained weight - 1/4| (< 0.1)": "(weights[0, :, :4] - 0.25).abs().max()",
        "RNN: last / first epoch loss (< 0.4)":
            "rnn_report.epoch_losses[-1] / rnn_report.epoch_losses[0]",
        "RNN: held-out BLEU (> 15)": "rnn_bleu",
        "alignments: right translations of 4+ tokens to draw (>= 3)":
            "sum(len(s.split()) >= 4 and data.decode_target(predicted[i].tolist()) in references[i]"
            " for i, s in enumerate(held_out_sources))",
        "alignments: mean largest weight minus uniform (> 0.05)": "largest - uniform",
        "alignments: mean largest weight (< 0.6)": "largest",
        "alignments: final rows on the source's end, minus chance (> 0.3)": "on_end - end_chance",
        "alignments: word steps moving back (< 0.1)": "backward",
        "alignments: chance of moving back minus moving back (> 0.2)": "chance - backward",
        "alignments: word steps moving forward minus back (> 0.2)": "forward - backward",
        "alignments: word steps staying, minus chance (> 0.1)": "stays - chance_stays",
        "alignments: word steps moving forward, minus chance (not asserted)": "forward - chance",
        "Transformer: held-out BLEU (not asserted)": "transformer_bleu",
        "Transformer - RNN BLEU after as many epochs (> 1)": "per_epoch_gain",
        "Transformer - RNN BLEU, each after its own epochs (not asserted)":
            "transformer_bleu - rnn_bleu",
        "Transformer ahead at every epoch from epoch (not asserted)": "ahead_from",
        "BLEU at the end, Transformer - RNN (not asserted)": "comparison.difference",
        "paired bootstrap p-value (not asserted)": "comparison.p_value",
        "training tokens/s, RNN / Transformer (not asserted)": "throughput_ratio",
        "training s, RNN / Transformer (not asserted)":
            "rnn_report.seconds / transformer_report.seconds",
        "GRU sensitivity, distance 29 / distance 1 (< 1e-3)": "gru_decay",
        "self-attention sensitivity, largest / smallest (< 2)": "attention_spread",
        "update time: RNN growth from 10 to 80 tokens (> 4)": "rnn_growth",
        "update time: RNN growth / Transformer growth (> 1)": "rnn_growth / transformer_growth",
        "update time RNN / Transformer at T = 10 (not asserted)": "slowdown[0]",
        "update time RNN / Transformer at T = 80 (not asserted)": "slowdown[-1]",
        "exercise 3: loss after 2 epochs, 0.002 - 0.005 (> 0.1)":
            "rate_results[0.002][0][-1] - rate_results[0.005][0][-1]",
        "exercise 3: BLEU after 2 epochs, 0.005 - 0.002 (> 2)": "rate_gap",
        "exercise 4: BLEU seed 1 - seed 0 after 2 epochs (|.| < exercise 3's gap)":
            "seeds.difference",
        "exercise 4: p-value (not asserted)": "seeds.p_value",
    },
    "09_training_recipe": {
        "baseline: exact match (>= 0.7)": "baseline_accuracy",
        "baseline: final loss (< 0.1)": "baseline_report.epoch_losses[-1]",
        "attention: mean weight on the mirror position (> 0.4)": "mirror_share.mean().item()",
        "attention: mirror / uniform share (> 2)": "(mirror_share.mean() / uniform_share).item()",
        "plain confidence (> 0.95)": "plain_confidence",
        "smoothed: |confidence - q| (< 0.03)": "abs(smooth_confidence - q_true)",
        "smoothed: final loss - floor (0 .. 0.05)": "smoothed_report.epoch_losses[-1] - floor",
        "smoothed: exact match (>= 0.95)": "smoothed_accuracy",
        "post-norm, no warm-up: highest exact match (< 0.1)": "max(post_cold)",
        "post-norm, no warm-up: lowest final loss (> 1.5)": "min(stuck_losses)",
        "post-norm, warm-up: lowest exact match (>= 0.5)": "min(post_warm)",
        "post-norm, warm-up: highest final loss (< 0.5)": "max(warm_losses)",
        "pre-norm, no warm-up: seeds learned (>= 2 of 3)": "pre_learned",
        "pre-norm, no warm-up: lowest exact match (not asserted)": "min(pre_cold)",
        "gradient slope, pre-norm (-0.5 .. 0)": "slopes[True]",
        "gradient slope, post-norm (> -0.02)": "slopes[False]",
        "gap growth (> 1.5)": "(post_grad[-1] / pre_grad[-1]) / (post_grad[0] / pre_grad[0])",
        "lowest of the three translation BLEU (> 8)": "min(bleu.values())",
        "recipe - default BLEU, seed 0 (not asserted)": "recipe_vs_default.difference",
        "recipe - default: p-value, seed 0": "recipe_vs_default.p_value",
        "|seed 1 - seed 0| BLEU, default (not asserted)": "seed_effect",
        "seed 1 - seed 0: p-value, default": "comparisons['seed 1 vs 0, default'].p_value",
        "smoothed - default final loss, seed 0 (> 0)":
            "reports['recipe', 0].epoch_losses[-1] - reports['default', 0].epoch_losses[-1]",
    },
    "10_decoding": {
        "first epoch loss (> 2.0)": "mt_report.epoch_losses[0]",
        "last epoch loss (< 2.0)": "mt_report.epoch_losses[-1]",
        "hand-written beam search agrees (== 30)": "agree",
        "greedy BLEU (> 15)": "bleu[1, None]",
        "beam 4 - greedy BLEU (> -1)": "beam_vs_greedy.difference",
        "beam 4 - greedy: p-value (not asserted)": "beam_vs_greedy.p_value",
        "beam 2 - greedy BLEU (> -1)": "bleu[2, ALPHA] - bleu[1, None]",
        "beam 2, 4: lowest share scoring >= greedy (>= 0.95)": "min(better.values())",
        "alpha 1 - alpha 0 mean length (> 0)":
            "by_alpha[1.0].lengths.float().mean() - by_alpha[0.0].lengths.float().mean()",
        "share of outputs changed by beam search, longest - shortest sources (not asserted)":
            "shares[-1] - shares[0]",
        "cache speed-up at T = 40 (> 2)": "speedups[-1]",
        "cache speed-up at T = 5 (below the one at T = 40)": "speedups[0]",
    },
    "11_modern_attention": {
        "added encoding: smallest spread of a score along a diagonal (> 0.1)": "added_spread",
        "length 16: lowest accuracy of any model (> 0.95)":
            "min(in_length[name].min().item() for name in ENCODINGS)",
        "RoPE, positions 16-63: lowest accuracy over seeds (> 0.8)":
            "unseen_accuracy['rope'].min().item()",
        "sinusoidal, positions 16-63: highest accuracy over seeds (< 0.7)":
            "unseen_accuracy['sinusoidal'].max().item()",
        "RoPE - sinusoidal, 16-63: mean over seeds (not asserted)": "gain.mean().item()",
        "RoPE - sinusoidal, 16-63: lower end of the 95% interval (> 0.3)": "low",
        "naive / online peak memory at the largest T (not asserted; growth asserted)": "ratio",
    },
    "12_decoder_only_lm": {
        "LM: parameter counts, relative gap between the two sets of pieces (< 0.01)": "size_gap",
        "LM kept for generating: last / first-epoch held-out perplexity (< 0.9)":
            "lm_curve[-1] / lm_curve[0]",
        "LM: highest last / first-epoch held-out perplexity over runs (< 0.9)":
            "max(c[-1] / c[0] for c in lm_curves.values())",
        "LM: highest held-out perplexity of any run / bigram's (< 0.8)":
            "max(p for runs in perplexity.values() for p in runs) / bigram_ppl",
        "RMSNorm + SwiGLU - 2017: mean paired difference (not asserted)": "difference.mean().item()",
        "RMSNorm + SwiGLU - 2017: 95% interval, low end (not asserted)": "interval.low",
        "RMSNorm + SwiGLU - 2017: 95% interval, high end (not asserted)": "interval.high",
        "RMSNorm + SwiGLU - 2017: far end of the interval / perplexity (< 0.1)": "largest",
        "distinct sampled sentences at tau = 1.5, of 20 (> 1)": "distinct['tau = 1.5']",
        "SmolLM2: greedy answer == LlamaForCausalLM's on the same weights (True)":
            "bool(torch.equal(answer, _theirs))",
        "SmolLM2: fewest words among the 3 sampled continuations (>= 5)":
            "min(len(t.split()) for t in _texts)",
        "generation: cache speed-up at the longest length (> 1.5)": "speedups[-1]",
        "generation: cache speed-up at the shortest length (< longest / 1.2)": "speedups[0]",
        "exercise 2: |g = 4 - g = 1| / perplexity, seed 0 (< 0.1)":
            "abs(g4_minus_g1) / kv_perplexity[2][0]",
    },
    "13_what_heads_learn": {
        "latest phase change / STEPS (<= 0.8)": "change_at.max().item() / STEPS",
        "two layers: highest final loss on the repeats / ln V (< 0.3)": "max(repeats_final)",
        "two layers: lowest final loss on the first half / ln V (> 0.95)": "min(first_half_final)",
        "one layer: lowest loss on the repeats / ln V (> 0.75)": "one_layer_lowest",
        "previous-token heads in layer 0, per seed (1 each)": "str(layer0_counts)",
        "induction heads in layer 1, per seed (2 each)": "str(layer1_counts)",
        "lowest previous-token score of a previous-token head (> 0.5)": "min(previous_scores)",
        "lowest induction score of an induction head (> 0.6)": "min(induction_scores)",
        "highest previous-token score of the other layer-0 head (< 0.4)": "max(other_previous)",
        "smallest rise of an induction score around the phase change (> 0.25)":
            "min(after - before for before, after in jumps)",
        "smallest rise of the previous-token score around the phase change (> 0.2)":
            "min(after - before for before, after in previous_jumps)",
        "without the induction heads: lowest loss on the repeats / ln V (> 0.7)":
            "min(n[0] for n in numbers.values())",
        "without the previous-token head: lowest loss on the repeats / ln V (> 0.7)":
            "min(n[1] for n in numbers.values())",
        "without the other layer-0 head: highest loss on the repeats / ln V (< 0.5)":
            "max(n[2] for n in numbers.values())",
        "without the previous-token head: highest induction score (< 0.4)":
            "max(n[3] for n in numbers.values())",
        "without both minus without one induction head, smallest / ln V (> 0.1)":
            "min(n[0] - n[4] for n in numbers.values())",
        "without one induction head minus with all, smallest / ln V (> 0.1)":
            "min(n[5] for n in numbers.values())",
        "fresh sequences: lowest share of repeated tokens copied (> 0.85)": "min(copied_all)",
        "control: smallest rise after the phase change, nats (> 0.02)":
            "min(last - lowest for lowest, last in rises)",
        "exercise 2: lowest score of an induction head on chance repeats (> 0.3)":
            "chance_scores[1, induction_heads].min().item()",
        "exercise 2: highest score of a layer-0 head on chance repeats (< 0.15)":
            "chance_scores[0].max().item()",
        "trained on different tokens only: phase change (None)": "str(phase_change_step(distinct_log))",
        "trained on different tokens only: lowest loss on the repeats / ln V (> 0.75)":
            "min(distinct_log['repeats']) / ln_V",
        "SmolLM2: loss on the repeats / on the first half (< 0.3)": "lm_repeats / lm_first",
        "SmolLM2: loss on the first half - ln V (> 0)": "lm_first - math.log(lm.vocab_size)",
        "SmolLM2: heads with an induction score above 0.3 (5 to 20)": "len(induction_lm)",
        "SmolLM2: highest induction score (> 0.8)": "induction_lm[0][2]",
        "SmolLM2: lowest layer of those heads (>= 15)": "min(lm_layers)",
        "SmolLM2: second-highest previous-token score (> 0.75)": "lm_previous[1][2]",
        "SmolLM2: layer of the highest induction head - highest previous-token layer (> 0)":
            "induction_lm[0][0] - max(l for l, _, _ in lm_previous)",
        "SmolLM2: without the induction heads / first half (> 0.8)": "without_induction / lm_first",
        "SmolLM2: without the induction heads - random heads' interval high, nats (> 3)":
            "without_induction - high",
    },
}

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def failed_line(error: CellExecutionError) -> str:
    """The line that raised, from IPython's traceback (it marks it with an arrow), or the error."""
    lines = ANSI.sub("", str(error)).splitlines()
    marked = [line for line in lines if line.lstrip().startswith("---->")]
    where = re.sub(r"^\s*---->\s*\d+\s*", "", marked[-1]).strip() if marked else ""
    what = f"{error.ename}: {error.evalue}".strip().rstrip(":")
    return f"{where}  ({what})" if where else what


def run(path: pathlib.Path, seed_offset: int, threads: int, timeout: int) -> dict:
    """Execute the notebook at ``path`` under one perturbation; return what happened."""
    os.environ["D2LHELPERS_SEED_OFFSET"] = str(seed_offset)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    notebook = nbformat.read(path, as_version=4)
    notebook.metadata["kernelspec"] = KERNELSPEC
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    result = {"notebook": path.stem, "seed_offset": seed_offset, "threads": threads,
              "failure": None, "quantities": {}}
    start = time.perf_counter()
    with client.setup_kernel():
        code_number = -1
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            code_number += 1
            try:
                client.execute_cell(cell, index)
            except CellExecutionError as error:
                result["failure"] = f"code cell {code_number}: {failed_line(error)}"
                break
        result["seconds"] = time.perf_counter() - start
        watched = WATCHED.get(path.stem, {})
        if watched:
            probe = nbformat.v4.new_code_cell(
                "import json as _json\n"
                "def _value(expression):\n"
                "    try:\n"
                "        value = eval(expression)\n"
                "        return float(value) if not isinstance(value, str) else value\n"
                "    except Exception as error:\n"
                "        return f'n/a ({type(error).__name__})'\n"
                f"print(_json.dumps({{name: _value(e) for name, e in {watched!r}.items()}}))")
            notebook.cells.append(probe)
            client.execute_cell(probe, len(notebook.cells) - 1)
            text = "".join(o.get("text", "") for o in probe.outputs if o.output_type == "stream")
            result["quantities"] = json.loads(text.strip().splitlines()[-1])
    return result


def label(result: dict) -> str:
    return f"seed +{result['seed_offset']}, {result['threads']} thr."


def tables(results: list[dict]) -> str:
    """Markdown: the pass/fail table, then one table of watched quantities per notebook."""
    notebooks = list(dict.fromkeys(r["notebook"] for r in results))
    runs = list(dict.fromkeys(label(r) for r in results))
    by_key = {(r["notebook"], label(r)): r for r in results}
    lines = ["| notebook | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for name in notebooks:
        cells = []
        for run_label in runs:
            r = by_key.get((name, run_label))
            cells.append("" if r is None else "pass" if r["failure"] is None
                         else "FAIL: " + r["failure"].replace("|", "\\|"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    passed = sum(r["failure"] is None for r in results)
    lines.append(f"\n{passed} of {len(results)} runs passed.")
    for name in notebooks:
        quantities = list(dict.fromkeys(q for r in results if r["notebook"] == name
                                        for q in r["quantities"]))
        if not quantities:
            continue
        lines += ["", f"**{name}**", "", "| quantity | " + " | ".join(runs) + " |",
                  "|---|" + "---:|" * len(runs)]
        for quantity in quantities:
            values = []
            for run_label in runs:
                value = by_key.get((name, run_label), {}).get("quantities", {}).get(quantity, "")
                values.append(f"{value:.4g}" if isinstance(value, float) else str(value))
            lines.append(f"| `{quantity}` | " + " | ".join(values) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path,
                        help="notebooks to run (default: every notebook of the course)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4],
                        help="seed offsets (default: 0 1 2 3 4)")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2],
                        help="thread counts (default: 1 2)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell")
    parser.add_argument("--json", type=pathlib.Path, help="also write the raw results here")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    results = []
    for path in paths:
        for threads in args.threads:
            for seed_offset in args.seeds:
                result = run(path.resolve(), seed_offset, threads, args.timeout)
                results.append(result)
                print(f"{path.stem}, {label(result)}: "
                      f"{'pass' if result['failure'] is None else 'FAIL ' + result['failure']} "
                      f"({result['seconds']:.0f} s) {result['quantities']}", file=sys.stderr,
                      flush=True)
                if args.json:
                    args.json.write_text(json.dumps(results, indent=1))
    print(tables(results))
    return 0 if all(r["failure"] is None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
