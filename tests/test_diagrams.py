"""The diagrams in img/: drawn by img/draw.py, up to date, each shown by a notebook, and every image a
notebook shows is there offline, in JupyterLab, on GitHub and on Colab (see img/draw.py for why the
notebooks embed PNG data URIs)."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import pathlib
import re

import pytest
from PIL import Image, ImageDraw

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("draw", ROOT / "img" / "draw.py")
draw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(draw)

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# Images a notebook may load from the web: the "Open in Colab" badge, whose link is online anyway.
REMOTE_IMAGES = {"https://colab.research.google.com/assets/colab-badge.svg"}


def markdown_sources(notebook: pathlib.Path) -> list[str]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells if c["cell_type"] == "markdown"]


def shown_diagrams() -> dict[str, list[str]]:
    """Diagram name -> the notebooks that embed it."""
    shown: dict[str, list[str]] = {}
    for notebook in NOTEBOOKS:
        for title, _ in draw.embedded_copies(notebook):
            shown.setdefault(pathlib.Path(title).stem, []).append(notebook.name)
    return shown


def test_img_holds_the_drawn_diagrams_and_they_are_up_to_date():
    files = {path.name for path in (ROOT / "img").iterdir() if not path.name.startswith(".")}
    files.discard("__pycache__")
    assert files == {"draw.py"} | {f"{name}.png" for name in draw.DIAGRAMS}, (
        "img/ holds the diagrams that img/draw.py draws, and nothing else")
    assert draw.stale() == [], "run python img/draw.py and commit what it changes"


def test_every_diagram_is_shown_by_a_notebook():
    missing = set(draw.DIAGRAMS) - set(shown_diagrams())
    assert not missing, f"diagrams no notebook shows: {sorted(missing)}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_every_image_a_notebook_shows_is_there_offline_and_on_colab(notebook):
    for source in markdown_sources(notebook):
        for match in draw.IMAGE.finditer(source):
            target = match["target"] or match["src"]
            if target in REMOTE_IMAGES:
                continue
            assert target.startswith("data:image/png;base64,"), (
                f"{notebook.name} shows {target[:60]!r}: a path or link does not show on Colab "
                "or offline; embed the diagram with python img/draw.py --markdown NAME")
        for title, data in draw.embedded_copies_of_source(source):
            assert title.startswith("img/") and (ROOT / title).is_file(), (
                f"{notebook.name} embeds an image whose title {title!r} names no file of img/")
            assert data == (ROOT / title).read_bytes(), (
                f"{notebook.name} embeds an old copy of {title}: run python img/draw.py")
            Image.open(io.BytesIO(data)).verify()  # a whole, readable PNG


def test_the_up_to_date_check_notices_a_changed_label():
    original = draw.path_of("attention_pooling").read_bytes()
    assert draw.same_picture(original, original)
    image = Image.open(io.BytesIO(original)).convert("RGB")
    ImageDraw.Draw(image).text((700, 600), "changed", fill="black")
    changed = io.BytesIO()
    image.save(changed, format="png")
    assert not draw.same_picture(original, changed.getvalue())
    assert not draw.same_picture(original, draw.path_of("masked_softmax").read_bytes())


def test_markdown_embeds_the_file_under_its_name():
    cell = draw.markdown("split_merge_heads", "Splitting and merging heads")
    match = re.fullmatch(draw.EMBEDDED, cell)
    assert match and match["title"] == "img/split_merge_heads.png"
    assert match["alt"] == "Splitting and merging heads"
    assert base64.b64decode(match["data"]) == draw.path_of("split_merge_heads").read_bytes()
