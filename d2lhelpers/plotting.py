"""Plotting: curves, attention heatmaps, runs compared over seeds, a live training plot and
explorers (a figure with controls that redraw it).

The only module of the package that imports matplotlib (and seaborn, for the intervals over runs;
ipywidgets, for the explorers' controls). Functions return the figure or axes they drew on, and
change global settings only when asked to (``use_svg_display``, ``use_png_display``,
``set_figsize``).
"""

from __future__ import annotations

import base64
import inspect
import io
import numbers
import sys

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

__all__ = ["use_svg_display", "use_png_display", "set_figsize", "plot", "show_heatmaps", "plot_runs",
           "LivePlot", "live_loss_plot", "explore", "Explorer"]


def _set_inline_formats(*formats: str, **kwargs) -> None:
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # not running under IPython: nothing to configure
        return
    if _in_notebook():
        # Show figures inline even where MPLBACKEND names another backend (CI sets Agg): otherwise
        # a fresh run would lose the figures that the stored outputs hold.
        sys.modules["IPython"].get_ipython().run_line_magic("matplotlib", "inline")
    set_matplotlib_formats(*formats, **kwargs)


def use_svg_display() -> None:
    """Show notebook figures as SVG, made deterministic (fixed ids, no date) so that nbval can
    compare them between runs."""
    mpl.rcParams["svg.hashsalt"] = "d2lhelpers"  # ids of clip paths etc. no longer random
    _set_inline_formats("svg", metadata={"Date": None})


def use_png_display(dpi: int = 150) -> None:
    """Show notebook figures as sharp PNG images (nbval does not compare PNG bytes)."""
    _set_inline_formats("png", dpi=dpi)


def set_figsize(figsize: tuple[float, float] = (3.5, 2.5)) -> None:
    """Set the default size, in inches, of the figures that follow."""
    mpl.rcParams["figure.figsize"] = figsize


def _as_numpy(x):
    if hasattr(x, "detach"):  # a torch tensor, possibly on a GPU
        x = x.detach().cpu()
    return np.asarray(x)


def plot(X, Y=None, xlabel=None, ylabel=None, legend=None, xlim=None, ylim=None,
         xscale="linear", yscale="linear", fmts=("-", "m--", "g-.", "r:", "c-", "k--"),
         figsize=(3.5, 2.5), axes=None):
    """Plot one or several curves and return the axes.

    ``X`` and ``Y`` are each a 1-D sequence or a list of them (one per curve). With ``Y`` None,
    ``X`` holds the y values and the x values are 0, 1, 2, ... ``legend`` names the curves.
    """
    def is_single(a):
        return hasattr(a, "ndim") and a.ndim == 1 or (
            isinstance(a, (list, tuple, range)) and len(a) > 0 and not hasattr(a[0], "__len__"))

    if Y is None:
        X, Y = [[]] * (1 if is_single(X) else len(X)), X
    if is_single(X):
        X = [X]
    if is_single(Y):
        Y = [Y]
    if len(X) != len(Y):
        if len(X) == 1:
            X = X * len(Y)
        else:
            raise ValueError(f"plot: X holds {len(X)} curves but Y holds {len(Y)}")
    if legend is not None and len(legend) != len(Y):
        raise ValueError(f"plot: legend names {len(legend)} curves but there are {len(Y)}")
    if axes is None:
        _, axes = plt.subplots(figsize=figsize)
    for i, (x, y) in enumerate(zip(X, Y)):
        y = _as_numpy(y)
        x = _as_numpy(x) if len(x) else np.arange(len(y))
        axes.plot(x, y, fmts[i % len(fmts)])
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_xscale(xscale)
    axes.set_yscale(yscale)
    if xlim is not None:
        axes.set_xlim(xlim)
    if ylim is not None:
        axes.set_ylim(ylim)
    if legend:
        axes.legend(legend)
    axes.grid(True)
    return axes


