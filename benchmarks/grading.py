"""The nbgrader round trip an instructor makes, on the course's own notebooks, timed.

    python benchmarks/grading.py                                   # notebooks 01-03
    python benchmarks/grading.py notebooks/01_queries_keys_values.ipynb

In a temporary course folder holding the repository's nbgrader_config.py, it writes nbgrader's
source notebooks of the teaching notebooks into source/<assignment>/ (as ``python -m
exercise_authoring source`` does: the hidden tests added to the check cells), runs ``nbgrader
generate_assignment``, builds four submissions from
the released notebooks, autogrades each one on its own (timing it), and prints the automatic
points of every check cell against the points expected:

- solved: every solution and model answer filled in from the source notebook;
- empty: the released notebooks as they are;
- wrong: in each notebook the first exercise solved, the others given a plausible wrong answer
  (``WRONG`` below: the round trip knows wrong answers for notebooks 01-03);
- patched: in each notebook the first exercise solved, in a cell that also replaces
  ``d2lh.exercises.run_check``, every check of ``d2lh.exercises`` and every check module's
  ``run_check`` by a function that prints "Correct"; the other exercises left as stubs.

Exit status 1 if any check's points differ from the expected ones. Run it with nbgrader installed
(the ``test`` extra) and ``D2LHELPERS_DATA_DIR`` set as ``.ci/run`` sets it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import exercise_authoring as authoring

ASSIGNMENT = "attention"
SUBMISSIONS = ("solved", "empty", "wrong", "patched")

# Plausible wrong answers (grade id of the solution cell -> its source), for the round trip's
# "wrong" submission: the wrong width under the root, a point among its own keys, a threshold
# averaged over every score.
WRONG = {
    "CrossAttention": '''class CrossAttention(nn.Module):
    def __init__(self, query_size, context_size, d, d_v):
        super().__init__()
        self.W_q = nn.Linear(query_size, d, bias=False)
        self.W_k = nn.Linear(context_size, d, bias=False)
        self.W_v = nn.Linear(context_size, d_v, bias=False)

    def forward(self, queries, context):
        Q, K, V = self.W_q(queries), self.W_k(context), self.W_v(context)
        weights = torch.softmax(Q @ K.transpose(1, 2) / math.sqrt(queries.shape[-1]), dim=-1)
        return weights @ V, weights''',
    "loo_error": '''def loo_error(x, y, width):
    weights = torch.softmax(-((x[:, None] - x[None, :]) / width) ** 2 / 2, dim=1)
    return ((weights @ y - y) ** 2).mean().item()''',
    "sparsemax": '''def sparsemax(scores):
    tau = (scores.sum(dim=-1, keepdim=True) - 1) / scores.shape[-1]
    return (scores - tau).clamp(min=0)''',
}

# Everything a solution cell can replace in the course's checking code (issue 14's one line, and
# more), so that every visible check prints "Correct".
PATCH = '''

import sys
import d2lhelpers as d2lh

def always_correct(*args, **kwargs):
    print("Correct")

d2lh.exercises.run_check = always_correct
for name in d2lh.exercises.__all__:
    if name.startswith("check_"):
        setattr(d2lh.exercises, name, always_correct)
for module_name, module in list(sys.modules.items()):
    if module_name.startswith("d2lhelpers.exercises."):
        module.run_check = always_correct'''

# a line of nbgrader's solution markers: "### BEGIN SOLUTION" in code, "<!-- BEGIN SOLUTION -->" in
# markdown (nbgrader looks for the words anywhere in a line)
_MARKER_LINE = re.compile(r"^[^\n]*(?:BEGIN|END) SOLUTION[^\n]*\n?", re.MULTILINE)


@dataclasses.dataclass
class Graded:
    """One autograded submission: its points per (notebook, check), the expected ones, the
    wall-clock and CPU seconds ``nbgrader autograde`` took (its kernels included), its log, and
    the graded notebooks by name."""

    student: str
    points: dict[tuple[str, str], float]
    expected: dict[tuple[str, str], float]
    seconds: float
    cpu_seconds: float
    log: str
    notebooks: dict[str, nbformat.NotebookNode]

    def checksum_warnings(self) -> list[str]:
        """The grade ids of the cells nbgrader warns about: "checksum ... has changed"."""
        return re.findall(r"Attribute 'checksum' for cell (\S+) has changed", self.log)

    def check_output(self, notebook: str, check: str) -> str:
        """What the graded check cell printed, then the error it ended with (if any)."""
        cell = next(c for c in self.notebooks[notebook].cells if grade_id(c) == check)
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        errors = [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]
        return text + "\n".join(errors)


def grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def nbgrader(course: pathlib.Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run an nbgrader command in the course folder; its output (nbgrader logs to stderr) is kept."""
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True, check=False)  # callers read the status


def generate_assignment(course: pathlib.Path, notebooks: list[pathlib.Path]) -> dict:
    """A course folder with the repository's nbgrader configuration, nbgrader's source notebooks
    of the teaching ``notebooks`` and the released assignment; return the source notebooks by
    name."""
    shutil.copy(ROOT / "nbgrader_config.py", course)
    written = authoring.nbgrader_sources(notebooks, course / "source" / ASSIGNMENT)
    result = nbgrader(course, "generate_assignment", ASSIGNMENT)
    if result.returncode != 0:
        raise RuntimeError(f"nbgrader generate_assignment failed:\n{result.stderr}")
    return {path.name: nbformat.read(path, as_version=4) for path in written}


