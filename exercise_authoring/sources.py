"""The generated parts of a source notebook, rewritten from one template each: the setup cell
(the first code cell), the hidden tests of every check cell, and nbgrader's cell metadata."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from pathlib import Path

from .copies import BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS, source_of
from .nbgrader_metadata import SETUP_HEADER, nbgrader_role, with_nbgrader_metadata
from .project import Project, find_project

__all__ = [
    "check_calls",
    "hidden_tests_source",
    "setup_source",
    "update_sources",
    "updated_notebook",
]

_VISIBLE_CALL = re.compile(r"^d2lh\.exercises\.(check_\w+)\((\w+)\)[ \t]*$", re.MULTILINE)
_HIDDEN_REGION = re.compile(r"\n?^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n.*?^[ \t]*### END HIDDEN TESTS"
                            r"[^\n]*$", re.MULTILINE | re.DOTALL)


def setup_source(project: Project) -> str:
    """The setup cell: on Colab it installs d2lhelpers at the release tag of ``project``'s
    version; everywhere it stops, saying how to install d2lhelpers, when the kernel cannot import
    it (otherwise every later cell fails, and nbgrader grades every check 0)."""
    return f'''{SETUP_HEADER} on Colab, install the version of the course's package d2lhelpers that this
# notebook was written for; anywhere, stop here with instructions if d2lhelpers is missing.
import importlib
import subprocess
import sys

D2LHELPERS = "{project.requirement}"
if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", D2LHELPERS], check=True)
    importlib.invalidate_caches()  # let this process see the package just installed
try:
    import d2lhelpers
except ImportError as error:
    raise ModuleNotFoundError(
        "This notebook needs the course's package d2lhelpers, which this kernel cannot import "
        f"({{error}}). Install it into the kernel's environment, then restart the kernel: "
        f"{{sys.executable}} -m pip install '{{D2LHELPERS}}' (or, in a clone of the course, "
        "pip install -e . in its folder).") from None'''


def hidden_tests_source(calls: Sequence[tuple[str, str]]) -> str:
    """Hidden tests rerunning each (check, function) with other inputs (seed=1) by a copy of the
    checking code loaded afresh from d2lhelpers' files (``check_afresh`` in
    ``d2lhelpers/exercises/runner.py``), so that a solution that replaces ``d2lh.exercises``, a
    check or ``run_check`` cannot earn the points."""
    lines = [BEGIN_HIDDEN_TESTS,
             "# For the grader: the same check on other inputs (seed=1), by a copy of the checking code",
             "# loaded afresh from d2lhelpers' files, which no code in this notebook can have patched.",
             "import importlib.util, runpy",
             '_d2lhelpers = importlib.util.find_spec("d2lhelpers").submodule_search_locations[0]',
             '_check_afresh = runpy.run_path(f"{_d2lhelpers}/exercises/runner.py")["check_afresh"]']
    lines += [f'_check_afresh("{check}", {function}, seed=1)' for check, function in calls]
    return "\n".join([*lines, END_HIDDEN_TESTS])


def check_calls(source: str) -> list[tuple[str, str]]:
    """The (check, function) pairs of a check cell's visible calls, e.g.
    ``d2lh.exercises.check_causal_lens(causal_lens)``, each on a line of its own."""
    return _VISIBLE_CALL.findall(_HIDDEN_REGION.sub("", source))


def updated_notebook(notebook: dict, project: Project) -> dict:
    """``notebook`` (nbformat JSON as a dict) with its setup cell, hidden tests and nbgrader
    metadata rewritten from the templates; a notebook that is up to date comes back equal."""
    notebook = copy.deepcopy(notebook)
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    if not code or "google.colab" not in source_of(code[0]):
        raise ValueError("notebook's first code cell must be its setup cell (it installs "
                         "d2lhelpers on Colab)")
    code[0]["source"] = setup_source(project)
    for cell in code:
        if (nbgrader_role(cell) or ("",))[0] != "check":
            continue
        source = source_of(cell)
        calls = check_calls(source)
        if not calls:
            raise ValueError("a check cell must call d2lh.exercises.check_<name>(<function>) on "
                             f"a line of its own, got:\n{source}")
        cell["source"] = _HIDDEN_REGION.sub("", source).rstrip("\n") + "\n" + hidden_tests_source(calls)
    return with_nbgrader_metadata(notebook)


def update_sources(paths: Sequence[Path]) -> list[tuple[Path, bool]]:
    """Rewrite the generated parts of source notebooks in place (with nbformat, which keeps the
    files' layout); return (path, changed) pairs."""
    import nbformat  # installed wherever notebooks run; only this command needs it

    results = []
    for path in map(Path, paths):
        notebook = nbformat.read(path, as_version=4)
        try:
            updated = nbformat.from_dict(updated_notebook(notebook, find_project(path.parent)))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
        changed = updated != notebook
        if changed:
            nbformat.write(updated, path)
        results.append((path, changed))
    return results
