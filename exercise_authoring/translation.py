"""The Chinese edition: gettext catalogues of the English notebooks' paragraphs, and the Chinese
notebooks written from them.

The English notebooks are the source. Each markdown cell is cut into blocks as a Markdown parser
sees them (markdown-it, the parser of MyST and JupyterLab's own renderer family): a heading, a
paragraph, a list item, a table or an HTML block with text is one catalogue entry, as Sphinx's
i18n cuts a page. Entries live in one gettext catalogue per notebook,
``locale/zh_CN/LC_MESSAGES/<notebook>.po``, read, merged and written by Babel: when an English
paragraph changes, Babel's merge keeps the old translation of the nearest old paragraph and marks
it fuzzy, so a translator sees what changed and nothing drifts silently.

A Chinese notebook (``notebooks/zh-CN/<notebook>.ipynb``) is its English notebook with each
translated block replaced: the same cells, the same code, the same stored outputs. Untranslated
and fuzzy entries keep the English text there, and the tests fail on them. A translation's line
breaks that a browser would show as a space (between two Chinese characters, after full-width
punctuation) are joined as it is written. The course's glossary (README.md's table) gives each
term one Chinese rendering and the variants it replaces; no translation may use a variant. A markdown page (the
instructor's guide, ``exercises/README.md``) is translated the same way, as a notebook of one
markdown cell, into ``exercises/README.zh-CN.md``.

What is not an entry: blocks with no words outside math, code, links' targets and HTML tags
(``$$...$$``, ``<!-- BEGIN SOLUTION -->``), and the edition line under the title (the Colab badge
and the link to the other edition), which this module writes for both editions.

Images are embedded in the notebooks as ``data:`` URIs; in a catalogue each appears as
:data:`IMAGE` and is put back from the English block, so a redrawn diagram needs no
retranslation.
"""

from __future__ import annotations

import copy
import datetime
import io
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .copies import BADGE, EXERCISES_LINE, exercises_line, notebook_text, source_of
from .project import find_project

__all__ = [
    "EDITION",
    "IMAGE",
    "LOCALE",
    "Block",
    "Term",
    "blocks",
    "catalogue_entries",
    "catalogue_path",
    "drifts",
    "edition_line",
    "entry_problems",
    "extract",
    "glossary",
    "join_chinese_lines",
    "stray_breaks",
    "translate_notebooks",
    "translated_notebook",
    "translation_path",
    "translation_report",
    "update_catalogue",
    "vocabulary",
    "with_edition_line",
]

LOCALE = "zh_CN"  # the catalogues' folder, locale/zh_CN/LC_MESSAGES/
EDITION = "zh-CN"  # the Chinese notebooks' folder, notebooks/zh-CN/ (JupyterLab opens both)
IMAGE = "data:…"  # an embedded image's URI, as a catalogue shows it
_DATA_URI = re.compile(r"data:[^)\s]+")
# The edition line: the Colab badge, then the link to the other edition.
_OTHER_EDITION = {"en": ("中文版", "在 Colab 中打开"), "zh": ("English", "on Colab")}
_FIXED_DATE = datetime.datetime(2026, 11, 27, tzinfo=datetime.timezone.utc)
# What a translation keeps as it is (code and math may run over a line break).
_CODE = re.compile(r"`[^`]*`")
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$]*\$", re.DOTALL)
_TARGET = re.compile(r"\]\([^)\s]*\)")
_TAG = re.compile(r"<!--.*?-->|</?[a-zA-Z][^>]*>", re.DOTALL)


def _markdown():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table")


@dataclass(frozen=True)
class Block:
    """Lines ``start`` to ``end`` (exclusive) of a markdown cell; ``prefix`` starts the first line
    (a heading's ``## ``, a list item's marker), ``indent`` the others; ``text`` is the rest: the
    catalogue's msgid, or None when the block has nothing to translate."""

    start: int
    end: int
    prefix: str
    indent: str
    text: str | None


