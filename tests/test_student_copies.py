"""Student copies of the course notebooks: valid, free of solutions, and working once solved.

For every notebook in notebooks/ with exercises, the copy that ``python -m exercise_authoring``
writes must be a valid notebook holding none of the solution text nor the hidden tests. Then ONE
kernel runs the copy cell by cell (in notebooks/, as nbval does): every cell before the first
exercise runs without error; each check fails with "not implemented yet" while its exercise is a
stub; the source notebook's solution is then executed in the same kernel and the check, run again,
passes; cells after a solved exercise (which may use the learner's function) run without error.
"""

from __future__ import annotations

import json
import pathlib
import re

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

import exercise_authoring as authoring

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = [path for path in sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
             if authoring.BEGIN_SOLUTION in path.read_text(encoding="utf-8")]
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
REGIONS = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)[^\n]*\n(.*?)### END \1", re.DOTALL)


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """Student copies of every notebook with exercises, written once: name -> path."""
    out = tmp_path_factory.mktemp("student")
    return {path.name: path for path in authoring.write_copies(NOTEBOOKS, out)}


def hidden_lines(source: nbformat.NotebookNode) -> list[list[str]]:
    """For each solution or hidden-test region of the source notebook, its non-blank lines."""
    return [[line.strip() for line in region.splitlines() if line.strip()]
            for cell in source.cells for _, region in REGIONS.findall(cell.source)]


def lines_of(cells) -> set[str]:
    return {line.strip() for cell in cells for line in cell.source.splitlines()}


def role_of(cell) -> str | None:
    meta = cell.metadata.get("nbgrader")
    if meta is None:
        return None
    return "solution" if meta["solution"] and cell.cell_type == "code" else \
        "answer" if meta["solution"] else "check"


def test_every_notebook_has_exercises():
    numbered = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    assert NOTEBOOKS == numbered, f"no exercises in {sorted(set(numbered) - set(NOTEBOOKS))}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_source_notebook_carries_current_nbgrader_metadata(notebook):
    source = nbformat.read(notebook, as_version=4)
    expected = authoring.with_nbgrader_metadata(source)
    for index, (cell, want) in enumerate(zip(source.cells, expected["cells"])):
        assert cell.metadata.get("nbgrader") == want["metadata"].get("nbgrader"), (
            f"{notebook.name}, cell {index}: nbgrader metadata is stale; run "
            f"python -m d2lhelpers.exercises notebooks/{notebook.name} --nbgrader-metadata")
    roles = [role_of(cell) for cell in source.cells]
    assert roles.count("solution") >= 2 and roles.count("check") >= 2, "two coding exercises"
    assert roles.count("answer") >= 1, "questions come with model answers"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_student_copy_is_valid_and_holds_no_solution(notebook, copies):
    source = nbformat.read(notebook, as_version=4)
    copy = nbformat.read(copies[notebook.name], as_version=4)
    nbformat.validate(copy)
    assert [c.cell_type for c in copy.cells] == [c.cell_type for c in source.cells]
    assert [c.metadata.get("nbgrader") for c in copy.cells] == \
        [c.metadata.get("nbgrader") for c in source.cells]
    text = json.dumps(copy)
    assert not any(marker in text for marker in MARKERS)
    code = [c for c in copy.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    for cell in copy.cells:
        role = role_of(cell)
        if role == "solution":
            assert "raise NotImplementedError()" in cell.source
        elif role == "answer":
            assert authoring.ANSWER_STUB in cell.source

    # Every line of a solution or hidden test is gone, except lines the learner reads anyway in
    # the cells that are not graded (e.g. `with torch.no_grad():`) and lines of punctuation.
    teaching = lines_of(c for c in source.cells if role_of(c) is None)
    student = lines_of(copy.cells)
    regions = hidden_lines(source)
    assert len(regions) >= 4
    for region in regions:
        checked = [line for line in region if line not in teaching and re.search(r"\w", line)]
        assert checked, f"a solution region made only of lines shown elsewhere: {region}"
        leaked = [line for line in checked if line in student]
        assert not leaked, f"{notebook.name}: the student copy still holds {leaked}"


def cell_text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_student_copy_runs_fails_its_checks_then_passes_them_once_solved(notebook, copies):
    source = nbformat.read(notebook, as_version=4)
    copy = nbformat.read(copies[notebook.name], as_version=4)
    client = NotebookClient(copy, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    stubs, passed = [], 0  # stubs: solution cells not yet solved
    with client.setup_kernel():
        for index, cell in enumerate(copy.cells):
            if cell.cell_type != "code":
                continue
            role = role_of(cell)
            if role != "check":  # teaching cells, stubs (they define a function), later cells
                client.execute_cell(cell, index)
                if role == "solution":
                    stubs.append(index)
                continue
            assert stubs, f"cell {index}: a check with no exercise before it"
            with pytest.raises(CellExecutionError, match="not implemented yet"):
                client.execute_cell(cell, index)
            for solved in stubs:  # paste the source notebook's solution back, and run it
                client.execute_cell(nbformat.v4.new_code_cell(source.cells[solved].source), solved)
            stubs = []
            client.execute_cell(cell, index)
            assert cell_text(cell).startswith("Correct: "), cell_text(cell)
            passed += 1
    assert passed == sum(role_of(c) == "check" for c in source.cells) >= 2
