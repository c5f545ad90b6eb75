"""Build the course's website, both editions, from the committed notebooks (nothing is executed).

    pip install -e ".[site]" && python website/build.py        # -> build/site/index.html

Sphinx with MyST-NB reads the notebooks with their stored outputs and sphinx-book-theme lays them
out. Two Sphinx builds run side by side, one per edition: the English one at the site's root, the
Chinese one (``language = "zh_CN"``: the theme's words, and a search index that splits Chinese) in
``zh-CN/``. Each page carries a switch to the same page in the other edition.

The repository's files are not built in place: they are copied into ``build/site-src/<edition>/``
(the page layout in Layout), with their links rewritten for the site:

- a link to another page of the same edition stays a MyST link (Sphinx resolves and checks it);
- a link to a page of the other edition becomes a link relative to the site's root (written as
  ``https://site.invalid/...`` and made relative to each page once the HTML is written);
- a link to a repository file that is not a page (``pyproject.toml``, ``tests/...``) leads to the
  repository on GitHub (``[project.urls] Repository``);
- the Colab badge's image, which lives on Colab's host, is replaced by a copy drawn for this site
  (``website/colab-badge.svg``), so that a page requests nothing from another host. The
  badge's link still opens Colab.

Each page's "download" button offers the committed notebook (or markdown file) itself.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import posixpath
import re
import shutil
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
WEBSITE = REPO / "website"
PLACEHOLDER = "https://site.invalid/"  # a link to the site's root, made relative after the build
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
EDITIONS = {"en": "", "zh-CN": "zh-CN/"}  # edition -> its folder in the site

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def repository_url() -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return project["project"]["urls"]["Repository"].rstrip("/")


def first_heading(path: pathlib.Path) -> str:
    """The text of a notebook's or a markdown file's first heading."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        text = path.read_text(encoding="utf-8")
    match = re.search(r"^#\s+(.+)$", text, flags=re.MULTILINE)
    return match.group(1).strip() if match else path.stem