def show_heatmaps(matrices, xlabel, ylabel, titles=None, figsize=(2.5, 2.5), cmap="Reds",
                  xticklabels=None, yticklabels=None, center=None, vmin=None, vmax=None):
    """Draw a grid of heatmaps that share one colour bar, and return the figure.

    matrices: (rows, cols, T_q, T_k), e.g. the attention weights of ``rows`` layers x ``cols`` heads;
    each heatmap has one row per query and one column per key.
    titles: one title per column of the grid. xticklabels / yticklabels: optional token labels for
    the keys (T_k of them) and the queries (T_q of them).
    ``figsize`` is the size of one heatmap.
    ``center``: for signed quantities (positional encodings, differences), the value the colour
    scale is centred on, e.g. 0 with a diverging ``cmap`` such as ``"RdBu_r"``: the scale then runs
    symmetrically from ``center - m`` to ``center + m``, m the largest distance from ``center``, so
    that equal distances above and below get equally strong colours.
    ``vmin``, ``vmax``: a fixed colour scale (e.g. 0 and 1 for attention weights), so that grids
    drawn side by side compare and near-uniform weights do not look structured; by default the
    scale runs from the smallest to the largest value shown.
    """
    matrices = _as_numpy(matrices)
    if matrices.ndim != 4:
        raise ValueError(
            f"matrices must have shape (rows, cols, num_queries, num_keys), got {matrices.shape}"
        )
    rows, cols, num_queries, num_keys = matrices.shape
    if titles is not None and len(titles) != cols:
        raise ValueError(f"titles must name the {cols} columns of the grid, got {len(titles)}")
    if xticklabels is not None and len(xticklabels) != num_keys:
        raise ValueError(f"xticklabels must label the {num_keys} keys, got {len(xticklabels)}")
    if yticklabels is not None and len(yticklabels) != num_queries:
        raise ValueError(f"yticklabels must label the {num_queries} queries, got {len(yticklabels)}")
    fig, axes = plt.subplots(rows, cols, figsize=(figsize[0] * cols, figsize[1] * rows),
                             sharex=True, sharey=True, squeeze=False)
    vmin = float(matrices.min()) if vmin is None else vmin
    vmax = float(matrices.max()) if vmax is None else vmax
    if center is not None:
        spread = max(abs(vmax - center), abs(center - vmin))
        vmin, vmax = center - spread, center + spread
    for i in range(rows):
        for j in range(cols):
            ax = axes[i, j]
            image = ax.imshow(matrices[i, j], cmap=cmap, vmin=vmin, vmax=vmax)
            # key/query indices: whole numbers only, even for a single row (min_n_ticks=1)
            ax.xaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True, min_n_ticks=1))
            ax.yaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True, min_n_ticks=1))
            if i == rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel)
            if titles is not None and i == 0:
                ax.set_title(titles[j])
            if xticklabels is not None:
                ax.set_xticks(range(num_keys), xticklabels, rotation=90)
            if yticklabels is not None:
                ax.set_yticks(range(num_queries), yticklabels)
    fig.colorbar(image, ax=axes, shrink=0.6)
    return fig


def plot_runs(runs, ylabel, xlabel=None, figsize=(3.5, 2.5), axes=None, seed=0,
              interval="bootstrap"):
    """Compare methods over several runs (seeds, draws): every run as a grey dot, drawn on top, and
    each method's mean with its 95% confidence interval (seaborn's ``pointplot``). Returns the axes.

    runs: {method name: [one value per run]}, e.g. ``{"sinusoidal": [...], "learned": [...]}``.
    interval: ``"bootstrap"`` (resampling with ``seed``, so that the figure repeats), or ``"t"``,
    Student's t-interval, mean +- t_{0.975, n-1} s / sqrt(n), which accounts for few runs where a
    bootstrap interval is far too narrow.
    """
    import seaborn as sns

    if not runs or any(len(values) == 0 for values in runs.values()):
        raise ValueError(f"runs must map each method to at least one value, got {runs!r}")
    if interval not in ("bootstrap", "t"):
        raise ValueError(f"interval must be 'bootstrap' or 't', got {interval!r}")
    names = [name for name, values in runs.items() for _ in values]
    values = [float(v) for vs in runs.values() for v in _as_numpy(vs).ravel()]
    if len(values) != len(names):
        raise ValueError("runs must map each method to a flat sequence of numbers")
    if axes is None:
        _, axes = plt.subplots(figsize=figsize)
    errorbar = ("ci", 95) if interval == "bootstrap" else _t_interval
    sns.pointplot(x=names, y=values, ax=axes, errorbar=errorbar, seed=seed, color="C0",
                  linestyle="none", capsize=0.2, markers="D", markersize=5, zorder=2)
    sns.stripplot(x=names, y=values, ax=axes, color="0.45", size=4, jitter=0.15, zorder=3,
                  edgecolor="white", linewidth=0.5)
    axes.set_ylabel(ylabel)
    if xlabel:
        axes.set_xlabel(xlabel)
    axes.grid(True, axis="y")
    return axes


