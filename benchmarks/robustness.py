"""Do the notebooks' assertions hold on other seeds and thread counts, not only on the run we stored?

    python benchmarks/robustness.py                         # every notebook, seeds 0-4, 1 and 2 threads
    python benchmarks/robustness.py notebooks/07_transformer_in_practice.ipynb --seeds 0 1 --threads 1
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
WATCHED: dict[str, dict[str, str]] = {}

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
