import base64
import io
import sys
import types

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import d2lhelpers as d2lh  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_show_heatmaps_draws_a_grid_with_one_shared_colour_bar():
    weights = torch.rand(2, 3, 4, 5)
    fig = d2lh.show_heatmaps(weights, xlabel="keys", ylabel="queries", titles=["a", "b", "c"],
                             xticklabels=list("vwxyz"), yticklabels=list("abcd"))
    heatmaps, colour_bars = fig.axes[:6], fig.axes[6:]
    assert len(heatmaps) == 6 and len(colour_bars) == 1
    images = [ax.images[0] for ax in heatmaps]
    np.testing.assert_allclose(images[4].get_array(), weights[1, 1].numpy())
    assert {im.get_clim() for im in images} == {(weights.min().item(), weights.max().item())}
    assert [ax.get_title() for ax in heatmaps[:3]] == ["a", "b", "c"]
    assert [t.get_text() for t in heatmaps[3].get_xticklabels()] == list("vwxyz")
    assert heatmaps[3].get_xlabel() == "keys" and heatmaps[0].get_ylabel() == "queries"


def test_show_heatmaps_centres_a_signed_colour_scale_on_the_given_value():
    signed = torch.tensor([[-0.5, 0.25], [1.0, 0.0]]).reshape(1, 1, 2, 2)
    image = d2lh.show_heatmaps(signed, "keys", "queries", cmap="RdBu_r", center=0).axes[0].images[0]
    assert image.get_clim() == (-1.0, 1.0)  # symmetric: 0 in the middle, white in RdBu_r
    image = d2lh.show_heatmaps(signed, "keys", "queries").axes[0].images[0]
    assert image.get_clim() == (-0.5, 1.0)  # by default: from the smallest to the largest value
    plt.close("all")


def test_show_heatmaps_identity_example():
    fig = d2lh.show_heatmaps(torch.eye(10).reshape(1, 1, 10, 10), "keys", "queries")
    assert np.array_equal(fig.axes[0].images[0].get_array(), np.eye(10))


@pytest.mark.parametrize("kwargs, message", [
    (dict(matrices=torch.rand(3, 4)), "rows, cols, num_queries, num_keys"),
    (dict(matrices=torch.rand(1, 2, 3, 4), titles=["one"]), "titles"),
    (dict(matrices=torch.rand(1, 1, 3, 4), xticklabels=list("ab")), "xticklabels"),
    (dict(matrices=torch.rand(1, 1, 3, 4), yticklabels=list("ab")), "yticklabels"),
])
def test_show_heatmaps_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        d2lh.show_heatmaps(xlabel="k", ylabel="q", **kwargs)


def test_plot_draws_each_curve_and_returns_the_axes():
    x = np.arange(5.0)
    axes = d2lh.plot(x, [x, x ** 2], xlabel="x", ylabel="y", legend=["x", "x^2"], yscale="log")
    lines = axes.get_lines()
    assert len(lines) == 2
    np.testing.assert_allclose(lines[1].get_ydata(), x ** 2)
    assert axes.get_yscale() == "log" and axes.get_xlabel() == "x"
    assert [t.get_text() for t in axes.get_legend().get_texts()] == ["x", "x^2"]


def test_plot_accepts_y_only_and_tensors():
    axes = d2lh.plot(torch.tensor([3.0, 1.0, 2.0]))
    np.testing.assert_allclose(axes.get_lines()[0].get_xdata(), [0, 1, 2])


def test_plot_rejects_mismatched_legend():
    with pytest.raises(ValueError, match="legend"):
        d2lh.plot([1.0, 2.0], legend=["a", "b"])


def test_live_plot_prints_plain_lines_when_not_interactive(capsys):
    live = d2lh.LivePlot(xlabel="epoch", legend=["loss", "bleu"], interactive=False)
    live.add(1, [2.5, None])
    live.add(2, [1.25, 0.3])
    assert capsys.readouterr().out.splitlines() == ["epoch 1: loss 2.5", "epoch 2: loss 1.25, bleu 0.3"]
    assert live.history == {"loss": [(1, 2.5), (2, 1.25)], "bleu": [(2, 0.3)]}
    with pytest.raises(ValueError, match="2 curves"):
        live.add(3, [1.0])


