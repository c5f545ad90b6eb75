"""Grading with nbgrader, end to end, on notebook 01: the round trip of benchmarks/grading.py
(which runs it on notebooks 01-03 and times it), kept quick for the test suite.

With the repository's nbgrader_config.py, nbgrader generates the assignment from nbgrader's source
notebook of the teaching notebook (written by the authoring tool's ``source`` command: the hidden
tests added to its check cells) and autogrades four submissions: solved, empty, wrong, and "patched", whose first
solution cell replaces every check of d2lh.exercises and their run_check by a function that
prints "Correct". Each check must get exactly the points it earned; in particular the patch earns
nothing (the hidden tests grade with a copy of the checks loaded afresh). A kernel without
d2lhelpers must make ``nbgrader autograde`` fail, not record zeros.
"""

import importlib.util
import os
import pathlib
import sys

import nbformat
import pytest
from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute
from traitlets.config.loader import PyFileConfigLoader

import exercise_authoring as authoring
from exercise_authoring.grading import RequireSetupCell

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_queries_keys_values.ipynb"
spec = importlib.util.spec_from_file_location("grading_round_trip", ROOT / "benchmarks" / "grading.py")
round_trip = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # for its dataclass
spec.loader.exec_module(round_trip)


def test_the_configuration_allows_long_cells_and_stops_on_a_failed_setup_cell():
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    assert config.Execute.timeout >= 2 * 240, "twice the longest training cell on 2 cores"
    preprocessors = config.Autograde.autograde_preprocessors
    assert preprocessors[preprocessors.index(Execute) + 1] is RequireSetupCell
    defaults = Autograde.class_traits()["autograde_preprocessors"].default()
    assert [p for p in preprocessors if p is not RequireSetupCell] == defaults
    assert config.ClearSolutions.code_stub == {"python": authoring.STUB}, "our copies' stubs"
    assert config.ClearSolutions.text_stub == authoring.ANSWER_STUB


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course folder holding the assignment generated from notebook 01, and its four
    submissions autograded in one run."""
    source = nbformat.read(NOTEBOOK, as_version=4)
    if authoring.updated_notebook(source, authoring.find_project(ROOT)) != source:
        pytest.fail(f"{NOTEBOOK.name} is stale: run python -m exercise_authoring update "
                    "notebooks/*.ipynb")
    folder = tmp_path_factory.mktemp("course")
    results = round_trip.round_trip([NOTEBOOK], folder, one_by_one=False)
    return folder, {result.student: result for result in results}


def test_the_released_notebook_has_the_cells_of_our_student_copy_but_for_the_badge(course):
    folder, _ = course
    release = nbformat.read(folder / "release" / round_trip.ASSIGNMENT / NOTEBOOK.name, as_version=4)
    copy = authoring.student_notebook(nbformat.read(NOTEBOOK, as_version=4), colab_url="copy")
    assert [cell.source for cell in release.cells[1:]] == [cell.source for cell in copy["cells"][1:]]
    assert "](copy)" in copy["cells"][0]["source"] and "](copy)" not in release.cells[0].source
    # the link to the Chinese edition, which would open the solutions, is in neither
    assert "中文版" not in release.cells[0].source and "中文版" not in copy["cells"][0]["source"]
    assert "中文版" in nbformat.read(NOTEBOOK, as_version=4).cells[0].source


@pytest.mark.parametrize("kind", round_trip.SUBMISSIONS)
def test_each_submission_gets_the_points_of_the_checks_it_solved(course, kind):
    _, results = course
    result = results[kind]
    assert result.points == result.expected


def test_the_patch_fools_the_visible_checks_but_earns_no_point(course):
    _, results = course
    patched = results["patched"]
    unsolved = [key for key, points in patched.expected.items() if points == 0]
    assert unsolved and all(patched.points[key] == 0 for key in unsolved)
    for notebook, check in unsolved:
        output = patched.check_output(notebook, check)
        assert output.startswith("Correct\n"), output  # the patched visible check ran...
        assert "ExerciseCheckFailed: " in output and "not implemented yet" in output  # ...in vain


def test_a_graded_check_cell_says_correct_once_though_its_hidden_tests_ran_too(course):
    _, results = course
    solved = results["solved"]
    for notebook, check in solved.points:
        cell = next(c for c in solved.notebooks[notebook].cells if round_trip.grade_id(c) == check)
        assert authoring.BEGIN_HIDDEN_TESTS in cell.source, "graded with its hidden tests"
        output = solved.check_output(notebook, check)
        assert output.splitlines() == [line for line in output.splitlines()
                                       if line.startswith("Correct: ")], output
        assert len(output.splitlines()) == len(authoring.check_calls(cell.source)), output


def test_nbgrader_grades_the_source_notebook_with_hidden_tests_the_teaching_notebook_lacks(course):
    folder, _ = course
    teaching = nbformat.read(NOTEBOOK, as_version=4)
    source = nbformat.read(folder / "source" / round_trip.ASSIGNMENT / NOTEBOOK.name, as_version=4)
    assert source == authoring.nbgrader_source_notebook(teaching, authoring.find_project(ROOT))
    checks = [cell for cell in source.cells if authoring.nbgrader_role(cell)
              and authoring.nbgrader_role(cell)[0] == "check"]
    assert len(checks) >= 2 and all(authoring.BEGIN_HIDDEN_TESTS in c.source for c in checks)
    assert not any(authoring.BEGIN_HIDDEN_TESTS in cell.source for cell in teaching.cells)


def test_checksum_warnings_name_only_the_check_cells_whose_hidden_tests_nbgrader_restores(course):
    folder, results = course
    source = nbformat.read(folder / "source" / round_trip.ASSIGNMENT / NOTEBOOK.name, as_version=4)
    checks = {cell.metadata.nbgrader.grade_id for cell in source.cells
              if authoring.BEGIN_HIDDEN_TESTS in cell.source}
    assert checks
    for result in results.values():
        assert set(result.checksum_warnings()) == checks


def test_a_kernel_without_d2lhelpers_makes_autograde_fail_instead_of_scoring_zero(course, tmp_path):
    folder, _ = course
    sources = {NOTEBOOK.name: nbformat.read(folder / "source" / round_trip.ASSIGNMENT / NOTEBOOK.name,
                                            as_version=4)}
    round_trip.write_submission(folder, sources, "solved", student="no_d2lhelpers")
    missing = tmp_path / "d2lhelpers"
    missing.mkdir()
    (missing / "__init__.py").write_text('raise ImportError("not installed in this kernel")\n')
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}  # the kernel finds this d2lhelpers first
    result = round_trip.nbgrader(folder, "autograde", round_trip.ASSIGNMENT, "--student",
                                 "no_d2lhelpers", env=env)
    assert result.returncode != 0
    assert "setup cell failed in the grading kernel" in result.stderr
    assert "not installed in this kernel" in result.stderr
    assert not (folder / "autograded" / "no_d2lhelpers" / round_trip.ASSIGNMENT / NOTEBOOK.name).exists()