def _t_interval(values):
    """Student's 95% t-interval of the mean of ``values`` (seaborn's ``errorbar`` callable)."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return values.mean() - half, values.mean() + half


def _in_notebook() -> bool:
    """True inside a Jupyter kernel (JupyterLab, Colab, nbval), where figures can be redrawn."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class LivePlot:
    """Curves that grow while a model trains: redrawn in place in Jupyter, printed as plain lines
    elsewhere (scripts, CI logs).

    >>> live = LivePlot(xlabel="epoch", legend=["train loss", "BLEU"])
    >>> live.add(1, [2.31, 0.05])        # one value per curve; None skips a curve at this x
    >>> live.history["train loss"]      # [(1, 2.31)]
    """

    def __init__(self, xlabel, legend, ylabel=None, xlim=None, ylim=None, yscale="linear",
                 figsize=(3.5, 2.5), interactive: bool | None = None):
        self.xlabel, self.ylabel, self.legend = xlabel, ylabel, list(legend)
        self.xlim, self.ylim, self.yscale, self.figsize = xlim, ylim, yscale, figsize
        self.history: dict[str, list[tuple[float, float]]] = {name: [] for name in self.legend}
        self.interactive = _in_notebook() if interactive is None else interactive
        self._fig = self._axes = self._handle = None

    def add(self, x, values) -> None:
        if len(values) != len(self.legend):
            raise ValueError(
                f"LivePlot.add: got {len(values)} values for the {len(self.legend)} curves {self.legend}"
            )
        for name, value in zip(self.legend, values):
            if value is not None:
                self.history[name].append((x, float(value)))
        if self.interactive:
            self._redraw()
        else:
            shown = ", ".join(f"{name} {value:.4g}" for name, value in zip(self.legend, values)
                              if value is not None)
            print(f"{self.xlabel} {x}: {shown}", flush=True)

    def _redraw(self) -> None:
        from IPython.display import display

        if self._fig is None:
            self._fig, self._axes = plt.subplots(figsize=self.figsize)
            plt.close(self._fig)  # shown through the display handle only, not again at cell end
        self._axes.cla()
        curves = [name for name in self.legend if self.history[name]]
        plot([[x for x, _ in self.history[n]] for n in curves],
             [[y for _, y in self.history[n]] for n in curves],
             xlabel=self.xlabel, ylabel=self.ylabel, legend=curves, xlim=self.xlim, ylim=self.ylim,
             yscale=self.yscale, axes=self._axes)
        if self._handle is None:
            self._handle = display(self._fig, display_id=True)
        else:
            self._handle.update(self._fig)


def live_loss_plot(yscale: str = "linear"):
    """A callback for ``train_seq2seq(..., on_epoch_end=live_loss_plot())``: after every epoch it
    adds the epoch's mean training loss to a :class:`LivePlot` (redrawn in Jupyter, a printed line
    elsewhere)."""
    live = LivePlot(xlabel="epoch", legend=["training loss"], ylabel="loss", yscale=yscale)

    def add_epoch(report) -> None:
        live.add(len(report.epoch_losses), [report.epoch_losses[-1]])

    return add_epoch


_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def explore(draw, /, *, dpi: int = 150, interactive: bool | None = None, **controls):
    """Show the figure ``draw()`` returns, with controls that redraw it; return the
    :class:`Explorer`.

    ``draw``: a function of keyword arguments that returns a matplotlib figure (or axes). Every
    argument has a default: the defaults give the first figure, the one a notebook stores.
    ``controls``: one per argument of ``draw`` that the learner may change:

    - ``(low, high)`` or ``(low, high, step)``: a slider (of integers when all three are ints);
    - a list of numbers: a slider over these values only (e.g. a log-spaced grid);
    - a list of strings, or of ``(label, value)`` pairs: a drop-down menu;
    - ``True`` or ``False``: a check box (its initial state is the default, not this value);
    - an ipywidgets widget, used as it is (its value is set to the default).

    In Jupyter (JupyterLab, Notebook) and on Colab, with ipywidgets installed, the cell shows the
    controls above the figure, which is redrawn when a control is released. The controls are
    ipywidgets' own (no custom widget, no JavaScript of ours): the figure is a PNG inside an
    ``HTML`` widget, so nothing needs binary messages, a custom widget manager or a network fetch.
    The cell's output is one display bundle: the widget view, and the first figure as
    ``image/png`` beside it, which is what GitHub, nbconvert and a notebook not yet run (an
    untrusted output in JupyterLab) show. Without ipywidgets, or with ipywidgets 7 outside Colab
    (JupyterLab 4 cannot render it), the PNG alone; outside a kernel
    (``interactive=False``), nothing is shown, and the explorer still draws on ``set``.

    >>> def draw(width=1.0):
    ...     fig, ax = plt.subplots()
    ...     ax.plot(x, np.exp(-(x / width) ** 2))
    ...     return fig
    >>> explorer = explore(draw, width=[0.1, 0.3, 1.0, 3.0])
    >>> explorer.set(width=0.3)      # what moving the slider does
    >>> explorer.values              # {'width': 0.3}; explorer.png: the figure drawn, PNG bytes
    """
    return Explorer(draw, controls, dpi=dpi, interactive=interactive)


