"""charts: `create_chart` draws numbers the model already has as a PNG and posts it in the conversation.

The numbers arrive as columns (one `x_values` list for the axis, one `values` list per series), the
one shape a JSON Schema can describe; a chart with nothing in it (no points, no series, a series
shorter than the axis) is a retry naming what is missing, never an empty frame that reads as "no
trend". Rendering is matplotlib's Agg backend (no display, no browser, no network), through its
object API (a Figure of our own, never pyplot's global state), in a worker thread with a deadline:
the event loop never draws. Input is bounded (series, points, label lengths) so a render is too.
The PNG goes to the conversation through the one outbound file path (`Turn.share_files`); the
model gets a sentence back, never the bytes.
"""

from __future__ import annotations

import asyncio
import io
import math
import re
import threading
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset

from gateway.outbound.adapter import OutboundFile, PlatformError
from gateway.outbound.files import FileRefused
from gateway.runs.turn import Turn

from .failures import trouble
from .registry import BuildContext, CapabilityDecl, ToolDecl, register, simple

Kind = Literal["line", "bar", "area", "scatter", "pie"]
MAX_SERIES = 12
MAX_POINTS = 5_000
MAX_LABEL = 200
RENDER_SECONDS = 20.0  # a render past this is given up (the thread finishes on its own; input is bounded)
WIDTH_PX, HEIGHT_PX, DPI = 1200, 720, 120
_render_lock = threading.Lock()  # matplotlib's font cache and text layout are shared: one render at a time


class Series(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="The series' name, shown in the legend", max_length=MAX_LABEL)
    values: list[float] = Field(description="One number per point of x_values, in the same order")


def problems(x_values: list[Any], series: list[Series], kind: str) -> str | None:
    """What is missing or wrong in a chart's data, in one sentence; None when it can be drawn."""
    if not x_values:
        return "`x_values` has no points: give the axis at least one value (a label, a date or a number)"
    if not series:
        return "`series` is empty: give at least one series, each {name, values}"
    if len(x_values) > MAX_POINTS:
        return f"`x_values` has {len(x_values)} points; at most {MAX_POINTS}"
    if len(series) > MAX_SERIES:
        return f"{len(series)} series; at most {MAX_SERIES}"
    if kind == "pie" and len(series) != 1:
        return "a pie chart shows exactly one series"
    for s in series:
        if len(s.values) < len(x_values):
            return (f"series {s.name!r} has {len(s.values)} values but `x_values` has {len(x_values)} points: "
                    "give one value per point")
        if len(s.values) > len(x_values):
            return (f"series {s.name!r} has {len(s.values)} values but `x_values` has only {len(x_values)} points: "
                    "add the missing axis points or drop the extra values")
        if any(not math.isfinite(v) for v in s.values):
            return f"series {s.name!r} holds a value that is not a finite number"
        if kind == "pie" and any(v < 0 for v in s.values):
            return f"a pie chart cannot show negative values (series {s.name!r})"
    return None


