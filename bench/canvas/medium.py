"""The canvas medium: a grid, a primitive vocabulary and a palette, and the drawing surface programs paint on.

A `Medium` is data: `V1` is the paper's (24x24, six primitives, 30-colour palette). Other media are
variants built from parameters, never forks of the v1 code paths:
- `V1.at_resolution(48)` rasterises the same 24-cell programs at 48x48 (shapes are unchanged, so
  symbolic scores are resolution-independent by construction, and tests prove it end to end);
- `V1.with_grid(48)` is a 48-cell canvas that programs address directly;
- `OUTLINE` adds `rect_outline`, `circle_outline` and `poly_outline` to the v1 vocabulary.
At `resolution == grid` the exact rasterisers of `bench.canvas.raster` paint; otherwise each shape is
sampled at pixel centres.

Each `Primitive` states its own facts once (its parameters, which of them are (row, column) positions,
which is a radius); the coordinate splice, the null baseline and the sandbox's geometry bound read them,
so adding a primitive to a vocabulary is an edit of this file only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import shapely
from shapely.geometry.base import BaseGeometry

from bench.canvas import geometry as G
from bench.canvas import raster as R
from bench.canvas.palette import RGB, ColorError, Palette, brief, v1_palette


class DrawError(ValueError):
    """A primitive was called with arguments it cannot draw (wrong count, non-numbers, NaN)."""


class BudgetExceeded(RuntimeError):
    """A program used more than its share of calls, pixels, operations or vertices."""


@dataclass(frozen=True)
class Primitive:
    """One drawing call of a vocabulary: its numeric parameters, its raster and its continuous shape.

    It also declares, once, which of its numbers are places on the canvas: the coordinate splice
    (`bench.intervene.splice`) rewrites exactly those literals and the null baseline
    (`bench.translation.baseline`) moves exactly those values, so a new primitive needs no edit there.
    """

    name: str
    params: tuple[str, ...]  #: names of the numeric parameters, in call order (the colour follows them)
    mask: Callable[..., np.ndarray]  #: (*params, n) -> (n, n) bool raster at resolution == grid
    shape: Callable[..., BaseGeometry]  #: (*params, grid) -> continuous shape in cell units
    #: the call takes one list of (r, c) points instead of `params`; every point is a position
    takes_points: bool = False
    #: (row index, column index) pairs into `params` that are canvas positions: a move by (dr, dc) adds
    #: dr to each row and dc to each column; sizes and radii are not positions. Empty for point primitives
    #: (their points are the positions) and for `fill`, which has no place.
    positions: tuple[tuple[int, int], ...] = ()
    #: index into `params` of a radius, bounded by `raster.MAX_RADIUS` (so one call cannot ask for a disc of
    #: 10^7 cells); None when the primitive has none
    radius: int | None = None
    doc: str = ""  #: the call's signature and meaning, shown to programs as the function's docstring

    def __post_init__(self) -> None:
        n = len(self.params)
        flat = [i for pair in self.positions for i in pair]
        if self.takes_points and (self.positions or self.params):
            raise ValueError(f"primitive {self.name}: a point primitive declares neither params nor positions")
        if any(not 0 <= i < n for i in flat) or len(set(flat)) != len(flat):
            raise ValueError(f"primitive {self.name}: positions {self.positions} must be distinct indices into {self.params}")
        if self.radius is not None and (not 0 <= self.radius < n or self.radius in flat):
            raise ValueError(f"primitive {self.name}: radius index {self.radius} must be a non-position index into {self.params}")

    def position_pairs(self, n_values: int) -> tuple[tuple[int, int], ...]:
        """(row, column) index pairs into a call's `n_values` flattened numbers that are positions."""
        if self.takes_points:
            return tuple((i, i + 1) for i in range(0, n_values - 1, 2))
        return self.positions

    def moved(self, values: Sequence[float], dr: float, dc: float) -> tuple[float, ...]:
        """`values` (a call's numbers, points flattened) with every position moved by dr rows and dc columns."""
        out = list(values)
        for ri, ci in self.position_pairs(len(out)):
            out[ri] += dr
            out[ci] += dc
        return tuple(out)


def _fill_mask(n: int) -> np.ndarray:
    return np.ones((n, n), dtype=bool)


def _set_pixel_mask(r: float, c: float, n: int) -> np.ndarray:
    return R.rect_mask(r, c, 1, 1, n)


def _set_pixel_shape(r: float, c: float, grid: int) -> BaseGeometry:
    return G.rect_shape(r, c, 1, 1, grid)


