"""The authoring tool of the exercises (exercise_authoring): student copies, the setup cell, nbval
tags, nbgrader metadata, nbgrader's source notebooks with their hidden tests, and the preprocessor
that stops grading when the setup cell failed."""

import json
import pathlib
import sys

import nbformat
import pytest

import d2lhelpers as d2lh
import exercise_authoring as authoring
from exercise_authoring import student_source

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROJECT = authoring.find_project(ROOT)

SOLVED = '''def double(x):
    """Twice x."""
    ### BEGIN SOLUTION
    y = 2 * x
    return y
    ### END SOLUTION

check(double)
### BEGIN HIDDEN TESTS
assert double(2) == 4
### END HIDDEN TESTS'''


def test_student_source_stubs_solutions_keeping_indentation_and_drops_hidden_tests():
    assert student_source(SOLVED) == '''def double(x):
    """Twice x."""
    # YOUR CODE HERE
    raise d2lhelpers.exercises.NotWrittenYet()

check(double)'''


def test_model_answers_take_the_markers_in_html_comments_or_as_in_code():
    for begin, end in ((authoring.BEGIN_ANSWER, authoring.END_ANSWER),
                       (authoring.BEGIN_SOLUTION, authoring.END_SOLUTION)):
        answer = f"**Answer:**\n{begin}\nBecause.\n{end}\nMore."
        assert student_source(answer, "markdown") == "**Answer:**\nYOUR ANSWER HERE\nMore."
        cell = {"cell_type": "markdown", "metadata": {}, "source": answer}
        assert authoring.nbgrader_role(cell) == ("answer", "")


def test_student_source_rejects_unbalanced_markers():
    with pytest.raises(ValueError, match="unbalanced markers"):
        student_source("### BEGIN SOLUTION\nx = 1\n")


# The setup cell ------------------------------------------------------------------------------

def run_cell(source, namespace):
    """Run a cell's source as IPython would (its %magics turned into calls of get_ipython())."""
    from IPython.core.inputtransformer2 import TransformerManager

    exec(TransformerManager().transform_cell(source), namespace)


def test_the_setup_cell_installs_the_release_on_colab_and_elsewhere_only_imports(monkeypatch):
    source = authoring.setup_source(PROJECT)
    requirement = f"d2lhelpers @ git+{PROJECT.repository}@v{PROJECT.version}"
    assert d2lh.__version__ == PROJECT.version, "the release tag names the package's version"
    assert len([line for line in source.splitlines() if line.strip()]) <= 5, "a short setup cell"
    run_cell(source, {})  # d2lhelpers importable, not on Colab: it is imported, nothing else

    class IPython:
        magics = []

        def run_line_magic(self, name, line):
            self.magics.append((name, line))

    import types

    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    run_cell(source, {"get_ipython": IPython})  # on Colab: pip installs the release
    assert IPython.magics == [("pip", f'install --quiet "{requirement}"')]
    monkeypatch.delitem(sys.modules, "google.colab")
    monkeypatch.setitem(sys.modules, "d2lhelpers", None)  # import d2lhelpers now fails...
    with pytest.raises(ImportError):
        run_cell(source, {})
    failing_line = source.splitlines()[-1]  # ...on a line that a traceback shows, saying what to do
    assert failing_line.startswith("import d2lhelpers  # ") and "pip install" in failing_line


# The project -----------------------------------------------------------------------------------

def test_project_reads_address_and_version_and_makes_colab_links_at_the_release_tag(tmp_path):
    assert PROJECT.root == ROOT and PROJECT.tag == f"v{PROJECT.version}"
    owner_name = PROJECT.repository.removeprefix("https://github.com/")
    assert PROJECT.colab_url(ROOT / "exercises" / "01_x.ipynb") == (
        f"https://colab.research.google.com/github/{owner_name}/blob/v{PROJECT.version}/exercises/01_x.ipynb")
    with pytest.raises(ValueError, match="path must lie inside the repository"):
        PROJECT.colab_url(tmp_path / "01_x.ipynb")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nversion = "1.2"\n[project.urls]\nRepository = "https://gitlab.com/a/b"\n')
    with pytest.raises(ValueError, match="Repository must be a GitHub address"):
        authoring.find_project(tmp_path)


# Student copies --------------------------------------------------------------------------------

BADGE = ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
         "(https://colab.research.google.com/github/o/n/blob/main/notebooks/07_demo.ipynb)")


