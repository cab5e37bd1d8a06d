"""The SVG medium (Exp. 2): sanitise model-written SVG, rasterise it at native size and at 24x24."""
