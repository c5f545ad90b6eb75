"""An explorer in a real browser: JupyterLab in headless Chromium, driven by Playwright.

One notebook with one explorer (``d2lh.explore``), executed as the notebooks are committed
(nbclient; widget state dropped). In JupyterLab, before the cell runs, its stored output shows the
static figure (the ``image/png`` beside the widget view: an output that the browser's user has not
run is untrusted, and JupyterLab then picks the safe PNG); after the cell runs, the controls and the
figure show, and moving the slider redraws the figure.

Needs ``playwright`` (pip) and Debian's ``chromium`` (apt): Playwright's own browser download
comes from a CDN that CI cannot reach, so the test launches the system Chromium. ``.ci/run``
installs it; where it is absent the test is skipped, except in CI (``CI=true``), where it fails.
Set ``D2LH_SCREENSHOTS=<folder>`` to keep the screenshots it takes.
"""

from __future__ import annotations

import os
import pathlib
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from browser_common import CHROMIUM, CHROMIUM_ARGS, playwright_entry

from exercise_authoring import collapse

REPO = pathlib.Path(__file__).resolve().parents[1]

EXPLORER_CELL = '''\
def draw_softmax(temperature=1.0):
    scores = np.array([2.0, 1.0, 0.5, 0.0, -1.0])
    weights = np.exp(scores / temperature) / np.exp(scores / temperature).sum()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(range(5), weights)
    ax.set(ylim=(0, 1), title=f"softmax at temperature {temperature:g}")
    return fig


explorer = d2lh.explore(draw_softmax, temperature=(0.1, 5.0, 0.1))'''


CHECK_CELL = "assert sum([1, 2, 3]) == 6\nprint('✓ the sum of 1, 2, 3 is 6')"
SOLUTION_CELL = "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"
ANSWER_CELL = ("<!-- BEGIN SOLUTION -->\n<details><summary>Answer</summary>\n\nBecause twice "
               "three is six.\n\n</details>\n<!-- END SOLUTION -->")


@pytest.fixture(scope="module")
def sync_playwright():
    """Playwright's entry point, once Playwright and Chromium are known to be there."""
    return playwright_entry()


