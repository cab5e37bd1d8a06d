"""Colours of the canvas medium: the 30-name recommended palette, CSS names, '#rrggbb' and (r, g, b)."""

from __future__ import annotations

import json
import itertools
import reprlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Mapping

RGB = tuple[int, int, int]



_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxother = 3, 40


def brief(value: object, width: int = 60) -> str:
    """A repr of `value` of at most `width` characters, bounded *before* it is built: `f'{x!r:.60}'` builds the
    whole repr and then cuts it, so `fill((big, 0, 0))` rendered a list of 100,000 big integers in full inside
    one error message, outside every charge (issue 32). reprlib shows a few elements of a few levels."""
    if isinstance(value, _VIEWS):  # reprlib knows no dict view: it would build the whole repr, then cut it (issue 42)
        head = list(itertools.islice(value, _BRIEF.maxlist + 1))
        return f"{type(value).__name__}({_BRIEF.repr(head)})"[:width]
    return _BRIEF.repr(value)[:width]


_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))

class ColorError(ValueError):
    """A colour argument that is not a palette name, a CSS name, '#rrggbb'/'#rgb' or an (r, g, b) triple."""


@dataclass(frozen=True)
class Palette:
    """Named colours a medium recommends in its prompt, plus the lenient fallbacks it accepts."""

    name: str
    colors: Mapping[str, RGB]
    accept_css_names: bool = True

    def normalise_name(self, name: str) -> str:
        key = name.strip().lower().replace(" ", "_").replace("-", "_")
        return key.replace("grey", "gray")

    def rgb(self, color: object) -> RGB:
        """Resolve a colour argument to an (r, g, b) triple of ints in 0..255, or raise ColorError."""
        if isinstance(color, str):
            return self._rgb_from_str(color)
        if isinstance(color, (tuple, list)) and len(color) in (3, 4):
            out = []
            for v in color[:3]:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise ColorError(f"colour components must be numbers, got {brief(color)}")
                if v != v:  # NaN
                    raise ColorError("colour component is NaN")
                out.append(int(min(255, max(0, round(v)))))
            return (out[0], out[1], out[2])
        raise ColorError(f"unsupported colour {brief(color)}: use a palette name, '#rrggbb' or (r, g, b)")

    def _rgb_from_str(self, text: str) -> RGB:
        if len(text) > 64:
            raise ColorError("colour string too long")
        s = text.strip()
        if s.startswith("#"):
            h = s[1:]
            if len(h) == 3 and _is_hex(h):
                return (int(h[0] * 2, 16), int(h[1] * 2, 16), int(h[2] * 2, 16))
            if len(h) in (6, 8) and _is_hex(h):
                return (int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16))
            raise ColorError(f"bad hex colour {text!r}: use '#rrggbb'")
        key = self.normalise_name(s)
        if key in self.colors:
            return self.colors[key]
        if self.accept_css_names:
            css = _css_colors().get(key.replace("_", ""))
            if css is not None:
                return css
        raise ColorError(f"unknown colour {text!r}: use one of the palette names ({', '.join(sorted(self.colors)[:6])}, ...), '#rrggbb' or (r, g, b)")

    def name_of(self, rgb: RGB) -> str | None:
        """The palette name of an exact RGB value, if it has one."""
        for k, v in self.colors.items():
            if tuple(v) == tuple(rgb):
                return k
        return None


def _is_hex(s: str) -> bool:
    return all(ch in "0123456789abcdefABCDEF" for ch in s)


@lru_cache(maxsize=1)
def _css_colors() -> dict[str, RGB]:
    from PIL import ImageColor

    out: dict[str, RGB] = {}
    for name, value in ImageColor.colormap.items():
        if isinstance(value, str) and value.startswith("#") and len(value) == 7:
            out[name.lower()] = (int(value[1:3], 16), int(value[3:5], 16), int(value[5:7], 16))
    return out


@lru_cache(maxsize=1)
def v1_palette() -> Palette:
    """The paper's recommended 30-colour palette (data file `bench/canvas/data/palette.json`)."""
    raw = json.loads(resources.files("bench.canvas").joinpath("data/palette.json").read_text())
    if raw.get("schema") != "ambench.palette/1":
        raise ValueError("palette.json: unknown schema")
    colors = {k: tuple(int(x) for x in v) for k, v in raw["colors"].items()}
    if len(colors) != 30:
        raise ValueError(f"palette.json must hold 30 colours, holds {len(colors)}")
    return Palette(name="v1", colors=colors)  # type: ignore[arg-type]
