"""Sphinx configuration: the API reference is generated from the docstrings (autodoc); the
guide is written by hand. Built in CI with warnings as errors:
``python -m sphinx -W --keep-going -b html docs docs/_build/html``."""
from __future__ import annotations

import importlib.metadata

project = "uvm_sched"
author = "the uvm_sched developers"
release = importlib.metadata.version("uvm_sched")  # the one place: pyproject.toml
version = release

extensions = ["sphinx.ext.autodoc"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []

# Docstrings name arguments with ``double backquotes``; a `single` one is a literal too.
default_role = "literal"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
