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

import ast
import io
import re
from collections import Counter
from pathlib import Path

from .project import find_project

__all__ = ["PLACEHOLDER", "VERDICT", "catalogue_of", "catalogue_report", "compiled",
           "message_problems", "messages_of", "mo_path", "package_messages", "translated_code",
           "translated_outputs", "update_message_catalogues", "verdicts"]

PLACEHOLDER = re.compile(r"(?<!\{)\{[^{}]*\}(?!\})")  # {name}, {value:.4g}; not {{ or }}
_KEYWORDS = {"_": None, "N_": None}


def _wide(character: str) -> bool:
    """Whether a character is a Chinese one or full-width punctuation (it needs no space)."""
    import unicodedata

    return bool(character) and unicodedata.east_asian_width(character) in "WF"


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
    # a space that joins a message to English words around it: kept, but Chinese needs none
    # before or after a Chinese character
    lost = [(msgid.startswith(" ") and not msgstr.startswith(" ") and not _wide(msgstr[:1])),
            (msgid.endswith(" ") and not msgstr.endswith(" ") and not _wide(msgstr[-1:]))]
    if any(lost) or (msgstr.startswith(" ") and not msgid.startswith(" ")):
        problems.append("the translation must begin and end with a space where the English does "
                        "(unless it begins or ends with a Chinese character or full-width punctuation)")
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


# The folded checks' verdicts ----------------------------------------------------------------------
# A folded check cell of a notebook prints one line starting with ✓ that says what held, e.g.
# print(f"✓ each row sums to 1 (largest error {error:.1e})"). Its text is a catalogue entry of the
# notebook, written as the body of the f-string: the placeholders are the code's, {error:.1e}, and a
# translation keeps each of them. The Chinese notebook prints the Chinese f-string instead, and its
# stored output is the English output with each verdict line rewritten: the values the English line
# shows, read off it by the English template, put into the Chinese one.

VERDICT = "✓"


def _escape(text: str) -> str:
    """Text as it is written inside f"...": backslashes, quotes, line breaks, braces escaped."""
    return (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            .replace("\t", "\\t").replace("{", "{{").replace("}", "}}"))


def _field(node) -> str:
    """A replacement field of an f-string, as one canonical text: {expression!conversion:spec}."""
    text = "{" + ast.unparse(node.value)
    if node.conversion != -1:
        text += "!" + chr(node.conversion)
    if node.format_spec is not None:
        text += ":" + "".join(v.value if isinstance(v, ast.Constant) else _field(v)
                              for v in node.format_spec.values)
    return text + "}"


def body_of(node) -> str | None:
    """The f-string body (what lies between f" and ") of a string or f-string literal node."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _escape(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(_escape(v.value) if isinstance(v, ast.Constant) else _field(v)
                       for v in node.values)
    return None


def _parts(body: str) -> list[tuple[str, str]]:
    """An f-string body cut into ("text", what it prints) and ("field", canonical field)."""
    node = ast.parse('f"""' + body + '"""', mode="eval").body
    values = node.values if isinstance(node, ast.JoinedStr) else [node]
    return [("text", v.value) if isinstance(v, ast.Constant) else ("field", _field(v))
            for v in values]


def _verdict_calls(source: str):
    """The verdict prints of a cell's code: (start, end, body) of each literal (character offsets),
    for each print( literal ) whose text starts with ✓."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython's magics (%pip): not a folded check
        return []
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(line, column):  # ast counts columns in UTF-8 bytes
        text = source[starts[line - 1]:starts[line]] if line < len(starts) else ""
        return starts[line - 1] + len(text.encode("utf-8")[:column].decode("utf-8"))

    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "print" and len(node.args) == 1):
            body = body_of(node.args[0])
            if body is not None and body.startswith(VERDICT):
                literal = node.args[0]
                found.append((offset(literal.lineno, literal.col_offset),
                              offset(literal.end_lineno, literal.end_col_offset), body))
    return sorted(found)


def is_folded(cell: dict) -> bool:
    return cell.get("cell_type") == "code" and bool(
        cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"))


def verdicts(cell: dict) -> list[str]:
    """The catalogue entries of a code cell: the bodies of its verdicts, if it is folded."""
    from .copies import source_of

    return [body for _, _, body in _verdict_calls(source_of(cell))] if is_folded(cell) else []


def translated_code(source: str, translations: dict[str, str]) -> str:
    """A folded cell's code with each translated verdict's literal replaced by the Chinese one."""
    for start, end, body in reversed(_verdict_calls(source)):
        if body in translations:
            chinese = translations[body]
            literal = ('f"' if "{" in chinese or "}" in chinese else '"') + chinese + '"'
            source = source[:start] + literal + source[end:]
    return source


def _template(body: str):
    """The regular expression that reads the values off a line the body printed, and the keys."""
    pattern, keys = "", []
    for kind, what in _parts(body):
        if kind == "text":
            pattern += re.escape(what)
        else:
            pattern += "(.*?)"
            keys.append(what)
    return re.compile(pattern, re.DOTALL), keys


def rewrite_line(text: str, pairs: list[tuple[str, str]]) -> str | None:
    """``text`` (what an English template printed, one or more lines) in Chinese: the values
    read off it by the first English template of ``pairs`` that prints it, put into that pair's
    Chinese template; None if none does."""
    for english, chinese in pairs:
        pattern, keys = _template(english)
        match = pattern.fullmatch(text)
        if match is None:
            continue
        values = {}
        if any(values.setdefault(k, v) != v for k, v in zip(keys, match.groups())):
            continue  # the same field read two ways
        try:
            return "".join(what if kind == "text" else values[what]
                           for kind, what in _parts(chinese))
        except KeyError:
            return None
    return None


def translated_text(text: str, pairs: list[tuple[str, str]]) -> str:
    """Printed text with each line (or group of lines) a template of ``pairs`` printed rewritten
    in Chinese; the other lines as they are."""
    lines = text.split("\n")
    heights = sorted({_parts_lines(english) for english, _ in pairs}, reverse=True)
    out, i = [], 0
    while i < len(lines):
        for height in heights:
            if i + height <= len(lines):
                rewritten = rewrite_line("\n".join(lines[i:i + height]), pairs)
                if rewritten is not None:
                    out.append(rewritten)
                    i += height
                    break
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(out)


def _parts_lines(body: str) -> int:
    return 1 + sum(what.count("\n") for kind, what in _parts(body) if kind == "text")


def translated_outputs(outputs: list, pairs: list[tuple[str, str]]) -> list:
    """A cell's stored outputs with the text its verdicts (and the package's messages) printed
    rewritten in Chinese."""
    import copy

    outputs = copy.deepcopy(outputs)
    for output in outputs:
        if output.get("output_type") == "stream" and pairs:
            text = "".join(output["text"]) if isinstance(output["text"], list) else output["text"]
            new = translated_text(text, pairs)
            if new != text:
                output["text"] = new
    return outputs


def package_messages(root: Path | None = None) -> dict[str, str]:
    """msgid -> msgstr of the package's translated messages (all modules)."""
    from .translation import _translations

    result = {}
    for module in modules(root):
        po = catalogue_of(module)
        if po.exists():
            result.update(_translations(po.read_text(encoding="utf-8")))
    return result
