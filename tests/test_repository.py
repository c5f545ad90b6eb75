"""The repository keeps its promises: the README's command is CI's, badges point at the one repository
address, and every notebook has the course's structure."""

import ast
import importlib.util
import pathlib
import re
import sys

import nbformat
import pytest

import exercise_authoring as authoring
from d2lhelpers import exercises

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
REPOSITORY = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
GITHUB_PATH = REPOSITORY.removeprefix("https://github.com/")
UPDATE = "python -m exercise_authoring update notebooks/*.ipynb"


NBVAL_TAGS = {"nbval-ignore-output", "nbval-check-output", "nbval-raises-exception"}
# What a learner should not have to read past (SYLLABUS, "What a learner reads"): hidden tests
# live in nbgrader's source notebooks, nbval's markers in cell tags, the seed offset of robustness
# runs in d2lh.set_seed.
MACHINERY = re.compile(r"BEGIN HIDDEN TESTS|runpy|check_afresh|NBVAL_|offset_seed|D2LHELPERS_SEED_OFFSET")


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
    # nbval's markers are cell tags, which the learner does not read, not comments
    for c in code:
        for line in c.source.splitlines():
            if re.match(r"\s*#.*NBVAL_", line):
                pytest.fail(f"{notebook.name}: {line.strip()!r}: use nbval's cell tag instead "
                            f"(e.g. nbval-ignore-output; {UPDATE} moves a marker into its tag)")
        tags = {tag for tag in c.metadata.get("tags", []) if "nbval" in tag}
        assert "nbval-skip" not in tags, "never skip a cell: assert instead"
        assert tags <= NBVAL_TAGS, f"{notebook.name}: not an nbval tag: {tags - NBVAL_TAGS}"
    # no machine-specific noise in stored outputs
    text = "".join(o.get("text", "") for c in code for o in c.outputs)
    assert "/work/" not in text and "/home/" not in text and "/root/" not in text


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_the_page_holds_a_short_setup_cell_and_no_grading_or_testing_machinery(notebook):
    code = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    setup = [line for line in code[0].source.splitlines() if line.strip()]
    assert len(setup) <= 5, f"{notebook.name}: a setup cell of {len(setup)} lines: run {UPDATE}"
    found = [line.strip() for c in code for line in c.source.splitlines() if MACHINERY.search(line)]
    assert not found, f"{notebook.name}: grading or testing machinery on the page: {found}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_the_main_line_reads_in_half_an_hour_with_checks_collapsed_and_answers_behind_a_click(
        notebook):
    nb = nbformat.read(notebook, as_version=4)
    reading = authoring.reading_time(nb)
    assert reading.minutes <= authoring.MAX_MINUTES and reading.words <= authoring.MAX_WORDS, (
        f"{notebook.name}: the main line reads in {reading.minutes:.0f} min ({reading.words} "
        f"words, {reading.code_lines} visible code lines): at most {authoring.MAX_MINUTES} min "
        f"and {authoring.MAX_WORDS} words (python -m exercise_authoring reading)")
    for index, cell in enumerate(nb.cells):
        role = (authoring.nbgrader_role(cell) or ("",))[0]
        hidden = cell.metadata.get("jupyter", {}).get("source_hidden", False)
        where = f"{notebook.name}, cell {index}"
        if role == "answer":
            assert "<details><summary>Answer</summary>" in cell.source, \
                f"{where}: a model answer in view: run {UPDATE}"
        if role == "solution":
            assert hidden, f"{where}: a code solution in view: run {UPDATE}"
        if cell.cell_type != "code" or role == "solution":
            continue
        tagged = authoring.COLLAPSE_TAG in cell.metadata.get("tags", [])
        assert hidden == tagged, f"{where}: collapse it everywhere or nowhere: run {UPDATE}"
        if hidden:
            assert cell.metadata.get("cellView") == "form", f"{where}: run {UPDATE}"
            assert cell.outputs, f"{where}: a collapsed cell says in its output what held or shows"
            assert not re.search(r"^class\s", cell.source, re.MULTILINE), \
                f"{where}: a collapsed cell checks or draws; the learner's classes stay in view"


