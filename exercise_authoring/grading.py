"""An nbgrader preprocessor that stops autograding when a notebook's setup cell fails.

nbgrader keeps executing a notebook after an error, so that one wrong answer does not cost the
points of the others. When the grading kernel cannot import d2lhelpers, every check then fails
and a correct submission scores 0, with nothing but an error inside the graded notebook to say
why. Listed after ``Execute`` in ``Autograde.autograde_preprocessors`` (as the repository's
nbgrader_config.py does), this preprocessor turns that into an error of ``nbgrader autograde``
itself: nbgrader logs the message, removes the half-graded notebook, and exits with status 1.

This module needs nbconvert (installed with nbgrader); the rest of the package does not.
"""

from __future__ import annotations

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from .nbgrader_metadata import SETUP_GRADE_ID

__all__ = ["RequireSetupCell", "SetupCellFailed"]


class SetupCellFailed(RuntimeError):
    """The setup cell of a notebook raised in the grading kernel."""


class RequireSetupCell(Preprocessor):
    """Raise :class:`SetupCellFailed` if the executed notebook's setup cell (the cell whose
    nbgrader grade id is "setup") holds an error; notebooks without one pass unchanged."""

    enabled = Bool(True, help="nbconvert runs only enabled preprocessors").tag(config=True)

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") != SETUP_GRADE_ID:
                continue
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    raise SetupCellFailed(
                        f"the notebook's setup cell failed in the grading kernel, so every check "
                        f"would score 0: {output.get('ename')}: {output.get('evalue')}\n"
                        "Install d2lhelpers into the environment of the kernel nbgrader starts "
                        "(`jupyter kernelspec list` shows which one runs 'python3'), then "
                        "autograde again.")
        return nb, resources
