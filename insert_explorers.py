"""Insert the explorer cells of explorer_cells.json into notebooks 02, 03 and 05 (idempotent).

    python insert_explorers.py notebooks/02_nadaraya_watson.ipynb \
        notebooks/03_attention_scoring.ipynb notebooks/05_self_attention_positional_encoding.ipynb
    python insert_explorers.py --check notebooks/*.ipynb   # only report where the cells would go

Each notebook's entry in explorer_cells.json names the code cell after which its cells go, by a
line of that cell's source (`after_cell_containing`, which must match exactly one cell). A cell
whose id is already in the notebook is replaced in place (its source refreshed, its outputs
cleared), so running the script twice changes nothing the second time. Then execute the notebook
as usual (python benchmarks/notebooks.py --write ...) to store the explorers' outputs.
"""

from __future__ import annotations

import argparse
import copy
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent


def insert(notebook: dict, entry: dict) -> tuple[dict, str]:
    """Return the notebook with the entry's cells in place, and a line saying what was done."""
    notebook = copy.deepcopy(notebook)
    cells = notebook["cells"]
    new_cells = [copy.deepcopy(c) for c in entry["cells"]]
    ids = [c["id"] for c in new_cells]
    present = [i for i, c in enumerate(cells) if c.get("id") in ids]
    if present:  # already inserted: refresh the sources in place
        stale = []
        for i in present:
            fresh = next(c for c in new_cells if c["id"] == cells[i]["id"])
            if cells[i]["source"] != fresh["source"]:
                cells[i], stale = fresh, stale + [i]
        done = f"refreshed the source of cells {stale}" if stale else "nothing to do"
        return notebook, f"already there (cells {present}); {done}"
    anchor = entry["after_cell_containing"]
    matches = [i for i, c in enumerate(cells)
               if c["cell_type"] == "code" and anchor in "".join(c["source"])]
    if len(matches) != 1:
        raise SystemExit(f"the anchor {anchor!r} matches {len(matches)} code cells "
                         f"({matches}); edit after_cell_containing in explorer_cells.json")
    at = matches[0] + 1
    cells[at:at] = new_cells
    return notebook, f"inserted {len(new_cells)} cells after cell {matches[0]}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=pathlib.Path)
    parser.add_argument("--check", action="store_true", help="report only; write nothing")
    parser.add_argument("--cells", type=pathlib.Path, default=HERE / "explorer_cells.json")
    args = parser.parse_args(argv)
    entries = json.loads(args.cells.read_text(encoding="utf-8"))
    for path in args.notebooks:
        entry = entries.get(path.stem)
        if entry is None:
            print(f"{path}: no explorer cells for it")
            continue
        notebook = json.loads(path.read_text(encoding="utf-8"))
        updated, what = insert(notebook, entry)
        print(f"{path}: {what}")
        if not args.check and updated != notebook:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(updated, f, indent=1, ensure_ascii=False, sort_keys=True)  # as nbformat
                f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