V1_VOCABULARY: Mapping[str, Primitive] = {
    "fill": Primitive("fill", (), _fill_mask, G.fill_shape, doc="fill(color): paint the whole canvas"),
    "set_pixel": Primitive("set_pixel", ("r", "c"), _set_pixel_mask, _set_pixel_shape, positions=((0, 1),), doc="set_pixel(r, c, color): one cell"),
    "rect": Primitive("rect", ("r", "c", "h", "w"), R.rect_mask, G.rect_shape, positions=((0, 1),), doc="rect(r, c, h, w, color): filled, top-left (r, c), h rows, w columns"),
    "circle": Primitive("circle", ("r", "c", "radius"), R.disc_mask, G.disc_shape, positions=((0, 1),), radius=2, doc="circle(r, c, radius, color): filled disc centred on cell (r, c)"),
    "line": Primitive("line", ("r0", "c0", "r1", "c1"), R.line_mask, G.line_shape, positions=((0, 1), (2, 3)), doc="line(r0, c0, r1, c1, color): one cell thick, end cells included"),
    "poly": Primitive("poly", (), R.poly_mask, G.poly_shape, takes_points=True, doc="poly([(r, c), ...], color): filled polygon through corner points"),
}


def _rect_outline_mask(r: float, c: float, h: float, w: float, n: int) -> np.ndarray:
    outer = R.rect_mask(r, c, h, w, n)
    hs, ws = (1 if h >= 0 else -1), (1 if w >= 0 else -1)
    inner = R.rect_mask(r + hs, c + ws, h - 2 * hs, w - 2 * ws, n) if abs(h) > 2 and abs(w) > 2 else np.zeros_like(outer)
    return outer & ~inner


def _rect_outline_shape(r: float, c: float, h: float, w: float, grid: int) -> BaseGeometry:
    outer = G.rect_shape(r, c, h, w, grid)
    hs, ws = (1 if h >= 0 else -1), (1 if w >= 0 else -1)
    if abs(h) <= 2 or abs(w) <= 2:
        return outer
    return G.clip(shapely.difference(outer, G.rect_shape(r + hs, c + ws, h - 2 * hs, w - 2 * ws, grid)), grid)


def _circle_outline_mask(r: float, c: float, radius: float, n: int) -> np.ndarray:
    outer = R.disc_mask(r, c, radius, n)
    rad = R.cell_index(radius)
    inner = R.disc_mask(r, c, rad - 1, n) if rad >= 1 else np.zeros_like(outer)
    return outer & ~inner


def _circle_outline_shape(r: float, c: float, radius: float, grid: int) -> BaseGeometry:
    outer = G.disc_shape(r, c, radius, grid)
    rad = R.cell_index(radius)
    if rad < 1:
        return outer
    return G.clip(shapely.difference(outer, G.disc_shape(r, c, rad - 1, grid)), grid)


def _poly_outline_mask(points: list[tuple[float, float]], n: int) -> np.ndarray:
    filled = R.poly_mask(points, n)
    interior = filled.copy()
    interior[1:, :] &= filled[:-1, :]
    interior[:-1, :] &= filled[1:, :]
    interior[:, 1:] &= filled[:, :-1]
    interior[:, :-1] &= filled[:, 1:]
    interior[0, :] = interior[-1, :] = interior[:, 0] = interior[:, -1] = False
    return filled & ~interior


def _poly_outline_shape(points: list[tuple[float, float]], grid: int) -> BaseGeometry:
    filled = G.poly_shape(points, grid)
    return G.clip(shapely.difference(filled, filled.buffer(-1.0, join_style="mitre")), grid)


OUTLINE_VOCABULARY: Mapping[str, Primitive] = {
    **V1_VOCABULARY,
    "rect_outline": Primitive("rect_outline", ("r", "c", "h", "w"), _rect_outline_mask, _rect_outline_shape, positions=((0, 1),), doc="rect_outline(r, c, h, w, color): one-cell border of rect"),
    "circle_outline": Primitive("circle_outline", ("r", "c", "radius"), _circle_outline_mask, _circle_outline_shape, positions=((0, 1),), radius=2, doc="circle_outline(r, c, radius, color): one-cell ring"),
    "poly_outline": Primitive("poly_outline", (), _poly_outline_mask, _poly_outline_shape, takes_points=True, doc="poly_outline([(r, c), ...], color): border cells of poly"),
}


