"""The course's Transformer against torch.nn.Transformer of the same size, on the same batches.

    python benchmarks/transformer.py               # 120 s of training each (about 5 minutes in all)
    python benchmarks/transformer.py --seconds 30  # a quicker look

Prints Markdown tables:
1. training throughput (target tokens per second) and held-out corpus BLEU of both models after the
   same CPU time budget, on the first 10,000 lines of fra-eng with 500 English sentences held out.
   The two models train in alternating epochs (one epoch of ours, one of PyTorch's, ...), so that a
   change in the machine's load hits both alike; each keeps its own optimiser and batch order. The
   BLEU difference comes with sacrebleu's paired bootstrap test on the same sentences;
2. greedy decoding time with and without the key-value cache, at 10 and 50 generated tokens.
The data must be in the cache directory (see d2lhelpers.data.data_dir); CI places it there.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch import nn

import d2lhelpers as d2lh
from d2lhelpers.data import load_translation_data

SIZE = dict(d_model=64, num_heads=4, ffn_hidden=128, num_layers=2, dropout=0.1)


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with the course model's embeddings, positional encoding and output layer,
    exposing the same interface (``encoder(src, src_valid_lens)``, ``decoder(tokens, enc, src_valid_lens)``)
    so that the same training loop and greedy decoding (without a cache) serve both."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model, num_heads, ffn_hidden, num_layers,
                 dropout):
        super().__init__()
        self.d_model = d_model
        self.src_embedding = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, d_model)
        for embedding in (self.src_embedding, self.tgt_embedding):
            nn.init.normal_(embedding.weight, std=d_model ** -0.5)
        self.positional_encoding = d2lh.PositionalEncoding(d_model, dropout)
        self.transformer = nn.Transformer(d_model, num_heads, num_layers, num_layers, ffn_hidden,
                                          dropout, batch_first=True)
        self.output = nn.Linear(d_model, tgt_vocab_size)

    def _embed(self, embedding, tokens):
        return self.positional_encoding(embedding(tokens) * math.sqrt(self.d_model))

    @staticmethod
    def _padding_mask(valid_lens, length):
        return torch.arange(length, device=valid_lens.device)[None, :] >= valid_lens[:, None]

    def encoder(self, src, src_valid_lens):
        mask = self._padding_mask(src_valid_lens, src.shape[1])
        return self.transformer.encoder(self._embed(self.src_embedding, src), src_key_padding_mask=mask)

    def decoder(self, tokens, enc_outputs, src_valid_lens, state=None):
        T = tokens.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=tokens.device)
        memory_mask = self._padding_mask(src_valid_lens, enc_outputs.shape[1])
        X = self.transformer.decoder(self._embed(self.tgt_embedding, tokens), enc_outputs,
                                     tgt_mask=causal, tgt_is_causal=True,
                                     memory_key_padding_mask=memory_mask)
        return self.output(X)

    def forward(self, src, src_valid_lens, dec_input):
        return self.decoder(dec_input, self.encoder(src, src_valid_lens), src_valid_lens)


def train_alternately(models, data, seconds):
    """Train every model for ``seconds`` of its own training time, one epoch each in turn; return
    per model (tokens per second, epochs, last epoch's loss)."""
    runs = {}
    for name, model in models.items():
        # Adam at 0.002, as train_seq2seq's default; a loader per model, so both see the same
        # sequence of batches
        runs[name] = dict(model=model, loader=data.train_loader(), report=d2lh.TrainingReport(),
                          optimizer=torch.optim.Adam(model.parameters(), lr=2e-3))
    while any(run["report"].seconds < seconds for run in runs.values()):
        for run in runs.values():
            if run["report"].seconds >= seconds:
                continue
            epoch = d2lh.train_seq2seq(run["model"], run["loader"], 1, optimizer=run["optimizer"],
                                       max_seconds=seconds - run["report"].seconds, progress=False)
            run["report"].seconds += epoch.seconds
            run["report"].num_tokens += epoch.num_tokens
            run["report"].epoch_losses += epoch.epoch_losses
    return {name: (run["report"].tokens_per_second, len(run["report"].epoch_losses),
                   run["report"].epoch_losses[-1]) for name, run in runs.items()}


def decoding_times(model, data, lengths=(10, 50), repeats=5):
    """Median seconds to greedily decode a batch of 100 held-out sentences to exactly n tokens."""
    src, src_valid_lens = data.encode_source(list(data.held_out)[:100])
    rows = []
    for n in lengths:
        times = {}
        for use_cache in (False, True):
            runs = []
            for _ in range(repeats):
                start = time.perf_counter()
                # eos=-1 never occurs, so every sequence runs the full n steps
                d2lh.greedy_decode(model, src, src_valid_lens, data.tgt_vocab.bos, -1, n, use_cache)
                runs.append(time.perf_counter() - start)
            times[use_cache] = sorted(runs)[len(runs) // 2]
        rows.append((n, times[False], times[True], times[False] / times[True]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="training budget per model")
    args = parser.parse_args()
    data = load_translation_data(batch_size=128, num_steps=10, num_lines=10_000, num_held_out=500)
    V_src, V_tgt = len(data.src_vocab), len(data.tgt_vocab)
    d2lh.set_seed(0)
    course = d2lh.Transformer(V_src, V_tgt, **SIZE)
    d2lh.set_seed(0)
    reference = TorchTransformer(V_src, V_tgt, **SIZE)
    names = {"course `d2lh.Transformer`": course, "`torch.nn.Transformer`": reference}
    results = train_alternately(names, data, args.seconds)
    sources = list(data.held_out)
    references = [data.held_out[s] for s in sources]
    outputs = {name: d2lh.translate(model, data, sources, use_cache=model is course)
               for name, model in names.items()}
    (ours_name, ours), (theirs_name, theirs) = outputs.items()
    comparison = d2lh.paired_bleu_test(theirs, ours, references)
    bleus = {ours_name: comparison.system, theirs_name: comparison.baseline}
    intervals = {ours_name: comparison.system_interval, theirs_name: comparison.baseline_interval}
    print(f"Training for {args.seconds:.0f} s each, in alternating epochs, on {len(data)} pairs "
          f"({torch.get_num_threads()} threads); BLEU on {len(data.held_out)} held-out English "
          f"sentences (95% bootstrap interval):\n")
    print("| model | target tokens/s | epochs | last epoch loss | held-out BLEU |")
    print("|---|---:|---:|---:|---:|")
    for name, (tps, epochs, loss) in results.items():
        low, high = intervals[name]
        print(f"| {name} | {tps:,.0f} | {epochs} | {loss:.3f} | {bleus[name]:.1f} ({low:.1f}-{high:.1f}) |")
    ratio = results[ours_name][0] / results[theirs_name][0]
    print(f"\nThroughput ratio course / PyTorch: {ratio:.2f}. BLEU difference course - PyTorch: "
          f"{comparison.difference:+.1f} (paired bootstrap p = {comparison.p_value:.3f}; it covers the "
          f"choice of sentences, not the luck of training)\n")
    print("Greedy decoding of 100 sentences with the course model (median of 5):\n")
    print("| tokens | without cache (s) | with cache (s) | speed-up |")
    print("|---:|---:|---:|---:|")
    for n, slow, fast, ratio in decoding_times(course, data):
        print(f"| {n} | {slow:.3f} | {fast:.3f} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