class Layout:
    """Which repository file is which page of which edition, and the way back."""

    def __init__(self) -> None:
        notebooks = sorted(p.name for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        copies = sorted(p.name for p in (REPO / "exercises").glob("[0-9][0-9]_*.ipynb"))
        # repository path -> (edition, page name without suffix, suffix)
        self.pages: dict[str, tuple[str, str, str]] = {
            "README.md": ("en", "index", ".md"),
            "exercises/README.md": ("en", "exercises/README", ".md"),
            "README.zh-CN.md": ("zh-CN", "index", ".md"),
            "exercises/README.zh-CN.md": ("zh-CN", "exercises/README", ".md"),
        }
        for name in notebooks:
            self.pages[f"notebooks/{name}"] = ("en", f"notebooks/{name[:-6]}", ".ipynb")
            if (REPO / "notebooks" / "zh-CN" / name).exists():
                self.pages[f"notebooks/zh-CN/{name}"] = ("zh-CN", f"notebooks/{name[:-6]}",
                                                         ".ipynb")
        for name in copies:
            self.pages[f"exercises/{name}"] = ("en", f"exercises/{name[:-6]}", ".ipynb")
        # folders a page links to, read as the page that lists their contents
        self.folders = {"notebooks": ("en", "index"), "notebooks/zh-CN": ("zh-CN", "index"),
                        "exercises": ("en", "exercises/README")}
        self.notebooks, self.copies = notebooks, copies
        self.repository = repository_url()

    def of(self, edition: str) -> dict[str, tuple[str, str]]:
        """Repository path -> (page name, suffix) of the pages of one edition."""
        return {path: (page, suffix) for path, (ed, page, suffix) in self.pages.items()
                if ed == edition}

    def other(self, edition: str, page: str) -> str:
        """The site path (from the site's root) of the same page in the other edition."""
        if edition == "en":
            if page.startswith("exercises/") and page != "exercises/README":
                # a student copy: English only; the Chinese guide's section on the copies says so
                return "zh-CN/exercises/README.html#学生版"
            chinese = f"notebooks/zh-CN/{page.removeprefix('notebooks/')}.ipynb"
            if page.startswith("notebooks/") and chinese not in self.pages:
                return "zh-CN/index.html"
            return f"zh-CN/{page}.html"
        return f"{page}.html"

    def rewrite(self, target: str, source: str, edition: str, page: str) -> str:
        """A link or image target of the repository file ``source`` as page ``page`` needs it."""
        if target == COLAB_BADGE:
            return posixpath.relpath("colab-badge.svg", posixpath.dirname(page))
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return target  # a URL of another host, a data: image, an anchor of this page
        path, _, fragment = target.partition("#")
        fragment = f"#{fragment}" if fragment else ""
        where = posixpath.normpath(posixpath.join(posixpath.dirname(source), path)).rstrip("/")
        if where in self.pages or where in self.folders:
            ed, linked = self.pages.get(where, self.folders.get(where))[:2]
            if ed == edition:
                suffix = self.pages[where][2] if where in self.pages else ".md"
                return posixpath.relpath(linked + suffix, posixpath.dirname(page)) + fragment
            return f"{PLACEHOLDER}{EDITIONS[ed]}{linked}.html{fragment}"
        if (REPO / where).is_dir():
            return f"{self.repository}/tree/main/{where}{fragment}"
        if (REPO / where).exists():
            return f"{self.repository}/blob/main/{where}{fragment}"
        print(f"WARNING: {source}: the link {target!r} leads nowhere", file=sys.stderr)
        return target


LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def rewrite_markdown(text: str, **where) -> str:
    return LINK.sub(lambda m: m.group(1) + LAYOUT.rewrite(m.group(2), **where) + m.group(3), text)


def toctree(caption: str, entries: list[str]) -> str:
    lines = "\n".join(entries)
    return f"\n\n```{{toctree}}\n:hidden:\n:maxdepth: 1\n:caption: {caption}\n\n{lines}\n```\n"


CAPTIONS = {"en": {"notebooks": "The notebooks", "teaching": "Teaching", "copies": "Student copies",
                   "copy": "student copy", "notebook": "the notebook with its solutions",
                   "copy_note": "The exercises without their solutions, to run on Colab or in "
                                "JupyterLab; the answers are in"},
            "zh-CN": {"notebooks": "笔记本", "teaching": "教学"}}  # the copies are English only


def stage(edition: str, source_dir: pathlib.Path) -> None:
    """Write one edition's Sphinx source folder: its pages with the links rewritten."""
    if source_dir.exists():
        shutil.rmtree(source_dir)
    words = CAPTIONS[edition]
    for path, (page, suffix) in LAYOUT.of(edition).items():
        target = source_dir / (page + suffix)
        target.parent.mkdir(parents=True, exist_ok=True)
        where = {"source": path, "edition": edition, "page": page}
        if suffix == ".md":
            text = rewrite_markdown((REPO / path).read_text(encoding="utf-8"), **where)
            if page == "index":
                pages = [p for p, _ in LAYOUT.of(edition).values() if p.startswith("notebooks/")]
                text += toctree(words["notebooks"], sorted(pages))
                text += toctree(words["teaching"], ["exercises/README"])
            elif page == "exercises/README" and edition == "en":
                text += toctree(words["copies"], [
                    f"{first_heading(REPO / 'exercises' / name)} ({words['copy']}) "
                    f"<{name[:-6]}>" for name in LAYOUT.copies])
            target.write_text(text, encoding="utf-8")
        else:
            notebook = json.loads((REPO / path).read_text(encoding="utf-8"))
            for cell in notebook["cells"]:
                if cell["cell_type"] == "markdown":
                    cell["source"] = rewrite_markdown("".join(cell["source"]), **where)
            if path.startswith("exercises/"):  # a student copy: say so, and where the notebook is
                first = next(c for c in notebook["cells"] if c["cell_type"] == "markdown")
                title, _, rest = first["source"].partition("\n")
                notebook_page = f"../notebooks/{page.removeprefix('exercises/')}.ipynb"
                first["source"] = (f"{title} ({words['copy']})\n\n*{words['copy_note']}* "
                                   f"[{words['notebook']}]({notebook_page}).\n{rest}")
            target.write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    shutil.copyfile(WEBSITE / "colab-badge.svg", source_dir / "colab-badge.svg")
    # the switch to the other edition, one per page; read by conf.py
    switch = {page: LAYOUT.other(edition, page) for page, _ in LAYOUT.of(edition).values()}
    (source_dir / "_site.json").write_text(json.dumps({
        "edition": edition, "switch": switch, "repository": LAYOUT.repository}, ensure_ascii=False),
        encoding="utf-8")


def finish(out: pathlib.Path) -> None:
    """Make the cross-edition links relative, and put the committed files behind "download"."""
    for html in out.rglob("*.html"):
        text = html.read_text(encoding="utf-8")
        if PLACEHOLDER in text:
            up = "../" * (len(html.relative_to(out).parts) - 1)
            html.write_text(text.replace(PLACEHOLDER, up), encoding="utf-8")
    (out / ".nojekyll").touch()  # GitHub Pages, if it runs Jekyll, serves _static/ and the like
    for path, (edition, page, suffix) in LAYOUT.pages.items():
        sources = out / EDITIONS[edition] / "_sources"
        for copy in sources.glob(page + suffix + "*"):  # e.g. index.md.txt, notebooks/01_x.ipynb
            shutil.copyfile(REPO / path, copy)


def build(out: pathlib.Path, work: pathlib.Path, quiet: bool = True) -> float:
    start = time.perf_counter()
    processes = []
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    jobs = (cores or 2) // len(EDITIONS)
    for edition in EDITIONS:
        source_dir = work / "site-src" / edition
        stage(edition, source_dir)
        # each edition in a folder of its own (MyST-NB writes beside it), then put together
        html = work / "site-html" / edition / "html"
        if html.exists():
            shutil.rmtree(html)
        command = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(WEBSITE),
                   "-d", str(work / "site-html" / edition / "doctrees"), "-E",
                   str(source_dir), str(html)]
        if jobs > 1:  # the two editions build at once; each takes half the cores
            command[3:3] = ["-j", str(jobs)]
        if quiet:
            command.insert(3, "-q")
        env = dict(os.environ, D2LH_SITE_SOURCE=str(source_dir))
        processes.append((edition, subprocess.Popen(command, env=env)))  # the two at once
    failed = [edition for edition, process in processes if process.wait() != 0]
    if failed:
        raise SystemExit(f"the site's build failed for {', '.join(failed)} (see above)")
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for edition, folder in EDITIONS.items():
        shutil.move(work / "site-html" / edition / "html", out / folder)
    finish(out)
    return time.perf_counter() - start


LAYOUT = Layout()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "build" / "site",
                        help="the site's folder (default build/site; emptied first)")
    parser.add_argument("--work", type=pathlib.Path, default=REPO / "build",
                        help="where the Sphinx sources and each edition's build are written "
                             "(default build)")
    parser.add_argument("--verbose", action="store_true", help="Sphinx's full output")
    args = parser.parse_args(argv)
    seconds = build(args.out.resolve(), args.work.resolve(), quiet=not args.verbose)
    print(f"built {args.out / 'index.html'} (and {args.out / 'zh-CN' / 'index.html'}) "
          f"in {seconds:.0f} s; serve it with: python -m http.server -d {args.out}")


if __name__ == "__main__":
    main()
