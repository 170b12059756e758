"""Symbolic short-term memory: offload entries, refs, task boundaries, canvases, injection and reclaim."""
