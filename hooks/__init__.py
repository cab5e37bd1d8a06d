"""Hook functions for the runtime: position-selecting capture, activation patching, steering."""