@dataclass(frozen=True)
class Limits:
    """Per-program budgets. Exceeding one is the outcome `budget` (or `timeout` / `memory`)."""

    max_calls: int = 20_000  #: primitive calls
    max_pixels: int = 4_000_000  #: cell writes summed over calls
    #: work units (bench.sandbox.meter): the static size of every loop pass, call and comprehension item,
    #: plus the elements and bits that builtins, methods and operators touch, plus what primitives cost;
    #: deterministic, so it decides `budget` the same way on every machine (calibrated by perf/bench_meter.py
    #: to stay well under `cpu_seconds` of CPU)
    max_ops: int = 10_000_000
    max_vertices: int = 4_096  #: vertices of one polygon
    #: coordinates a result may carry, summed over its shapes (the polygons' points and the shapes'
    #: outlines; a disc is 257): bounds what the host receives and what PIoU scoring must chew on
    max_total_vertices: int = 100_000
    max_result_bytes: int = 4_000_000  #: encoded size of one result sent back to the host
    max_range: int = 1_000_000  #: length of one range()
    max_source_bytes: int = 100_000  #: model text larger than this is not parsed
    max_collection: int = 1_000_000  #: elements of one list/str built by * or **
    cpu_seconds: float = 2.0  #: CPU time of one program (and, separately, of scoring it); decides `timeout`
    #: far wall-clock backstop for one attempt: the worker is killed past it and the attempt is
    #: recorded as `backstop` (never `timeout`: wall-clock time depends on the machine's load)
    wall_seconds: float = 60.0
    memory_mb: int = 768  #: address-space growth allowed to one program, measured from where it starts


@dataclass(frozen=True)
class Medium:
    """A canvas medium: the grid programs address, the raster resolution, the vocabulary and palette."""

    name: str = "v1"
    grid: int = 24
    resolution: int = 24
    vocabulary: Mapping[str, Primitive] = field(default_factory=lambda: V1_VOCABULARY)
    palette: Palette = field(default_factory=v1_palette)
    background: RGB = (255, 255, 255)  #: colour of the canvas before any call

    def __post_init__(self) -> None:
        if not (1 <= self.grid <= 512 and 1 <= self.resolution <= 1024):
            raise ValueError(f"medium {self.name}: grid {self.grid} / resolution {self.resolution} out of range")

    def at_resolution(self, resolution: int) -> "Medium":
        return replace(self, name=f"{self.name}@{resolution}", resolution=resolution)

    def with_grid(self, grid: int) -> "Medium":
        return replace(self, name=f"{self.name}-{grid}", grid=grid, resolution=grid)

    def with_vocabulary(self, name: str, vocabulary: Mapping[str, Primitive]) -> "Medium":
        return replace(self, name=name, vocabulary=vocabulary)

    def new_canvas(self, limits: Limits | None = None) -> "Canvas":
        return Canvas(self, limits or Limits())


V1 = Medium()
OUTLINE = V1.with_vocabulary("outline", OUTLINE_VOCABULARY)
MEDIA: Mapping[str, Medium] = {"v1": V1, "v1@48": V1.at_resolution(48), "v1-48": V1.with_grid(48), "outline": OUTLINE}


def get_medium(name: str) -> Medium:
    try:
        return MEDIA[name]
    except KeyError:
        raise ValueError(f"unknown medium {name!r}; known: {', '.join(MEDIA)}") from None


@dataclass(frozen=True)
class Call:
    """One executed primitive call, in painter's order, with its normalised arguments."""

    kind: str
    params: tuple[float, ...]  #: numeric arguments; for point primitives the flattened (r, c) pairs
    color: RGB
    order: int

    def points(self) -> list[tuple[float, float]]:
        return [(self.params[i], self.params[i + 1]) for i in range(0, len(self.params), 2)]


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DrawError(f"{what} must be a number, got {type(value).__name__}")
    v = float(value) if not isinstance(value, int) or abs(value) < 2**53 else float(R.clamp(value))
    if not math.isfinite(v):
        raise DrawError(f"{what} must be finite, got {value!r}")
    return v


