"""The exercise mechanism: checks that fail helpfully, and student copies."""

import json

import pytest
import torch

import d2lhelpers as d2lh
import exercise_authoring as authoring
from d2lhelpers.exercises import ExerciseCheckFailed, run_check
from exercise_authoring import student_source

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
    raise NotImplementedError()

check(double)'''


def test_student_source_rejects_unbalanced_markers():
    with pytest.raises(ValueError, match="unbalanced markers"):
        student_source("### BEGIN SOLUTION\nx = 1\n")


CASES = [("a 2x3 matrix", (torch.arange(6.0).reshape(2, 3),)), ("an empty row", (torch.zeros(1, 0),))]


def reference(x):
    return x.softmax(dim=-1)


def test_run_check_passes_a_correct_function(capsys):
    run_check("softmax", lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True), CASES, reference)
    assert capsys.readouterr().out == "Correct: softmax passed all 2 checks.\n"


def test_run_check_says_which_input_failed_what_was_expected_and_what_came_back():
    with pytest.raises(ExerciseCheckFailed) as failure:
        run_check("softmax", lambda x: x.softmax(dim=0), CASES, reference, hint="which axis?")
    message = str(failure.value)
    assert "on input a 2x3 matrix" in message and "values differ" in message
    assert "expected: tensor of shape (2, 3)" in message and "got:      tensor of shape (2, 3)" in message
    assert message.endswith("Hint: which axis?")


def test_run_check_reports_wrong_shapes_errors_and_missing_work():
    with pytest.raises(ExerciseCheckFailed, match=r"expected shape \(2, 3\), got shape \(2,\)"):
        run_check("softmax", lambda x: x.sum(-1), CASES, reference)
    with pytest.raises(ExerciseCheckFailed, match="raised IndexError"):
        run_check("softmax", lambda x: x[5], CASES, reference)

    def not_done(x):
        raise NotImplementedError()

    with pytest.raises(ExerciseCheckFailed, match="not implemented yet"):
        run_check("softmax", not_done, CASES, reference)


def test_run_check_catches_a_function_that_modifies_its_input():
    def right_answer_but_clobbers_input(x):
        result = reference(x)
        x.zero_()
        return result

    with pytest.raises(ExerciseCheckFailed, match=r"modified its input argument\(s\) \[0\]"):
        run_check("softmax", right_answer_but_clobbers_input, CASES, reference)


def test_failed_checks_are_assertion_errors_for_nbgrader():
    assert issubclass(ExerciseCheckFailed, AssertionError)


def notebook_with(*sources):
    return {"cells": [{"cell_type": "code", "source": s, "outputs": [{"output_type": "stream"}],
                       "execution_count": 3, "metadata": {}} for s in sources]
                     + [{"cell_type": "markdown", "metadata": {},
                         "source": "**Answer:**\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION"}],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_command_writes_student_copies_and_an_answer_key(tmp_path, capsys):
    source = tmp_path / "07_demo.ipynb"
    source.write_text(json.dumps(notebook_with("import torch", SOLVED)))
    authoring.main([str(source), "--out", str(tmp_path / "student"),
                    "--answer-key", str(tmp_path / "key")])
    assert capsys.readouterr().out.splitlines() == [f"wrote {tmp_path / 'student' / source.name}",
                                                    f"wrote {tmp_path / 'key' / source.name}"]
    student = json.loads((tmp_path / "student" / source.name).read_text())
    key = json.loads((tmp_path / "key" / source.name).read_text())
    assert "y = 2 * x" not in student["cells"][1]["source"] and "HIDDEN" not in student["cells"][1]["source"]
    assert key["cells"][1]["source"] == SOLVED
    for copy in (student, key):
        assert all(c["outputs"] == [] and c["execution_count"] is None
                   for c in copy["cells"] if c["cell_type"] == "code")
    assert student["cells"][2]["source"] == "**Answer:**\nYOUR ANSWER HERE"
    assert key["cells"][2]["source"] == "**Answer:**\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION"


def test_command_refuses_a_notebook_without_exercises(tmp_path):
    source = tmp_path / "plain.ipynb"
    source.write_text(json.dumps(notebook_with("x = 1")))
    with pytest.raises(ValueError, match="no exercise solution"):
        authoring.write_copies([source], tmp_path / "student")


def test_exercises_module_is_reachable_from_the_package():
    from d2lhelpers import exercises

    assert d2lh.exercises is exercises


def test_run_check_compares_arrays_numbers_and_tuples(capsys):
    import numpy as np

    cases = [("a 2x2 array", (np.array([[1.0, 2.0], [3.0, 4.0]]),))]
    run_check("pair", lambda a: (a.sum(), a * 2), cases, lambda a: (a.sum(), a * 2))
    assert capsys.readouterr().out == "Correct: pair passed all 1 checks.\n"
    with pytest.raises(ExerciseCheckFailed, match=r"result 1 of the tuple: values differ"):
        run_check("pair", lambda a: (a.sum(), a * 3), cases, lambda a: (a.sum(), a * 2))
    with pytest.raises(ExerciseCheckFailed, match=r"expected a tuple of 2 results"):
        run_check("pair", lambda a: a.sum(), cases, lambda a: (a.sum(), a * 2))
    with pytest.raises(ExerciseCheckFailed, match=r"expected 10, got 11"):
        run_check("total", lambda a: float(a.sum() + 1), cases, lambda a: a.sum())
    with pytest.raises(ExerciseCheckFailed, match=r"modified its input"):
        run_check("total", lambda a: (a.sum(), a.fill(0))[0], cases, lambda a: a.sum())


def test_run_check_wants_float64_results_for_float64_inputs():
    cases = [("float64", (torch.ones(2, 3, dtype=torch.float64),))]
    with pytest.raises(ExerciseCheckFailed, match="expected dtype float64"):
        run_check("softmax", lambda x: reference(x).float(), cases, reference)
    run_check("softmax", lambda x: reference(x.float()).double(), cases, reference)


def test_run_check_rejects_a_learner_fn_that_is_not_a_function():
    with pytest.raises(ValueError, match="learner_fn must be a function, got int"):
        run_check("softmax", 3, CASES, reference)


# nbgrader metadata -------------------------------------------------------------------------------

CHECK_CELL = '''exercises.check_double(double)
### BEGIN HIDDEN TESTS
exercises.check_double(double, seed=1)
### END HIDDEN TESTS'''
SOLUTION_CELL = SOLVED.split("\n\ncheck(double)")[0]


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