def _translatable(text: str) -> bool:
    """Whether words remain outside math, inline code, link targets and HTML tags or comments."""
    for pattern in (_CODE, _MATH, _TARGET, _TAG):
        text = pattern.sub(" ", text)
    return re.search(r"[A-Za-z]{2,}", text) is not None


def blocks(markdown: str) -> list[Block]:
    """The blocks of a markdown cell, in order: top-level headings, paragraphs, tables and HTML
    blocks, and each item of a top-level list (its nested lists included)."""
    lines = markdown.splitlines()
    found = []
    tokens = _markdown().parse(markdown)
    for i, token in enumerate(tokens):
        if token.map is None or token.nesting == -1:
            continue
        top = token.level == 0
        item = token.type == "list_item_open" and token.level == 1
        if not (top and not token.type.endswith("list_open")) and not item:
            continue
        start, end = token.map
        while end > start and not lines[end - 1].strip():
            end -= 1
        body = lines[start:end]
        prefix = indent = ""
        if token.type == "heading_open":
            prefix = token.markup + " "
            body = [body[0][len(prefix):].strip()]
        elif item:
            marker = re.match(r"[ \t]*(?:[-*+]|\d+[.)])[ \t]+", body[0]).group(0)
            prefix, indent = marker, " " * len(marker)
            body = [body[0][len(marker):]] + [line[len(indent):] if line.startswith(indent)
                                             else line.lstrip() for line in body[1:]]
        text = "\n".join(body)
        found.append(Block(start, end, prefix, indent,
                           _DATA_URI.sub(IMAGE, text) if _translatable(text) else None))
    return found


# A markdown page's edition line (the English page writes it; the Chinese one is written here).
_PAGE_EDITION = re.compile(r"English · \[中文\]\(([^)\s]+)\)")


def _is_edition_line(text: str, page: bool = False) -> bool:
    """Whether a block is the edition line: on a page, ``English · [中文](...)``; in a notebook,
    one line starting with the Open-in-Colab badge."""
    if page:
        return _PAGE_EDITION.fullmatch(text) is not None
    return "\n" not in text and BADGE.match(text) is not None


def _is_page(path: Path) -> bool:
    """A markdown page (the instructor's guide), translated as a notebook of one markdown cell."""
    return Path(path).suffix == ".md"


def _read_source(path: Path) -> dict:
    """A notebook, or a markdown page as a notebook of one markdown cell."""
    text = Path(path).read_text(encoding="utf-8")
    if _is_page(path):
        return {"cells": [{"cell_type": "markdown", "metadata": {}, "source": text}],
                "metadata": {}}
    return json.loads(text)


def extract(notebook: dict, page: bool = False) -> list[tuple[str, int]]:
    """The catalogue entries of a notebook (or of a markdown ``page`` read as one): (msgid, cell
    index), in order, repeats included."""
    from .messages import verdicts

    entries = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "code":
            entries += [(body, index) for body in verdicts(cell)]
        if cell["cell_type"] != "markdown":
            continue
        for block in blocks(source_of(cell)):
            if block.text is not None and not _is_edition_line(block.text, page):
                entries.append((block.text, index))
    return entries


def catalogue_path(notebook_path: Path) -> Path:
    """Where a notebook's catalogue lives: ``locale/zh_CN/LC_MESSAGES/<notebook>.po``; a page's,
    its path with ``-`` for ``/`` (``exercises/README.md``: ``exercises-README.po``)."""
    project = find_project(Path(notebook_path).parent)
    name = Path(notebook_path).stem
    if _is_page(notebook_path):
        relative = Path(notebook_path).resolve().relative_to(project.root).with_suffix("")
        name = "-".join(relative.parts)
    return project.root / "locale" / LOCALE / "LC_MESSAGES" / (name + ".po")


def translation_path(notebook_path: Path) -> Path:
    """Where a notebook's Chinese edition lives: ``notebooks/zh-CN/<notebook>.ipynb``; a page's,
    beside it (``exercises/README.zh-CN.md``)."""
    path = Path(notebook_path)
    if _is_page(path):
        return path.with_name(f"{path.stem}.{EDITION}.md")
    return path.parent / EDITION / path.name


