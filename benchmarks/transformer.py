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
from dataclasses import dataclass
import math
import os
import time

import torch
from torch import nn

import d2lhelpers as d2lh
from d2lhelpers.data import load_translation_data

SIZE = dict(d_model=64, num_heads=4, ffn_hidden=128, num_layers=2, dropout=0.1)
# the recipe of --time-to-bleu (see the README's Performance section for how it was chosen)
RECIPE_SIZE = dict(d_model=128, num_heads=4, ffn_hidden=256, num_layers=2, dropout=0.0)
RECIPE_BATCH_SIZE, RECIPE_LABEL_SMOOTHING = 64, 0.1
RECIPE_HALVE_EVERY = 1000  # updates: Adam's learning rate 2e-3 halves every 1000 updates


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with the course model's embeddings, positional encoding and output layer,
    exposing the same interface (``encoder(src, src_valid_lens)``, ``decoder(tokens, enc,
    src_valid_lens)``, ``decoder.init_state`` and ``decoder.step``) so that the same training loop
    and greedy decoding serve both (PyTorch's decoder has no cache: each step reruns every token)."""

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

    @property
    def decoder(self):
        return _RecomputingDecoder(self)

    def decode(self, tokens, enc_outputs, src_valid_lens):
        T = tokens.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=tokens.device)
        memory_mask = self._padding_mask(src_valid_lens, enc_outputs.shape[1])
        X = self.transformer.decoder(self._embed(self.tgt_embedding, tokens), enc_outputs,
                                     tgt_mask=causal, tgt_is_causal=True,
                                     memory_key_padding_mask=memory_mask)
        return self.output(X)

    def forward(self, src, src_valid_lens, dec_input):
        return self.decode(dec_input, self.encoder(src, src_valid_lens), src_valid_lens)


@dataclass
class _TokensSoFar:
    """The decoding state of :class:`_RecomputingDecoder`: what it attends over, and every token
    fed so far (B, T), which each step feeds again."""

    enc_outputs: torch.Tensor
    src_valid_lens: torch.Tensor
    tokens: torch.Tensor | None = None

    def reorder(self, rows):
        self.enc_outputs, self.src_valid_lens = self.enc_outputs[rows], self.src_valid_lens[rows]
        if self.tokens is not None:
            self.tokens = self.tokens[rows]


class _RecomputingDecoder:
    """TorchTransformer's decoder with the course's decoding interface."""

    def __init__(self, model):
        self.model = model

    def __call__(self, tokens, enc_outputs, src_valid_lens):
        return self.model.decode(tokens, enc_outputs, src_valid_lens)

    def init_state(self, enc_outputs, src_valid_lens):
        return _TokensSoFar(enc_outputs, torch.as_tensor(src_valid_lens, device=enc_outputs.device))

    def step(self, tokens, state):
        state.tokens = tokens if state.tokens is None else torch.cat([state.tokens, tokens], dim=1)
        logits = self.model.decode(state.tokens, state.enc_outputs, state.src_valid_lens)
        return logits[:, -tokens.shape[1]:]


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


def race_to_bleu(models, loaders, make_optimizer, data, target, max_seconds, checkpoint=60.0,
                 label_smoothing=0.0):
    """Train the models in alternating epochs, each on its own copy of the same batches, and
    measure held-out BLEU (greedy) after every epoch and once after ``checkpoint`` seconds of
    training; evaluation time is not counted.

    make_optimizer(model) -> (optimizer, scheduler or None). A model stops once its training time
    reaches ``max_seconds``, or once it has reached ``target`` and passed the checkpoint. Returns
    per model: seconds of training when BLEU first reached ``target`` (None if never), BLEU at the
    checkpoint (None if not reached), and the curve [(epoch, seconds, BLEU), ...].
    """
    runs = {}
    for name, model in models.items():
        optimizer, scheduler = make_optimizer(model)
        runs[name] = dict(model=model, loader=loaders[name], optimizer=optimizer, scheduler=scheduler,
                          seconds=0.0, epochs=0, reached=None, at_checkpoint=None, curve=[])

    def active(run):
        done = run["reached"] is not None and run["seconds"] >= checkpoint
        return run["seconds"] < max_seconds and not done

    def evaluate(run, label):
        bleu = d2lh.held_out_bleu(run["model"], data, use_cache=not isinstance(run["model"],
                                                                               TorchTransformer))
        run["curve"].append((label, run["seconds"], bleu))
        if bleu >= target and run["reached"] is None:
            run["reached"] = run["seconds"]
        return bleu

    while any(active(run) for run in runs.values()):
        for run in runs.values():
            if not active(run):
                continue
            batches = iter(run["loader"])  # one epoch; paused at the checkpoint, then resumed
            while True:
                before = run["seconds"]
                stop = checkpoint if before < checkpoint else max_seconds
                part = d2lh.train_seq2seq(run["model"], batches, 1, optimizer=run["optimizer"],
                                          scheduler=run["scheduler"], max_seconds=stop - before,
                                          label_smoothing=label_smoothing, progress=False)
                run["seconds"] = before + part.seconds
                if part.seconds < stop - before:
                    break  # the epoch ended before the time did
                if stop == checkpoint:
                    run["at_checkpoint"] = evaluate(run, f"{checkpoint:.0f} s")
                if run["seconds"] >= max_seconds:
                    break
            run["epochs"] += 1
            evaluate(run, str(run["epochs"]))
    return {name: (run["reached"], run["at_checkpoint"], run["curve"]) for name, run in runs.items()}


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


