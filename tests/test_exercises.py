"""The exercise mechanism: checks that fail helpfully, and student copies."""

import json

import pytest
import torch

import d2lhelpers as d2lh
from d2lhelpers import exercises
from d2lhelpers.exercises import ExerciseCheckFailed, run_check, student_source

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
    exercises.main([str(source), "--out", str(tmp_path / "student"),
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
        exercises.write_copies([source], tmp_path / "student")


def test_exercises_module_is_reachable_from_the_package():
    assert d2lh.exercises is exercises