def edition_line(notebook_path: Path, language: str) -> str:
    """The line under a notebook's title: its Open-in-Colab badge, then the other edition, as a
    relative link (JupyterLab, GitHub) and on Colab. ``language``: "en" or "zh"."""
    project = find_project(Path(notebook_path).parent)
    english = Path(notebook_path)
    chinese = translation_path(english)
    here, there, link = ((english, chinese, f"{EDITION}/{english.name}") if language == "en"
                         else (chinese, english, f"../{english.name}"))
    name, on_colab = _OTHER_EDITION[language]
    badge = "https://colab.research.google.com/assets/colab-badge.svg"

    def colab(path):
        return project.colab_url(path).replace(f"/blob/{project.tag}/", "/blob/main/")

    return (f"[![Open In Colab]({badge})]({colab(here)}) · [{name}]({link}) "
            f"([{on_colab}]({colab(there)}))")


def read_catalogue(catalogue):
    """A catalogue (its path, or its text) as polib reads it: entries with ``msgid``, ``msgstr``,
    ``fuzzy``, ``previous_msgid``, ``occurrences``. (Babel merges; polib reads and writes.)"""
    import polib

    return polib.pofile(str(catalogue), wrapwidth=0)


def _catalogue_text(catalogue) -> str:
    """A catalogue as its .po text. Babel writes it; polib writes the previous English of a fuzzy
    entry (``#| msgid``), which Babel 2.19 wraps into lines gettext's tools cannot read."""
    from babel.messages.pofile import write_po

    out = io.BytesIO()
    write_po(out, catalogue, width=0, ignore_obsolete=True, include_previous=False,
             sort_output=False)
    po = read_catalogue(out.getvalue().decode("utf-8"))
    po.metadata.pop("Generated-By", None)  # the Babel version: not the catalogue's business
    previous = {m.id: m.previous_id[0] for m in catalogue if m.id and m.fuzzy and m.previous_id}
    for entry in po:
        if entry.msgid in previous:
            entry.previous_msgid = previous[entry.msgid]
        # prose, not format strings: Babel flags any "50% of" or "{d}" as python-format, and
        # gettext's checker (msgfmt -c) then rejects a translation that moves them
        entry.flags = [flag for flag in entry.flags if not flag.endswith("-format")]
    return str(po)


def update_catalogue(notebook_path: Path, notebook: dict, old_text: str | None) -> str:
    """The catalogue of ``notebook`` (at ``notebook_path``) as text: the English entries, with the
    translations of ``old_text`` (the catalogue as it was, or None) merged in by Babel; an entry
    whose English changed gets the old translation of its nearest old English, marked fuzzy."""
    entries = [(msgid, (Path(notebook_path).name, index + 1))
               for msgid, index in extract(notebook, _is_page(notebook_path))]
    header = ("# Chinese edition of the course's notebook "
              f"{Path(notebook_path).name}.\n"
              "# Written by `python -m exercise_authoring translate`; "
              "translate the msgstr lines.\n#")
    return merge_catalogue(entries, old_text, header, find_project(Path(notebook_path).parent))