def other_cpu_seconds():
    """CPU seconds spent so far by the whole machine minus this process (Linux; None elsewhere):
    read before and after a measurement, it says how much other programs competed with it."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait
    return busy - sum(os.times()[:2])


def time_to_bleu(args):
    """The --time-to-bleu mode: both models, the same recipe and batches, BLEU after every epoch."""
    if args.baseline:  # the settings of the throughput mode
        batch_size, bucket, size, label_smoothing, halve_every = 128, False, SIZE, 0.0, None
    else:
        batch_size, bucket, label_smoothing = args.batch_size, True, args.label_smoothing
        halve_every = args.halve_every
        size = dict(d_model=args.d_model, num_heads=args.num_heads, ffn_hidden=args.ffn_hidden,
                    num_layers=args.num_layers, dropout=args.dropout)
    data = load_translation_data(batch_size=batch_size, num_steps=10, num_lines=10_000,
                                 num_held_out=500)
    data.seed = args.seed  # the order of the batches; the held-out sentences stay those of seed 0
    V_src, V_tgt = len(data.src_vocab), len(data.tgt_vocab)
    d2lh.set_seed(args.seed)
    course = d2lh.Transformer(V_src, V_tgt, **size)
    d2lh.set_seed(args.seed)
    reference = TorchTransformer(V_src, V_tgt, **size)
    models = {"course": course, "nn.Transformer": reference}
    loaders = {name: data.train_loader(bucket=bucket) for name in models}

    def make_optimizer(model):
        optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, fused=True)
        if halve_every is None:
            return optimizer, None
        return optimizer, torch.optim.lr_scheduler.LambdaLR(  # stepped after every update
            optimizer, lambda update: 0.5 ** (update / halve_every))

    other_before = other_cpu_seconds()
    start = time.perf_counter()
    results = race_to_bleu(models, loaders, make_optimizer, data, args.time_to_bleu,
                           args.max_seconds, label_smoothing=label_smoothing)
    wall = time.perf_counter() - start
    recipe = (f"batch {batch_size}, {'bucketed by length' if bucket else 'padded to 10 steps'}, "
              f"{', '.join(f'{k} {v}' for k, v in size.items())}, Adam 2e-3"
              f"{'' if halve_every is None else f' halved every {halve_every} updates'}, "
              f"label smoothing {label_smoothing}")
    print(f"Held-out BLEU (greedy, {len(data.held_out)} sentences) after every epoch, against seconds "
          f"of training (evaluation not counted), both models in alternating epochs on the same "
          f"batches; {recipe}; seed {args.seed}; {torch.get_num_threads()} threads.\n")
    print("| model | epochs | seconds per epoch | BLEU after each epoch (s: BLEU) |")
    print("|---|---:|---:|---|")
    for name, (_, _, curve) in results.items():
        epochs = [(seconds, bleu) for label, seconds, bleu in curve if label.isdigit()]
        per_epoch = epochs[-1][0] / len(epochs)
        points = " ".join(f"{seconds:.0f}: {bleu:.1f}" for seconds, bleu in epochs)
        print(f"| {name} | {len(epochs)} | {per_epoch:.2f} | {points} |")
    if other_before is not None:
        print(f"\nOther processes used {other_cpu_seconds() - other_before:.1f} CPU-seconds during "
              f"these {wall:.0f} s (near 0 on an idle machine; more means the timings are noisy).")
    for name, (_, at_checkpoint, _) in results.items():
        bleu = "not reached" if at_checkpoint is None else f"{at_checkpoint:.1f}"
        print(f"BLEU after 60 s of training, {name}: {bleu}")
    times = ", ".join(f"{name} {'never' if reached is None else f'{reached:.1f} s'}"
                      for name, (reached, _, _) in results.items())
    print(f"time to BLEU {args.time_to_bleu:g}: {times}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="training budget per model")
    parser.add_argument("--time-to-bleu", type=float, metavar="BLEU",
                        help="instead: seconds of training each model needs to reach this held-out BLEU")
    parser.add_argument("--max-seconds", type=float, default=120.0,
                        help="--time-to-bleu: training time limit per model")
    parser.add_argument("--seed", type=int, default=0,
                        help="--time-to-bleu: seed of the initial weights, dropout and batch order")
    parser.add_argument("--baseline", action="store_true",
                        help="--time-to-bleu with the settings of the throughput mode, not the recipe")
    recipe = parser.add_argument_group("the recipe's settings, for --time-to-bleu")
    recipe.add_argument("--batch-size", type=int, default=RECIPE_BATCH_SIZE)
    recipe.add_argument("--halve-every", type=int, default=RECIPE_HALVE_EVERY,
                        help="updates after which the learning rate has halved (decays smoothly)")
    recipe.add_argument("--d-model", type=int, default=RECIPE_SIZE["d_model"])
    recipe.add_argument("--num-heads", type=int, default=RECIPE_SIZE["num_heads"])
    recipe.add_argument("--ffn-hidden", type=int, default=RECIPE_SIZE["ffn_hidden"])
    recipe.add_argument("--num-layers", type=int, default=RECIPE_SIZE["num_layers"])
    recipe.add_argument("--dropout", type=float, default=RECIPE_SIZE["dropout"])
    recipe.add_argument("--label-smoothing", type=float, default=RECIPE_LABEL_SMOOTHING)
    args = parser.parse_args()
    if args.time_to_bleu is not None:
        time_to_bleu(args)
        return
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
