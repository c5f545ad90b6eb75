"""Held-out trial of the checks' diagnoses: do wrong answers written blind to the catalogues of
mistakes fail, and does the message name their mistake?

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/diagnoses_trial.py
    python benchmarks/diagnoses_trial.py --check check_gru_cell --seed 1 --json trial.json

The wrong answers are in ``tests/heldout2_mistakes.py`` (one function or class per mistake, named
in plain words by its author). Each runs through its check, ``d2lh.exercises.<check>``; the
check's output is silenced. For each, the table shows what came out:

- ``PASSED``: the check accepted the wrong answer (a failure of the check);
- the first line of ``ExerciseCheckFailed.diagnosis``, the sentence naming the mistake; marked
  ``[generic]`` when it is one of the runner's generic sentences (a constant factor or offset, a
  transposed, reshaped or reordered result), which say what the result has in common with the
  expected one rather than which step is wrong;
- ``(no diagnosis)``: the check failed the answer without naming a mistake;
- ``CHECK ERROR``: the check itself raised something other than ExerciseCheckFailed.

A right answer per check (``CONTROLS``) runs first: a control that fails means the harness, not
the check, is wrong, and is reported as such. The script reads only the exception's ``diagnosis``
attribute (the first line of the message, when it has none), so it keeps working when the checks'
sentences change. It judges nothing: whether a diagnosis names the author's mistake is for a
reader of the table to say.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
MISTAKES_FILE = ROOT / "tests" / "heldout2_mistakes.py"

os.environ.setdefault("OMP_NUM_THREADS", "1")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import d2lhelpers as d2lh  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# The runner's sentences about what a result shares with the expected one, whatever the exercise
# (d2lhelpers/exercises/runner.py, _GENERIC); "Result 1: your result ..." is one of them on a part.
GENERIC_OPENINGS = (
    "your result is the expected one",
    "your result holds the expected values",
    "your results are the expected ones in another order",
)


def load_mistakes():
    spec = importlib.util.spec_from_file_location("heldout2_mistakes", MISTAKES_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def is_generic(diagnosis: str) -> bool:
    text = diagnosis.strip().lower()
    if text.startswith("result ") and ":" in text:  # a part of a tuple: "Result 1: your ..."
        text = text.split(":", 1)[1].strip()
    return text.startswith(GENERIC_OPENINGS)


def run_one(check_name: str, answer, seed: int) -> dict:
    """Run ``answer`` through its check: {outcome, diagnosis, seconds}. outcome is one of passed,
    diagnosed, generic, undiagnosed, check_error."""
    check = getattr(d2lh.exercises, check_name)
    failed_type = d2lh.exercises.ExerciseCheckFailed
    start = time.perf_counter()
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            check(answer, seed=seed)
    except failed_type as error:
        diagnosis = getattr(error, "diagnosis", None)
        if diagnosis is None and not hasattr(error, "diagnosis"):  # an older or newer API
            diagnosis = (str(error).strip().splitlines() or [""])[0] or None
        if diagnosis:
            first = diagnosis.strip().splitlines()[0]
            outcome = "generic" if is_generic(first) else "diagnosed"
        else:
            first, outcome = None, "undiagnosed"
    except Exception as error:  # the check broke, not the learner's answer
        first, outcome = f"{type(error).__name__}: {error}".splitlines()[0], "check_error"
    else:
        first, outcome = None, "passed"
    return {"outcome": outcome, "diagnosis": first,
            "seconds": round(time.perf_counter() - start, 3)}


def shown(row: dict) -> str:
    if row["outcome"] == "passed":
        return "PASSED (wrong answer not caught)"
    if row["outcome"] == "undiagnosed":
        return "(no diagnosis)"
    if row["outcome"] == "check_error":
        return f"CHECK ERROR {row['diagnosis']}"
    prefix = "[generic] " if row["outcome"] == "generic" else ""
    return prefix + row["diagnosis"]


def table(rows: list[dict]) -> str:
    lines = ["| # | check | mistake (author's words) | diagnosis (first line) |",
             "|---|---|---|---|"]
    for i, row in enumerate(rows, 1):
        cells = [str(i), row["check"], row["mistake"], shown(row)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the checks' seed (default 0)")
    parser.add_argument("--check", action="append", default=None,
                        help="only this check (repeatable), e.g. check_gru_cell")
    parser.add_argument("--json", type=pathlib.Path, help="also write the rows to this file")
    args = parser.parse_args(argv)

    module = load_mistakes()
    mistakes = [m for m in module.MISTAKES if args.check is None or m[0] in args.check]
    controls = {c: fn for c, fn in module.CONTROLS.items() if args.check is None or c in args.check}
    started = time.perf_counter()

    broken_controls = []
    for check_name, answer in controls.items():
        row = run_one(check_name, answer, args.seed)
        if row["outcome"] != "passed":
            broken_controls.append((check_name, shown(row)))

    rows = []
    for check_name, mistake, answer in mistakes:
        row = run_one(check_name, answer, args.seed)
        rows.append({"check": check_name, "mistake": mistake, **row})

    print(table(rows))
    counts = {k: sum(r["outcome"] == k for r in rows)
              for k in ("passed", "diagnosed", "generic", "undiagnosed", "check_error")}
    total = len(rows)
    print()
    print(f"wrong answers: {total} over {len({r['check'] for r in rows})} checks, seed {args.seed}")
    print(f"  passed (wrong answer not caught): {counts['passed']}")
    print(f"  diagnosed (a sentence naming a mistake): {counts['diagnosed']}")
    print(f"  diagnosed with a generic sentence only: {counts['generic']}")
    print(f"  undiagnosed (failed, no diagnosis): {counts['undiagnosed']}")
    if counts["check_error"]:
        print(f"  check errors (the check raised): {counts['check_error']}")
    print(f"controls (right answers) failing: {len(broken_controls)} of {len(controls)}")
    for check_name, text in broken_controls:
        print(f"  CONTROL FAILED {check_name}: {text}")
    slowest = sorted(rows, key=lambda r: -r["seconds"])[:3]
    print(f"time: {time.perf_counter() - started:.1f} s; slowest: "
          + ", ".join(f"{r['check']} / {r['mistake']} {r['seconds']:.2f} s" for r in slowest))
    if args.json:
        args.json.write_text(json.dumps({"seed": args.seed, "rows": rows, "counts": counts,
                                         "controls_failed": broken_controls}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