def merge_catalogue(entries, old_text: str | None, header: str, project) -> str:
    """A catalogue's text: ``entries`` ((msgid, (file, line)) pairs, in order, repeats merged),
    with the translations of ``old_text`` (the catalogue as it was, or None) merged in by Babel;
    an entry whose English changed gets the old translation of its nearest old English, marked
    fuzzy; ``header``: the comment at its top."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po

    def new_catalogue():
        return Catalog(locale=LOCALE, project="attention-course", version=project.version,
                       creation_date=_FIXED_DATE, revision_date=_FIXED_DATE, fuzzy=False,
                       copyright_holder="the course's authors",
                       last_translator="the course's translators",
                       language_team="the course's translators",
                       msgid_bugs_address=project.repository + "/issues")

    template = new_catalogue()
    for msgid, location in entries:
        if msgid in template:
            template[msgid].locations.append(location)
        else:
            template.add(msgid, locations=[location])
    if old_text is None:
        catalogue = new_catalogue()
    else:
        catalogue = read_po(io.BytesIO(old_text.encode("utf-8")), locale=LOCALE)
        catalogue.fuzzy = False
        catalogue.last_translator = catalogue.language_team = "the course's translators"
    # the previous English of an entry already fuzzy (Babel's merge keeps it only for the entries
    # it marks fuzzy now)
    # (read by polib: Babel 2.19 does not read a previous English of several lines)
    previous = {} if old_text is None else {
        e.msgid: [e.previous_msgid] for e in read_catalogue(old_text)
        if e.fuzzy and e.previous_msgid}
    catalogue.update(template, no_fuzzy_matching=False, update_header_comment=False,
                     keep_user_comments=True, update_creation_date=False)
    for message in catalogue:
        if message.id and not message.string:
            message.flags.discard("fuzzy")
        if message.id and message.fuzzy and not message.previous_id and message.id in previous:
            message.previous_id = previous[message.id]
    catalogue.header_comment = header
    return _catalogue_text(catalogue)


def _translations(catalogue_text: str) -> dict[str, str]:
    """msgid -> msgstr of the entries translated and not fuzzy."""
    return {e.msgid: e.msgstr for e in read_catalogue(catalogue_text)
            if e.msgid and e.msgstr and not e.fuzzy}


def _relink(text: str) -> str:
    """Links and images of an English block, made to resolve one folder down: a notebook of the
    course links its Chinese edition (the same name there), any other relative path gets ``../``."""

    def fix(match):
        target = match.group(1)
        if re.match(r"[a-z]+:|#", target) or re.fullmatch(r"\d\d_[\w-]+\.ipynb(#.*)?", target):
            return match.group(0)
        return f"]({'../' + target}"

    return re.sub(r"\]\(([^)\s]+)", fix, text)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _relink_page(text: str, folder: Path, anchors: dict[str, str]) -> str:
    """Links of a page's English block, made to lead a Chinese reader on: an anchor of the page
    to its Chinese heading's, a page or folder with a Chinese edition (``X.zh-CN.md``,
    ``folder/zh-CN``) to that edition."""

    def fix(match):
        target = match.group(1)
        if target.startswith("#"):
            return f"](#{anchors.get(target[1:], target[1:])}"
        if re.match(r"[a-z]+:", target) or "#" in target:
            return match.group(0)
        path = Path(target)
        for chinese in (path.with_name(f"{path.stem}.{EDITION}{path.suffix}"), path / EDITION):
            if path.suffix in ("", ".md") and (folder / chinese).exists():
                return f"]({chinese.as_posix()}"
        return match.group(0)

    return re.sub(r"\]\(([^)\s]+)", fix, text)


def translated_notebook(notebook_path: Path, notebook: dict, catalogue_text: str) -> dict:
    """The Chinese edition of ``notebook``: each markdown block translated where the catalogue
    has a translation (not fuzzy), the edition line written for Chinese, code cells and outputs
    as they are."""
    translations = _translations(catalogue_text)
    notebook = copy.deepcopy(notebook)
    page = _is_page(notebook_path)
    anchors = {_slug(b.text): _slug(translations.get(b.text, b.text))
               for cell in notebook["cells"] if page and cell["cell_type"] == "markdown"
               for b in blocks(source_of(cell)) if b.text and b.prefix.startswith("#")}
    if not page:  # the package's ✓ lines (the exercise checks' line about the model answer)
        from .messages import VERDICT, package_messages

        package = [(english, chinese) for english, chinese in
                   package_messages(find_project(Path(notebook_path).parent).root).items()
                   if english.startswith(VERDICT)]
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code" and not page:
            _translate_code_cell(cell, translations, package)
        if cell["cell_type"] != "markdown":
            continue
        lines = source_of(cell).splitlines()
        for block in reversed(blocks(source_of(cell))):
            if block.text is None:
                continue
            if _is_edition_line(block.text, page=True) and _is_page(notebook_path):
                new = [f"[English]({Path(notebook_path).name}) · 中文"]
            elif _is_edition_line(block.text) and not _is_page(notebook_path):  # or the exercises'
                new = [exercises_line(notebook_path, "zh") if EXERCISES_LINE.match(block.text)
                       else edition_line(notebook_path, "zh")]
            else:
                text = translations.get(block.text, block.text)
                images = iter(_DATA_URI.findall("\n".join(lines[block.start:block.end])))
                text = text.replace(IMAGE, "\0")
                text = re.sub("\0", lambda _: next(images, IMAGE), text)
                text = (_relink_page(text, Path(notebook_path).parent, anchors) if page
                        else _relink(text))
                if block.text in translations:  # no line break a browser shows as a space
                    text = join_chinese_lines(text)
                body = text.split("\n")
                new = [block.prefix + body[0]] + [block.indent + line if line else line
                                                  for line in body[1:]]
            lines[block.start:block.end] = new
        cell["source"] = "\n".join(lines) + ("\n" if source_of(cell).endswith("\n") else "")
    if not _is_page(notebook_path):
        notebook["metadata"] = {**notebook["metadata"], "language": "zh-CN"}
    return notebook


# The line of the setup cell that imports the package, and what the Chinese edition adds after it:
# the checks' feedback in Chinese.
SETUP_IMPORT = "import d2lhelpers  # missing?"
LANGUAGE_SWITCH = 'd2lhelpers.set_language("zh_CN")  # 练习的检查用中文给出反馈'


def _translate_code_cell(cell: dict, translations: dict[str, str],
                         package: list[tuple[str, str]]) -> None:
    """A code cell of the Chinese edition, in place: the setup cell switches the checks' language
    to Chinese; a folded check prints its verdict in Chinese; the stored outputs show what the
    Chinese code prints (the verdicts' and the package's ✓ lines rewritten)."""
    from .messages import is_folded, translated_code, translated_outputs, verdicts

    source = source_of(cell)
    lines = source.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(SETUP_IMPORT):
            lines.insert(i + 1, LANGUAGE_SWITCH)
            cell["source"] = "\n".join(lines)
            return
    pairs = [(body, translations[body]) for body in verdicts(cell) if body in translations]
    pairs += package
    if is_folded(cell):
        cell["source"] = translated_code(source, translations)
    if cell.get("outputs"):
        cell["outputs"] = translated_outputs(cell["outputs"], pairs)


def with_edition_line(notebook_path: Path, notebook: dict) -> dict:
    """The English notebook with its edition line (badge and link to the Chinese edition)
    written, where its first cell holds an Open-in-Colab badge (a notebook without one is left
    as it is)."""
    notebook = copy.deepcopy(notebook)
    cell = notebook["cells"][0] if notebook["cells"] else {"cell_type": "code"}
    if cell["cell_type"] != "markdown":
        return notebook
    lines = source_of(cell).splitlines()
    for block in blocks(source_of(cell)):
        if block.text is not None and _is_edition_line(block.text):
            lines[block.start:block.end] = [edition_line(notebook_path, "en")]
            cell["source"] = "\n".join(lines) + ("\n" if source_of(cell).endswith("\n") else "")
            break
    return notebook


def translate_notebooks(paths, write: bool = True) -> list[dict]:
    """For each English notebook: its catalogue merged and written, its Chinese edition written
    (when ``write``); returns per notebook a summary: entries, untranslated, fuzzy, and whether
    the catalogue or the Chinese notebook changed."""
    summaries = []
    for path in map(Path, paths):
        notebook = _read_source(path)
        po = catalogue_path(path)
        old = po.read_text(encoding="utf-8") if po.exists() else None
        text = update_catalogue(path, notebook, old)
        target = translation_path(path)
        translated = translated_notebook(path, notebook, text)
        translated = (source_of(translated["cells"][0]) if _is_page(path)
                      else notebook_text(translated))
        old_nb = target.read_text(encoding="utf-8") if target.exists() else None
        entries = list(read_catalogue(text))
        summaries.append({
            "notebook": path, "catalogue": po, "translation": target, "entries": len(entries),
            "untranslated": sum(not e.msgstr for e in entries),
            "fuzzy": sum(bool(e.msgstr) and e.fuzzy for e in entries),
            "changed": old is None or catalogue_entries(old) != catalogue_entries(text)
                       or old_nb != translated})
        if write:
            po.parent.mkdir(parents=True, exist_ok=True)
            po.write_text(text, encoding="utf-8")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(translated, encoding="utf-8")
    return summaries


def catalogue_entries(text: str) -> list[tuple]:
    """A catalogue's entries as compared for staleness (not its layout, which the versions of
    Babel and polib may change): English, Chinese, flags, previous English, where."""
    return [(e.msgid, e.msgstr, sorted(e.flags), e.previous_msgid, e.occurrences)
            for e in read_catalogue(text)]


# --- what a translation must keep -------------------------------------------------------------

def _inline(text: str) -> Counter:
    """What a translation must keep of a block: inline code, math, link and image targets, HTML
    tags, the numbers written in digits outside them, and the rendered emphasis and links. Code
    and math may run over a line break (whitespace inside them is compared as one space)."""
    kept = Counter()
    rest = text
    for kind, pattern in (("code", _CODE), ("math", _MATH), ("target", _TARGET), ("tag", _TAG)):
        for found in pattern.findall(rest):
            kept[(kind, re.sub(r"\s+", " ", found))] += 1
        rest = pattern.sub(" X ", rest)
    # (a number before thousand, million or billion is said another way in Chinese: 7 billion
    # is 70 亿, so it is not compared)
    rest = re.sub(r"\d+(?:\.\d+)?\s+(?:thousand|million|billion|trillion)\b", " ", rest,
                  flags=re.IGNORECASE)
    for number in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", rest):
        kept[("number", number)] += 1
    # emphasis and links as a renderer sees them, with math taken out first (markdown-it does not
    # know math: the underscores of $h_t$ and $h_{t-1}$ would read as emphasis)
    rendered = Counter(t.type for token in _markdown().parse(_MATH.sub("M", text))
                       for t in (token.children or [])
                       if t.type in ("strong_open", "em_open", "link_open", "image",
                                     "code_inline"))
    for kind, count in rendered.items():
        kept[("rendered", kind)] = count
    return kept


def _term_pattern(english: str) -> re.Pattern:
    words = []
    for word in re.split(r"[\s-]+", english.strip()):
        word = re.escape(word).replace("normalization", "normali[sz]ation")
        if word.endswith("y") and not word.endswith("ey"):
            word = word[:-1] + "(?:y|ies)"
        else:
            word += "(?:s|es|ed|ing)?"
        words.append(word)
    return re.compile(r"\b" + r"[\s-]+".join(words) + r"\b", re.IGNORECASE)


_ROW = re.compile(r"^\|\s*([A-Za-z*`][^|]*?)\s*\|\s*([^|]*?)\s*\|(?:\s*([^|]*?)\s*\|)?\s*$",
                  re.MULTILINE)


@dataclass(frozen=True)
class Term:
    """A row of the course's glossary: the English (``head`` is it without its parenthesised
    sense), its one Chinese rendering, the variants no Chinese text may use for it, and whether
    a paragraph whose English uses the term must use its Chinese (not for a term in italics in
    the table: its English word has other senses)."""

    english: str
    chinese: str
    avoid: tuple[str, ...]
    required: bool

    @property
    def head(self) -> str:
        return re.sub(r"[*`]", "", self.english.split(" (")[0]).strip()


def _glossary_table() -> str:
    readme = find_project(Path(__file__).parent).root / "README.md"
    return readme.read_text(encoding="utf-8").split("\n## Glossary\n", 1)[1].split("\n## ")[0]


def vocabulary(table: str | None = None) -> list[Term]:
    """The rows of the course's glossary (README.md's ``## Glossary`` table, or ``table``):
    English | 中文 | the variants it replaces (separated by commas)."""
    terms = []
    for english, chinese, avoid in _ROW.findall(_glossary_table() if table is None else table):
        if english == "English" or not re.search(r"[\u4e00-\u9fff]|^[a-z]", chinese):
            continue
        variants = tuple(v.strip() for v in re.split(r",\s*|、", avoid or "")
                         if v.strip() and v.strip() not in "-—")
        terms.append(Term(english, chinese, variants, not english.startswith("*")))
    return terms


def glossary(notebook: dict | None = None) -> dict[str, str]:
    """English term -> Chinese term, the terms a translation must keep: the course's glossary
    (README.md's table, but its terms in italics), and, given a notebook, the terms of the table
    in its first cell that the course's glossary does not name."""
    found = {t.english: t.chinese for t in vocabulary() if t.required}
    heads = {t.head for t in vocabulary()}
    if notebook is not None:
        for english, chinese, _ in _ROW.findall(source_of(notebook["cells"][0])):
            if (english != "English" and english not in heads
                    and re.search(r"[\u4e00-\u9fff]", chinese)):
                found[english] = chinese
    return found


def _prose(text: str) -> str:
    """``text`` without its inline code, math, link targets, HTML tags and emphasis marks, its
    lines joined."""
    for pattern in (_CODE, _MATH, _TARGET, _TAG):
        text = pattern.sub(" ", text)
    return re.sub(r"\n[ \t]*", "", text).replace("*", "")


def drifts(chinese: str, terms: list[Term] | None = None) -> list[tuple[str, Term]]:
    """The variants the glossary replaces that a Chinese text uses (outside code and math), each
    with the glossary's row. A variant inside the row's own rendering is not one (自动检查会 is
    not the bare 检查会), nor one glossing it in parentheses; an ASCII variant counts as a whole
    word, in any case."""
    terms = vocabulary() if terms is None else terms
    prose = _prose(chinese)
    found = []
    for term in terms:
        # (the rendering glossed with its English, 相加与规范化（add & norm）, is not a variant)
        rest = re.sub(r"\0[”’]?（[^）]*）", "\0", prose.replace(term.chinese, "\0"))
        for variant in term.avoid:
            pattern = (r"(?<![A-Za-z])" + re.escape(variant) + r"(?![A-Za-z])"
                       if variant.isascii() else re.escape(variant))
            # (a variant that holds the rendering, as logits holds logit, is looked for as it is)
            if re.search(pattern, prose if term.chinese in variant else rest, re.IGNORECASE):
                found.append((variant, term))
    return found


_CJK = "\u2e80-\u9fff\uf900-\ufaff"
_FULL_WIDTH = "\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65\u2014\u2026\u201c\u201d\u2018\u2019"
# A line break a browser shows as a space: between two Chinese characters, or after full-width
# punctuation, the next line going on with the paragraph (not a list item, table row, heading,
# quote, fence, HTML or blank line).
_STRAY_BREAK = re.compile(
    rf"(?:(?<=[{_CJK}])\n[ \t]*(?=[{_CJK}{_FULL_WIDTH}])"
    rf"|(?<=[{_FULL_WIDTH}])\n[ \t]*(?![ \t]*(?:[-*+>|#<]|\d+[.)]\s|```|\n|$)))")
_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.DOTALL | re.MULTILINE)