class Canvas:
    """The drawing surface one program paints: raster pixels plus the ordered call log."""

    def __init__(self, medium: Medium, limits: Limits) -> None:
        self.medium = medium
        self.limits = limits
        n = medium.resolution
        self.pixels = np.empty((n, n, 3), dtype=np.uint8)
        self.pixels[:] = medium.background
        self.calls: list[Call] = []
        self.pixel_writes = 0
        self.vertices = 0  #: polygon points drawn so far (bounded by Limits.max_total_vertices)
        self.background: RGB = medium.background
        #: where drawing charges its work units (the sandbox's meter; nothing outside it)
        self.charge: Callable[[int], None] = _no_charge
        if medium.resolution != medium.grid:
            step = medium.grid / n
            centres = (np.arange(n) + 0.5) * step
            self._xs, self._ys = np.meshgrid(centres, centres)

    def functions(self) -> dict[str, Callable[..., None]]:
        """The vocabulary as plain functions bound to this canvas (what programs call)."""
        out = {}
        for name, prim in self.medium.vocabulary.items():
            out[name] = self._bind(prim)
        return out

    def _bind(self, prim: Primitive) -> Callable[..., None]:
        def primitive(*args: Any, **kwargs: Any) -> None:
            self.draw(prim, args, kwargs)

        primitive.__name__ = prim.name
        primitive.__doc__ = prim.doc
        return primitive

    def draw(self, prim: Primitive, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        if len(self.calls) >= self.limits.max_calls:
            raise BudgetExceeded(f"more than {self.limits.max_calls} primitive calls")
        params, color = self._parse(prim, list(args), dict(kwargs))
        units = call_units(prim, params, self.medium.grid)
        if units > self.limits.max_ops:
            raise BudgetExceeded(f"{prim.name}() of {len(params) // 2} vertices that is not a simple polygon: its even-odd "
                                 f"reading costs {units} work units, over the {self.limits.max_ops} of a program")
        self.charge(units)
        rgb = self.medium.palette.rgb(color)
        n, grid = self.medium.resolution, self.medium.grid
        if prim.takes_points:
            pts = [(params[i], params[i + 1]) for i in range(0, len(params), 2)]
            if n == grid:
                mask = prim.mask(pts, n)
            else:
                mask = self._sample(prim.shape(pts, grid))
        else:
            # the reason keeps the word "circle" for every radius primitive: it is a recorded result
            if prim.radius is not None and abs(params[prim.radius]) > R.MAX_RADIUS:
                raise BudgetExceeded(f"circle radius {params[prim.radius]:g} exceeds {R.MAX_RADIUS}")
            mask = prim.mask(*params, n) if n == grid else self._sample(prim.shape(*params, grid))
        self.pixel_writes += int(np.count_nonzero(mask)) if prim.name != "fill" else n * n
        if self.pixel_writes > self.limits.max_pixels:
            raise BudgetExceeded(f"more than {self.limits.max_pixels} pixel writes")
        self.pixels[mask] = rgb
        if prim.name == "fill":
            self.background = rgb
        self.calls.append(Call(prim.name, params, rgb, len(self.calls)))

    def _sample(self, geom: BaseGeometry) -> np.ndarray:
        if geom.is_empty:
            return np.zeros(self._xs.shape, dtype=bool)
        return shapely.intersects_xy(geom, self._xs, self._ys)

    def _parse(self, prim: Primitive, args: list[Any], kwargs: dict[str, Any]) -> tuple[tuple[float, ...], Any]:
        color = None
        for key in ("color", "colour"):
            if key in kwargs:
                color = kwargs.pop(key)
        if prim.takes_points:
            if "points" in kwargs:
                args.insert(0, kwargs.pop("points"))
            if kwargs:
                raise DrawError(f"{prim.name}() got unexpected keyword {brief(next(iter(kwargs)))}")
            if color is None and len(args) == 2:
                color = args.pop()
            if len(args) != 1 or color is None:
                raise DrawError(f"{prim.name}() takes a list of (r, c) points and a color")
            pts = args[0]
            if not isinstance(pts, (list, tuple)):
                raise DrawError(f"{prim.name}() points must be a list of (r, c) pairs")
            if len(pts) > self.limits.max_vertices:
                raise BudgetExceeded(f"{prim.name}() with more than {self.limits.max_vertices} vertices")
            self.vertices += len(pts)
            if self.vertices > self.limits.max_total_vertices:
                raise BudgetExceeded(f"more than {self.limits.max_total_vertices} polygon vertices in all")
            flat: list[float] = []
            for p in pts:
                if not isinstance(p, (list, tuple)) or len(p) != 2:
                    raise DrawError(f"{prim.name}() points must be (r, c) pairs")
                flat.append(_number(p[0], f"{prim.name}() point row"))
                flat.append(_number(p[1], f"{prim.name}() point column"))
            return tuple(flat), color
        names = prim.params
        values: list[Any] = list(args[: len(names)])
        rest = args[len(names) :]
        for nm in names[len(values) :]:
            if nm in kwargs:
                values.append(kwargs.pop(nm))
        if kwargs:
            raise DrawError(f"{prim.name}() got unexpected keyword {brief(next(iter(kwargs)))}")
        if color is None and len(rest) == 1:
            color = rest.pop()
        if len(values) != len(names) or rest or color is None:
            sig = ", ".join(names + ("color",))
            raise DrawError(f"{prim.name}() takes ({sig}), got {len(args) + len(kwargs)} arguments")
        return tuple(_number(v, f"{prim.name}() {nm}") for v, nm in zip(values, names)), color

    def shapes(self) -> list[BaseGeometry]:
        """Continuous shape of every call, in painter's order (cell units of the grid)."""
        return [self.shape_of(c) for c in self.calls]

    def shape_of(self, call: Call) -> BaseGeometry:
        return shape_of(self.medium, call)


def _no_charge(units: int) -> None:
    return None


#: work units of one primitive call: parsing, rasterising, its shape and the checks on it (about 50 us)
CALL_UNITS = 1_200
#: primitives whose call costs more or less than CALL_UNITS (measured per call, drawing and shape: a
#: disc's 257-vertex shape about 130 us, a line 70 us, a fill 25 us)
#: (circles at 3,200 measured 0.47-0.56 s at the full budget, so 4,000)
PRIMITIVE_UNITS = {"fill": 600, "line": 1_800, "circle": 4_000, "circle_outline": 4_000}
#: a polygon's scanline fill: per row it spans, and per row and edge (a full-height triangle took 0.31 ms,
#: a 40-vertex ring 0.71 ms)
ROW_UNITS = 250
ROW_EDGE_UNITS = 8
#: per polygon vertex of a ring that does not cross itself (rasterising, clipping and checking its shape:
#: 24 rings of 4,096 vertices took 0.62 s of CPU)
VERTEX_UNITS = 128
#: times n^2 for a ring read by the even-odd rule (a ring that is not a simple polygon): the balanced XOR
#: of its n - 2 fan triangles (a 256-vertex zigzag with 253 crossings took 0.19 s of CPU)
EVEN_ODD_UNITS = 84  # 64 measured 0.45-0.66 s for zigzags at the full budget, near the bench's 0.6 s
#: and a fixed part: the validity check, the crossing count and the overlays of even the smallest ring
#: (a full-canvas bow tie took 0.6 ms; at 3,000, 5,000 and 6,000 units, bow ties to the full budget took
#: 0.50-0.71 s of CPU, around the 0.6 s perf/bench_meter.py allows, so 9,000)
EVEN_ODD_BASE_UNITS = 9_000
#: times k^1.5 for its k crossings (a 96-vertex star with 4,371 crossings took 1.2 s)
CROSSING_UNITS = 100
#: rings of more vertices than this are charged 84 n^2 without counting their crossings (already over
#: the default budget; counting them would cost O(n^2) itself)
COUNTED_VERTICES = 400


def call_units(prim: Primitive, params: tuple[float, ...], grid: int = 24) -> int:
    """Work units one primitive call costs (bench.sandbox.meter): deterministic in its parameters."""
    if not prim.takes_points:
        return PRIMITIVE_UNITS.get(prim.name, CALL_UNITS)
    n = len(params) // 2
    units = CALL_UNITS + VERTEX_UNITS * n
    if n:
        rows = params[0::2]
        # only the canvas's rows are filled, however far outside it the coordinates reach
        spanned = max(0, min(grid, math.ceil(max(rows))) - max(0, math.floor(min(rows))))
        units += spanned * (ROW_UNITS + ROW_EDGE_UNITS * n)
    if n >= 4:
        pts = list(zip(params[0::2], params[1::2]))
        if G.needs_even_odd(pts):
            units += EVEN_ODD_BASE_UNITS + EVEN_ODD_UNITS * n * n
            if n <= COUNTED_VERTICES:
                units += int(CROSSING_UNITS * G.crossings(pts) ** 1.5)
    return units


def shape_of(medium: Medium, call: Call) -> BaseGeometry:
    prim = medium.vocabulary[call.kind]
    if prim.takes_points:
        return prim.shape(call.points(), medium.grid)
    return prim.shape(*call.params, medium.grid)


__all__ = [
    "BudgetExceeded",
    "Call",
    "Canvas",
    "ColorError",
    "DrawError",
    "Limits",
    "MEDIA",
    "Medium",
    "OUTLINE",
    "Primitive",
    "V1",
    "get_medium",
    "shape_of",
]
