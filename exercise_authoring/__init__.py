"""Authoring the course's exercises: the generated parts of the source notebooks, student copies,
and what nbgrader needs.

In a source notebook, a coding exercise's solution sits between nbgrader's markers, and its check
cell calls the check; the hidden tests below the call are generated::

    def multiplicative_scores(queries, keys, W):
        ### BEGIN SOLUTION
        ...
        ### END SOLUTION

    d2lh.exercises.check_multiplicative_scores(multiplicative_scores)
    ### BEGIN HIDDEN TESTS
    ... (written by `update`)
    ### END HIDDEN TESTS

Two commands, run from the repository's folder::

    python -m exercise_authoring update notebooks/*.ipynb
    python -m exercise_authoring copies notebooks/*.ipynb --out exercises/

``update`` rewrites, in place, each notebook's setup cell (it installs d2lhelpers at the release
tag of the package's version on Colab, and stops with instructions where d2lhelpers is missing),
the hidden tests of its check cells, and its nbgrader cell metadata. ``copies`` writes student
copies: solutions replaced by stubs, model answers by "YOUR ANSWER HERE", hidden tests removed,
outputs cleared, and the Open-in-Colab badge opening the copy itself at the release tag
(``--answer-key DIR`` also writes copies that keep the solutions).

Modules: ``project`` (address and version from pyproject.toml), ``copies``, ``nbgrader_metadata``,
``sources`` (the templates and ``update``), ``grading`` (an nbgrader preprocessor; it needs
nbconvert and is not imported here). Plain Python: this package imports neither torch nor
d2lhelpers, so the commands start at once.
"""

from __future__ import annotations

from .copies import (
    ANSWER_STUB,
    BEGIN_HIDDEN_TESTS,
    BEGIN_SOLUTION,
    END_HIDDEN_TESTS,
    END_SOLUTION,
    STUB,
    notebook_text,
    source_of,
    student_notebook,
    student_source,
    write_copies,
)
from .nbgrader_metadata import SETUP_GRADE_ID, nbgrader_role, with_nbgrader_metadata
from .project import Project, find_project
from .sources import (
    check_calls,
    hidden_tests_source,
    setup_source,
    update_sources,
    updated_notebook,
)

__all__ = [
    "ANSWER_STUB",
    "BEGIN_HIDDEN_TESTS",
    "BEGIN_SOLUTION",
    "END_HIDDEN_TESTS",
    "END_SOLUTION",
    "SETUP_GRADE_ID",
    "STUB",
    "Project",
    "check_calls",
    "find_project",
    "hidden_tests_source",
    "main",
    "nbgrader_role",
    "notebook_text",
    "setup_source",
    "source_of",
    "student_notebook",
    "student_source",
    "update_sources",
    "updated_notebook",
    "with_nbgrader_metadata",
    "write_copies",
]


def main(argv=None) -> int:
    """The command line: ``update`` or ``copies`` (see the package's docstring)."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m exercise_authoring",
                                     description="Author the course's exercise notebooks.")
    commands = parser.add_subparsers(dest="command", required=True)
    update = commands.add_parser(
        "update", help="rewrite the setup cell, the hidden tests and the nbgrader metadata of "
                       "source notebooks in place")
    update.add_argument("notebooks", nargs="+", type=Path, help="source notebooks")
    copies = commands.add_parser(
        "copies", help="write student copies: solutions stubbed, hidden tests removed, outputs "
                       "cleared, each with a Colab badge of its own")
    copies.add_argument("notebooks", nargs="+", type=Path, help="source notebooks")
    copies.add_argument("--out", type=Path, required=True, help="folder for the copies")
    copies.add_argument("--answer-key", type=Path, default=None,
                        help="also write copies that keep the solutions (outputs cleared) here")
    args = parser.parse_args(argv)
    if args.command == "update":
        for path, changed in update_sources(args.notebooks):
            print(f"{'updated' if changed else 'unchanged'} {path}")
    else:
        for path in write_copies(args.notebooks, args.out, args.answer_key):
            print(f"wrote {path}")
    return 0
