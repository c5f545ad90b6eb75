"""The exercise notebooks: teaching notebooks whose generated parts are current, and student copies,
committed in exercises/, that are current, free of solutions, and working.

Each check below fails while a notebook or a copy is stale; the message gives the command to run.
The working copies are tested without running the notebooks (nbval runs every teaching notebook):
the exercise cells run in a namespace that holds only what the notebook imports and defines
(functions, classes, constants) before them. There, while an exercise is a stub, its check must
say "not implemented yet"; once the teaching notebook's solution is run, the copy's check and the
hidden tests of nbgrader's source notebook must pass.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import re

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

import d2lhelpers
import exercise_authoring as authoring
from d2lhelpers import exercises

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
EXERCISE_DIR = ROOT / "exercises"  # the committed student copies
PROJECT = authoring.find_project(ROOT)
NOTEBOOKS = [path for path in sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
             if authoring.BEGIN_SOLUTION in path.read_text(encoding="utf-8")]
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
# a region between markers: "### BEGIN SOLUTION" in code, "<!-- BEGIN SOLUTION -->" in markdown
REGIONS = re.compile(r"BEGIN (SOLUTION|HIDDEN TESTS)[^\n]*\n(.*?)^[^\n]*END \1",
                     re.DOTALL | re.MULTILINE)
UPDATE = "python -m exercise_authoring update notebooks/*.ipynb"
COPIES = "python -m exercise_authoring copies notebooks/*.ipynb --out exercises/"


def source_json(path: pathlib.Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def student_copy(path: pathlib.Path) -> dict:
    """The copy ``copies`` writes into exercises/ for the source notebook at ``path``."""
    return authoring.student_notebook(source_json(path),
                                      colab_url=PROJECT.colab_url(EXERCISE_DIR / path.name))


def current_source_and_copy(path: pathlib.Path):
    """nbgrader's source notebook of the teaching notebook at ``path`` (hidden tests included), and
    the student copy of the teaching notebook with its generated parts current. (The copy equals
    the committed one when the tests above pass; used as such below, so that a stale notebook
    fails those tests only.)"""
    teaching = authoring.updated_notebook(nbformat.read(path, as_version=4), PROJECT)
    source = authoring.nbgrader_source_notebook(teaching, PROJECT)
    copy = authoring.student_notebook(teaching,
                                      colab_url=PROJECT.colab_url(EXERCISE_DIR / path.name))
    return nbformat.from_dict(source), nbformat.from_dict(copy)


def role_of(cell) -> str | None:
    """A cell's role, read from its nbgrader metadata (a copy has no markers left to read)."""
    meta = cell.metadata.get("nbgrader")
    if meta is None:
        return None
    if meta["grade_id"] == authoring.SETUP_GRADE_ID:
        return "setup"
    if meta["solution"]:
        return "solution" if cell.cell_type == "code" else "answer"
    return "check" if meta["grade"] else None


def test_every_notebook_has_exercises():
    numbered = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    assert NOTEBOOKS == numbered, f"no exercises in {sorted(set(numbered) - set(NOTEBOOKS))}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_teaching_notebook_has_current_setup_cell_and_nbgrader_metadata_and_no_hidden_tests(
        notebook):
    source = nbformat.read(notebook, as_version=4)
    assert not any(authoring.BEGIN_HIDDEN_TESTS in cell.source for cell in source.cells), \
        f"{notebook.name} holds hidden tests: run {UPDATE}"
    expected = authoring.updated_notebook(source, PROJECT)
    for index, (cell, want) in enumerate(zip(source.cells, expected["cells"])):
        if cell != want:
            pytest.fail(f"{notebook.name}, cell {index} is stale: run {UPDATE}")
    roles = [role_of(cell) for cell in source.cells]
    assert roles.count("solution") >= 2 and roles.count("check") >= 2, "two coding exercises"
    assert roles.count("answer") >= 1, "questions come with model answers"


def test_committed_copies_are_current():
    committed = sorted(path.name for path in EXERCISE_DIR.glob("*.ipynb"))
    assert committed == [path.name for path in NOTEBOOKS], f"exercises/ is stale: run {COPIES}"
    for path in NOTEBOOKS:
        text = (EXERCISE_DIR / path.name).read_text(encoding="utf-8")
        assert text == authoring.notebook_text(student_copy(path)), \
            f"exercises/{path.name} is stale: run {COPIES}"


