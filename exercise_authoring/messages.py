"""The Chinese edition of what the package says: the exercise checks' messages (what is wrong,
the hints, the verdict), in gettext catalogues like the notebooks' paragraphs.

In ``d2lhelpers/exercises/*.py`` a message the learner reads is marked for the catalogue: ``_(...)``
where it is made (translated at once, its numbers and names filled in afterwards with
``.format``), ``N_(...)`` where it is defined once and shown later (a mistake's sentence, a hint,
a case's description: the runner translates it where it shows it). Babel's Python extractor finds
them; each module has its catalogue, ``locale/zh_CN/LC_MESSAGES/d2lhelpers/<module>.po``, merged
as the notebooks' are (a changed message keeps its old translation, marked fuzzy). All of them are
compiled into the one file the package reads at run time with Python's ``gettext``,
``d2lhelpers/locale/zh_CN/LC_MESSAGES/d2lhelpers.mo``, which is committed (Colab installs the
package from git and has no Babel): :func:`compiled` makes it, and a stale one fails the tests.

A translation keeps the English's placeholders (``{name}``, ``{count}``, ...) and its line breaks:
:func:`message_problems` says what it lost.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path

from .project import find_project

__all__ = ["PLACEHOLDER", "catalogue_of", "compiled", "message_catalogues", "message_problems",
           "messages_of", "mo_path", "update_message_catalogues"]

PLACEHOLDER = re.compile(r"(?<!\{)\{[^{}]*\}(?!\})")  # {name}, {value:.4g}; not {{ or }}
_KEYWORDS = {"_": None, "N_": None}


def _root() -> Path:
    return find_project(Path(__file__).parent).root


def modules(root: Path | None = None) -> list[Path]:
    """The package's modules whose messages a learner reads: the exercise checks."""
    root = root or _root()
    return sorted(p for p in (root / "d2lhelpers" / "exercises").glob("*.py")
                  if p.name != "__init__.py")


def catalogue_of(module: Path) -> Path:
    """``locale/zh_CN/LC_MESSAGES/d2lhelpers/<module>.po``."""
    from .translation import LOCALE

    root = find_project(Path(module).parent).root
    return root / "locale" / LOCALE / "LC_MESSAGES" / "d2lhelpers" / (Path(module).stem + ".po")


def mo_path(root: Path | None = None) -> Path:
    from .translation import LOCALE

    return (root or _root()) / "d2lhelpers" / "locale" / LOCALE / "LC_MESSAGES" / "d2lhelpers.mo"


def messages_of(module: Path) -> list[tuple[str, int]]:
    """The marked messages of a module, (msgid, line), in order, by Babel's Python extractor."""
    from babel.messages.extract import extract_from_file

    found = []
    for line, message, _, _ in extract_from_file("python", str(module), keywords=_KEYWORDS,
                                                 comment_tags=(), options={}):
        if isinstance(message, str) and message:
            found.append((message, line))
    return found


def update_message_catalogues(where: Path, write: bool = True) -> list[dict]:
    """The catalogues of the project holding ``where`` (a path in it): each module's catalogue
    merged with its messages (and written, when ``write``), and the compiled catalogue written;
    per module a summary as ``translate_notebooks`` gives one (none if the project has no
    package)."""
    from .translation import catalogue_entries, merge_catalogue, read_catalogue

    project = find_project(Path(where).resolve().parent)
    if not modules(project.root):
        return []
    summaries = []
    for module in modules(project.root):
        po = catalogue_of(module)
        old = po.read_text(encoding="utf-8") if po.exists() else None
        entries = [(msgid, (f"d2lhelpers/exercises/{module.name}", line))
                   for msgid, line in messages_of(module)]
        header = (f"# Chinese edition of the messages of d2lhelpers/exercises/{module.name}.\n"
                  "# Written by `python -m exercise_authoring translate`; translate the msgstr "
                  "lines, keeping each {placeholder} and line break.\n#")
        text = merge_catalogue(entries, old, header, project)
        parsed = list(read_catalogue(text))
        summaries.append({
            "notebook": module, "catalogue": po, "translation": po,
            "entries": len(parsed), "untranslated": sum(not e.msgstr for e in parsed),
            "fuzzy": sum(bool(e.msgstr) and e.fuzzy for e in parsed),
            "changed": old is None or catalogue_entries(old) != catalogue_entries(text),
            "text": text})
        if write and (old is None or old != text):
            po.parent.mkdir(parents=True, exist_ok=True)
            po.write_text(text, encoding="utf-8")
    mo = mo_path(project.root)
    data = compiled([s["text"] for s in summaries])
    stale = not mo.exists() or mo.read_bytes() != data
    for s in summaries:
        s["changed"] = s["changed"] or stale
    if write and stale:
        mo.parent.mkdir(parents=True, exist_ok=True)
        mo.write_bytes(data)
    return summaries


def message_catalogues() -> list[Path]:
    return [catalogue_of(m) for m in modules()]


def compiled(catalogue_texts) -> bytes:
    """The .mo file of the catalogues (their translated, not fuzzy, entries), as bytes: the same
    catalogues always give the same bytes."""
    from babel.messages.catalog import Catalog
    from babel.messages.mofile import write_mo

    from .translation import LOCALE, _FIXED_DATE, read_catalogue

    catalogue = Catalog(locale=LOCALE, project="d2lhelpers", creation_date=_FIXED_DATE,
                        revision_date=_FIXED_DATE, fuzzy=False)
    for text in catalogue_texts:
        for entry in read_catalogue(text):
            if entry.msgid and entry.msgstr and not entry.fuzzy:
                catalogue.add(entry.msgid, entry.msgstr)
    out = io.BytesIO()
    write_mo(out, catalogue, use_fuzzy=False)
    return out.getvalue()


def message_problems(msgid: str, msgstr: str) -> list[str]:
    """What a translation of a message lost or added: placeholders, line breaks."""
    problems = []
    english, chinese = Counter(PLACEHOLDER.findall(msgid)), Counter(PLACEHOLDER.findall(msgstr))
    for what in english - chinese:
        problems.append(f"the translation lacks the placeholder {what}")
    for what in chinese - english:
        problems.append(f"the translation has a placeholder {what} the English has not")
    if msgid.count("\n") != msgstr.count("\n"):
        problems.append(f"the English has {msgid.count(chr(10))} line break(s), the translation "
                        f"{msgstr.count(chr(10))}")
    if msgid.startswith(" ") != msgstr.startswith(" ") or msgid.endswith(" ") != msgstr.endswith(" "):
        problems.append("the translation must begin and end with a space where the English does")
    return problems


def catalogue_report(po: Path) -> list[str]:
    """Each problem of a message catalogue on disk, one line each."""
    from .translation import read_catalogue

    lines = []
    for entry in read_catalogue(po):
        if not entry.msgstr or entry.fuzzy:
            continue
        for problem in message_problems(entry.msgid, entry.msgstr):
            lines.append(f"{entry.msgid[:50]!r}...: {problem}")
    return lines