def render_png(kind: str, title: str, x_values: list[Any], series: list[Series], x_label: str, y_label: str) -> bytes:
    """The chart as PNG bytes (Agg, off the loop: call it in a thread). Deterministic: no timestamp."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with _render_lock:
        fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        labels = [str(x) for x in x_values]
        numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in x_values)
        xs: list[Any] = list(x_values) if numeric else list(range(len(labels)))
        if kind == "pie":
            ax.pie(series[0].values, labels=labels, autopct="%1.0f%%")
            ax.axis("equal")
        elif kind == "bar":
            width = 0.8 / len(series)
            for i, s in enumerate(series):
                offsets = [j + (i - (len(series) - 1) / 2) * width for j in range(len(labels))]
                ax.bar(offsets, s.values, width=width, label=s.name)
            ax.set_xticks(range(len(labels)), labels)
        else:
            for s in series:
                if kind == "line":
                    ax.plot(xs, s.values, marker="o" if len(xs) <= 50 else None, label=s.name)
                elif kind == "area":
                    ax.fill_between(xs, s.values, alpha=0.35, label=s.name)
                    ax.plot(xs, s.values)
                else:
                    ax.scatter(xs, s.values, label=s.name)
            if not numeric:
                step = max(1, len(labels) // 20)  # at most ~20 tick labels, else they overlap
                ax.set_xticks(xs[::step], labels[::step])
        if kind != "pie":
            ax.set_xlabel(x_label)
            ax.set_ylabel(y_label)
            if len(series) > 1:
                ax.legend()
            ax.grid(True, alpha=0.3)
            if not numeric and len(labels) > 8:
                for tick in ax.get_xticklabels():
                    tick.set_rotation(45)
                    tick.set_horizontalalignment("right")
        ax.set_title(title)
        fig.tight_layout()
        out = io.BytesIO()
        fig.savefig(out, format="png", metadata={"Software": None})
        return out.getvalue()


def file_name(title: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-").lower()[:60]
    return f"{stem or 'chart'}.png"


def _toolset() -> FunctionToolset[Turn]:
    async def create_chart(ctx: RunContext[Turn], kind: Kind, title: str, x_values: list[str | float],
                           series: list[Series], x_label: str = "", y_label: str = "") -> str:
        """Draw a chart of numbers you already have and post it as an image in this conversation, so the person can see them.

        Use it when numbers read better as a picture (a trend, a comparison, shares of a whole). It draws
        only what you give it: it does not fetch, compute or aggregate; work the numbers out first
        (with a code or data tool, or from the conversation). For a table, answer in text instead.

        Args:
            kind: line (a trend over the axis), bar (compare values per point), area (a trend with volume),
                scatter (points without order), or pie (shares of one whole; exactly one series).
            title: The chart's title, shown above it and used for the file name. At most 200 characters.
            x_values: The axis, one entry per point, in order: labels ("Mon", "2026-03-02") or numbers.
                1 to 5000 points.
            series: One or more series (at most 12), each {name, values} with exactly one number per
                point of x_values.
            x_label: The x axis' label. Default: none.
            y_label: The y axis' label, with the unit (e.g. "signups", "ms"). Default: none.

        Returns:
            A sentence saying the chart was posted (its file name and size), or why it could not be
            posted (this platform takes no files, the file is too large); the image itself is not returned.
        """
        if (problem := problems(x_values, series, kind)) is not None:
            return trouble(ctx, "mistake", problem)
        if len(title) > MAX_LABEL or len(x_label) > MAX_LABEL or len(y_label) > MAX_LABEL:
            return trouble(ctx, "mistake", f"keep the title and the axis labels within {MAX_LABEL} characters")
        try:
            png = await asyncio.wait_for(
                asyncio.to_thread(render_png, kind, title, x_values, series, x_label, y_label), RENDER_SECONDS)
        except TimeoutError:
            return trouble(ctx, "transient", f"drawing the chart took longer than {RENDER_SECONDS:g} s; "
                                             "try fewer points")
        chart = OutboundFile(file_name(title), png, "image/png")
        try:
            shared = await ctx.deps.share_files([chart], title, "")
        except FileRefused as e:
            return f"The chart was not posted: {e}."
        except PlatformError as e:
            return trouble(ctx, "transient", f"the platform did not take the chart ({e})")
        points = f"{len(x_values)} point{'s' if len(x_values) != 1 else ''}"
        return (f"A {kind} chart {title!r} of {len(series)} series over {points}: {shared.note}. "
                "The person sees it; do not describe the image as if they could not.")

    return FunctionToolset([create_chart])


def build(ctx: BuildContext) -> AbstractCapability[Any]:
    return simple(toolsets=[_toolset()])


register(CapabilityDecl(
    id="charts", name="Charts", category="analysis", tools=(ToolDecl("create_chart"),), build=build,
    shared=True,  # its tool reads the run (where to post) from its deps
    description="Draws numbers the agent already has as a line, bar, area, scatter or pie chart, posted as a PNG.",
))
