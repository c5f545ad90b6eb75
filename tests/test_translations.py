"""The Chinese edition cannot drift from the English: every paragraph translated and current, the
Chinese notebooks exactly what the catalogues give, their code and outputs the English ones, and
each translation keeping the math, code, links, numbers and glossary terms of its English."""

import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest

import exercise_authoring as authoring
from exercise_authoring import messages, translation
from exercise_authoring.copies import exercises_line, notebook_text, source_of

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
GUIDE = ROOT / "exercises" / "README.md"  # the instructor's guide, a markdown page
SOURCES = [*NOTEBOOKS, GUIDE]
TRANSLATE = "python -m exercise_authoring translate notebooks/*.ipynb exercises/README.md"


def load(path):
    return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))


def unresolved(page, text):
    """The relative link targets of ``text`` (markdown at ``page``) that lead nowhere."""
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text)
               if not re.match(r"[a-z]+:|#", t)]
    return [t for t in targets if not (pathlib.Path(page).parent / t).exists()]


def not_ready(po_path):
    """The entries of a catalogue a reader would get in English: untranslated or fuzzy."""
    return [("fuzzy: " if e.msgstr else "untranslated: ") + e.msgid[:70]
            for e in translation.read_catalogue(po_path) if not e.msgstr or e.fuzzy]


@pytest.mark.parametrize("notebook", SOURCES, ids=lambda p: p.name)
def test_every_paragraph_is_translated_and_none_is_fuzzy(notebook):
    po = translation.catalogue_path(notebook)
    assert po.exists(), f"{po.relative_to(ROOT)} is missing: run {TRANSLATE}"
    missing = not_ready(po)
    assert not missing, (f"{po.relative_to(ROOT)}: {len(missing)} entries a Chinese reader would "
                         f"read in English; translate their msgstr (and remove 'fuzzy'), then run "
                         f"{TRANSLATE}:\n" + "\n".join(missing[:10]))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_catalogue_and_chinese_notebook_are_what_the_command_writes(notebook):
    english = load(notebook)
    po, target = translation.catalogue_path(notebook), translation.translation_path(notebook)
    committed = po.read_text(encoding="utf-8")
    merged = translation.update_catalogue(notebook, english, committed)
    assert translation.catalogue_entries(merged) == translation.catalogue_entries(committed), (
        f"{po.relative_to(ROOT)} is stale (the English changed): run {TRANSLATE}")
    assert target.exists(), f"{target.relative_to(ROOT)} is missing: run {TRANSLATE}"
    assert target.read_text(encoding="utf-8") == notebook_text(
        translation.translated_notebook(notebook, english, committed)), (
        f"{target.relative_to(ROOT)} is not what the catalogue gives (edited by hand, or stale): "
        f"run {TRANSLATE}")


def without_verdicts(source: str) -> str:
    """A cell's code with each folded check's verdict literal left out."""
    for start, end, _ in reversed(messages._verdict_calls(source)):
        source = source[:start] + '""' + source[end:]
    return source


