"""The generated parts of the notebooks, rewritten from one template each.

A teaching notebook (``notebooks/``, what a learner reads) holds the setup cell (its first code
cell), the solutions between nbgrader's markers (in markdown, HTML comments that renderers hide),
check cells that call a check on a line of their own, nbgrader's cell metadata, and nbval's
markers as cell tags: ``update`` keeps these current.
nbgrader's source notebook of a teaching notebook (what an instructor puts in nbgrader's
``source/<assignment>/`` folder) is the same notebook with the hidden tests below the call in every
check cell: ``nbgrader_sources`` writes it. The hidden tests are never stored where a learner reads.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from pathlib import Path

from .copies import (
    BEGIN_ANSWER,
    BEGIN_HIDDEN_TESTS,
    COLLAPSE_TAG,
    END_ANSWER,
    END_HIDDEN_TESTS,
    EXERCISES_HEADING,
    EXERCISES_LINE,
    MODEL_ANSWER,
    MODEL_ANSWER_OUTPUT,
    OTHER_EDITION,
    collapse,
    exercises_line,
    expand,
    source_of,
    without_exercises_line,
    without_model_answer,
)
from .nbgrader_metadata import SETUP_HEADER, nbgrader_role, with_nbgrader_metadata
from .project import Project, find_project

__all__ = [
    "check_calls",
    "hidden_tests_source",
    "nbgrader_source_notebook",
    "nbgrader_sources",
    "setup_source",
    "update_sources",
    "updated_notebook",
]

_VISIBLE_CALL = re.compile(rf"^d2lh\.exercises\.(check_\w+)\((\w+)(?:{re.escape(MODEL_ANSWER)})?\)"
                           r"[ \t]*$", re.MULTILINE)
_CALLED = r"check_\w+\(\w+"  # the start of a visible call: check_x(fn
_HIDDEN_REGION = re.compile(r"\n?^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n.*?^[ \t]*### END HIDDEN TESTS"
                            r"[^\n]*$", re.MULTILINE | re.DOTALL)
# nbval's comment markers (a comment line of its own, e.g. "# NBVAL_IGNORE_OUTPUT"); nbval reads
# the same markers from the cell's tags, lower case with dashes ("nbval-ignore-output")
_NBVAL_MARKERS = ("NBVAL_IGNORE_OUTPUT", "NBVAL_CHECK_OUTPUT", "NBVAL_RAISES_EXCEPTION", "NBVAL_SKIP")
_NBVAL_COMMENT = re.compile(rf"^[ \t]*#+[ \t]*({'|'.join(_NBVAL_MARKERS)})[ \t]*(?:\n|\Z)",
                            re.MULTILINE)
# nbgrader's markers written as in code ("### BEGIN SOLUTION"), which markdown shows as headings
_MARKDOWN_HEADING_MARKER = re.compile(r"^[ \t]*#+[ \t]*(BEGIN|END) SOLUTION[ \t#]*$", re.MULTILINE)


def setup_source(project: Project) -> str:
    """The setup cell: on Colab it installs d2lhelpers at the release tag of ``project``'s
    version; anywhere it imports d2lhelpers, so that a kernel without it fails here, on a line
    that says how to install it (and nbgrader's autograde stops: see ``grading``). The name it
    binds, ``d2lhelpers``, is the one the stubs of the student copies use (``copies.STUB``)."""
    return f'''{SETUP_HEADER} on Colab, install the course's package d2lhelpers at the version of this notebook.
import sys
if "google.colab" in sys.modules:
    %pip install --quiet "{project.requirement}"
import d2lhelpers  # missing? run the %pip line above, or pip install -e . in the course's folder'''


def hidden_tests_source(calls: Sequence[tuple[str, str]]) -> str:
    """Hidden tests rerunning each (check, function) with other inputs (seed=1) by a copy of the
    checking code loaded afresh from d2lhelpers' files (``check_afresh`` in
    ``d2lhelpers/exercises/runner.py``), so that a solution that replaces ``d2lh.exercises``, a
    check or ``run_check`` cannot earn the points. They print nothing when they pass: the visible
    check above them has printed its "Correct" line."""
    lines = [BEGIN_HIDDEN_TESTS,
             "# For the grader: the same check on other inputs (seed=1), by a copy of the checking code",
             "# loaded afresh from d2lhelpers' files, which no code in this notebook can have patched.",
             "import importlib.util, runpy",
             '_d2lhelpers = importlib.util.find_spec("d2lhelpers").submodule_search_locations[0]',
             '_check_afresh = runpy.run_path(f"{_d2lhelpers}/exercises/runner.py")["check_afresh"]']
    lines += [f'_check_afresh("{check}", {function}, seed=1)' for check, function in calls]
    return "\n".join([*lines, END_HIDDEN_TESTS])


def check_calls(source: str) -> list[tuple[str, str]]:
    """The (check, function) pairs of a check cell's visible calls, e.g.
    ``d2lh.exercises.check_loo_error(loo_error)``, each on a line of its own."""
    return _VISIBLE_CALL.findall(_HIDDEN_REGION.sub("", source))


def _nbval_markers_to_tags(cell: dict) -> None:
    """Move nbval's comment markers of a code cell into its tags (``# NBVAL_IGNORE_OUTPUT`` becomes
    the tag ``nbval-ignore-output``), so that the learner does not read them."""
    source = source_of(cell)
    markers = _NBVAL_COMMENT.findall(source)
    if not markers:
        return
    cell["source"] = _NBVAL_COMMENT.sub("", source)
    tags = cell.setdefault("metadata", {}).setdefault("tags", [])
    tags += [tag for tag in dict.fromkeys(m.lower().replace("_", "-") for m in markers)
             if tag not in tags]


def _answer_markers_hidden(source: str) -> str:
    """A markdown cell's source with nbgrader's markers written as code comments ("### BEGIN
    SOLUTION", a heading in markdown) turned into HTML comments, which renderers hide."""
    return _MARKDOWN_HEADING_MARKER.sub(
        lambda m: BEGIN_ANSWER if m.group(1) == "BEGIN" else END_ANSWER, source)


_ANSWER_REGION = re.compile(rf"({re.escape(BEGIN_ANSWER)}\n)(.*?)(\n?{re.escape(END_ANSWER)})", re.DOTALL)
DETAILS_OPEN, DETAILS_CLOSE = "<details><summary>Answer</summary>", "</details>"


def _answer_behind_a_click(source: str) -> str:
    """A markdown cell's source with each model answer (between the HTML-comment markers) inside
    ``<details><summary>Answer</summary> ... </details>``, which GitHub, JupyterLab and Colab show
    closed. The ``<details>`` lines sit inside the markers, so a student copy loses them with the
    answer."""
    def wrap(m: re.Match) -> str:
        body = m.group(2).strip("\n")
        if body.startswith(DETAILS_OPEN):
            return m.group(0)
        return f"{m.group(1)}{DETAILS_OPEN}\n\n{body}\n\n{DETAILS_CLOSE}{m.group(3)}"
    return _ANSWER_REGION.sub(wrap, source)


def _model_answer_checked(cell: dict) -> None:
    """A check cell as a teaching notebook shows it: its calls with ``model_answer=True``,
    collapsed, and its output the line that each such call prints (the reader has run nothing:
    the model answer passes, and the student copy is where their own code gets its verdict)."""
    calls = check_calls(source_of(cell))
    cell["source"] = re.sub(rf"^(d2lh\.exercises\.{_CALLED})\)", rf"\1{MODEL_ANSWER})",
                            without_model_answer(source_of(cell)), flags=re.MULTILINE)
    collapse(cell)
    text = "".join(MODEL_ANSWER_OUTPUT.format(check=check) + "\n" for check, _ in calls)
    cell["outputs"] = [{"name": "stdout", "output_type": "stream", "text": text}]


def _with_exercises_line(cell: dict, path: Path) -> None:
    """The line saying where to try the exercises, written (or rewritten) right under the
    "## Exercises" heading of a markdown cell that starts with it."""
    source = source_of(cell)
    heading = EXERCISES_HEADING.match(source)
    if heading is None:
        return
    rest = source[heading.end():].lstrip("\n")
    if EXERCISES_LINE.match(rest):  # written before: written again
        rest = EXERCISES_LINE.sub("", rest, count=1).lstrip("\n")
    cell["source"] = (f"{heading.group(0)}\n\n{exercises_line(path)}"
                      + (f"\n\n{rest}" if rest else ""))


def updated_notebook(notebook: dict, project: Project, path: Path | None = None) -> dict:
    """The teaching notebook ``notebook`` (nbformat JSON as a dict) with its setup cell rewritten
    from the template, hidden tests removed from its check cells, nbval's comment markers moved
    into cell tags, the solution markers of its markdown cells made HTML comments with the answer
    inside ``<details>``, code solutions and the cells tagged ``hide-input`` (checks and figure
    code) collapsed in every front end (:func:`copies.collapse`), and its nbgrader metadata
    rewritten; given its ``path``, also the edition line under its title (the Colab badge and the
    link to its Chinese edition); a notebook that is up to date comes back equal."""
    notebook = copy.deepcopy(notebook)
    if path is not None:
        from .translation import with_edition_line

        notebook = with_edition_line(path, notebook)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown" and path is not None:
            _with_exercises_line(cell, path)
        if cell["cell_type"] == "markdown":
            source = source_of(cell)
            hidden = _answer_behind_a_click(_answer_markers_hidden(source))
            if hidden != source:
                cell["source"] = hidden
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    if not code or "google.colab" not in source_of(code[0]):
        raise ValueError("notebook's first code cell must be its setup cell (it installs "
                         "d2lhelpers on Colab)")
    code[0]["source"] = setup_source(project)
    for cell in code:
        _nbval_markers_to_tags(cell)
        role = (nbgrader_role(cell) or ("",))[0]
        if role == "solution" or COLLAPSE_TAG in cell.get("metadata", {}).get("tags", []):
            collapse(cell)
        if role != "check":
            continue
        source = source_of(cell)
        if not check_calls(source):
            raise ValueError("a check cell must call d2lh.exercises.check_<name>(<function>) on "
                             f"a line of its own, got:\n{source}")
        cell["source"] = _HIDDEN_REGION.sub("", source).rstrip("\n")
        _model_answer_checked(cell)
    return with_nbgrader_metadata(notebook)


def nbgrader_source_notebook(notebook: dict, project: Project) -> dict:
    """nbgrader's source notebook of the teaching notebook ``notebook``: the notebook as ``update``
    writes it, with the hidden tests (:func:`hidden_tests_source`) below the calls of every check
    cell. nbgrader records these cells, hidden tests included, when it generates the assignment,
    releases them without the hidden tests, and grades with the recorded cells. As in the student
    copies, the link to the Chinese edition is dropped (it would open the solutions), and so is
    the line pointing to the student copy; the check cells, without ``model_answer=True``, are
    expanded and print the learner's own verdict."""
    notebook = updated_notebook(notebook, project)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":  # no link to the Chinese edition, with its solutions
            cell["source"] = without_exercises_line(OTHER_EDITION.sub("", source_of(cell)))
        if cell["cell_type"] == "code" and (nbgrader_role(cell) or ("",))[0] == "check":
            source = without_model_answer(source_of(cell))  # the learner's verdict, expanded
            expand(cell)
            cell["source"] = source + "\n" + hidden_tests_source(check_calls(source))
            cell["outputs"] = []
    return notebook


def update_sources(paths: Sequence[Path]) -> list[tuple[Path, bool]]:
    """Rewrite the generated parts of teaching notebooks in place (with nbformat, which keeps the
    files' layout); return (path, changed) pairs."""
    import nbformat  # installed wherever notebooks run; only the commands need it

    results = []
    for path in map(Path, paths):
        notebook = nbformat.read(path, as_version=4)
        try:
            updated = nbformat.from_dict(updated_notebook(notebook, find_project(path.parent), path))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
        changed = updated != notebook
        if changed:
            nbformat.write(updated, path)
        results.append((path, changed))
    return results


def nbgrader_sources(paths: Sequence[Path], out_dir: Path) -> list[Path]:
    """Write nbgrader's source notebook of each teaching notebook into ``out_dir`` (e.g.
    ``source/<assignment>/`` of an nbgrader course folder), under the same name; return the paths
    written. Refuses to overwrite a teaching notebook with its hidden tests."""
    import nbformat

    written = []
    for path in map(Path, paths):
        target = Path(out_dir) / path.name
        if target.resolve() == path.resolve():
            raise ValueError(f"{path}: the nbgrader source notebook would overwrite the teaching "
                             "notebook: choose another --out folder")
        notebook = nbformat.read(path, as_version=4)
        try:
            source = nbgrader_source_notebook(notebook, find_project(path.parent))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.from_dict(source), target)
        written.append(target)
    return written
