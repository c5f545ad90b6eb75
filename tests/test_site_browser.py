"""The course's website in a real browser: both editions built once, served on this machine, and
read in headless Chromium, driven by Playwright.

The site is built as the README says (``python website/build.py``, nothing executed), into a
temporary folder, and served by a local HTTP server. An English and a Chinese notebook page must
show their figures (stored outputs and images embedded in the markdown) and typeset math (no raw
``$`` left); a folded check opens on a click and shows its code; a model answer stays closed until
its summary is clicked; the language switch lands on the same notebook in the other edition;
search finds an English term (RoPE) and a Chinese one (多头注意力); and every request any page
makes goes to the local server, and is answered.

Needs the site's packages (``pip install -e ".[test]"`` installs them), ``playwright`` and
Debian's ``chromium``, as tests/test_explorers_browser.py does: where one is absent the test is
skipped, except in CI (``CI=true``), where it fails. Set ``D2LH_SCREENSHOTS=<folder>`` to keep the
screenshots it takes.
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import urllib.parse

import pytest
from browser_common import CHROMIUM, CHROMIUM_ARGS, playwright_entry

REPO = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = "11_modern_attention"  # RoPE's notebook: figures, math, checks, answers
SITE_PACKAGES = ["sphinx", "myst_nb", "sphinx_book_theme"]


@pytest.fixture(scope="module")
def sync_playwright():
    """Playwright's entry point, once the site's packages, Playwright and Chromium are there."""
    return playwright_entry(*SITE_PACKAGES)


@pytest.fixture(scope="module")
def site(sync_playwright, tmp_path_factory):
    """Both editions built by the README's command, into a temporary folder."""
    work = tmp_path_factory.mktemp("site")
    out = work / "site"
    done = subprocess.run([sys.executable, str(REPO / "website" / "build.py"), "--out", str(out),
                           "--work", str(work)], cwd=REPO, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, (
        f"the site's build failed:\n{done.stdout[-3000:]}{done.stderr[-6000:]}")
    assert (out / "index.html").exists() and (out / "zh-CN" / "index.html").exists()
    # The build goes on past Sphinx's warnings (the site builds from whatever is committed), but a
    # link or an image that leads nowhere on the site is a defect of a page.
    broken = [line for line in done.stderr.splitlines() if "WARNING" in line and re.search(
        r"leads nowhere|not found|not readable|xref|undefined label|unknown document", line)]
    assert not broken, "links or images of the site that lead nowhere:\n" + "\n".join(broken)
    return out


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="module")
def server(site):
    """The built site served on a free port of this machine; yields its address."""
    handler = functools.partial(QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class Traffic:
    """Every request the pages make, and every answer under 400 that they did not get."""

    def __init__(self, origin: str) -> None:
        self.origin, self.requests, self.failures = origin, [], []

    def elsewhere(self) -> list[str]:
        return [url for url in self.requests
                if not url.startswith(self.origin + "/") and not url.startswith("data:")]


@pytest.fixture(scope="module")
def browser(sync_playwright, server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        traffic = Traffic(server)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.on("request", lambda request: traffic.requests.append(request.url))
        context.on("requestfailed", lambda request: traffic.failures.append(
            f"{request.url} ({request.failure})"))
        context.on("response", lambda response: traffic.failures.append(
            f"{response.url} ({response.status})") if response.status >= 400 else None)
        yield context, traffic
        browser.close()


@pytest.fixture
def page(browser, server):
    context, traffic = browser
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page, server, traffic
    page.close()
    assert not traffic.elsewhere(), f"requests left the site: {traffic.elsewhere()}"
    assert not traffic.failures, f"requests that failed: {traffic.failures}"


def screenshot(page, name: str, tmp_path) -> None:
    folder = pathlib.Path(os.environ.get("D2LH_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=folder / f"{name}.png")


def open_notebook(page, server: str, edition: str) -> None:
    prefix = "zh-CN/" if edition == "zh-CN" else ""
    page.goto(f"{server}/{prefix}notebooks/{NOTEBOOK}.html")
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise")
    page.evaluate("() => MathJax.startup.promise")  # typesetting done


def committed(edition: str) -> dict:
    folder = REPO / "notebooks" / ("zh-CN" if edition == "zh-CN" else "")
    return json.loads((folder / f"{NOTEBOOK}.ipynb").read_text(encoding="utf-8"))


@pytest.mark.parametrize("edition", ["en", "zh-CN"])
def test_figures_load_and_math_is_typeset(page, edition, tmp_path):
    page, server, _ = page
    open_notebook(page, server, edition)
    notebook = committed(edition)
    outputs = sum("image/png" in output.get("data", {}) for cell in notebook["cells"]
                  for output in cell.get("outputs", []))
    embedded = sum("".join(cell["source"]).count("](data:image/") for cell in notebook["cells"]
                   if cell["cell_type"] == "markdown")
    assert outputs and embedded, "the notebook was chosen for its figures: it lost them"
    images = page.evaluate("""async () => {
        const images = [...document.querySelectorAll('article img')];
        for (const image of images) {  // scrolled into view, in case the browser loads lazily
            image.scrollIntoView();
            if (!image.complete) {
                await new Promise(done => { image.onload = image.onerror = done; });
            }
        }
        return images.map(image => ({src: image.getAttribute('src').slice(0, 40),
                                     width: image.naturalWidth,
                                     output: !!image.closest('.cell_output')}));
    }""")
    assert all(image["width"] > 0 for image in images), [i for i in images if not i["width"]]
    assert sum(image["output"] for image in images) == outputs  # the stored figures
    assert sum(image["src"].startswith("data:image/") and not image["output"]
               for image in images) == embedded  # the images of the markdown
    assert any(image["src"].endswith("colab-badge.svg") for image in images)  # served here

    math = page.evaluate("""() => {
        const spans = [...document.querySelectorAll('article .math')];
        const article = document.querySelector('article').cloneNode(true);
        article.querySelectorAll('pre, code, script, style, mjx-container')
            .forEach(n => n.remove());
        return {spans: spans.length,
                typeset: spans.filter(s => s.querySelector('mjx-container svg')).length,
                raw: (article.textContent.match(/.{0,30}[$].{0,30}/g) || [])};
    }""")
    assert math["spans"] > 10 and math["typeset"] == math["spans"], math
    assert not math["raw"], f"raw $ left on the page: {math['raw']}"
    screenshot(page, f"site-{edition}-notebook", tmp_path)


class TextOutsideCodeAndMath(html.parser.HTMLParser):
    """The text of a page outside code, scripts and math (which MathJax typesets)."""

    VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
                      "source", "track", "wbr"})

    def __init__(self) -> None:
        super().__init__()
        self.open, self.text = [], []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            classes = (dict(attrs).get("class") or "").split()
            self.open.append(tag in {"pre", "code", "script", "style"} or "math" in classes)

    def handle_endtag(self, tag):
        if tag not in self.VOID and self.open:
            self.open.pop()

    def handle_data(self, data):
        if not any(self.open):
            self.text.append(data)


def test_no_raw_dollar_on_any_page(site):
    """Every page of both editions: a $ outside code is math that MyST did not take as math (the
    browser tests check that MathJax typesets what it took, on a page of each edition)."""
    pages = [p for p in site.rglob("*.html") if p.name not in {"search.html", "genindex.html"}]
    assert len(pages) >= 2 * 13 + 13 + 4
    raw = {}
    for path in pages:
        parser = TextOutsideCodeAndMath()
        parser.feed(path.read_text(encoding="utf-8"))
        text = " ".join(parser.text)
        found = re.findall(r".{0,40}[$].{0,40}", text, flags=re.DOTALL)
        if found:
            raw[str(path.relative_to(site))] = found[:3]
    assert not raw, f"raw $ left on pages: {raw}"


@pytest.mark.parametrize("edition", ["en", "zh-CN"])
def test_a_folded_check_opens_on_a_click_and_shows_its_code(page, edition, tmp_path):
    page, server, _ = page
    open_notebook(page, server, edition)
    first = next(cell for cell in committed(edition)["cells"]
                 if "hide-input" in cell["metadata"].get("tags", []))
    line = "".join(first["source"]).splitlines()[0].strip()
    shown = "".join(first["outputs"][0].get("text", "")).splitlines()[0]
    assert shown.startswith("✓")
    cell = page.locator(".cell.tag_hide-input").first
    cell.scroll_into_view_if_needed()
    fold = cell.locator("details").first
    code = cell.locator(".cell_input pre")
    assert fold.get_attribute("open") is None and not code.is_visible(), "the check is open"
    assert shown in cell.locator(".cell_output").inner_text()  # what held shows, folded
    fold.locator("summary").click()
    code.wait_for(state="visible")
    assert line in code.inner_text()
    screenshot(page, f"site-{edition}-check-opened", tmp_path)


@pytest.mark.parametrize("edition", ["en", "zh-CN"])
def test_an_answer_stays_closed_until_clicked(page, edition, tmp_path):
    page, server, _ = page
    open_notebook(page, server, edition)
    answer = page.locator("article details:not(.hide)").filter(
        has=page.locator("summary")).first
    answer.scroll_into_view_if_needed()
    body = answer.locator("p").first
    assert answer.get_attribute("open") is None and not body.is_visible(), "the answer is open"
    summary = answer.locator("summary")
    assert summary.inner_text().strip() == ("答案" if edition == "zh-CN" else "Answer")
    summary.click()
    body.wait_for(state="visible")
    assert len(body.inner_text()) > 40
    screenshot(page, f"site-{edition}-answer-opened", tmp_path)


def test_the_language_switch_lands_on_the_same_notebook(page, tmp_path):
    page, server, _ = page
    open_notebook(page, server, "en")
    english = page.locator("article h1").first.inner_text()
    page.locator("#lang-switch").click()
    page.wait_for_url(f"{server}/zh-CN/notebooks/{NOTEBOOK}.html")
    chinese = page.locator("article h1").first.inner_text()
    assert chinese.startswith(english[:3]) and chinese != english  # "11 " and the Chinese title
    assert page.locator("#lang-switch").inner_text().strip() == "English"
    page.locator("#lang-switch").click()
    page.wait_for_url(f"{server}/notebooks/{NOTEBOOK}.html")
    for home, other in (("", "zh-CN/"), ("zh-CN/", "")):  # and on the home pages
        page.goto(f"{server}/{home}index.html")
        page.locator("#lang-switch").click()
        page.wait_for_url(f"{server}/{other}index.html")


@pytest.mark.parametrize("edition, term, found", [
    ("en", "RoPE", f"notebooks/{NOTEBOOK}.html"),  # RoPE: rotary position embeddings
    ("zh-CN", "多头注意力", "notebooks/04_multihead_attention.html"),
])
def test_search_finds_an_english_and_a_chinese_term(page, edition, term, found, tmp_path):
    page, server, _ = page
    prefix = "zh-CN/" if edition == "zh-CN" else ""
    page.goto(f"{server}/{prefix}search.html?q={urllib.parse.quote(term)}")
    results = page.locator("#search-results ul.search li a")
    results.first.wait_for()
    links = [urllib.parse.urlsplit(href).path for href in
             results.evaluate_all("links => links.map(a => a.href)")]
    assert f"/{prefix}{found}" in links, links
    screenshot(page, f"site-{edition}-search", tmp_path)


@pytest.mark.parametrize("path", ["index.html", "exercises/README.html",
                                  f"exercises/{NOTEBOOK}.html", "zh-CN/index.html",
                                  "zh-CN/exercises/README.html"])
def test_the_other_pages_load_nothing_from_elsewhere(page, path):
    """The home pages, the instructor's guide in both editions and a student copy (the page
    fixture fails if a request left the site or was not answered)."""
    page, server, traffic = page
    before = len(traffic.requests)
    page.goto(f"{server}/{path}")
    page.wait_for_load_state("networkidle")
    assert len(traffic.requests) > before + 5  # the page, its styles, scripts and images
    assert page.locator("#lang-switch").count() == 1
