"""The hook-driven runtime on TransformerLens (TransformerBridge), probes and statistics."""
