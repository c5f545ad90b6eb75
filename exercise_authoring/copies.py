"""Student copies: solutions replaced by stubs, hidden tests removed, outputs cleared, and the
Open-in-Colab badge pointing at the copy itself.

A solution lies between nbgrader's markers: in a code cell the comments ``### BEGIN SOLUTION`` /
``### END SOLUTION``; in a markdown cell (a model answer) the HTML comments ``<!-- BEGIN SOLUTION
-->`` / ``<!-- END SOLUTION -->``, which every renderer hides (a line ``### BEGIN SOLUTION`` there
would show as a heading). nbgrader accepts both: a line that contains "BEGIN SOLUTION" starts a
solution, whatever its comment marks (nbgrader's ``ClearSolutions``), and so it does here.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from pathlib import Path

from .project import find_project

__all__ = [
    "ANSWER_STUB",
    "BEGIN_ANSWER",
    "BEGIN_HIDDEN_TESTS",
    "BEGIN_SOLUTION",
    "END_ANSWER",
    "END_HIDDEN_TESTS",
    "END_SOLUTION",
    "COLLAPSE_TAG",
    "EXERCISES_LINE",
    "MODEL_ANSWER_OUTPUT",
    "STUB",
    "collapse",
    "exercises_line",
    "expand",
    "has_solution",
    "notebook_text",
    "source_of",
    "student_notebook",
    "student_source",
    "write_copies",
]

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"  # in code cells
BEGIN_ANSWER, END_ANSWER = "<!-- BEGIN SOLUTION -->", "<!-- END SOLUTION -->"  # in markdown
BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
_BEGIN, _END = "BEGIN SOLUTION", "END SOLUTION"  # what nbgrader looks for in a line
# The stubs. nbgrader's release writes the same ones (the code stub is given to it as
# ClearSolutions.code_stub in the repository's nbgrader_config.py), so that its release notebooks
# equal our copies. The code stub raises d2lhelpers.exercises.NotWrittenYet, a NotImplementedError
# that Jupyter shows in two lines naming the function to write (``d2lhelpers``: the name the
# setup cell imports).
STUB = "# YOUR CODE HERE\nraise d2lhelpers.exercises.NotWrittenYet()"
ANSWER_STUB = "YOUR ANSWER HERE"  # nbgrader's own text stub
# A cell whose code a learner need not read (a check, figure code, a code solution) is collapsed in
# each front end: JupyterLab reads jupyter.source_hidden, Colab its form view (cellView), Jupyter
# Book and nbconvert templates the tag hide-input. The author tags a cell hide-input; `update`
# writes the rest.
COLLAPSE_TAG = "hide-input"


def collapse(cell: dict) -> None:
    """Collapse a code cell's source in JupyterLab, Colab and Jupyter Book (its output stays)."""
    metadata = cell.setdefault("metadata", {})
    metadata.setdefault("jupyter", {})["source_hidden"] = True
    metadata["cellView"] = "form"
    tags = metadata.setdefault("tags", [])
    if COLLAPSE_TAG not in tags:
        tags.append(COLLAPSE_TAG)


def expand(cell: dict) -> None:
    """Undo :func:`collapse` (a student copy's exercise cell is where the learner writes)."""
    metadata = cell.get("metadata", {})
    metadata.get("jupyter", {}).pop("source_hidden", None)
    if metadata.get("jupyter") == {}:
        del metadata["jupyter"]
    metadata.pop("cellView", None)
    if COLLAPSE_TAG in metadata.get("tags", []):
        metadata["tags"].remove(COLLAPSE_TAG)
        if not metadata["tags"]:
            del metadata["tags"]

_REGION = re.compile(rf"^([ \t]*)[^\n]*{_BEGIN}[^\n]*\n.*?^[^\n]*{_END}[^\n]*$",
                     re.MULTILINE | re.DOTALL)
_HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?",
                     re.MULTILINE | re.DOTALL)