def test_nbgrader_metadata_is_derived_from_markers_and_check_calls():
    notebook = exercise_notebook(
        ("markdown", "## Exercises", {}),
        ("code", "import torch", {"nbgrader": {"grade": True}}),  # stale: removed
        ("code", SOLUTION_CELL, {"tags": ["keep"]}),
        ("code", CHECK_CELL, {}),
        ("markdown", "### BEGIN SOLUTION\nBecause.\n### END SOLUTION", {}),
        ("markdown", "### BEGIN SOLUTION\nAnd so.\n### END SOLUTION", {}),
        ("code", "x = 1\n### BEGIN SOLUTION\nx = 2\n### END SOLUTION", {}))
    result = authoring.with_nbgrader_metadata(notebook)
    meta = [cell["metadata"].get("nbgrader") for cell in result["cells"]]
    assert meta[0] is None and meta[1] is None
    assert meta[2] == {"grade": False, "grade_id": "double", "locked": False, "schema_version": 3,
                       "solution": True}
    assert result["cells"][2]["metadata"]["tags"] == ["keep"]
    assert meta[3] == {"grade": True, "grade_id": "check_double", "locked": True, "points": 1,
                       "schema_version": 3, "solution": False}
    assert meta[4] == {"grade": True, "grade_id": "answer_1", "locked": False, "points": 1,
                       "schema_version": 3, "solution": True}
    assert meta[5]["grade_id"] == "answer_2" and meta[6]["grade_id"] == "solution_2"
    assert nbgrader_v3_errors(result) == []
    assert "nbgrader" in notebook["cells"][1]["metadata"], "the input notebook is left alone"


def test_nbgrader_metadata_refuses_ambiguous_cells():
    with pytest.raises(ValueError, match="share the nbgrader grade_id 'double'"):
        authoring.with_nbgrader_metadata(exercise_notebook(("code", SOLUTION_CELL, {}),
                                                           ("code", SOLUTION_CELL, {})))
    with pytest.raises(ValueError, match="both a solution and a check"):
        both = SOLVED + "\nexercises.check_x(f)"
        authoring.with_nbgrader_metadata(exercise_notebook(("code", both, {})))
    with pytest.raises(ValueError, match="hidden tests belong in a code cell"):
        authoring.with_nbgrader_metadata(exercise_notebook(("markdown", CHECK_CELL, {})))


def test_command_writes_nbgrader_metadata_into_notebooks_in_place(tmp_path, capsys):
    nbformat = pytest.importorskip("nbformat")
    path = tmp_path / "01_demo.ipynb"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SOLUTION_CELL),
                                               nbformat.v4.new_code_cell(CHECK_CELL)])
    nbformat.write(notebook, path)
    authoring.main([str(path), "--nbgrader-metadata"])
    authoring.main([str(path), "--nbgrader-metadata"])
    assert capsys.readouterr().out.splitlines() == [f"updated {path}", f"unchanged {path}"]
    written = nbformat.read(path, as_version=4)
    assert [c.metadata.nbgrader.grade_id for c in written.cells] == ["double", "check_double"]
    assert written.cells[0].source == SOLUTION_CELL  # nothing else changes
    assert not (tmp_path / "student").exists(), "the metadata mode writes no copies"