@pytest.fixture(scope="module")
def notebook_dir(sync_playwright, tmp_path_factory):
    """A folder with explorer.ipynb, executed and stored as benchmarks/notebooks.py stores them."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    folder = tmp_path_factory.mktemp("lab")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nimport numpy as np\n\n"
                                  "import d2lhelpers as d2lh\n\nd2lh.use_png_display()"),
        nbformat.v4.new_code_cell(EXPLORER_CELL),
        nbformat.v4.new_code_cell(CHECK_CELL, metadata={"tags": ["hide-input"]}),
        nbformat.v4.new_code_cell(SOLUTION_CELL),
        nbformat.v4.new_markdown_cell(ANSWER_CELL),
    ]
    # collapsed as the course's notebooks are (python -m exercise_authoring update)
    for cell in notebook.cells[2:4]:
        collapse(cell)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    notebook.metadata.pop("widgets", None)  # as benchmarks/notebooks.py --write does
    outputs = notebook.cells[1].outputs
    assert [sorted(o.data) for o in outputs] == [[
        "application/vnd.jupyter.widget-view+json", "image/png", "text/plain"]]
    nbformat.write(notebook, folder / "explorer.ipynb")
    return folder


@pytest.fixture(scope="module")
def lab(notebook_dir):
    """JupyterLab serving notebook_dir on a free port, with its own (empty) settings and
    trust database; yields its address with the token."""
    pytest.importorskip("jupyterlab", reason="the browser test needs JupyterLab")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    home = notebook_dir.parent / "lab-home"
    news = home / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)  # no "get notified about Jupyter news?" prompt, no news fetched
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"),
               JUPYTER_DATA_DIR=str(home / "data"), IPYTHONDIR=str(home / "ipython"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
               f"--port={port}", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={notebook_dir}", "--LabApp.expose_app_in_browser=True",
               f"--LabApp.user_settings_dir={home / 'settings'}",
               f"--LabApp.workspaces_dir={home / 'workspaces'}",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    log = open(notebook_dir.parent / "lab.log", "w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)  # its kernels end with it
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("JupyterLab did not start:\n"
                                + (notebook_dir.parent / "lab.log").read_text()[-3000:])
                time.sleep(0.3)
        yield url, token
    finally:
        stop(server)
        log.close()


def stop(server) -> None:
    """End the server and its kernels (its process group, made for it alone)."""
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=15)
    except ProcessLookupError:  # already gone
        pass
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def page(sync_playwright, lab):
    url, token = lab
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(30_000)
        page.goto(f"{url}/lab/tree/explorer.ipynb?token={token}")
        yield page
        browser.close()


def screenshot(page, name: str, tmp_path) -> None:
    folder = pathlib.Path(os.environ.get("D2LH_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=folder / f"{name}.png", full_page=True)


def test_stored_output_shows_the_static_figure_before_the_cell_runs(page, tmp_path):
    output = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea-output")
    image = output.locator("img")
    image.wait_for()
    assert image.get_attribute("src").startswith("data:image/png;base64,")
    assert "Error displaying widget" not in output.inner_text()
    assert page.locator(".d2lh-explorer").count() == 0  # no live widget yet
    screenshot(page, "explorer-static-fallback", tmp_path)


def test_moving_the_slider_redraws_the_figure(page, tmp_path):
    page.wait_for_function("window.jupyterapp && window.jupyterapp.commands"
                           ".hasCommand('notebook:run-all-cells')")
    page.evaluate("""async () => {  // the kernel first, then every cell, as a learner would
        const panel = window.jupyterapp.shell.currentWidget;
        await panel.sessionContext.ready;
        await window.jupyterapp.commands.execute('notebook:run-all-cells');
    }""")
    picture = page.locator(".d2lh-explorer img")
    picture.wait_for(timeout=60_000)
    before = picture.get_attribute("src")
    assert before.startswith("data:image/png;base64,")
    readout = page.locator(".d2lh-explorer .widget-readout")
    assert readout.inner_text().strip() == "1.00"

    handle = page.locator(".d2lh-explorer .noUi-handle")  # ipywidgets 8's slider
    handle.focus()
    for _ in range(5):
        page.keyboard.press("ArrowRight")
    if readout.inner_text().strip() == "1.00":  # no keyboard steps: drag the handle instead
        box = handle.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + 60, box["y"] + box["height"] / 2, steps=5)
        page.mouse.up()
    page.wait_for_function("old => document.querySelector('.d2lh-explorer img').src !== old",
                           arg=before, timeout=30_000)
    assert readout.inner_text().strip() != "1.00"
    last, since = None, time.monotonic()
    while time.monotonic() - since < 1.5:  # each key press redraws: wait for the last figure
        src = picture.get_attribute("src")
        last, since = (src, time.monotonic()) if src != last else (last, since)
        time.sleep(0.25)
    assert page.locator(".d2lh-explorer img").get_attribute("src").startswith("data:image/png")
    screenshot(page, "explorer-live-after-moving-the-slider", tmp_path)


def test_checks_and_solutions_render_collapsed_and_answers_closed_until_clicked(page, tmp_path):
    """What a learner reads: a check cell and a code solution show their output (or nothing) with
    the code folded away, and open on a click; a model answer stays closed until its summary is
    clicked."""
    for index, shown in ((2, "✓ the sum of 1, 2, 3 is 6"), (3, "return 2 * x")):
        cell = page.locator(".jp-Cell").nth(index)
        cell.scroll_into_view_if_needed()
        placeholder = cell.locator(".jp-InputPlaceholder")
        placeholder.wait_for()
        assert not cell.locator(".jp-InputArea-editor").is_visible(), f"cell {index} is open"
        if index == 2:
            assert shown in cell.locator(".jp-OutputArea-output").inner_text()
        placeholder.locator(".jp-Placeholder-content, .jp-InputPlaceholder *").first.click()
        cell.locator(".jp-InputArea-editor").wait_for(state="visible")
        if index == 3:
            assert shown in cell.locator(".jp-InputArea-editor").inner_text()
    answer = page.locator(".jp-Cell").nth(4).locator("details")
    answer.scroll_into_view_if_needed()
    assert answer.get_attribute("open") is None and not answer.get_by_text("twice").is_visible()
    answer.locator("summary").click()
    answer.get_by_text("Because twice three is six.").wait_for(state="visible")
    screenshot(page, "collapsed-cells-opened", tmp_path)