# The link to the other edition, after the badge (see translation.edition_line): a student copy
# drops it (the copy has no other edition, and the link would open the solutions).
OTHER_EDITION = re.compile(r" · \[[^\]]+\]\([^)\s]+\.ipynb\) \(\[[^\]]+\]\(https://colab[^)\s]+\)\)")
BADGE = re.compile(r"(\[!\[Open In Colab\]\(https://colab\.research\.google\.com/assets/"
                   r"colab-badge\.svg\)\])\((https://colab\.research\.google\.com/github/[^)\s]+)\)")


# A teaching notebook shows no verdict its reader did not earn: its check cells call the check
# with model_answer=True (``update`` adds it, ``copies`` and ``source`` remove it), collapsed, and
# their stored output is this line (the same as d2lhelpers.exercises.runner.MODEL_ANSWER).
MODEL_ANSWER = ", model_answer=True"
MODEL_ANSWER_OUTPUT = "✓ the model answer passes {check}; try yours in the student copy"
_MODEL_ANSWER_CALL = re.compile(rf"^(d2lh\.exercises\.check_\w+\(\w+){re.escape(MODEL_ANSWER)}\)",
                                re.MULTILINE)
# The line at the top of a teaching notebook's "## Exercises" section that says where to try them:
# the student copy's Open-in-Colab badge first (so that, like the edition line, the Chinese
# edition writes its own form instead of translating it), then the copy.
EXERCISES_HEADING = re.compile(r"^## Exercises[ \t]*$", re.MULTILINE)
EXERCISES_LINE = re.compile(r"^\[!\[Open In Colab\]\([^)\s]+\)\]"
                            r"\([^)\s]+/exercises/[^)\s]+\.ipynb\) [^\n]*$", re.MULTILINE)
_EXERCISES_TEXT = {
    "en": ("Try them in their student copy, [`exercises/{name}`]({link}) (the badge opens it on "
           "Colab): it has a place for each answer, and its checks judge your own code. Here each "
           "model answer opens on a click, and each check only confirms that the model answer "
           "passes."),
    "zh": ("请在这些练习的学生版 [`exercises/zh-CN/{name}`]({link})（徽章在 Colab 中打开它）中"
           "做练习：那里有写每个答案的位置，检查会用中文评判你自己的代码。这里的参考答案点击后"
           "才展开，检查单元格只确认参考答案能通过。"),
}


def exercises_line(notebook_path: Path, language: str = "en") -> str:
    """The line under a teaching notebook's "## Exercises" heading: the Open-in-Colab badge of
    its student copy (the URL of the copy's own badge) and a relative link to the copy, from the
    English notebook or (``language`` "zh") from its Chinese edition, one folder down, to the
    Chinese student copy (``exercises/zh-CN/``)."""
    path = Path(notebook_path)
    project = find_project(path.parent)
    folder = "exercises" if language == "en" else "exercises/zh-CN"
    copy_path = project.root / folder / path.name
    link = ("../" if language == "en" else "../../") + f"{folder}/{path.name}"
    badge = "https://colab.research.google.com/assets/colab-badge.svg"
    return (f"[![Open In Colab]({badge})]({project.colab_url(copy_path)}) "
            + _EXERCISES_TEXT[language].format(name=path.name, link=link))


def has_solution(source: str) -> bool:
    """Whether a cell's source holds a solution region (a line with nbgrader's "BEGIN SOLUTION")."""
    return _BEGIN in source


def source_of(cell: dict) -> str:
    """A cell's source as one string (nbformat JSON may store it as a list of lines)."""
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def student_source(source: str, cell_type: str = "code") -> str:
    """A cell's source with each solution replaced by a stub and hidden tests removed.

    In a code cell the stub (:data:`STUB`) raises ``d2lhelpers.exercises.NotWrittenYet``, indented
    like the solution it replaces; in a markdown cell (a model answer to a question) it is the line
    "YOUR ANSWER HERE". Each line holding a marker goes with the region, as in nbgrader.
    """
    for begin, end in ((_BEGIN, _END), (BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS)):
        if source.count(begin) != source.count(end):
            raise ValueError(f"unbalanced markers: {source.count(begin)} {begin!r} but "
                             f"{source.count(end)} {end!r} in cell:\n{source}")
    stub = STUB if cell_type == "code" else ANSWER_STUB
    source = _REGION.sub(lambda m: "\n".join(m.group(1) + line for line in stub.splitlines()), source)
    return _HIDDEN.sub("", source).rstrip("\n")