def stream_lines(cell) -> list[str]:
    return [line for o in cell.get("outputs", []) if o["output_type"] == "stream"
            for line in "".join(o["text"]).split("\n")]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_chinese_notebook_has_the_english_cells_code_and_outputs_but_its_language(notebook):
    """The Chinese edition runs the English code: the same cells, code and outputs, but for the
    line of its setup cell that makes the checks speak Chinese and the verdicts of its folded
    checks (and the ✓ lines they and the exercise checks print). The cells that differ are run in
    the English notebook's nbval run, right after their English cell (conftest.py), so that their
    stored outputs are checked without a second run of the notebook."""
    english, chinese = load(notebook), load(translation.translation_path(notebook))
    assert [c["cell_type"] for c in chinese["cells"]] == [c["cell_type"] for c in english["cells"]]
    switched = 0
    for index, (en, zh) in enumerate(zip(english["cells"], chinese["cells"])):
        where = f"{notebook.name}, cell {index}"
        if en["cell_type"] == "code":
            assert {k: v for k, v in zh.items() if k not in ("source", "outputs")} == {
                k: v for k, v in en.items() if k not in ("source", "outputs")}, where
            en_source, zh_source = source_of(en), source_of(zh)
            if translation.LANGUAGE_SWITCH in zh_source:
                switched += 1
                assert zh_source.replace("\n" + translation.LANGUAGE_SWITCH, "") == en_source
            else:
                assert without_verdicts(zh_source) == without_verdicts(en_source), (
                    f"{where}: the Chinese edition's code differs beyond its verdicts")
            assert [o["output_type"] for o in zh.get("outputs", [])] == [
                o["output_type"] for o in en.get("outputs", [])], where
            assert [o for o in zh.get("outputs", []) if o["output_type"] != "stream"] == [
                o for o in en.get("outputs", []) if o["output_type"] != "stream"], where
            en_lines, zh_lines = stream_lines(en), stream_lines(zh)
            assert [x for x in en_lines if not x.startswith("✓")] == [
                x for x in zh_lines if not x.startswith("✓")], where
        else:
            assert zh["metadata"] == en["metadata"], f"{where}: metadata differs"
            for marker in ("BEGIN SOLUTION", "END SOLUTION", "<details>", "</details>"):
                assert source_of(zh).count(marker) == source_of(en).count(marker), (
                    f"{where}: {marker!r} count differs")
    assert switched == 1, f"{notebook.name}: the setup cell must switch the checks to Chinese"
    assert {k: v for k, v in chinese["metadata"].items() if k != "language"} == english["metadata"]
    assert chinese["metadata"]["language"] == "zh-CN"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_the_chinese_edition_prints_its_verdicts_in_chinese(notebook):
    """Every ✓ line stored in the Chinese notebook (a folded check's verdict, an exercise check's
    line about the model answer) is Chinese, and its folded checks print Chinese."""
    chinese = load(translation.translation_path(notebook))
    english_lines = [line for c in chinese["cells"] if c["cell_type"] == "code"
                     for line in stream_lines(c) if line.startswith("✓") and not HAN.search(line)
                     and ENGLISH_WORD.search(line)]  # a verdict of formulas only is as it is
    assert not english_lines, f"{notebook.name}: ✓ lines in English:\n" + "\n".join(
        english_lines[:5])
    for cell in chinese["cells"]:
        for _, _, body in messages._verdict_calls(source_of(cell)) if messages.is_folded(
                cell) else []:
            assert HAN.search(body) or not ENGLISH_WORD.search(body), (
                f"{notebook.name}: a verdict in English: {body[:60]}")


HAN = re.compile(r"[\u4e00-\u9fff]")
ENGLISH_WORD = re.compile(r"(?<![\w.])[a-z]{3,}(?![\w(.])")  # a word, not a name in code


def test_the_checks_messages_are_translated_current_and_keep_their_placeholders():
    """Every message a check shows has its Chinese in its module's catalogue (none untranslated,
    none fuzzy, every placeholder and line break kept), the catalogues hold what the code marks,
    and the package's compiled catalogue is what they compile to."""
    summaries = messages.update_message_catalogues(ROOT / "README.md", write=False)
    assert summaries and sum(s["entries"] for s in summaries) > 300
    for s in summaries:
        name = s["catalogue"].relative_to(ROOT)
        assert not s["changed"], f"{name} or the compiled .mo is stale: run {TRANSLATE}"
        assert not s["untranslated"] and not s["fuzzy"], (
            f"{name}: {s['untranslated']} untranslated, {s['fuzzy']} fuzzy: translate them, then "
            f"run {TRANSLATE}")
        problems = messages.catalogue_report(s["catalogue"])
        assert not problems, f"{name}:\n" + "\n".join(problems[:10])


@pytest.mark.parametrize("english, chinese, printed, expected", [
    ("✓ {n} rows sum to 1", "✓ {n} 行之和为 1", "✓ 12 rows sum to 1", "✓ 12 行之和为 1"),
    ("✓ error {err:.1e} < {tol}; {name!r} kept", "✓ 误差 {err:.1e} < {tol}；保留了 {name!r}",
     "✓ error 3.0e-07 < 1e-5; 'x' kept", "✓ 误差 3.0e-07 < 1e-5；保留了 'x'"),
    ("✓ {a} then {b}", "✓ 先 {b} 后 {a}", "✓ x then y", "✓ 先 y 后 x"),  # order changed
    ("✓ two lines:\\n{x}", "✓ 两行：\\n{x}", "✓ two lines:\n7", "✓ 两行：\n7"),
])
def test_a_verdict_line_is_rewritten_with_the_values_the_english_printed(
        english, chinese, printed, expected):
    text = f"before\n{printed}\nafter\n"
    assert messages.translated_text(text, [(english, chinese)]) == f"before\n{expected}\nafter\n"
    source = f"x = 1\nprint(f\"{english}\")\n"
    assert messages.translated_code(source, {english: chinese}) == f'x = 1\nprint(f"{chinese}")\n'


