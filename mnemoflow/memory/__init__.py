"""Layered long-term memory: L0 conversations, L1 atoms, L2 scenes, L3 persona, and recall."""