def join_chinese_lines(text: str) -> str:
    """A Chinese block with the line breaks a browser would show as a stray space removed (not
    inside a code fence)."""
    parts, end = [], 0
    for fence in _FENCE.finditer(text):
        parts += [_STRAY_BREAK.sub("", text[end:fence.start()]), fence.group(0)]
        end = fence.end()
    return "".join(parts) + _STRAY_BREAK.sub("", text[end:])


def stray_breaks(markdown: str) -> list[str]:
    """The places in Chinese markdown where a paragraph's line break renders as a stray space
    (code fences skipped), each as the text around it."""
    text = _FENCE.sub("", markdown)
    return [text[max(0, m.start() - 12):m.end() + 12].replace("\n", "⏎")
            for m in _STRAY_BREAK.finditer(text)]


def entry_problems(msgid: str, msgstr: str, terms: dict[str, str]) -> list[str]:
    """What is wrong with a translation, as sentences: each thing the English keeps that the
    Chinese lost or added (math, code, link targets, tags, numbers, emphasis), and each glossary
    term of the English whose Chinese is missing."""
    problems = []
    english, chinese = _inline(msgid), _inline(msgstr)
    for (kind, what), count in (english - chinese).items():
        problems.append(f"the translation lacks the English's {kind} {what!r}"
                        + (f" ({count} of them)" if count > 1 else ""))
    for (kind, what), count in (chinese - english).items():
        if kind != "number":
            problems.append(f"the translation has a {kind} {what!r} the English has not")
    if msgid.count(IMAGE) != msgstr.count(IMAGE):
        problems.append(f"the translation must keep the {msgid.count(IMAGE)} image(s) {IMAGE}")
    if "\n" not in msgid and "\n" in msgstr:
        problems.append("the English is one line (a heading, a short item): so must the "
                        "translation be")
    prose = msgid
    for pattern in (_CODE, _MATH, _TARGET):
        prose = pattern.sub(" ", prose)
    heads = {}  # a term with senses (mask: the tensor, the operation): any sense's Chinese will do
    for term, chinese_term in terms.items():
        heads.setdefault(term.split(" (")[0], []).append(chinese_term)
    for head, renderings in heads.items():
        if _term_pattern(head).search(prose) and not any(c in msgstr for c in renderings):
            wanted = " or ".join(repr(c) for c in renderings)
            problems.append(f"the English says {head!r}: the translation must use {wanted}")
    return problems