def _widgets_render_here() -> bool:
    """Whether ipywidgets' controls can show here: ipywidgets installed, and version 8 or later
    except on Colab. JupyterLab 4 (and Notebook 7) render only ipywidgets 8's widgets: with 7.x a
    widget view shows an error, or nothing, where the figure should be. Then the explorer shows
    its figure alone and says in one line how to get the controls. Colab renders 7.7, the version
    it preinstalls."""
    try:
        import ipywidgets
    except ImportError:
        return False
    major = int(str(getattr(ipywidgets, "__version__", "8")).split(".")[0])
    if major >= 8 or "google.colab" in sys.modules:
        return True
    print(f"(ipywidgets {ipywidgets.__version__}: JupyterLab 4 shows the controls with ipywidgets "
          ">= 8 only; pip install -U ipywidgets, then restart the kernel. The figure alone below.)")
    return False


class Explorer:
    """A figure with controls that redraw it; made and shown by :func:`explore`.

    ``values``: the controls' current values; ``png``: the current figure as PNG bytes;
    ``draws``: how many figures were drawn; ``widget``: the ipywidgets box (``None`` without a
    front end); ``set(**values)`` moves controls from code and redraws once.
    """

    def __init__(self, draw, controls: dict, dpi: int = 150, interactive: bool | None = None):
        if not callable(draw):
            raise TypeError(f"explore: draw must be a function, got {type(draw).__name__}")
        parameters = inspect.signature(draw).parameters
        for name in controls:
            if name not in parameters:
                raise ValueError(f"explore: control {name!r} is not an argument of "
                                 f"{draw.__name__}{inspect.signature(draw)}")
        no_default = [name for name, p in parameters.items()
                      if p.default is inspect.Parameter.empty
                      and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if no_default:
            raise ValueError(f"explore: every argument of {draw.__name__} needs a default (the "
                             f"first figure's value); {', '.join(no_default)} has none")
        self.draw, self.dpi = draw, dpi
        self.values = {name: parameters[name].default for name in controls}
        for name, spec in controls.items():
            _check_control(name, spec, self.values[name])
        self.draws = 0
        self.png = self._render()
        self.interactive = _in_notebook() if interactive is None else interactive
        self.widget = self._controls = self._picture = self._status = None
        self._holding = False
        if self.interactive:
            if _widgets_render_here():
                self._build_widgets(controls)
            if _in_notebook():
                from IPython.display import display

                display(self._mimebundle(), raw=True)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.values.items())
        return (f"<explorer {self.draw.__name__}({shown}): run the cell in Jupyter or Colab to "
                "move its controls>")

    def set(self, **values) -> None:
        """Move the named controls to ``values`` and redraw the figure once."""
        for name, value in values.items():
            if name not in self.values:
                raise ValueError(f"Explorer.set: no control {name!r}; the controls are "
                                 f"{list(self.values)}")
        if self._controls is None:
            self.values.update(values)
            self._redraw()
            return
        self._holding = True
        try:
            for name, value in values.items():
                self._controls[name].value = value
        finally:
            self._holding = False
        self._redraw()

    def _render(self) -> bytes:
        """Draw at the current values; return the PNG. Every figure the draw opened is closed:
        the explorer shows it, and it must not show again at the end of the cell."""
        before = set(plt.get_fignums())
        try:
            figure = self.draw(**self.values)
            if hasattr(figure, "flat"):  # an array of axes
                figure = figure.flat[0]
            figure = getattr(figure, "figure", figure)  # axes -> their figure
            if not isinstance(figure, mpl.figure.Figure):
                raise TypeError(f"explore: {self.draw.__name__} must return a matplotlib figure "
                                f"or axes, got {type(figure).__name__}")
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=self.dpi, bbox_inches="tight")
        finally:
            for number in set(plt.get_fignums()) - before:
                plt.close(number)
        self.draws += 1
        return buffer.getvalue()

    def _redraw(self, change=None) -> None:
        if self._holding:
            return
        if self._controls is not None:
            self.values = {name: control.value for name, control in self._controls.items()}
        try:
            self.png = self._render()
        except Exception as error:  # a callback's exception would go to a log the learner misses
            if self._status is None:
                raise
            self._status.value = f"{self.draw.__name__} failed: {type(error).__name__}: {error}"
            self._status.layout.display = None  # shown
            return
        if self._picture is not None:
            self._picture.value = _img_tag(self.png)
            self._status.value, self._status.layout.display = "", "none"

    def _build_widgets(self, controls: dict) -> None:
        import ipywidgets as widgets

        self._controls = {name: _make_control(widgets, name, spec, self.values[name])
                          for name, spec in controls.items()}
        for control in self._controls.values():
            control.observe(self._redraw, names="value")
        self._picture = widgets.HTML(_img_tag(self.png))
        self._status = widgets.Label("", layout=widgets.Layout(display="none"))  # for errors
        row = widgets.HBox(list(self._controls.values()),
                           layout=widgets.Layout(flex_flow="row wrap"))
        self.widget = widgets.VBox([row, self._status, self._picture])
        self.widget.add_class("d2lh-explorer")

    def _mimebundle(self) -> dict:
        data = {"text/plain": repr(self), "image/png": base64.b64encode(self.png).decode("ascii")}
        if self.widget is not None:
            data[_WIDGET_VIEW] = {"version_major": 2, "version_minor": 0,
                                          "model_id": self.widget.model_id}
        return data


