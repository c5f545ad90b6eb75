"""pytest's hooks for the whole repository: the Chinese edition's cells that differ from the
English ones run inside the English notebooks' nbval runs (the unit tests' own helpers are in
tests/conftest.py)."""

from __future__ import annotations


# The Chinese edition's code cells are the English ones, but for its setup cell (the checks speak
# Chinese), its folded checks (their verdicts in Chinese) and the stored outputs that show them.
# Running every Chinese notebook again would double the suite's time; instead, each cell of the
# Chinese edition that differs from the English one (code or stored outputs) is run by nbval right
# after the English cell, in the same kernel, with the language switched to Chinese and the random
# state put back afterwards, and its output compared with the Chinese notebook's stored one.
_CHINESE_PRELUDE = """\
import os as _zh_os, random as _zh_random
_zh_saved = (_zh_os.environ.get("D2LHELPERS_LANGUAGE"), _zh_random.getstate(), None, None)
try:
    import torch as _zh_torch
    _zh_saved = _zh_saved[:2] + (_zh_torch.get_rng_state(), None)
    import numpy as _zh_numpy
    _zh_saved = _zh_saved[:3] + (_zh_numpy.random.get_state(),)
except ImportError:
    pass
_zh_os.environ["D2LHELPERS_LANGUAGE"] = "zh_CN"
"""
_CHINESE_AFTER = """\
if _zh_saved[0] is None:
    _zh_os.environ.pop("D2LHELPERS_LANGUAGE", None)
else:
    _zh_os.environ["D2LHELPERS_LANGUAGE"] = _zh_saved[0]
_zh_random.setstate(_zh_saved[1])
if _zh_saved[2] is not None:
    _zh_torch.set_rng_state(_zh_saved[2])
if _zh_saved[3] is not None:
    _zh_numpy.random.set_state(_zh_saved[3])
del _zh_saved, _zh_os, _zh_random
for _zh_name in ("_zh_torch", "_zh_numpy", "_zh_name"):
    globals().pop(_zh_name, None)
"""


def _quietly_in(kernel, code: str) -> None:
    """Run ``code`` in nbval's kernel, its messages not taken for a cell's outputs."""
    message = kernel.execute_cell_input(code, allow_stdin=False)
    kernel.await_reply(message, timeout=60)
    kernel.await_idle(message, 60)


def _chinese_cell_class():
    from nbval.plugin import IPyNbCell

    class ChineseCell(IPyNbCell):
        """A cell of the Chinese edition, run after its English cell in the English kernel. A
        folded check runs again only the statements that print its verdicts (what comes before
        them has run in the English cell: a second run could change state, e.g. a model's last
        attention weights), and only its ✓ lines are compared."""

        verdicts_only = False

        def compare_outputs(self, test, ref, skip_compare=None):
            if self.verdicts_only:
                test = _verdict_lines(test)
            return super().compare_outputs(test, ref, skip_compare)

        def runtest(self):
            kernel = self.parent.kernel
            _quietly_in(kernel, _CHINESE_PRELUDE)
            try:
                super().runtest()
            finally:
                _quietly_in(kernel, _CHINESE_AFTER)

    return ChineseCell


def _verdict_lines(outputs) -> list:
    """Outputs reduced to the ✓ lines they print."""
    import nbformat

    lines = [line for o in outputs if o.get("output_type") == "stream"
             for line in "".join(o["text"]).split("\n") if line.startswith("✓")]
    return [nbformat.v4.new_output("stream", name="stdout", text="\n".join(lines) + "\n")
            ] if lines else []


def _verdict_statements(cell):
    """A folded check cell reduced to the top-level statements that print its verdicts, and its
    outputs to their ✓ lines; None if the cell prints no verdict of its own."""
    import ast
    import copy

    from exercise_authoring.messages import _verdict_calls, is_folded

    source = cell.source
    calls = _verdict_calls(source) if is_folded(cell) else []
    if not calls:
        return None
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    lines = source.splitlines(keepends=True)
    kept = [statement for statement in ast.parse(source).body
            if any(starts[statement.lineno - 1] <= start < starts[statement.end_lineno]
                   for start, _, _ in calls)]
    reduced = copy.deepcopy(cell)
    reduced.source = "".join("".join(lines[s.lineno - 1:s.end_lineno]) for s in kept)
    reduced.outputs = _verdict_lines(cell.outputs)
    return reduced


def pytest_collection_modifyitems(session, config, items):
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:
        return
    import nbformat

    chinese_cell, editions, result = None, {}, []
    for item in items:
        result.append(item)
        if not isinstance(item, IPyNbCell) or item.path.parent.name == "zh-CN":
            continue
        path = item.path.parent / "zh-CN" / item.path.name
        if path not in editions:
            editions[path] = ([c for c in nbformat.read(path, as_version=4).cells
                               if c.cell_type == "code"] if path.exists() else None)
        cells = editions[path]
        if cells is None:
            continue
        chinese = cells[item.cell_num]
        if chinese.source == item.cell.source and chinese.outputs == item.cell.outputs:
            continue
        chinese_cell = chinese_cell or _chinese_cell_class()
        reduced = _verdict_statements(chinese)
        replay = chinese_cell.from_parent(item.parent, name=f"{item.name} (zh-CN)",
                                          cell_num=item.cell_num, cell=reduced or chinese,
                                          options=item.options)
        replay.verdicts_only = reduced is not None
        result.append(replay)
    items[:] = result