def test_a_verdicts_translation_must_keep_the_codes_placeholders():
    assert translation.verdict_problems("✓ {n} rows", "✓ {n} 行") == []
    assert translation.verdict_problems("✓ {n} rows", "✓ {m} 行")
    assert translation.verdict_problems("✓ {n} rows", "✓ {n 行")


@pytest.mark.parametrize("notebook", SOURCES, ids=lambda p: p.name)
def test_translations_keep_math_code_links_numbers_emphasis_and_glossary_terms(notebook):
    problems = translation.translation_report(notebook)
    assert not problems, f"{notebook.name}: {len(problems)} translations lose what their English " \
                         f"keeps:\n" + "\n".join(problems[:10])


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_each_edition_links_the_other_and_every_link_resolves(notebook):
    chinese_path = translation.translation_path(notebook)
    english, chinese = load(notebook), load(chinese_path)
    assert f"[中文版](zh-CN/{notebook.name})" in source_of(english["cells"][0])
    assert f"/blob/main/notebooks/zh-CN/{notebook.name})" in source_of(english["cells"][0])
    assert f"[English](../{notebook.name})" in source_of(chinese["cells"][0])
    assert f"/blob/main/notebooks/{notebook.name})" in source_of(chinese["cells"][0])
    for path, nb in ((notebook, english), (chinese_path, chinese)):
        text = "\n".join(source_of(c) for c in nb["cells"] if c["cell_type"] == "markdown")
        assert not unresolved(path, text), f"{path.relative_to(ROOT)} links what does not exist"


def test_catalogues_are_valid_for_gettexts_tools():
    """What a translator opens them with (Poedit, Lokalize) is built on GNU gettext: polib reads
    each catalogue, no entry is flagged as a format string (prose with "50%" is not one), and
    where GNU gettext is installed, its checker passes."""
    for notebook in SOURCES:
        po = translation.catalogue_path(notebook)
        flagged = [e.msgid[:40] for e in translation.read_catalogue(po) if
                   any(flag.endswith("-format") for flag in e.flags)]
        assert not flagged, f"{po.name}: entries flagged as format strings: {flagged}"
        if shutil.which("msgfmt"):
            result = subprocess.run(["msgfmt", "--check", "-o", os.devnull, str(po)],
                                    capture_output=True, text=True)
            assert result.returncode == 0, result.stderr


def test_the_chinese_guide_is_what_the_command_writes_and_its_links_resolve():
    po, target = translation.catalogue_path(GUIDE), translation.translation_path(GUIDE)
    assert (po.name, target.name) == ("exercises-README.po", "README.zh-CN.md")
    english = translation._read_source(GUIDE)
    committed = po.read_text(encoding="utf-8")
    merged = translation.update_catalogue(GUIDE, english, committed)
    assert translation.catalogue_entries(merged) == translation.catalogue_entries(committed), (
        f"{po.relative_to(ROOT)} is stale: run {TRANSLATE}")
    expected = source_of(translation.translated_notebook(GUIDE, english, committed)["cells"][0])
    assert target.read_text(encoding="utf-8") == expected, f"{target.name} is stale: run {TRANSLATE}"
    assert "English · [中文](README.zh-CN.md)" in GUIDE.read_text(encoding="utf-8")
    chinese = target.read_text(encoding="utf-8")
    assert "[English](README.md) · 中文" in chinese
    headings = {translation._slug(line.lstrip("#")) for line in chinese.splitlines()
                if line.startswith("#")}
    anchors = re.findall(r"\]\(#([^)\s]+)\)", chinese)
    assert set(anchors) <= headings, f"{target.name} links headings it lacks: {anchors}"
    assert not unresolved(target, chinese), unresolved(target, chinese)
    assert "](../README.zh-CN.md)" in chinese, "the Chinese guide leads to the Chinese README"


