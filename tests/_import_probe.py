"""A module only ``tests/engine/test_placement.py`` imports, through an operator's ``imports``: the
test checks it is imported before the operator's first task runs."""
