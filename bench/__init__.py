"""AM-Bench benchmark side: the canvas medium, the sandbox and the scorers (never imports torch)."""

__version__ = "0.1.0"