def test_a_catalogue_of_the_english_gives_back_the_english_notebook():
    """The cutting into blocks and the putting back lose nothing: with each entry 'translated'
    as its own English, every cell comes back as it was, but the two lines written for each
    edition (under the title, and under "## Exercises")."""
    for notebook in NOTEBOOKS:
        english = load(notebook)
        catalogue = translation.read_catalogue(translation.catalogue_path(notebook))
        for entry in catalogue:
            entry.msgstr, entry.flags = entry.msgid, []
        same = translation.translated_notebook(notebook, english, str(catalogue))
        lines = {translation.edition_line(notebook, "zh"): translation.edition_line(notebook, "en"),
                 exercises_line(notebook, "zh"): exercises_line(notebook, "en")}
        for a, b in zip(english["cells"], same["cells"]):  # code: a verdict may be rewritten
            if a["cell_type"] == "code":
                assert without_verdicts(source_of(b).replace(
                    "\n" + translation.LANGUAGE_SWITCH, "")) == without_verdicts(source_of(a))
                # (the exercise checks' line about the model answer comes from the package's
                # own catalogue, in Chinese whatever the notebook's catalogue says)
                assert [x for x in stream_lines(b) if "参考答案" not in x] == [
                    x for x in stream_lines(a) if "the model answer passes" not in x]
        differ = [i for i, (a, b) in enumerate(zip(english["cells"], same["cells"]))
                  if a["cell_type"] == "markdown" and source_of(a) != source_of(b)]
        assert differ[0] == 0 and len(differ) <= 2, f"{notebook.name}: cells {differ} changed"
        for i in differ:  # the edition line, and the line that says where to try the exercises
            text = source_of(same["cells"][i])
            for chinese, english_line in lines.items():
                text = text.replace(chinese, english_line)
            assert text == source_of(english["cells"][i])