def notebook_with(*sources):
    cells = ([{"cell_type": "markdown", "metadata": {}, "source": f"# Demo\n\n{BADGE}\n"}]
             + [{"cell_type": "code", "source": s, "execution_count": 3, "metadata": {},
                 "outputs": [{"output_type": "stream", "name": "stdout", "text": "6\n"}]}
                for s in sources]
             + [{"cell_type": "markdown", "metadata": {},
                 "source": "**Answer:**\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION"}])
    return {"cells": [{"id": f"cell-{i}", **cell} for i, cell in enumerate(cells)],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def a_project(folder: pathlib.Path) -> pathlib.Path:
    (folder / "pyproject.toml").write_text(
        '[project]\nversion = "2.0"\n[project.urls]\nRepository = "https://github.com/o/n"\n')
    (folder / "notebooks").mkdir()
    return folder / "notebooks"


def test_command_writes_student_copies_with_their_own_badge_and_an_answer_key(tmp_path, capsys):
    source = a_project(tmp_path) / "07_demo.ipynb"
    source.write_text(json.dumps(notebook_with("import torch", SOLVED)))
    authoring.main(["copies", str(source), "--out", str(tmp_path / "exercises"),
                    "--answer-key", str(tmp_path / "key")])
    assert capsys.readouterr().out.splitlines() == [f"wrote {tmp_path / 'exercises' / source.name}",
                                                    f"wrote {tmp_path / 'key' / source.name}"]
    student = nbformat.read(tmp_path / "exercises" / source.name, as_version=4)
    key = nbformat.read(tmp_path / "key" / source.name, as_version=4)
    assert student.cells[0].source == (
        "# Demo\n\n[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        "(https://colab.research.google.com/github/o/n/blob/v2.0/exercises/07_demo.ipynb)")
    assert key.cells[0].source == f"# Demo\n\n{BADGE}\n", "an answer key keeps the source's badge"
    assert "y = 2 * x" not in student.cells[2].source and "HIDDEN" not in student.cells[2].source
    assert key.cells[2].source == SOLVED
    for copy in (student, key):
        assert all(c.outputs == [] and c.execution_count is None
                   for c in copy.cells if c.cell_type == "code")
    assert student.cells[3].source == "**Answer:**\nYOUR ANSWER HERE"
    assert (tmp_path / "exercises" / source.name).read_text() == \
        authoring.notebook_text(authoring.student_notebook(
            json.loads(source.read_text()),
            colab_url="https://colab.research.google.com/github/o/n/blob/v2.0/exercises/07_demo.ipynb"))


def test_a_copy_outside_the_repository_gets_no_badge_and_a_notebook_needs_one(tmp_path):
    (tmp_path / "repo").mkdir()
    source = a_project(tmp_path / "repo") / "07_demo.ipynb"
    source.write_text(json.dumps(notebook_with(SOLVED)))
    [copy] = authoring.write_copies([source], tmp_path / "elsewhere")
    assert "colab" not in copy.read_text(), "the source's badge would open the solutions"
    no_badge = notebook_with(SOLVED)
    no_badge["cells"][0]["source"] = "# Demo"
    source.write_text(json.dumps(no_badge))
    with pytest.raises(ValueError, match="07_demo.ipynb: notebook must have an Open-in-Colab badge"):
        authoring.write_copies([source], tmp_path / "elsewhere")


def test_command_refuses_a_notebook_without_exercises(tmp_path):
    source = a_project(tmp_path) / "plain.ipynb"
    source.write_text(json.dumps(notebook_with("x = 1")))
    with pytest.raises(ValueError, match="no exercise solution"):
        authoring.write_copies([source], tmp_path / "student")


# Teaching notebooks (setup cell, nbgrader metadata, nbval tags) and nbgrader's source notebooks --

CHECK_CELL = '''d2lh.exercises.check_double(double)
### BEGIN HIDDEN TESTS
d2lh.exercises.check_double(double, seed=1)
### END HIDDEN TESTS'''
SOLUTION_CELL = SOLVED.split("\n\ncheck(double)")[0]
OLD_SETUP = 'import sys\nif "google.colab" in sys.modules:\n    pass'


def exercise_notebook(*cells):
    """cells: (cell_type, source, metadata) triples."""
    def cell(cell_type, source, metadata):
        extra = {"outputs": [], "execution_count": None} if cell_type == "code" else {}
        return {"cell_type": cell_type, "source": source, "metadata": metadata, **extra}

    return {"cells": [cell(*c) for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def nbgrader_v3_errors(notebook):
    """The rules nbgrader 0.9's metadata validator (schema version 3) enforces on cells."""
    errors, ids = [], set()
    for cell in notebook["cells"]:
        meta = cell["metadata"].get("nbgrader")
        if meta is None:
            continue
        required = {"schema_version", "grade", "locked", "solution"}
        if not required <= set(meta) or meta["schema_version"] != 3:
            errors.append("required keys")
        if set(meta) - required - {"task", "grade_id", "points"}:
            errors.append("unknown keys")
        if (meta["grade"] or meta["solution"] or meta["locked"]) and not meta.get("grade_id"):
            errors.append("grade_id")
        if not all(c.isalnum() or c in "_-" for c in meta.get("grade_id", "")):
            errors.append("grade_id pattern")
        if meta["grade"] and "points" not in meta:
            errors.append("points")
        if cell["cell_type"] == "markdown" and meta["grade"] != meta["solution"]:
            errors.append("markdown cells are grade and solution, or neither")
        if meta.get("grade_id") in ids:
            errors.append("duplicate grade_id")
        ids.add(meta.get("grade_id"))
    return errors


def test_nbgrader_metadata_is_derived_from_markers_check_calls_and_the_setup_cell():
    notebook = exercise_notebook(
        ("markdown", "## Exercises", {}),
        ("code", authoring.setup_source(PROJECT), {}),
        ("code", "import torch", {"nbgrader": {"grade": True}}),  # stale: removed
        ("code", SOLUTION_CELL, {"tags": ["keep"]}),
        ("code", CHECK_CELL, {}),
        ("markdown", "### BEGIN SOLUTION\nBecause.\n### END SOLUTION", {}),
        ("markdown", "### BEGIN SOLUTION\nAnd so.\n### END SOLUTION", {}),
        ("code", "x = 1\n### BEGIN SOLUTION\nx = 2\n### END SOLUTION", {}))
    result = authoring.with_nbgrader_metadata(notebook)
    meta = [cell["metadata"].get("nbgrader") for cell in result["cells"]]
    assert meta[0] is None and meta[2] is None
    assert meta[1] == {"grade": False, "grade_id": "setup", "locked": True, "schema_version": 3,
                       "solution": False}
    assert meta[3] == {"grade": False, "grade_id": "double", "locked": False, "schema_version": 3,
                       "solution": True}
    assert result["cells"][3]["metadata"]["tags"] == ["keep"]
    assert meta[4] == {"grade": True, "grade_id": "check_double", "locked": True, "points": 1,
                       "schema_version": 3, "solution": False}
    assert meta[5] == {"grade": True, "grade_id": "answer_1", "locked": False, "points": 1,
                       "schema_version": 3, "solution": True}
    assert meta[6]["grade_id"] == "answer_2" and meta[7]["grade_id"] == "solution_2"
    assert nbgrader_v3_errors(result) == []
    assert "nbgrader" in notebook["cells"][2]["metadata"], "the input notebook is left alone"


def test_nbgrader_metadata_refuses_ambiguous_cells():
    with pytest.raises(ValueError, match="share the nbgrader grade_id 'double'"):
        authoring.with_nbgrader_metadata(exercise_notebook(("code", SOLUTION_CELL, {}),
                                                           ("code", SOLUTION_CELL, {})))
    with pytest.raises(ValueError, match="both a solution and a check"):
        both = SOLVED + "\nexercises.check_x(f)"
        authoring.with_nbgrader_metadata(exercise_notebook(("code", both, {})))
    with pytest.raises(ValueError, match="hidden tests belong in a code cell"):
        authoring.with_nbgrader_metadata(exercise_notebook(("markdown", CHECK_CELL, {})))


def test_updated_notebook_rewrites_setup_cell_and_metadata_and_removes_hidden_tests():
    notebook = exercise_notebook(("markdown", f"# Demo\n{BADGE}", {}), ("code", OLD_SETUP, {}),
                                 ("code", SOLUTION_CELL, {}), ("code", CHECK_CELL, {}),
                                 ("code", "d2lh.exercises.check_triple(triple)", {}))
    updated = authoring.updated_notebook(notebook, PROJECT)
    assert updated["cells"][1]["source"] == authoring.setup_source(PROJECT)
    assert updated["cells"][3]["source"] == "d2lh.exercises.check_double(double, model_answer=True)"
    assert updated["cells"][4]["source"] == "d2lh.exercises.check_triple(triple, model_answer=True)"
    assert [c["metadata"]["nbgrader"]["grade_id"] for c in updated["cells"][1:]] == \
        ["setup", "double", "check_double", "check_triple"]
    assert authoring.updated_notebook(updated, PROJECT) == updated, "idempotent"
    with pytest.raises(ValueError, match="first code cell must be its setup cell"):
        authoring.updated_notebook(exercise_notebook(("code", "import torch", {})), PROJECT)
    with pytest.raises(ValueError, match=r"must call d2lh.exercises.check_<name>\(<function>\)"):
        authoring.updated_notebook(exercise_notebook(
            ("code", OLD_SETUP, {}), ("code", "d2lh.exercises.check_double(double, seed=3)", {})),
            PROJECT)


def test_updated_notebook_hides_the_markers_of_model_answers_in_html_comments():
    answer = "**Answer:**\n### BEGIN SOLUTION\nBecause.\n  ##  END SOLUTION ##"
    notebook = exercise_notebook(("code", OLD_SETUP, {}), ("code", SOLUTION_CELL, {}),
                                 ("markdown", answer, {}))
    cells = authoring.updated_notebook(notebook, PROJECT)["cells"]
    assert cells[2]["source"] == ("**Answer:**\n<!-- BEGIN SOLUTION -->\n"
                                  "<details><summary>Answer</summary>\n\nBecause.\n\n</details>\n"
                                  "<!-- END SOLUTION -->")
    assert cells[2]["metadata"]["nbgrader"]["grade_id"] == "answer_1"
    assert cells[1]["source"] == SOLUTION_CELL, "code keeps its comments"
    assert authoring.updated_notebook({**notebook, "cells": cells}, PROJECT)["cells"] == cells
    assert student_source(cells[2]["source"], "markdown") == "**Answer:**\nYOUR ANSWER HERE"


def test_updated_notebook_collapses_checks_figure_code_and_solutions_and_copies_expand_solutions():
    check = ("code", "assert 1 + 1 == 2\nprint('✓ 1 + 1 == 2')", {"tags": ["hide-input"]})
    notebook = exercise_notebook(("markdown", f"# Demo\n{BADGE}", {}), ("code", OLD_SETUP, {}),
                                 ("code", "x = 1", {}), check, ("code", SOLUTION_CELL, {}))
    cells = authoring.updated_notebook(notebook, PROJECT)["cells"]
    for cell in (cells[3], cells[4]):  # the check and the code solution
        assert cell["metadata"]["jupyter"] == {"source_hidden": True}  # JupyterLab
        assert cell["metadata"]["cellView"] == "form"  # Colab
        assert cell["metadata"]["tags"] == ["hide-input"]  # Jupyter Book, nbconvert
    assert "jupyter" not in cells[2]["metadata"] and "tags" not in cells[2]["metadata"]
    assert authoring.updated_notebook({**notebook, "cells": cells}, PROJECT)["cells"] == cells
    copy = authoring.student_notebook({**notebook, "cells": cells}, colab_url="https://x")
    assert copy["cells"][3]["metadata"]["jupyter"] == {"source_hidden": True}, "checks stay folded"
    assert not {"jupyter", "cellView", "tags"} & set(copy["cells"][4]["metadata"]), \
        "the learner writes in the exercise cell: the copy shows it"


def test_reading_time_counts_main_line_prose_and_visible_code_only():
    notebook = exercise_notebook(
        ("markdown", "# Title\nOne two three $x^2 + y$ four.", {}),  # 1 + 5 words (math is one)
        ("code", "a = 1\n# a comment\n\nb = 2", {}),  # 2 lines
        ("code", "assert a == 1", {"jupyter": {"source_hidden": True}}),  # collapsed: 0
        ("markdown", "## Going deeper: more\nnot counted", {}),
        ("code", "c = 3", {}),
        ("markdown", "## Summary\nSix", {}),  # main line again: 2 words
        ("markdown", "## Exercises\nnot counted", {}), ("code", "d = 4", {}))
    reading = authoring.reading_time(notebook)
    assert (reading.words, reading.code_lines) == (1 + 5 + 2, 2)
    assert reading.minutes == pytest.approx(8 / 200 + 2 / 10)


def test_updated_notebook_moves_nbval_comment_markers_into_cell_tags():
    notebook = exercise_notebook(
        ("code", OLD_SETUP, {}),
        ("code", "# NBVAL_IGNORE_OUTPUT\n# (timings)\nprint(time.time())", {"tags": ["keep"]}),
        ("code", "x = 1\n  #  NBVAL_RAISES_EXCEPTION  \n1 / 0", {}),
        ("code", "# NBVAL_IGNORE_OUTPUT (a comment after it: not a marker to nbval)\nx", {}))
    cells = authoring.updated_notebook(notebook, PROJECT)["cells"]
    assert cells[1]["source"] == "# (timings)\nprint(time.time())"
    assert cells[1]["metadata"]["tags"] == ["keep", "nbval-ignore-output"]
    assert cells[2]["source"] == "x = 1\n1 / 0"
    assert cells[2]["metadata"]["tags"] == ["nbval-raises-exception"]
    assert cells[3] == notebook["cells"][3], "left for the tests to reject"


def test_nbgrader_source_notebook_adds_hidden_tests_that_load_the_checks_afresh():
    notebook = exercise_notebook(("markdown", f"# Demo\n{BADGE}", {}), ("code", OLD_SETUP, {}),
                                 ("code", SOLUTION_CELL, {}), ("code", CHECK_CELL, {}),
                                 ("code", "d2lh.exercises.check_triple(triple)", {}))
    source = authoring.nbgrader_source_notebook(notebook, PROJECT)
    teaching = authoring.updated_notebook(notebook, PROJECT)
    hidden = authoring.hidden_tests_source([("check_double", "double")])
    assert hidden.endswith('_check_afresh("check_double", double, seed=1)\n### END HIDDEN TESTS')
    assert "runpy.run_path" in hidden and "/exercises/runner.py" in hidden
    assert source["cells"][3]["source"] == "d2lh.exercises.check_double(double)\n" + hidden
    assert source["cells"][4]["source"] == "d2lh.exercises.check_triple(triple)\n" + \
        authoring.hidden_tests_source([("check_triple", "triple")])
    others = [0, 1, 2]
    assert [source["cells"][i] for i in others] == [teaching["cells"][i] for i in others]
    assert [c["metadata"] for c in source["cells"][:3]] == [
        c["metadata"] for c in teaching["cells"][:3]]
    assert [c["metadata"]["nbgrader"] for c in source["cells"][3:]] == [
        c["metadata"]["nbgrader"] for c in teaching["cells"][3:]]
    assert all(c["outputs"] == [] and "hide-input" not in c["metadata"].get("tags", [])
               for c in source["cells"][3:]), "the learner's own verdict, in view"
    assert nbgrader_v3_errors(source) == []
    assert authoring.nbgrader_source_notebook(source, PROJECT) == source, "from itself: the same"
    student = authoring.student_notebook(source, colab_url="copy")
    assert student == authoring.student_notebook(teaching, colab_url="copy"), \
        "nbgrader's release and our student copies agree"


def demo_notebook_file(folder):
    """A stale notebook (old setup cell, hidden tests in its check cell) in a project in ``folder``:
    its path and its content."""
    path = a_project(folder) / "01_demo.ipynb"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(OLD_SETUP),
                                               nbformat.v4.new_code_cell(SOLUTION_CELL),
                                               nbformat.v4.new_code_cell(CHECK_CELL)])
    nbformat.write(notebook, path)
    return path, notebook


def test_source_command_writes_nbgrader_source_notebooks_beside_the_teaching_ones(tmp_path, capsys):
    path, notebook = demo_notebook_file(tmp_path)
    before = path.read_text()
    out = tmp_path / "course" / "source" / "demo"
    authoring.main(["source", str(path), "--out", str(out)])
    assert capsys.readouterr().out.splitlines() == [f"wrote {out / path.name}"]
    assert path.read_text() == before, "the teaching notebook is left as it is"
    written = nbformat.read(out / path.name, as_version=4)
    project = authoring.find_project(tmp_path)
    assert written == nbformat.from_dict(authoring.nbgrader_source_notebook(notebook, project))
    assert 'git+https://github.com/o/n@v2.0"' in written.cells[0].source
    with pytest.raises(ValueError, match="would overwrite the teaching notebook"):
        authoring.nbgrader_sources([path], path.parent)


def test_update_command_rewrites_notebooks_in_place_and_says_which_changed(tmp_path, capsys):
    path, _ = demo_notebook_file(tmp_path)
    authoring.main(["update", str(path)])
    authoring.main(["update", str(path)])
    assert capsys.readouterr().out.splitlines() == [f"updated {path}", f"unchanged {path}"]
    written = nbformat.read(path, as_version=4)
    assert [c.metadata.nbgrader.grade_id for c in written.cells] == ["setup", "double", "check_double"]
    assert 'git+https://github.com/o/n@v2.0"' in written.cells[0].source
    assert written.cells[1].source == SOLUTION_CELL  # nothing else changes
    assert written.cells[2].source == "d2lh.exercises.check_double(double, model_answer=True)", \
        "hidden tests removed"


def test_a_teaching_notebook_shows_no_verdict_and_says_where_to_try_the_exercises(tmp_path):
    """update: the check cells call with model_answer=True, collapsed, their output the one line
    the check prints then; the Exercises section starts with the student copy's link and badge.
    copies: the learner's own verdict, in view, and no such line; the Chinese edition's line."""
    from d2lhelpers.exercises.runner import MODEL_ANSWER
    from exercise_authoring import translation

    path, _ = demo_notebook_file(tmp_path)
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.insert(0, nbformat.v4.new_markdown_cell(f"# Demo\n\n{BADGE}"))
    notebook.cells.insert(2, nbformat.v4.new_markdown_cell("## Exercises\n\n**1.** Write double."))
    nbformat.write(notebook, path)
    authoring.main(["update", str(path)])
    once = path.read_text()
    authoring.main(["update", str(path)])
    assert path.read_text() == once, "idempotent"
    written = nbformat.read(path, as_version=4)
    check = written.cells[-1]
    assert check.source == "d2lh.exercises.check_double(double, model_answer=True)"
    assert "hide-input" in check.metadata.tags and check.metadata.jupyter.source_hidden
    assert [o["text"] for o in check.outputs] == [
        MODEL_ANSWER.format(check="check_double") + "\n"]
    assert authoring.copies.MODEL_ANSWER_OUTPUT == MODEL_ANSWER and MODEL_ANSWER.startswith("✓ ")
    copy_url = "https://colab.research.google.com/github/o/n/blob/v2.0/exercises/01_demo.ipynb"
    heading, line, task = written.cells[2].source.split("\n\n")
    assert heading == "## Exercises" and task == "**1.** Write double."
    assert line.startswith(f"[![Open In Colab](https://colab.research.google.com/assets/"
                           f"colab-badge.svg)]({copy_url}) Try them in their student copy, "
                           "[`exercises/01_demo.ipynb`](../exercises/01_demo.ipynb)")
    student = authoring.student_notebook(written, colab_url=copy_url)
    assert student["cells"][2]["source"] == "## Exercises\n\n**1.** Write double."
    assert student["cells"][-1]["source"] == "d2lh.exercises.check_double(double)"
    assert "metadata" not in student["cells"][-1] or "hide-input" not in student["cells"][-1][
        "metadata"].get("tags", [])
    chinese = translation.translated_notebook(path, written, "")
    chinese_line = authoring.copies.exercises_line(path, "zh")
    assert chinese["cells"][2]["source"].split("\n\n")[1] == chinese_line
    # the Chinese edition leads to the Chinese student copy, whose checks speak Chinese
    chinese_url = copy_url.replace("/exercises/01_demo.ipynb", "/exercises/zh-CN/01_demo.ipynb")
    assert "](../../exercises/zh-CN/01_demo.ipynb)" in chinese_line
    assert f"]({chinese_url})" in chinese_line and chinese_url != copy_url


# nbgrader: a failed setup cell stops the grading -------------------------------------------------

def test_require_setup_cell_raises_when_the_setup_cell_failed():
    from exercise_authoring.grading import RequireSetupCell, SetupCellFailed

    setup = nbformat.v4.new_code_cell("...", metadata={"nbgrader": {"grade_id": "setup"}})
    notebook = nbformat.v4.new_notebook(cells=[setup, nbformat.v4.new_code_cell("1 / 0")])
    notebook.cells[1].outputs = [nbformat.v4.new_output("error", ename="ZeroDivisionError",
                                                        evalue="division by zero", traceback=[])]
    RequireSetupCell()(notebook, {})  # as nbconvert calls it; an error elsewhere is the learner's
    setup.outputs = [nbformat.v4.new_output("error", ename="ModuleNotFoundError",
                                            evalue="needs d2lhelpers", traceback=[])]
    with pytest.raises(SetupCellFailed, match="setup cell failed in the grading kernel, so every "
                                              "check would score 0: ModuleNotFoundError: needs"):
        RequireSetupCell()(notebook, {})
