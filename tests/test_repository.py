"""The repository keeps its promises: the README's command is CI's, badges point at the one repository
address, and every notebook has the course's structure."""

import importlib.util
import pathlib
import re
import sys

import nbformat
import pytest

from d2lhelpers import exercises

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
REPOSITORY = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
GITHUB_PATH = REPOSITORY.removeprefix("https://github.com/")


NBVAL_MARKERS = {"NBVAL_IGNORE_OUTPUT", "NBVAL_CHECK_OUTPUT", "NBVAL_RAISES_EXCEPTION"}


def colab_url(notebook: pathlib.Path) -> str:
    return f"https://colab.research.google.com/github/{GITHUB_PATH}/blob/main/notebooks/{notebook.name}"


def test_ci_runs_the_readme_test_command_verbatim():
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    command = ci_lines[-1]
    assert "pytest" in command, f"the last line of .ci/run should be the test command, got {command!r}"
    readme = (ROOT / "README.md").read_text()
    assert f"\n{command}\n" in readme, f"README.md does not show CI's test command {command!r}"


def test_there_are_notebooks_in_course_order():
    numbers = [int(path.name[:2]) for path in NOTEBOOKS]
    assert numbers == list(range(1, len(NOTEBOOKS) + 1)), numbers


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_structure(notebook):
    nb = nbformat.read(notebook, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    first, install = nb.cells[0], nb.cells[1]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert f"]({colab_url(notebook)})" in first.source, "Open-in-Colab badge missing or stale"
    assert install.cell_type == "code" and '"google.colab" in sys.modules' in install.source
    assert f"d2lhelpers @ git+{REPOSITORY}" in install.source
    headings = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown" and c.source]
    assert "## Exercises" in headings, "every notebook ends with an Exercises section"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "commit notebooks executed"
    assert not any(o.output_type == "error" for c in code for o in c.outputs)
    assert not any("NBVAL_SKIP" in c.source for c in code), "never skip a cell: assert instead"
    # nbval obeys a marker only on a comment line of its own ("# NBVAL_IGNORE_OUTPUT (why)" is
    # silently not a marker, and the cell's output is then compared after all)
    for c in code:
        for line in c.source.splitlines():
            if "NBVAL_" in line and line.strip().lstrip("#").strip() not in NBVAL_MARKERS:
                pytest.fail(f"{notebook.name}: {line.strip()!r} is not an nbval marker: put the "
                            "marker alone on its line and explain it on the next")
    # no machine-specific noise in stored outputs
    text = "".join(o.get("text", "") for c in code for o in c.outputs)
    assert "/work/" not in text and "/home/" not in text and "/root/" not in text


def test_readme_lists_every_notebook_with_its_badge():
    readme = (ROOT / "README.md").read_text()
    for notebook in NOTEBOOKS:
        assert f"(notebooks/{notebook.name})" in readme, f"README does not link {notebook.name}"
        assert f"({colab_url(notebook)})" in readme, f"README lacks the Colab badge of {notebook.name}"
    linked = set(re.findall(r"\(notebooks/([^)]+\.ipynb)\)", readme))
    assert linked <= {p.name for p in NOTEBOOKS}, f"README links missing notebooks: {linked}"


def test_readme_describes_every_notebooks_exercises_and_names_every_check():
    readme = (ROOT / "README.md").read_text()
    heading = "What each notebook's exercises cover, and its exercise copy:"
    teaching = readme.split(heading, 1)[1].split("\n## ", 1)[0]
    for notebook in NOTEBOOKS:
        number = notebook.name[:2]
        assert f"\n| {number} | " in teaching, f"README's exercise table has no row for {number}"
    for check in (name for name in exercises.__all__ if name.startswith("check_")):
        assert f"(`{check}`)" in teaching, f"README's exercise table does not name {check}"


def test_notebook_runner_times_notebooks_and_writes_outputs_only_when_asked(tmp_path):
    spec = importlib.util.spec_from_file_location("notebook_runner", ROOT / "benchmarks" / "notebooks.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    path = tmp_path / "99_tiny.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")]), path)
    before = path.read_text()
    assert runner.run(path) > 0 and path.read_text() == before  # timed, left as it was
    runner.run(path, write=True)
    cell = nbformat.read(path, as_version=4).cells[0]
    assert cell.outputs[0].text == "42\n" and cell.execution_count == 1
    assert "execution" not in cell.metadata  # no timestamps: a re-run changes only what changed