def test_a_changed_english_paragraph_fails_the_tests_until_it_is_translated_again(tmp_path):
    notebook = NOTEBOOKS[2]
    project = tmp_path / "course"
    (project / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    shutil.copytree(ROOT / "locale", project / "locale")
    english = load(notebook)
    cell = next(c for c in english["cells"][3:] if c["cell_type"] == "markdown"
                and any(b.text and "\n" in b.text for b in translation.blocks(source_of(c))))
    block = next(b for b in translation.blocks(source_of(cell)) if b.text and "\n" in b.text)
    old = block.text
    new = old.replace(" the ", " that ", 1)
    assert new != old
    cell["source"] = source_of(cell).replace(old, new, 1)
    copy = project / "notebooks" / notebook.name
    copy.write_text(notebook_text(english), encoding="utf-8")
    po = translation.catalogue_path(copy)
    assert po.parent.is_relative_to(project)
    old_translation = next(e.msgstr for e in translation.read_catalogue(po) if e.msgid == old)

    assert authoring.main(["translate", "--check", str(copy)]) == 1  # stale
    assert not_ready(po) == []
    assert authoring.main(["translate", str(copy)]) == 0
    fuzzy = [e for e in translation.read_catalogue(po) if e.fuzzy]
    assert [e.msgid for e in fuzzy] == [new]
    assert fuzzy[0].msgstr == old_translation  # the old translation kept for the translator
    # and the old English, run after run, written as gettext's tools (Poedit, msgmerge) read it
    assert authoring.main(["translate", str(copy)]) == 0
    assert [e.previous_msgid for e in translation.read_catalogue(po) if e.fuzzy] == [old]
    assert not_ready(po) == ["fuzzy: " + new[:70]]
    written = load(translation.translation_path(copy))
    assert any(new.split("\n")[0] in source_of(c) for c in written["cells"]), (
        "a fuzzy entry shows the new English in the Chinese notebook")
    assert authoring.main(["translate", "--check", str(copy)]) == 1  # fuzzy

    # The translator updates the entry: the tests pass again.
    catalogue = translation.read_catalogue(po)
    entry = next(e for e in catalogue if e.fuzzy)
    entry.flags.remove("fuzzy")
    entry.previous_msgid = None
    catalogue.save()
    assert not_ready(po) == []
    assert authoring.main(["translate", str(copy)]) == 0
    assert authoring.main(["translate", "--check", str(copy)]) == 0

    # A Chinese notebook edited by hand is stale.
    target = translation.translation_path(copy)
    target.write_text(target.read_text(encoding="utf-8").replace("。", ".", 1), encoding="utf-8")
    assert authoring.main(["translate", "--check", str(copy)]) == 1


@pytest.mark.parametrize("english, chinese, problem", [
    ("Divide by $\\sqrt{d}$.", "除以 $\\sqrt{d}$。", None),
    ("Divide by $\\sqrt{d}$.", "除以根号 d。", "math '$\\\\sqrt{d}$'"),
    ("Call `d2lh.masked_softmax`.", "调用 d2lh.masked_softmax。", "code '`d2lh.masked_softmax`'"),
    ("See [notebook 05](05_x.ipynb).", "见[笔记本 05](06_x.ipynb)。", "target '](05_x.ipynb)'"),
    ("It takes 12 steps.", "它需要十二步。", "number '12'"),
    ("This is the **scoring function (a)**.", "这是**评分函数（a）**。", None),
    ("This is **(a)** here.", "这是**（a）**的。", "rendered 'strong_open'"),
    ("Each query picks.", "每个问题挑选。", "'query': the translation must use '查询'"),
    ("Masked positions get 0.", "被掩蔽的位置为 0。", None),
    ("The causal mask is a tensor.", "因果掩码是一个张量。", None),
    ("The causal mask is a tensor.", "因果遮罩是一个张量。", "'mask': the translation must use '掩码' or '掩蔽'"),
    ("Continue a prompt.", "续写一段文字。", "'prompt': the translation must use '提示'"),
    ("Summary", "小\n结", "one line"),
    ("An image: ![a diagram](data:…)", "一幅图：![示意图](data:…)", None),
])
def test_entry_problems_name_what_a_translation_lost(english, chinese, problem):
    problems = translation.entry_problems(english, chinese, translation.glossary())
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


def test_blocks_cut_a_cell_as_a_markdown_parser_does():
    cell = ("## 2. A heading\n\nA paragraph\nof two lines.\n\n- an item\n  continued\n- another\n"
            "  - nested\n\n1. first\n2. second\n\n| name | shape |\n|---|---|\n| x | 2 |\n\n"
            "<!-- BEGIN SOLUTION -->\n<details><summary>Answer</summary>\n\n$$x = 1$$")
    found = [(b.prefix, b.text) for b in translation.blocks(cell)]
    assert found == [
        ("## ", "2. A heading"), ("", "A paragraph\nof two lines."),
        ("- ", "an item\ncontinued"), ("- ", "another\n- nested"),
        ("1. ", "first"), ("2. ", "second"), ("", "| name | shape |\n|---|---|\n| x | 2 |"),
        ("", None), ("", "<details><summary>Answer</summary>"), ("", None)]


def test_the_course_glossary_is_the_syllabus_glossary_and_the_readmes_table():
    syllabus = (ROOT.parent / "shared" / "SYLLABUS.md")
    terms = translation.glossary()
    senses = {}  # a term of two senses has two rows: mask, the tensor (掩码) and the operation (掩蔽)
    for english, chinese in terms.items():
        senses.setdefault(english.split(" (")[0], []).append(chinese)
    assert terms["query"] == "查询" and sorted(senses["mask"]) == ["掩码", "掩蔽"]
    assert len(senses) >= 17
    if syllabus.exists():  # the syllabus lies beside the repository on the course's machines
        for english, chinese in re.findall(r"([a-z][a-z -]+?) ([\u4e00-\u9fff][^\s,)]*)",
                                           syllabus.read_text(encoding="utf-8").split("## 01")[0]):
            assert chinese in senses.get(english.strip(), []), (english, chinese)


def test_the_readmes_name_each_other_and_the_chinese_readme_lists_every_chinese_notebook():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    chinese = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
    assert "(README.zh-CN.md)" in "\n".join(readme.splitlines()[:4]), (
        "README.md names the Chinese edition in its first lines")
    assert "(README.md)" in "\n".join(chinese.splitlines()[:4])
    commands = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.DOTALL)[:2]
    for command in commands:
        assert f"```bash\n{command}\n```" in chinese, f"README.zh-CN.md lacks {command!r}"
    repository = authoring.find_project(ROOT).repository.removeprefix("https://github.com/")
    for notebook in NOTEBOOKS:
        title = source_of(load(translation.translation_path(notebook))["cells"][0]).splitlines()[0]
        title = re.sub(r"^# \d\d\s+", "", title)
        assert f"[{title}](notebooks/zh-CN/{notebook.name})" in chinese, (
            f"README.zh-CN.md should link {notebook.name} by its Chinese title {title!r}")
        assert (f"(https://colab.research.google.com/github/{repository}/blob/main/notebooks/"
                f"zh-CN/{notebook.name})") in chinese
    assert not unresolved(ROOT / "README.zh-CN.md", chinese), unresolved(ROOT / "README.zh-CN.md",
                                                                            chinese)