def exercises(source) -> list[tuple[str, str]]:
    """(solution grade id, check grade id) of each coding exercise of a source notebook, in order."""
    checks = {function: grade_id(cell) for cell in source.cells
              if authoring.nbgrader_role(cell) and authoring.nbgrader_role(cell)[0] == "check"
              for _, function in authoring.check_calls(cell.source)}
    return [(grade_id(cell), checks[grade_id(cell)]) for cell in source.cells
            if authoring.nbgrader_role(cell) and authoring.nbgrader_role(cell)[0] == "solution"]


def submission(release, source, kind: str):
    """The released notebook filled in as the submission ``kind`` (see the module's docstring)."""
    answers = {grade_id(cell): _MARKER_LINE.sub("", cell.source) for cell in source.cells
               if cell.metadata.get("nbgrader", {}).get("solution")}
    first = exercises(source)[0][0]
    filled = nbformat.from_dict(release)
    for cell in filled.cells:
        name = grade_id(cell)
        if name not in answers or kind == "empty":
            continue
        if kind == "solved" or name == first:
            cell.source = answers[name] + (PATCH if kind == "patched" else "")
        elif kind == "wrong" and cell.cell_type == "code":
            if name not in WRONG:
                raise ValueError(f"WRONG has no wrong answer for {name!r}: add one")
            cell.source = WRONG[name]
    return filled


def expected_points(source, kind: str) -> dict[str, float]:
    """The automatic points each check cell of ``source`` should get for the submission ``kind``."""
    pairs = exercises(source)
    solved = {"solved": {check for _, check in pairs}, "empty": set()}.get(kind, {pairs[0][1]})
    return {check: 1.0 if check in solved else 0.0 for _, check in pairs}


def write_submission(course: pathlib.Path, sources: dict, kind: str,
                     student: str | None = None) -> dict:
    """Write the submission ``kind`` of every notebook into submitted/, for ``student`` (by
    default the kind's name); return the automatic points expected for each (notebook, check)."""
    folder = course / "submitted" / (student or kind) / ASSIGNMENT
    folder.mkdir(parents=True)
    expected = {}
    for name, source in sources.items():
        release = nbformat.read(course / "release" / ASSIGNMENT / name, as_version=4)
        nbformat.write(submission(release, source, kind), folder / name)
        expected.update({(name, check): points
                         for check, points in expected_points(source, kind).items()})
    return expected


def graded(course: pathlib.Path, sources: dict, kind: str, expected: dict, seconds: float,
           cpu_seconds: float, log: str) -> Graded:
    """The points the gradebook holds for the submission ``kind``, and its graded notebooks."""
    from nbgrader.api import Gradebook

    points = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for name in sources:
            notebook = gradebook.find_submission_notebook(name.removesuffix(".ipynb"),
                                                          ASSIGNMENT, kind)
            points.update({(name, grade.name): grade.auto_score for grade in notebook.grades
                           if grade.cell_type == "code"})
    notebooks = {name: nbformat.read(course / "autograded" / kind / ASSIGNMENT / name,
                                     as_version=4) for name in sources}
    return Graded(kind, points, expected, seconds, cpu_seconds, log, notebooks)


def _children_cpu_seconds() -> float:
    """User and system CPU seconds of the finished child processes (and theirs: the kernels)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def round_trip(notebooks: list[pathlib.Path], course: pathlib.Path, kinds=SUBMISSIONS,
               one_by_one: bool = True) -> list[Graded]:
    """Generate the assignment from the teaching ``notebooks`` in the empty folder ``course``,
    write each submission kind, and autograde them: one ``nbgrader autograde`` per submission
    (timed), or all in one run (quicker; each submission's seconds are then those of the whole
    run)."""
    sources = generate_assignment(course, notebooks)
    expected = {kind: write_submission(course, sources, kind) for kind in kinds}
    runs = {}
    for students in ([[kind] for kind in kinds] if one_by_one else [list(kinds)]):
        start, cpu_start = time.perf_counter(), _children_cpu_seconds()
        result = nbgrader(course, "autograde", ASSIGNMENT,
                          *(["--student", students[0]] if one_by_one else []))
        seconds, cpu_seconds = time.perf_counter() - start, _children_cpu_seconds() - cpu_start
        if result.returncode != 0:
            raise RuntimeError(f"nbgrader autograde failed:\n{result.stderr}")
        runs.update({student: (seconds, cpu_seconds, result.stderr) for student in students})
    return [graded(course, sources, kind, expected[kind], *runs[kind]) for kind in kinds]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path,
                        default=sorted((ROOT / "notebooks").glob("0[1-3]_*.ipynb")))
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as the tests run; other work may share the CPU
    with tempfile.TemporaryDirectory() as folder:
        results = round_trip([path.resolve() for path in args.notebooks], pathlib.Path(folder))
    print("| submission | automatic points | expected | seconds | CPU seconds |\n"
          "|---|---:|---:|---:|---:|")
    for graded in results:
        print(f"| {graded.student} | {sum(graded.points.values()):g} | "
              f"{sum(graded.expected.values()):g} | {graded.seconds:.1f} | "
              f"{graded.cpu_seconds:.1f} |")
    for graded in results:
        if graded.student == "patched":
            print("\nThe patched submission's unsolved checks, as graded:")
            for (notebook, check), points in graded.points.items():
                if points == 0:
                    output = graded.check_output(notebook, check).strip().splitlines()
                    print(f"- {notebook} {check}: {points:g} points; printed {output[0]!r}, "
                          f"ended with {output[-1][:120]!r}")
    warned = sorted({name for graded in results for name in graded.checksum_warnings()})
    print(f"\nCells named in nbgrader's checksum warnings: {', '.join(warned) or 'none'}")
    failed = False
    for graded in results:
        if graded.points != graded.expected:
            failed = True
            print(f"\n{graded.student}: points {graded.points}\nexpected {graded.expected}\n"
                  f"{graded.log[-3000:]}")
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
