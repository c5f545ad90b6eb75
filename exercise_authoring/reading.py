"""How long a notebook's main line takes to read, by the course's one count (SYLLABUS, "What a
learner reads"): prose words / 200 + visible main-line code lines / 10 per minute.

The main line is every section but those whose heading starts with "Going deeper" and the
exercises. Prose words are the markdown's words (images' data and LaTeX between ``$`` count as
one word each); code lines are the non-blank, non-comment lines of code cells a learner sees, so
a collapsed cell (``jupyter.source_hidden``: a check, figure code) does not count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .copies import source_of

__all__ = ["MAX_MINUTES", "MAX_WORDS", "Reading", "reading_time"]

MAX_MINUTES, MAX_WORDS = 30, 2500
_IMAGE_DATA = re.compile(r"data:image/[a-z+]+;base64,[A-Za-z0-9+/=]+")
_HEADING = re.compile(r"^(#+)\s+(.*)")


@dataclass(frozen=True)
class Reading:
    words: int  # prose words of the main line
    code_lines: int  # visible code lines of the main line

    @property
    def minutes(self) -> float:
        return self.words / 200 + self.code_lines / 10


def _section(level: int, title: str, current: str) -> str:
    title = re.sub(r"^[\d.\s]+", "", title).strip().lower()
    if title.startswith("exercise"):
        return "exercises"
    if title.startswith("going deeper"):
        return "deeper"
    return "main" if level <= 2 else current


def reading_time(notebook: dict) -> Reading:
    """The main line's prose words and visible code lines of ``notebook`` (nbformat JSON)."""
    section, words, code = "main", 0, 0
    for cell in notebook["cells"]:
        source = source_of(cell)
        if cell["cell_type"] == "markdown":
            for line in _IMAGE_DATA.sub("", source).splitlines():
                heading = _HEADING.match(line)
                if heading:
                    section = _section(len(heading.group(1)), heading.group(2), section)
                if section == "main":
                    words += len(re.findall(r"[A-Za-z0-9]+", re.sub(r"\$[^$]*\$", " x ", line)))
        elif cell["cell_type"] == "code" and section == "main":
            if cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"):
                continue
            code += sum(1 for line in source.splitlines()
                        if line.strip() and not line.strip().startswith("#"))
    return Reading(words, code)