def _img_tag(png: bytes) -> str:
    encoded = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{encoded}" style="max-width: 100%" alt="figure">'


def _is_number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _check_control(name, spec, default) -> None:
    """Reject a control that cannot show its default, before any widget is made."""
    if hasattr(spec, "value") and hasattr(spec, "observe"):  # a widget
        return
    if isinstance(spec, bool):
        if not isinstance(default, bool):
            raise ValueError(f"explore: check box {name!r} needs a True/False default, got "
                             f"{default!r}")
    elif isinstance(spec, tuple) and len(spec) in (2, 3) and all(map(_is_number, spec)):
        if not (_is_number(default) and spec[0] <= default <= spec[1]):
            raise ValueError(f"explore: slider {name!r} runs from {spec[0]} to {spec[1]}, but its "
                             f"default is {default!r}")
    elif isinstance(spec, list) and spec:
        values = [v[1] if isinstance(v, tuple) and len(v) == 2 else v for v in spec]
        if default not in values:
            raise ValueError(f"explore: the default of {name!r}, {default!r}, is not among its "
                             f"options {values}")
    else:
        raise ValueError(f"explore: control {name!r} must be (low, high[, step]), a list of "
                         f"options, True/False or a widget, got {spec!r}")


def _make_control(widgets, name: str, spec, value):
    """An ipywidgets control for ``spec`` (see :func:`explore`), set to ``value``."""
    label = dict(description=name.replace("_", " "), style={"description_width": "initial"})
    if hasattr(spec, "value") and hasattr(spec, "observe"):
        spec.value = value
        return spec
    if isinstance(spec, bool):
        return widgets.Checkbox(value=value, indent=False, **label)
    if isinstance(spec, tuple):
        low, high, *step = spec
        if all(isinstance(x, int) for x in (*spec, value)):
            return widgets.IntSlider(value=value, min=low, max=high, step=step[0] if step else 1,
                                     continuous_update=False, **label)
        step = step[0] if step else (high - low) / 100
        return widgets.FloatSlider(value=value, min=low, max=high, step=step,
                                   continuous_update=False, **label)
    if all(map(_is_number, spec)):
        return widgets.SelectionSlider(options=[(f"{v:g}", v) for v in spec], value=value,
                                       continuous_update=False, **label)
    return widgets.Dropdown(options=spec, value=value, **label)