# --- one vocabulary, and Chinese that renders without stray spaces ---------------------------

CHINESE_README = ROOT / "README.zh-CN.md"


def drift_lines(catalogue, terms=None):
    """Each variant the glossary replaces that a catalogue's translations use: the catalogue,
    the entry (cells, start of the English), the variant and the glossary's rendering."""
    lines = []
    for entry in translation.read_catalogue(catalogue):
        for variant, term in translation.drifts(entry.msgstr, terms):
            where = ", ".join(f"cell {line}" for _, line in entry.occurrences[:3])
            lines.append(f"{pathlib.Path(catalogue).name}, {where} ({entry.msgid[:40]!r}...): "
                         f"{variant!r}: the glossary says {term.chinese!r} for {term.english!r}")
    return lines


@pytest.mark.parametrize("notebook", SOURCES, ids=lambda p: p.name)
def test_no_translation_uses_a_variant_the_glossary_replaces(notebook):
    found = drift_lines(translation.catalogue_path(notebook))
    assert not found, (f"{len(found)} translations drift from the glossary (README.md, "
                       f"## Glossary):\n" + "\n".join(found[:20]))


def test_the_drift_check_names_the_catalogue_the_entry_and_the_variant(tmp_path):
    po = tmp_path / "99_planted.po"
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
                  '#: 99_planted.ipynb:7\nmsgid "The package\'s boolean mask, `mask`."\n'
                  'msgstr "软件包中的布尔掩蔽，`课程包`。"\n', encoding="utf-8")
    found = drift_lines(po)
    assert len(found) == 2, found  # the code span's 课程包 is code, not prose
    assert found[0].startswith("99_planted.po, cell 7 (\"The package's boolean mask")
    assert any("'软件包': the glossary says '配套包'" in line for line in found)
    assert any("'布尔掩蔽': the glossary says '掩码'" in line for line in found)
    for chinese, variants in [("自动检查会比较两者。", []), ("检查会比较两者。", ["检查会"]),
                              ("把 logits 设为 $-\\infty$", ["logits"]),
                              ("`logits` 的形状", []), ("“autograded answer”单元格", []),
                              ("每次 autograde 都会", ["autograde"]),
                              ("两个\n堆叠", ["两个堆叠"]), ("把这些层堆叠起来", [])]:
        assert [v for v, _ in translation.drifts(chinese)] == variants, chinese


def test_the_readmes_glossaries_are_one_table():
    english = translation.vocabulary()
    chinese = translation.vocabulary(
        CHINESE_README.read_text(encoding="utf-8").split("\n## 术语表\n", 1)[1].split("\n## ")[0])
    assert [(t.english, t.chinese, t.avoid) for t in chinese] == [
        (t.english, t.chinese, t.avoid) for t in english], (
        "README.zh-CN.md's 术语表 and README.md's Glossary differ")
    assert len({t.english for t in english}) == len(english)
    for term in english:  # a rendering is never taken for one of its variants
        assert not translation.drifts(term.chinese, [term]), term
    text = CHINESE_README.read_text(encoding="utf-8").split("\n## 术语表\n", 1)
    found = translation.drifts(text[0] + text[1].split("\n## ", 1)[-1])
    assert not found, f"README.zh-CN.md uses variants the glossary replaces: {found}"


