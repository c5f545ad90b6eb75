"""Execute notebooks in place, as the tests run them, and print each one's run time.

    python tools/run_notebooks.py                 # every notebook
    python tools/run_notebooks.py notebooks/03_attention_scoring.ipynb

Run it in the environment the tests use, with D2LHELPERS_DATA_DIR pointing at the offline data as
.ci/run sets it, then commit the notebooks with their outputs. Volatile metadata (execution
timestamps) is dropped so that a re-run changes only what really changed.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def run(path: pathlib.Path) -> float:
    notebook = nbformat.read(path, as_version=4)
    notebook.metadata["kernelspec"] = KERNELSPEC
    client = NotebookClient(notebook, timeout=1800, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
    notebook.metadata.pop("widgets", None)
    nbformat.write(notebook, path)
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path)
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(pathlib.Path("notebooks").glob("[0-9]*.ipynb"))
    for path in paths:
        print(f"{path}: {run(path):.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
