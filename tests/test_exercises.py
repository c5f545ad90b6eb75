"""The exercises package as a whole (d2lhelpers/exercises/__init__.py): every check it offers is
tested by the test file of its module, and it is reachable from d2lhelpers.

Each check module exercises/checks_<topic>.py has its tests in tests/test_checks_<topic>.py (right
and plausible wrong answers, run through the tests of checks_common.py); the runner and the cases
have theirs in test_exercises_runner.py and test_exercises_cases.py.
"""

import importlib
import pathlib

import d2lhelpers as d2lh
from d2lhelpers import exercises

TESTS = pathlib.Path(__file__).resolve().parent
CHECK_MODULES = sorted(path.stem for path in
                       (TESTS.parent / "d2lhelpers" / "exercises").glob("checks_*.py"))


def test_every_check_module_has_a_test_file():
    assert CHECK_MODULES and sorted(path.stem.removeprefix("test_")
                                    for path in TESTS.glob("test_checks_*.py")) == CHECK_MODULES


def test_every_check_of_the_module_is_tested():
    tables = [importlib.import_module(f"test_{module}").CHECKS for module in CHECK_MODULES]
    tested = [check for table in tables for check in table]
    assert {name for name in exercises.__all__ if name.startswith("check_")} == set(tested)
    assert len(tested) == len(set(tested)), "a check is in two tables"


def test_exercises_module_is_reachable_from_the_package():
    assert d2lh.exercises is exercises