def chinese_markdown():
    """Every Chinese markdown text a reader sees: the Chinese notebooks' markdown cells, the
    Chinese guide and README.zh-CN.md, as (where, text)."""
    for notebook in NOTEBOOKS:
        path = translation.translation_path(notebook)
        for index, cell in enumerate(load(path)["cells"]):
            if cell["cell_type"] == "markdown":
                yield f"{path.relative_to(ROOT)}, cell {index}", source_of(cell)
    for path in (translation.translation_path(GUIDE), CHINESE_README):
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def test_chinese_markdown_has_no_line_break_a_browser_shows_as_a_space():
    found = [f"{where}: {around}" for where, text in chinese_markdown()
             for around in translation.stray_breaks(text)]
    assert not found, (f"{len(found)} line breaks inside Chinese paragraphs render as a stray "
                       f"space; write the paragraph on one line (translate joins a catalogue's "
                       f"lines itself):\n" + "\n".join(found[:20]))


@pytest.mark.parametrize("markdown, breaks", [
    ("第一行\n第二行", 1), ("句子。\n下一句", 1), ("句子。\nPyTorch 的层", 1),
    ("使用\nPyTorch 的层", 0), ("PyTorch\n的层", 0), ("列表：\n- 一项\n- 两项", 0),
    ("| 表 |\n|---|\n| 格 |", 0), ("段落。\n\n段落", 0), ("```\n代码\n代码\n```", 0),
    ("公式：\n$$x$$", 1), ("标题\n\n1. 第一", 0),
])
def test_stray_breaks_are_found_and_joined(markdown, breaks):
    assert len(translation.stray_breaks(markdown)) == breaks
    joined = translation.join_chinese_lines(markdown)
    assert translation.stray_breaks(joined) == []
    if breaks:
        assert joined.count("\n") == markdown.count("\n") - breaks
    else:
        assert joined == markdown


def test_translate_joins_the_lines_of_a_chinese_paragraph():
    notebook = NOTEBOOKS[0]
    english = load(notebook)
    catalogue = translation.read_catalogue(translation.catalogue_path(notebook))
    entry = next(e for e in catalogue if "\n" in e.msgid and e.msgstr)
    entry.msgstr = "第一行没有结束\n第二行接着说。\n第三行"
    chinese = translation.translated_notebook(notebook, english, str(catalogue))
    text = "\n".join(source_of(c) for c in chinese["cells"])
    assert "第一行没有结束第二行接着说。第三行" in text


def test_the_chinese_readme_leads_to_the_chinese_guide_and_names_what_it_leaves_out():
    chinese = CHINESE_README.read_text(encoding="utf-8")
    english = (ROOT / "README.md").read_text(encoding="utf-8")
    notebooks_section = chinese.split("\n## 笔记本\n", 1)[1].split("\n## ")[0]
    assert "](exercises/README.zh-CN.md)" in notebooks_section, (
        "the student copies are listed in the Chinese guide")
    assert "](exercises/README.md)" not in notebooks_section.replace(
        "（[英文原文](exercises/README.md)）", "")
    anchors = {translation._slug(line.lstrip("#")) for line in english.splitlines()
               if line.startswith("## ")}
    linked = set(re.findall(r"\]\(README\.md#([^)\s]+)\)", chinese))
    assert linked <= anchors, f"README.zh-CN.md links English sections that do not exist: " \
                              f"{linked - anchors}"
    for section in ("The companion package", "Do the results hold on your machine?",
                    "Performance", "Contributing"):
        if f"\n## {section}\n" in english:
            assert translation._slug(section) in linked, (
                f"README.zh-CN.md does not say it leaves out the English README's {section!r}")


def test_the_compiled_messages_ship_with_the_package():
    """pip (and Colab's install from git) copies the .mo into the installed package only if
    pyproject.toml's package data names it."""
    import fnmatch
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mo = messages.mo_path(ROOT).relative_to(ROOT / "d2lhelpers").as_posix()
    assert any(fnmatch.fnmatch(mo, pattern) for pattern in data["package-data"]["d2lhelpers"])
