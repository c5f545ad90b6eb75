"""Authoring the course's exercises: the generated parts of the teaching notebooks, nbgrader's
source notebooks, student copies, and what nbgrader needs.

In a teaching notebook (``notebooks/``), a coding exercise's solution sits between nbgrader's
markers, and its check cell calls the check, on a line of its own::

    def sparsemax(scores):
        ### BEGIN SOLUTION
        ...
        ### END SOLUTION

    d2lh.exercises.check_sparsemax(sparsemax)

A model answer to a question, in markdown, sits between the same markers in HTML comments, which
renderers hide (``<!-- BEGIN SOLUTION -->`` ... ``<!-- END SOLUTION -->``; nbgrader looks for
"BEGIN SOLUTION" anywhere in a line).

nbgrader's source notebook adds the hidden tests below the call, which a learner never reads::

    d2lh.exercises.check_sparsemax(sparsemax)
    ### BEGIN HIDDEN TESTS
    ... (the same check with seed=1, by a copy of the checks loaded afresh)
    ### END HIDDEN TESTS

Five commands, run from the repository's folder::

    python -m exercise_authoring update notebooks/*.ipynb
    python -m exercise_authoring copies notebooks/*.ipynb --out exercises/
    python -m exercise_authoring source notebooks/0[1-3]_*.ipynb --out source/attention/
    python -m exercise_authoring reading notebooks/*.ipynb
    python -m exercise_authoring translate notebooks/*.ipynb exercises/README.md

``update`` rewrites, in place, each teaching notebook's setup cell (on Colab it installs
d2lhelpers at the release tag of the package's version; anywhere it imports d2lhelpers), its
nbgrader cell metadata, and moves nbval's comment markers into cell tags; it removes hidden tests
left in check cells, and turns markers written as ``### BEGIN SOLUTION`` in markdown (a heading
there) into HTML comments. ``copies`` writes student copies: solutions replaced by stubs (they
raise ``d2lhelpers.exercises.NotWrittenYet``, which Jupyter shows in two lines), model answers by
"YOUR ANSWER HERE", outputs cleared, and the Open-in-Colab badge opening the copy itself at the
release tag (``--answer-key DIR`` also writes copies that keep the solutions). ``source`` writes
nbgrader's source notebooks, for an nbgrader course folder's ``source/<assignment>/``: each
teaching notebook, current as ``update`` writes it, with the hidden tests in its check cells.

``translate`` keeps the Chinese edition in step (see ``translation``): it merges each notebook's
English paragraphs into its gettext catalogue, ``locale/zh_CN/LC_MESSAGES/<notebook>.po`` (a
changed paragraph keeps its old translation, marked fuzzy), and writes the Chinese notebooks,
``notebooks/zh-CN/``, from the catalogues: the same cells, code and outputs; a markdown page
(the instructor's guide) is translated the same way, into ``exercises/README.zh-CN.md``.

Modules: ``project`` (address and version from pyproject.toml), ``copies``, ``nbgrader_metadata``,
``sources`` (the templates, ``update`` and ``source``), ``translation`` (the catalogues and the Chinese edition), ``grading`` (an nbgrader preprocessor; it
needs nbconvert and is not imported here). Plain Python: this package imports neither torch nor
d2lhelpers, so the commands start at once.
"""

from __future__ import annotations

from .copies import (
    ANSWER_STUB,
    BEGIN_ANSWER,
    BEGIN_HIDDEN_TESTS,
    BEGIN_SOLUTION,
    COLLAPSE_TAG,
    END_ANSWER,
    END_HIDDEN_TESTS,
    END_SOLUTION,
    STUB,
    collapse,
    expand,
    has_solution,
    notebook_text,
    source_of,
    student_notebook,
    student_source,
    write_copies,
)
from .nbgrader_metadata import SETUP_GRADE_ID, nbgrader_role, with_nbgrader_metadata
from .project import Project, find_project
from .reading import MAX_MINUTES, MAX_WORDS, Reading, reading_time
from .sources import (
    check_calls,
    hidden_tests_source,
    nbgrader_source_notebook,
    nbgrader_sources,
    setup_source,
    update_sources,
    updated_notebook,
)