def test_live_plot_redraws_one_figure_in_a_notebook(monkeypatch):
    shown = []

    class Handle:
        def update(self, fig):
            shown.append(("update", fig))

    def fake_display(fig, display_id):
        shown.append(("display", fig))
        return Handle()

    import IPython.display

    monkeypatch.setattr(IPython.display, "display", fake_display)
    live = d2lh.LivePlot(xlabel="epoch", legend=["loss"], interactive=True)
    for epoch in range(3):
        live.add(epoch, [1.0 / (epoch + 1)])
    assert [kind for kind, _ in shown] == ["display", "update", "update"]
    assert len({id(fig) for _, fig in shown}) == 1
    np.testing.assert_allclose(live._axes.get_lines()[0].get_ydata(), [1, 1 / 2, 1 / 3])


def test_svg_display_is_deterministic():
    def render():
        fig = d2lh.show_heatmaps(torch.eye(3).reshape(1, 1, 3, 3), "keys", "queries")
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
        plt.close(fig)
        return buffer.getvalue()

    d2lh.use_svg_display()
    try:
        assert render() == render()
    finally:
        matplotlib.rcParams["svg.hashsalt"] = None


def test_set_figsize():
    old = matplotlib.rcParams["figure.figsize"]
    try:
        d2lh.set_figsize((4, 3))
        assert tuple(plt.figure().get_size_inches()) == (4, 3)
    finally:
        matplotlib.rcParams["figure.figsize"] = old


def test_plot_takes_a_range_or_a_tuple_as_one_curve():
    axes = d2lh.plot(range(1, 4), (3.0, 1.0, 2.0))
    lines = axes.get_lines()
    assert len(lines) == 1
    np.testing.assert_allclose(lines[0].get_xdata(), [1, 2, 3])
    np.testing.assert_allclose(lines[0].get_ydata(), [3, 1, 2])


def test_show_heatmaps_ticks_are_whole_query_and_key_indices():
    fig = d2lh.show_heatmaps(torch.rand(1, 1, 10, 50), xlabel="keys", ylabel="queries")
    fig.canvas.draw()
    ax = fig.axes[0]
    for ticks in (ax.get_xticks(), ax.get_yticks()):
        assert len(ticks) > 1 and all(float(t).is_integer() for t in ticks), ticks


def test_show_heatmaps_takes_a_fixed_colour_scale():
    weights = torch.full((1, 2, 3, 3), 1 / 3) + 0.01 * torch.rand(1, 2, 3, 3)
    fig = d2lh.show_heatmaps(weights, xlabel="keys", ylabel="queries", vmin=0, vmax=1)
    assert {ax.images[0].get_clim() for ax in fig.axes[:2]} == {(0, 1)}


def test_plot_runs_shows_every_run_and_each_methods_mean_with_its_interval():
    runs = {"sinusoidal": [0.10, 0.20, 0.15, 0.12, 0.18], "learned": [0.30, 0.25, 0.40, 0.35]}
    axes = d2lh.plot_runs(runs, ylabel="error")
    for i, (values, dots) in enumerate(zip(runs.values(), axes.collections)):
        x, y = np.asarray(dots.get_offsets()).T  # every run a dot near its method's position
        np.testing.assert_allclose(sorted(y), sorted(values))
        assert np.all(np.abs(x - i) < 0.5)
    means = axes.lines[0]  # the means, as diamonds
    np.testing.assert_allclose(means.get_ydata(), [np.mean(v) for v in runs.values()])
    for i, (values, bar) in enumerate(zip(runs.values(), axes.lines[1:])):
        low, high = np.nanmin(bar.get_ydata()), np.nanmax(bar.get_ydata())  # the interval's caps
        assert min(values) <= low < np.mean(values) < high <= max(values)
        assert np.nanmin(bar.get_xdata()) < i < np.nanmax(bar.get_xdata())
    assert axes.get_ylabel() == "error"
    assert [t.get_text() for t in axes.get_xticklabels()] == list(runs)