def student_notebook(notebook: dict, keep_solutions: bool = False,
                     colab_url: str | None = None) -> dict:
    """A copy of a notebook (nbformat JSON as a dict) for students: outputs and execution counts
    cleared; unless ``keep_solutions`` (an answer key), solutions (code, and model answers in
    markdown) stubbed, hidden tests removed, and the Open-in-Colab badge made to open
    ``colab_url`` (the copy itself), or removed when ``colab_url`` is None: the source's badge
    would open the solutions."""
    notebook = copy.deepcopy(notebook)
    badges = 0
    for cell in notebook["cells"]:
        if not keep_solutions and cell["cell_type"] in ("code", "markdown"):
            if cell["cell_type"] == "code" and (has_solution(source_of(cell))
                                                or _MODEL_ANSWER_CALL.search(source_of(cell))):
                expand(cell)  # where the learner writes, and the check of what they wrote
            cell["source"] = without_model_answer(student_source(source_of(cell),
                                                                 cell["cell_type"]))
            if cell["cell_type"] == "markdown":
                cell["source"] = without_exercises_line(cell["source"])
                cell["source"], found = BADGE.subn(
                    lambda m: f"{m.group(1)}({colab_url})" if colab_url else "", cell["source"])
                cell["source"] = OTHER_EDITION.sub("", cell["source"])
                badges += found
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    if not keep_solutions and badges == 0:
        raise ValueError("notebook must have an Open-in-Colab badge for the copy to replace")
    return notebook


def without_model_answer(source: str) -> str:
    """A check cell's source with ``model_answer=True`` taken out of its calls: what a learner
    runs prints the verdict on their own code."""
    return _MODEL_ANSWER_CALL.sub(r"\1)", source)


def without_exercises_line(source: str) -> str:
    """A markdown cell's source without the line that says where to try the exercises (a copy
    is that place)."""
    return re.sub(r"\n\n" + EXERCISES_LINE.pattern.lstrip("^"), "", source, flags=re.MULTILINE)


def notebook_text(notebook: dict) -> str:
    """A notebook as nbformat writes it: sources as lists of lines, keys sorted, one-space
    indent, UTF-8 kept."""
    cells = [{**cell, "source": source_of(cell).splitlines(keepends=True)}
             for cell in notebook["cells"]]
    return json.dumps({**notebook, "cells": cells}, indent=1, sort_keys=True,
                      ensure_ascii=False) + "\n"


def write_copies(paths: Sequence[Path], out_dir: Path,
                 answer_key_dir: Path | None = None) -> list[Path]:
    """Write a student copy of each notebook into ``out_dir`` (and an answer key, which keeps the
    solutions, into ``answer_key_dir``); return the paths written. A copy inside the repository
    gets a badge that opens it on Colab at the release tag of the package's version; a copy
    outside gets none."""
    written = []
    for path in map(Path, paths):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        if not any(has_solution(source_of(c)) for c in notebook["cells"]
                   if c["cell_type"] == "code"):
            raise ValueError(f"{path} has no exercise solution ({BEGIN_SOLUTION!r}) to remove")
        project = find_project(path.parent)
        target = Path(out_dir) / path.name
        url = project.colab_url(target) if project.contains(target) else None
        try:
            copies = [(target, student_notebook(notebook, colab_url=url))]
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
        if answer_key_dir is not None:
            copies.append((Path(answer_key_dir) / path.name,
                           student_notebook(notebook, keep_solutions=True)))
        for target, copied in copies:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(notebook_text(copied), encoding="utf-8")
            written.append(target)
    return written