__all__ = [
    "ANSWER_STUB",
    "MAX_MINUTES",
    "MAX_WORDS",
    "Reading",
    "BEGIN_ANSWER",
    "BEGIN_HIDDEN_TESTS",
    "BEGIN_SOLUTION",
    "COLLAPSE_TAG",
    "END_ANSWER",
    "END_HIDDEN_TESTS",
    "END_SOLUTION",
    "SETUP_GRADE_ID",
    "STUB",
    "Project",
    "check_calls",
    "collapse",
    "expand",
    "find_project",
    "has_solution",
    "hidden_tests_source",
    "main",
    "nbgrader_role",
    "nbgrader_source_notebook",
    "nbgrader_sources",
    "notebook_text",
    "reading_time",
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
    """The command line: ``update``, ``copies`` or ``source`` (see the package's docstring)."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m exercise_authoring",
                                     description="Author the course's exercise notebooks.")
    commands = parser.add_subparsers(dest="command", required=True)
    update = commands.add_parser(
        "update", help="rewrite the setup cell, the nbgrader metadata and the nbval tags of "
                       "teaching notebooks in place (and remove any hidden tests)")
    update.add_argument("notebooks", nargs="+", type=Path, help="teaching notebooks")
    copies = commands.add_parser(
        "copies", help="write student copies: solutions stubbed, outputs cleared, each with a "
                       "Colab badge of its own")
    copies.add_argument("notebooks", nargs="+", type=Path, help="teaching notebooks")
    copies.add_argument("--out", type=Path, required=True, help="folder for the copies")
    copies.add_argument("--answer-key", type=Path, default=None,
                        help="also write copies that keep the solutions (outputs cleared) here")
    source = commands.add_parser(
        "source", help="write nbgrader's source notebooks: the teaching notebooks with the "
                       "hidden tests in their check cells")
    source.add_argument("notebooks", nargs="+", type=Path, help="teaching notebooks")
    source.add_argument("--out", type=Path, required=True,
                        help="folder for them: source/<assignment>/ in an nbgrader course folder")
    translate = commands.add_parser(
        "translate", help="the Chinese edition: merge each notebook's English paragraphs into its "
                          "catalogue locale/zh_CN/LC_MESSAGES/<notebook>.po (a changed paragraph "
                          "becomes fuzzy) and write notebooks/zh-CN/<notebook>.ipynb")
    translate.add_argument("notebooks", nargs="+", type=Path,
                           help="English teaching notebooks, and markdown pages (exercises/README.md)")
    translate.add_argument("--check", action="store_true",
                           help="write nothing; exit 1 if a catalogue or Chinese notebook is "
                                "stale, an entry untranslated or fuzzy, or a translation loses "
                                "what its English keeps")
    reading = commands.add_parser(
        "reading", help="print each notebook's main-line reading time: prose words / 200 + "
                        "visible code lines / 10 minutes")
    reading.add_argument("notebooks", nargs="+", type=Path, help="teaching notebooks")
    args = parser.parse_args(argv)
    if args.command == "update":
        for path, changed in update_sources(args.notebooks):
            print(f"{'updated' if changed else 'unchanged'} {path}")
    elif args.command == "copies":
        for path in write_copies(args.notebooks, args.out, args.answer_key):
            print(f"wrote {path}")
    elif args.command == "translate":
        from .translation import translate_notebooks, translation_report

        from .messages import catalogue_report, update_message_catalogues

        # the package's messages first: the Chinese notebooks show some of them (the model answer's
        # line), as the package's current catalogue gives them
        messages = update_message_catalogues(args.notebooks[0], write=not args.check)
        summaries = translate_notebooks(args.notebooks, write=not args.check)
        failed = False
        for s in summaries + messages:
            problems = (catalogue_report(s["catalogue"]) if s in messages
                        else translation_report(s["notebook"]))
            print(f"{'stale' if args.check and s['changed'] else 'wrote' if not args.check else 'current'}"
                  f" {s['translation']}: {s['entries']} entries, {s['untranslated']} untranslated, "
                  f"{s['fuzzy']} fuzzy, {len(problems)} with problems")
            for problem in problems:
                print("    " + problem)
            failed |= bool(s["untranslated"] or s["fuzzy"] or problems
                           or (args.check and s["changed"]))
        return 1 if args.check and failed else 0
    elif args.command == "reading":
        import json

        print(f"{'notebook':<48} {'words':>6} {'code':>5} {'minutes':>8}")
        for path in args.notebooks:
            r = reading_time(json.loads(path.read_text(encoding="utf-8")))
            flag = "" if r.minutes <= MAX_MINUTES and r.words <= MAX_WORDS else "  over"
            print(f"{path.name:<48} {r.words:>6} {r.code_lines:>5} {r.minutes:>8.1f}{flag}")
    else:
        for path in nbgrader_sources(args.notebooks, args.out):
            print(f"wrote {path}")
    return 0