def test_committed_chinese_copies_are_current_and_speak_chinese():
    """The Chinese edition's student copies (exercises/zh-CN/, written from notebooks/zh-CN/ by
    the same command) are current, open themselves on Colab, and switch the checks to Chinese
    in their setup cell; a stub's check says so in Chinese."""
    folder = EXERCISE_DIR / "zh-CN"
    committed = sorted(path.name for path in folder.glob("*.ipynb"))
    assert committed == [path.name for path in NOTEBOOKS], (
        "exercises/zh-CN/ is stale: run python -m exercise_authoring copies "
        "notebooks/zh-CN/*.ipynb --out exercises/zh-CN/")
    for path in NOTEBOOKS:
        chinese = NOTEBOOK_DIR / "zh-CN" / path.name
        expected = authoring.student_notebook(source_json(chinese),
                                              colab_url=PROJECT.colab_url(folder / path.name))
        assert (folder / path.name).read_text(encoding="utf-8") == authoring.notebook_text(
            expected), f"exercises/zh-CN/{path.name} is stale"
        setup = next(c for c in expected["cells"] if c["cell_type"] == "code")
        assert 'd2lhelpers.set_language("zh_CN")' in "".join(setup["source"])
    def stub(scores):
        raise NotImplementedError()

    previous = os.environ.get("D2LHELPERS_LANGUAGE")
    d2lhelpers.set_language("zh_CN")
    try:
        with pytest.raises(exercises.ExerciseCheckFailed, match="还没有实现"):
            exercises.check_sparsemax(stub)
    finally:
        d2lhelpers.set_language(previous or "en")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_student_copy_is_valid_holds_no_solution_and_opens_itself_on_colab(notebook):
    source, copy = current_source_and_copy(notebook)
    nbformat.validate(copy)
    assert [c.cell_type for c in copy.cells] == [c.cell_type for c in source.cells]
    assert [c.metadata.get("nbgrader") for c in copy.cells] == \
        [c.metadata.get("nbgrader") for c in source.cells]
    text = json.dumps(copy)
    assert not any(marker in text for marker in MARKERS)
    assert f"]({PROJECT.colab_url(EXERCISE_DIR / notebook.name)})" in copy.cells[0].source
    assert "/blob/main/" not in text, "no badge may open the source notebook"
    code = [c for c in copy.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    for cell in copy.cells:
        if role_of(cell) == "solution":
            assert authoring.STUB.splitlines()[-1] in cell.source
        elif role_of(cell) == "answer":
            assert authoring.ANSWER_STUB in cell.source

    # Every line of a solution or hidden test is gone, except lines the learner reads anyway in
    # the cells that are not graded (e.g. `with torch.no_grad():`) and lines of punctuation.
    teaching = {line.strip() for c in source.cells if role_of(c) is None
                for line in c.source.splitlines()}
    student = {line.strip() for c in copy.cells for line in c.source.splitlines()}
    regions = [[line.strip() for line in region.splitlines() if line.strip()]
               for cell in source.cells for _, region in REGIONS.findall(cell.source)]
    assert len(regions) >= 4
    for region in regions:
        checked = [line for line in region if line not in teaching and re.search(r"\w", line)]
        assert checked, f"a solution region made only of lines shown elsewhere: {region}"
        leaked = [line for line in checked if line in student]
        assert not leaked, f"{notebook.name}: the student copy still holds {leaked}"


def definitions(cells) -> str:
    """The imports, functions, classes and constants (names bound to literals) defined at the top
    level of ``cells``, as Python source (IPython's magics turned into Python first, then left out)."""
    kept = []
    for cell in cells:
        tree = ast.parse(TransformerManager().transform_cell(cell.source))
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
                kept.append(node)
            elif isinstance(node, ast.Assign) and all(isinstance(target, ast.Name)
                                                      for target in node.targets):
                try:
                    ast.literal_eval(node.value)
                except ValueError:
                    continue
                kept.append(node)
    return ast.unparse(ast.Module(body=kept, type_ignores=[]))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_stubs_are_not_implemented_yet_and_solutions_pass_the_copys_checks(notebook, capsys):
    source, copy = current_source_and_copy(notebook)
    first_exercise = next(i for i, c in enumerate(copy.cells) if role_of(c) == "solution")
    namespace = {"__name__": "notebook"}
    setup = next(c for c in copy.cells if role_of(c) == "setup")
    exec(TransformerManager().transform_cell(setup.source), namespace)  # it imports d2lhelpers
    exec(definitions(c for c in copy.cells[:first_exercise]
                     if c.cell_type == "code" and role_of(c) is None), namespace)
    stubs, passed = [], 0
    for index, cell in enumerate(copy.cells):
        if role_of(cell) == "solution":
            exec(cell.source, namespace)
            stubs.append(index)
        elif role_of(cell) == "check":
            assert stubs, f"cell {index}: a check with no exercise before it"
            capsys.readouterr()
            with pytest.raises(AssertionError, match="not implemented yet"):
                exec(cell.source, namespace)
            for solved in stubs:
                exec(source.cells[solved].source, namespace)
            stubs = []
            exec(cell.source, namespace)
            lines = capsys.readouterr().out.splitlines()
            assert len(lines) == len(authoring.check_calls(cell.source)), lines
            assert all(line.startswith("Correct: ") for line in lines), lines
            exec(source.cells[index].source, namespace)  # the check again, then the hidden tests
            assert capsys.readouterr().out.splitlines() == lines, "the hidden tests pass quietly"
            passed += 1
    assert passed == sum(role_of(c) == "check" for c in source.cells) >= 2


def test_a_stub_called_outside_its_check_shows_two_lines_in_ipython(tmp_path):
    """In IPython (as in Jupyter), a cell that calls an exercise still a stub, through PyTorch's
    layers, shows which function to write and where, instead of a traceback."""
    import subprocess
    import sys

    cells = [authoring.setup_source(PROJECT), authoring.student_source(
        "import torch\n\nclass Layer(torch.nn.Module):\n    def forward(self, x):\n"
        "        ### BEGIN SOLUTION\n        return x\n        ### END SOLUTION"),
        "Layer()(torch.zeros(1))"]
    script = tmp_path / "cells.py"
    script.write_text(
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        f"for cell in {cells!r}:\n"
        "    print('--- cell'); shell.run_cell(cell)\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            cwd=ROOT, timeout=120, check=True)
    shown = result.stdout.split("--- cell\n")[-1].strip().splitlines()
    assert shown == ["NotWrittenYet: `Layer.forward` is an exercise still to write.",
                     "Write it in its exercise cell above (where it says YOUR CODE HERE), run "
                     "that cell, then this one."], result.stdout + result.stderr


def test_instructors_guide_links_every_exercise_copy_on_colab():
    guide = (EXERCISE_DIR / "README.md").read_text(encoding="utf-8")
    for path in NOTEBOOKS:
        assert f"]({path.name})" in guide, f"exercises/README.md does not link {path.name}"
        url = PROJECT.colab_url(EXERCISE_DIR / path.name)
        assert f"({url})" in guide, f"exercises/README.md lacks the Colab badge {url}"
