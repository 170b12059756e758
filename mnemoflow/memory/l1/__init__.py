"""L1: atomic facts. When to extract (triggers, schedule, windows), extraction, dedup against the index, and
the record history that links each atom to its L0 messages.
"""
