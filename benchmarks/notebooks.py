"""Run the notebooks as the tests run them, one at a time, and print each one's run time.

    python benchmarks/notebooks.py                          # every notebook; prints a table
    python benchmarks/notebooks.py notebooks/03_attention_scoring.ipynb
    python benchmarks/notebooks.py --write notebooks/09_training_recipe.ipynb

Run it in the environment the tests use, with D2LHELPERS_DATA_DIR pointing at the offline data as
.ci/run sets it, on an otherwise idle machine (a second PyTorch process slows both down many times).
Prints a Markdown table of wall-clock seconds per notebook, kernel start-up included, and each as a
multiple of a fixed reference workload timed in the same run (``reference_seconds``: a small
Transformer's training steps), so that a budget can be stated and checked on machines that differ
in speed: "at most N reference units" holds on a fast and a slow machine alike. The reference is
timed before the first notebook and after each one; a notebook's units divide its seconds by the
mean of the two timings around it, which follows a machine whose speed drifts during the run.

With ``--write`` each notebook is also stored in place with its new outputs: that is how a maintainer
executes a notebook before committing it. Volatile metadata (execution timestamps) is dropped, so a
re-run changes only what really changed.
"""

from __future__ import annotations

import argparse
import pathlib
import platform
import sys
import time

import nbformat
import torch
from nbclient import NotebookClient

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parents[1] / "notebooks"


def reference_seconds(device: str | torch.device = "cpu", repeats: int = 3) -> float:
    """Seconds of a fixed workload on ``device``, best of ``repeats``: 20 training steps of a
    2-block Transformer (d_model 128, batches of 64 pairs of 12 tokens), the kind of work the
    notebooks do. The unit in which notebook times are compared across machines."""
    import d2lhelpers as d2lh

    device = torch.device(device)
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, 200, (64, 12), generator=generator).to(device)
    tgt = torch.randint(4, 200, (64, 12), generator=generator).to(device)
    lens = torch.full((64,), 12, device=device)
    torch.manual_seed(0)
    model = d2lh.Transformer(200, 200, d_model=128, num_heads=4, ffn_hidden=256, num_layers=2,
                             dropout=0.0).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(20):
            loss = torch.nn.functional.cross_entropy(model(src, lens, tgt).flatten(0, 1),
                                                     tgt.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        loss.item()  # waits for the device
        best = min(best, time.perf_counter() - start)
    return best


def run(path: pathlib.Path, write: bool = False) -> float:
    """Execute the notebook at ``path`` top to bottom in a fresh kernel; return the seconds taken.
    A failing cell raises nbclient's CellExecutionError, naming the cell."""
    notebook = nbformat.read(path, as_version=4)
    notebook.metadata["kernelspec"] = KERNELSPEC
    client = NotebookClient(notebook, timeout=1800, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    if write:
        for cell in notebook.cells:
            cell.metadata.pop("execution", None)
        notebook.metadata.pop("widgets", None)
        nbformat.write(notebook, path)
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path,
                        help="notebooks to run (default: every notebook of the course)")
    parser.add_argument("--write", action="store_true",
                        help="store each notebook in place with its new outputs")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} thread(s)"
          f"{', outputs written' if args.write else ''}\n")
    before = reference_seconds()  # and again after each notebook (the module's docstring)
    references = [before]
    print(f"reference workload: {before:.2f} s (benchmarks/notebooks.py: reference_seconds)\n")
    print("| notebook | seconds | reference units |\n|---|---:|---:|", flush=True)
    total_seconds = total_units = 0.0
    for path in paths:
        seconds = run(path, write=args.write)
        after = reference_seconds()
        references.append(after)
        units = seconds / ((before + after) / 2)
        total_seconds, total_units = total_seconds + seconds, total_units + units
        print(f"| {path.stem} | {seconds:.0f} | {units:.0f} |", flush=True)
        before = after
    print(f"| all {len(paths)} | {total_seconds:.0f} | {total_units:.0f} |")
    low, high = min(references), max(references)
    print(f"\nreference workload over the run: {low:.2f} to {high:.2f} s"
          + (" (more than 20% apart: the machine's speed changed during the run)"
             if high / low > 1.2 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
