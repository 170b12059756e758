"""L2: scene blocks. The scene model and files, the pass that plans and commits them, its schedule and
the forgetting of deleted atoms.
"""
