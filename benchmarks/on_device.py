"""Run every notebook on a device (a GPU) as the tests run them on the CPU, and report what held.

    python benchmarks/on_device.py                        # every notebook on CUDA
    python benchmarks/on_device.py --device cpu           # the same on the CPU: the script's own check
    python benchmarks/on_device.py notebooks/06_transformer.ipynb --json results.json

Each notebook runs top to bottom in a fresh kernel with ``D2LHELPERS_DEVICE`` set, so that
``d2lh.choose_device()`` returns the device asked for; its assertions are the same ones nbval runs.
Per notebook it prints: pass, or the cell and the last line of the error (the failing assertion);
the seconds taken and that time in reference units (``reference_seconds`` of
``benchmarks/notebooks.py``, timed on the same device in the same run, so that budgets can be
compared across machines); and the largest difference between the numbers in the stored outputs
that nbval compares and those of this run (cells tagged ``nbval-ignore-output`` are not
compared), with the number of outputs whose text differs otherwise.

Run it in the test environment with ``D2LHELPERS_DATA_DIR`` set as ``.ci/run`` sets it. One GPU
runs the whole course in a few minutes; ``--timeout`` bounds each cell.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import re
import sys
import time

import nbformat
import torch
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from notebooks import KERNELSPEC, NOTEBOOK_DIR, reference_seconds  # noqa: E402

NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def output_texts(cell) -> list[str]:
    """The texts of a code cell's outputs that nbval compares: each stream's text (a kernel may
    split it into several outputs; nbval joins them) and every text/plain."""
    streams, texts = {}, []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            streams[output.get("name")] = streams.get(output.get("name"), "") + output.get("text", "")
        elif "data" in output and "text/plain" in output["data"]:
            texts.append(output["data"]["text/plain"])
    return [streams[name] for name in sorted(streams)] + texts


def compare_outputs(stored, fresh) -> dict:
    """Compare the outputs nbval checks in two runs of the same notebook: the largest absolute
    and relative difference between numbers at the same place of the same text shape, and the
    count of outputs whose words differ (or whose numbers do not line up)."""
    largest_abs = largest_rel = 0.0
    differing = []
    for index, (a, b) in enumerate(zip(stored.cells, fresh.cells)):
        if a.cell_type != "code" or "nbval-ignore-output" in a.metadata.get("tags", []):
            continue
        texts_a, texts_b = output_texts(a), output_texts(b)
        if len(texts_a) != len(texts_b):
            differing.append(index)
            continue
        for ta, tb in zip(texts_a, texts_b):
            if ta == tb:
                continue
            na, nb = NUMBER.findall(ta), NUMBER.findall(tb)
            if NUMBER.sub("#", ta) != NUMBER.sub("#", tb) or len(na) != len(nb):
                differing.append(index)
                continue
            for x, y in zip(map(float, na), map(float, nb)):
                if math.isfinite(x) and math.isfinite(y):
                    largest_abs = max(largest_abs, abs(x - y))
                    largest_rel = max(largest_rel, abs(x - y) / max(abs(x), abs(y), 1e-12))
    return {"max_abs_difference": largest_abs, "max_rel_difference": largest_rel,
            "cells_differing_in_text": sorted(set(differing))}


def run_notebook(path: pathlib.Path, device: str, timeout: int = 600) -> dict:
    """Execute the notebook at ``path`` with ``D2LHELPERS_DEVICE=device``; return a record:
    passed, seconds, the failing cell and error line if any, and :func:`compare_outputs`."""
    stored = nbformat.read(path, as_version=4)
    fresh = nbformat.read(path, as_version=4)
    fresh.metadata["kernelspec"] = KERNELSPEC
    previous = os.environ.get("D2LHELPERS_DEVICE")
    os.environ["D2LHELPERS_DEVICE"] = device  # the kernel inherits the environment
    client = NotebookClient(fresh, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    record = {"notebook": path.stem, "device": device, "passed": True, "error": None}
    start = time.perf_counter()
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as error:
        lines = [line for line in str(error).splitlines() if line.strip()]
        failed = next((i for i, c in enumerate(fresh.cells) if c.cell_type == "code" and any(
            o.get("output_type") == "error" for o in c.get("outputs", []))), None)
        record.update(passed=False, error=lines[-1] if lines else type(error).__name__,
                      cell=failed)
    finally:
        if previous is None:
            os.environ.pop("D2LHELPERS_DEVICE", None)
        else:
            os.environ["D2LHELPERS_DEVICE"] = previous
    record["seconds"] = time.perf_counter() - start
    record.update(compare_outputs(stored, fresh))
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path,
                        help="notebooks to run (default: every notebook of the course)")
    parser.add_argument("--device", default="cuda", help="the device to run on (default cuda)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell")
    parser.add_argument("--json", type=pathlib.Path, help="also write the records here")
    args = parser.parse_args(argv)
    torch.empty(0, device=args.device)  # fails at once where the device is missing
    paths = args.notebooks or sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    unit = reference_seconds(args.device)
    print(f"torch {torch.__version__} on {name}; reference workload {unit:.2f} s\n")
    print("| notebook | result | seconds | reference units | largest difference of stored "
          "numbers (abs / rel) | outputs differing in text |\n|---|---|---:|---:|---|---|",
          flush=True)
    records = []
    for path in paths:
        record = run_notebook(path, args.device, args.timeout)
        record["reference_units"] = record["seconds"] / unit
        records.append(record)
        result = "pass" if record["passed"] else f"FAIL in cell {record.get('cell')}: " \
                                                 f"{record['error'][:160]}"
        print(f"| {path.stem} | {result} | {record['seconds']:.0f} | "
              f"{record['reference_units']:.0f} | {record['max_abs_difference']:.2g} / "
              f"{record['max_rel_difference']:.2g} | "
              f"{record['cells_differing_in_text'] or '-'} |", flush=True)
    total = sum(r["seconds"] for r in records)
    print(f"\n{sum(r['passed'] for r in records)} of {len(records)} passed in {total:.0f} s "
          f"({total / unit:.0f} reference units)")
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    return 0 if all(r["passed"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