def bindings(tree: ast.AST) -> set[str]:
    """The names a cell's top-level statements bind: assignments and loop targets (names starting
    with _ left out: a collapsed cell's own scratch)."""
    names = set()
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [item.optional_vars for item in node.items] if isinstance(node, ast.With)
                       else [node.target])
            names |= {n.id for t in targets if t is not None for n in ast.walk(t)
                      if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return {name for name in names if not name.startswith("_")}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_what_a_visible_cell_reads_was_not_set_in_a_collapsed_cell(notebook):
    """A learner cannot see where a value came from if a collapsed cell set it (or changed it);
    collapsed cells may define helper functions and read the page, not feed it variables."""
    from IPython.core.inputtransformer2 import TransformerManager

    set_by, found = {}, []
    for index, cell in enumerate(nbformat.read(notebook, as_version=4).cells):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(TransformerManager().transform_cell(cell.source))
        hidden = cell.metadata.get("jupyter", {}).get("source_hidden", False)
        if not hidden:
            own = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                   and isinstance(n.ctx, ast.Store)} | {a.arg for a in ast.walk(tree)
                                                       if isinstance(a, ast.arg)}
            found += [f"cell {index} reads {n.id!r} set in collapsed cell {set_by[n.id]}"
                      for n in ast.walk(tree) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Load) and n.id not in own
                      and set_by.get(n.id) is not None]
        for name in bindings(tree):
            set_by[name] = index if hidden else None
        for node in tree.body:  # functions, classes and imports may be used from anywhere
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                set_by[node.name] = None
    assert not found, f"{notebook.name}: " + "; ".join(dict.fromkeys(found))


def test_readme_lists_every_notebook_with_its_badge():
    readme = (ROOT / "README.md").read_text()
    for notebook in NOTEBOOKS:
        assert f"(notebooks/{notebook.name})" in readme, f"README does not link {notebook.name}"
        assert f"({colab_url(notebook)})" in readme, f"README lacks the Colab badge of {notebook.name}"
    linked = set(re.findall(r"\(notebooks/([^)]+\.ipynb)\)", readme))
    assert linked <= {p.name for p in NOTEBOOKS}, f"README links missing notebooks: {linked}"


def test_readme_links_the_instructors_guide():
    readme = (ROOT / "README.md").read_text()
    assert "(exercises/README.md)" in readme, "README.md does not link the instructor's guide"


def test_instructors_guide_describes_every_notebooks_exercises_and_names_every_check():
    guide = (ROOT / "exercises" / "README.md").read_text(encoding="utf-8")
    heading = "\n## What each notebook's exercises cover, and its exercise copy\n"
    assert heading in guide, f"exercises/README.md lacks the heading {heading.strip()!r}"
    table = guide.split(heading, 1)[1].split("\n## ", 1)[0]
    for notebook in NOTEBOOKS:
        number = notebook.name[:2]
        assert f"\n| {number} | " in table, f"the guide's exercise table has no row for {number}"
    for check in (name for name in exercises.__all__ if name.startswith("check_")):
        assert f"(`{check}`)" in table, f"the guide's exercise table does not name {check}"


@pytest.mark.parametrize("page", ["README.md", "exercises/README.md"])
def test_relative_links_resolve(page):
    path = ROOT / page
    targets = re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8"))
    local = [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z]+:|#", t)]
    missing = [t for t in local if not (path.parent / t).exists()]
    assert not missing, f"{page} links files that do not exist: {missing}"


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


def test_device_runner_reports_pass_failures_and_differences_of_stored_numbers(tmp_path):
    """benchmarks/on_device.py, run here on the CPU (its own check; on a GPU: --device cuda)."""
    spec = importlib.util.spec_from_file_location("on_device", ROOT / "benchmarks" / "on_device.py")
    on_device = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(on_device)
    cells = [nbformat.v4.new_code_cell("import d2lhelpers as d2lh\nprint(d2lh.choose_device())"),
             nbformat.v4.new_code_cell("print(f'{1 / 3:.4f} and 7')")]
    stored = [[nbformat.v4.new_output("stream", text="cpu\n")],
              [nbformat.v4.new_output("stream", text="0.3330 and 7\n")]]
    for cell, outputs in zip(cells, stored):
        cell.outputs = outputs
    path = tmp_path / "98_tiny.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    record = on_device.run_notebook(path, "cpu")
    assert record["passed"] and record["cells_differing_in_text"] == []
    assert record["max_abs_difference"] == pytest.approx(0.0003)
    cells.append(nbformat.v4.new_code_cell("assert 1 + 1 == 3, 'arithmetic broke'"))
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    record = on_device.run_notebook(path, "cpu")
    assert not record["passed"] and record["cell"] == 2
    assert "arithmetic broke" in record["error"]
    first = on_device.run_notebook(NOTEBOOKS[0], "cpu")  # a course notebook, as nbval runs it
    assert first["passed"] and first["cells_differing_in_text"] == [], first