def test_plot_runs_draws_students_t_interval_with_the_dots_on_top():
    from scipy import stats

    runs = {"a": [0.915, 0.79, 0.975], "b": [0.89, 0.715, 0.65]}
    axes = d2lh.plot_runs(runs, ylabel="exact match", interval="t")
    for values, bar in zip(runs.values(), axes.lines[1:]):
        half = stats.t.ppf(0.975, 2) * np.std(values, ddof=1) / np.sqrt(3)
        np.testing.assert_allclose([np.nanmin(bar.get_ydata()), np.nanmax(bar.get_ydata())],
                                   [np.mean(values) - half, np.mean(values) + half])
    assert min(dots.get_zorder() for dots in axes.collections) > max(
        line.get_zorder() for line in axes.lines)  # no dot hidden under a cap or a mean
    with pytest.raises(ValueError, match="interval must be 'bootstrap' or 't'"):
        d2lh.plot_runs(runs, ylabel="exact match", interval="normal")


@pytest.mark.parametrize("runs", [{}, {"a": []}])
def test_plot_runs_rejects_empty_runs(runs):
    with pytest.raises(ValueError, match="runs must map each method to at least one value"):
        d2lh.plot_runs(runs, ylabel="error")


# Explorers: a figure with controls that redraw it ----------------------------------------------

def draw_curve(scale=1.0, power=2, kind="line", log=False):
    fig, ax = plt.subplots(figsize=(2, 1.5))
    x = np.linspace(0.1, 1, 20)
    ax.plot(x, scale * x ** power, "-" if kind == "line" else "o")
    ax.set_yscale("log" if log else "linear")
    return fig


CONTROLS = dict(scale=(0.5, 2.0), power=[1, 2, 3], kind=["line", "dots"], log=False)


def test_explore_draws_the_defaults_and_redraws_when_set():
    explorer = d2lh.explore(draw_curve, interactive=False, **CONTROLS)
    assert explorer.values == {"scale": 1.0, "power": 2, "kind": "line", "log": False}
    assert explorer.png.startswith(b"\x89PNG") and explorer.draws == 1 and explorer.widget is None
    first = explorer.png
    explorer.set(power=3, kind="dots")
    assert explorer.values["power"] == 3 and explorer.draws == 2 and explorer.png != first
    assert plt.get_fignums() == []  # every figure closed: none shown again at the end of a cell
    assert repr(explorer).startswith(
        "<explorer draw_curve(scale=1.0, power=3, kind='dots', log=False)")


def test_explore_makes_one_ipywidgets_control_per_argument_and_redraws_on_a_move():
    widgets = pytest.importorskip("ipywidgets")
    explorer = d2lh.explore(draw_curve, interactive=True, **CONTROLS)
    controls = explorer.widget.children[0].children
    assert [type(c) for c in controls] == [widgets.FloatSlider, widgets.SelectionSlider,
                                           widgets.Dropdown, widgets.Checkbox]
    assert [c.value for c in controls] == [1.0, 2, "line", False]
    assert all(c.continuous_update is False for c in controls[:2])  # redraw on release
    picture = explorer.widget.children[2]
    assert base64.b64encode(explorer.png).decode() in picture.value
    first = explorer.png
    controls[0].value = 1.5  # what the learner's slider does
    assert explorer.values["scale"] == 1.5 and explorer.draws == 2 and explorer.png != first
    assert base64.b64encode(explorer.png).decode() in picture.value
    explorer.set(power=1, log=True)  # two controls, one redraw
    assert [c.value for c in controls] == [1.5, 1, "line", True] and explorer.draws == 3


def test_explore_uses_an_int_slider_for_ints_and_a_given_widget_as_it_is():
    widgets = pytest.importorskip("ipywidgets")
    own = widgets.FloatLogSlider(min=-1, max=1)
    explorer = d2lh.explore(draw_curve, interactive=True, power=(1, 4), scale=own)
    power, scale = explorer.widget.children[0].children
    assert isinstance(power, widgets.IntSlider) and (power.min, power.max, power.value) == (1, 4, 2)
    assert scale is own and own.value == 1.0  # set to the default


