"""Example veriloop plugin: a task (reverse a word), its verifier and a shaped reward function.

Nothing here registers itself on import: veriloop reads this package's entry points (pyproject.toml) and imports
``task``, ``verifier`` or ``rewards`` the first time a config names their entries."""
