"""Sphinx configuration for streamseq."""

project = "streamseq"
author = "streamseq developers"
copyright = "2026, streamseq developers"
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "sphinx.ext.viewcode",
    "sphinx.ext.intersphinx",
]
intersphinx_mapping = {}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
html_theme = "alabaster"
html_static_path = ["_static"]
exclude_patterns = ["_build"]
nitpicky = False