def test_explore_bundle_carries_the_widget_view_and_the_static_figure(monkeypatch):
    pytest.importorskip("ipywidgets")
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **kw: shown.append((a, kw)))
    monkeypatch.setattr(d2lh.plotting, "_in_notebook", lambda: True)
    explorer = d2lh.explore(draw_curve, **CONTROLS)
    (bundle,), options = shown[0]
    assert len(shown) == 1 and options == {"raw": True}
    assert base64.b64decode(bundle["image/png"]) == explorer.png  # GitHub, nbconvert, untrusted
    view = bundle["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"] == explorer.widget.model_id
    assert bundle["text/plain"] == repr(explorer)  # what nbval compares: no random id, no bytes


@pytest.mark.parametrize("version, colab, widgets", [("7.7.5", False, False), ("7.7.5", True, True),
                                                     ("8.1.2", False, True)])
def test_explore_shows_the_figure_alone_where_the_widgets_cannot_render(monkeypatch, capsys,
                                                                        version, colab, widgets):
    ipywidgets = pytest.importorskip("ipywidgets")
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **kw: shown.append((a, kw)))
    monkeypatch.setattr(d2lh.plotting, "_in_notebook", lambda: True)
    monkeypatch.setattr(ipywidgets, "__version__", version)
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    explorer = d2lh.explore(draw_curve, **CONTROLS)
    (bundle,), _ = shown[0]
    assert ("application/vnd.jupyter.widget-view+json" in bundle) == widgets
    assert (explorer.widget is not None) == widgets
    assert base64.b64decode(bundle["image/png"]) == explorer.png  # the figure, always
    said = capsys.readouterr().out
    assert ("pip install -U ipywidgets" in said) == (not widgets)


def test_explore_shows_a_failing_redraw_under_the_controls():
    pytest.importorskip("ipywidgets")

    def draw(scale=1.0):
        if scale > 1.5:
            raise RuntimeError("too large")
        return draw_curve(scale)

    explorer = d2lh.explore(draw, interactive=True, scale=(0.5, 2.0))
    first = explorer.png
    explorer.set(scale=2.0)
    status = explorer.widget.children[1]
    assert "RuntimeError: too large" in status.value and explorer.png == first
    assert status.layout.display is None  # shown
    explorer.set(scale=1.0)
    assert status.value == "" and status.layout.display == "none" and plt.get_fignums() == []


@pytest.mark.parametrize("controls, message", [
    (dict(width=(0, 1)), "'width' is not an argument"),
    (dict(scale=(2.0, 3.0)), "runs from 2.0 to 3.0, but its default is 1.0"),
    (dict(power=[1, 3]), "not among its options"),
    (dict(kind={"line": 1}), "must be \\(low, high\\[, step\\]\\)"),
    (dict(log=True, scale=True), "needs a True/False default"),
])
def test_explore_rejects_controls_that_cannot_show_the_default(controls, message):
    with pytest.raises(ValueError, match=message):
        d2lh.explore(draw_curve, interactive=False, **controls)


def test_explore_needs_defaults_and_a_figure():
    with pytest.raises(ValueError, match="needs a default.*scale has none"):
        d2lh.explore(lambda scale, power=2: None, interactive=False, power=[2])
    with pytest.raises(TypeError, match="must return a matplotlib figure or axes, got NoneType"):
        d2lh.explore(lambda scale=1.0: None, interactive=False, scale=(0.0, 2.0))
    axes = d2lh.explore(lambda n=2: plt.subplots(1, n)[1], interactive=False, n=(1, 3))
    assert axes.png.startswith(b"\x89PNG")  # an array of axes: their figure


def test_importing_the_package_does_not_import_ipywidgets():
    import subprocess
    import sys

    code = "import sys, d2lhelpers; assert 'ipywidgets' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_explore_leaves_the_learners_own_figures_open():
    own = plt.figure()
    explorer = d2lh.explore(draw_curve, interactive=False, scale=(0.5, 2.0))
    explorer.set(scale=2.0)
    assert plt.get_fignums() == [own.number]
