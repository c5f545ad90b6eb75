"""What an exercise raises while it is still the stub of a student copy.

In a student copy (``python -m exercise_authoring copies``; nbgrader's release notebooks alike,
through ``ClearSolutions.code_stub`` in the repository's nbgrader_config.py), each solution is
replaced by::

    # YOUR CODE HERE
    raise d2lhelpers.exercises.NotWrittenYet()

(``d2lhelpers`` is the name the notebook's setup cell imports.) A check that meets it says "not
implemented yet", as for nbgrader's usual ``raise NotImplementedError()``. Any other cell that
calls the unwritten function shows two lines in Jupyter, instead of a traceback through PyTorch's
layers, naming the function and saying what to do.
"""

from __future__ import annotations

import sys

from .runner import _

__all__ = ["NotWrittenYet"]


class NotWrittenYet(NotImplementedError):
    """The function that raised it is an exercise still to write: its body is the stub.

    ``function``: the qualified name of that function (e.g. ``"PackedSelfAttention.forward"``),
    read from the frame that raised it, or None when the stub ran outside a function. A
    ``NotImplementedError``, so that code catching that (and nbgrader, which counts any error as a
    failed test) treats it as usual. In IPython it renders as two lines (IPython's
    ``_render_traceback_`` protocol) instead of the traceback.
    """

    # How the checks recognise a stub: by this mark, not by the class, since the hidden tests
    # grade with a private copy of d2lhelpers, whose class is another (see runner.check_afresh).
    exercise_stub = True

    def __init__(self):
        code = sys._getframe(1).f_code  # the frame whose `raise` made this exception
        self.function = (None if code.co_name == "<module>"
                         else getattr(code, "co_qualname", code.co_name))  # Python 3.10: no qualname
        self._filename = code.co_filename
        super().__init__(
            (_("this is an exercise still to write (where it says YOUR CODE HERE): write it, run "
               "its cell, then this one.") if self.function is None else
             _("`{function}` is an exercise still to write (where it says YOUR CODE HERE): write "
               "it, run its cell, then this one.")).format(function=self.function))

    def _raised_in_the_cell_run(self) -> bool:
        """Whether the stub is in the cell that was run (the cell's own code is the first frame
        of the traceback that runs a module's top level; IPython's own frames come before it)."""
        tb = self.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_name != "<module>":
            tb = tb.tb_next
        return tb is not None and tb.tb_frame.f_code.co_filename == self._filename

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of the traceback (IPython's protocol): two lines."""
        where = (_("Write it in this cell (where it says YOUR CODE HERE), then run the cell "
                   "again.") if self._raised_in_the_cell_run() else
                 _("Write it in its exercise cell above (where it says YOUR CODE HERE), run that "
                   "cell, then this one."))
        what = (_("this is an exercise still to write.") if self.function is None else
                _("`{function}` is an exercise still to write.").format(function=self.function))
        return [f"{type(self).__name__}: {what}", where]