def verdict_problems(msgid: str, msgstr: str) -> list[str]:
    """What is wrong with a folded check's verdict in Chinese: a placeholder (the code's) lost or
    added, or a body that is no f-string's."""
    from .messages import _parts

    try:
        english = sorted(w for kind, w in _parts(msgid) if kind == "field")
        chinese = sorted(w for kind, w in _parts(msgstr) if kind == "field")
    except SyntaxError as error:
        return [f"the translation is not the body of an f-string: {error.msg}"]
    problems = [f"the translation must keep the code's placeholders {english}, has {chinese}"
                ] if english != chinese else []
    if not msgstr.startswith("✓"):
        problems.append("a verdict starts with ✓")
    return problems


def translation_report(notebook_path: Path) -> list[str]:
    """Each problem of a notebook's catalogue as it is on disk, one line each: the cell, the start
    of the English, and what is wrong (see :func:`entry_problems`), or the variant the glossary
    replaces that it uses (see :func:`drifts`)."""
    notebook = _read_source(notebook_path)
    po = catalogue_path(notebook_path)
    if not po.exists():
        return [f"{po} does not exist"]
    terms, vocabulary_rows = glossary(notebook), vocabulary()
    lines = []
    for entry in read_catalogue(po):
        if not entry.msgstr or entry.fuzzy:
            continue
        where = ", ".join(f"cell {line}" for _, line in entry.occurrences[:3])
        for problem in (verdict_problems(entry.msgid, entry.msgstr) if entry.msgid.startswith("✓")
                        else entry_problems(entry.msgid, entry.msgstr, terms)):
            lines.append(f"{where}: {entry.msgid[:50]!r}...: {problem}")
        for variant, term in drifts(entry.msgstr, vocabulary_rows):
            lines.append(f"{where}: {entry.msgid[:50]!r}...: the translation says {variant!r}: the "
                         f"glossary says {term.chinese!r} for {term.english!r}")
    return lines
