"""Sphinx configuration of the course's website, shared by both editions (see build.py).

build.py writes each edition's pages into a source folder with ``_site.json`` beside them (the
edition, each page's counterpart in the other edition) and names that folder in D2LH_SITE_SOURCE.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
from importlib import metadata

import snowballstemmer
from sphinx.search import SearchLanguage
from sphinx.search.zh import SearchChinese

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = pathlib.Path(os.environ["D2LH_SITE_SOURCE"])
SITE = json.loads((SOURCE / "_site.json").read_text(encoding="utf-8"))
EDITION = SITE["edition"]
CHINESE = EDITION == "zh-CN"

project = "注意力与 Transformer" if CHINESE else "Attention and Transformers"
html_title = project
author = "the course's authors"
copyright = "the course's authors, MIT licence"
language = "zh_CN" if CHINESE else "en"
root_doc = "index"
exclude_patterns = ["_site.json"]

extensions = ["myst_nb"]

# MyST-NB: the notebooks as committed, outputs included; nothing runs.
nb_execution_mode = "off"
nb_merge_streams = True
# An explorer's stored output holds an ipywidgets view (which has no state to show on a static
# page: benchmarks/notebooks.py drops it) beside the static figure: show the figure, and load no
# widget scripts (they would come from a CDN).
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
nb_ipywidgets_js = {}
if CHINESE:  # the label of a folded cell (the course folds inputs only: hide-input)
    nb_code_prompt_show, nb_code_prompt_hide = "显示代码", "隐藏代码"
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_dmath_double_inline = True  # $$...$$ inside a paragraph or a list item, as Jupyter reads it
myst_heading_anchors = 3  # README.md#performance and the like

# Math typeset by MathJax 3 served from the site itself (the SVG output: no font files to load).
_mathjax = metadata.distribution("sphinx-mathjax-offline").locate_file(
    "sphinx-mathjax-offline/static/mathjax/tex-svg-full.js")
mathjax_path = "mathjax/tex-svg-full.js"
mathjax3_config = {"svg": {"fontCache": "global"}}

html_theme = "sphinx_book_theme"
templates_path = [str(HERE / "_templates")]
html_static_path = [str(HERE / "_static")]
html_css_files = ["site.css"]
html_js_files = ["search-summaries.js"]
html_copy_source = True
html_show_sphinx = False
html_context = {"default_mode": "light"}
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "repository_url": SITE["repository"],
    "use_repository_button": True,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "article_header_end": ["lang-switch.html", "article-header-buttons.html"],
    "show_toc_level": 2,
    "navbar_persistent": [],  # the search field is in the sidebar (and behind Ctrl+K)
}

# Search: Sphinx's Chinese splitter cuts words with jieba, whose words need not be those a reader
# types (多头注意力 is cut into 多头 and 注意力), and the browser does not cut the query at all.
# Both sides cut a run of Chinese characters into its overlapping pairs instead (多头 头注 注意
# 意力), and a page is found when it holds every pair of the query: no dictionary, nothing to
# install, and any phrase of two characters or more is found.
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"


class SearchChineseBigrams(SearchChinese):
    # Latin words are stemmed as English, in the index and in the browser; Sphinx 9 names the
    # browser's stemmer after language_name, and with SearchChinese's "Chinese" the search page
    # fails (ChineseStemmer is not defined)
    language_name = "English"
    js_splitter_code = r"""
function splitQuery(query) {
  const terms = [];
  for (const word of query.split(/[^\p{Letter}\p{Number}_]+/u)) {
    for (const run of word.match(/[HAN]+|[^HAN]+/gu) || []) {
      if (!/[HAN]/u.test(run)) terms.push(run);
      else if (run.length === 1) terms.push(run);
      else for (let i = 0; i + 1 < run.length; i++) terms.push(run.slice(i, i + 2));
    }
  }
  return terms;
}
""".replace("HAN", HAN)

    def __init__(self, options: dict[str, str]) -> None:
        SearchLanguage.__init__(self, options)  # not SearchChinese's: jieba, if installed, unused
        self.latin_terms: set[str] = set()
        self.stemmer = snowballstemmer.stemmer("english")

    def split(self, input: str) -> list[str]:
        latin = [term.strip() for term in self.latin1_letters.findall(input)]
        self.latin_terms.update(latin)
        pairs = [run[i:i + 2] for run in re.findall(f"[{HAN}]+", input)
                 for i in range(len(run) - 1)]
        return pairs + latin


def copy_mathjax(app, exception):
    if exception is None:
        target = pathlib.Path(app.outdir, "_static", "mathjax")
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_mathjax, target / "tex-svg-full.js")


def page_context(app, pagename, templatename, context, doctree):
    """The switch to the same page in the other edition, relative to this page."""
    other = SITE["switch"].get(pagename)
    if other is None:  # search.html, genindex.html: the other edition's home
        other = "index.html" if CHINESE else "zh-CN/index.html"
    depth = pagename.count("/") + (1 if CHINESE else 0)
    context["other_edition"] = {"href": "../" * depth + other,
                                "label": "English" if CHINESE else "中文",
                                "lang": "en" if CHINESE else "zh-CN"}


def setup(app):
    if CHINESE:
        app.add_search_language(SearchChineseBigrams)
    app.set_html_assets_policy("always")  # MathJax on the search page too, for its summaries
    app.connect("html-page-context", page_context)
    app.connect("build-finished", copy_mathjax)
