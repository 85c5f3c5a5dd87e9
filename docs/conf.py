"""Sphinx configuration for streamseq."""

import re
from pathlib import Path

project = "streamseq"
# the version has one place, streamseq/__init__.py (read, not imported)
release = re.search(
    r'^__version__ = "([^"]+)"',
    (Path(__file__).resolve().parents[1] / "streamseq" / "__init__.py").read_text(),
    re.M,
).group(1)
version = ".".join(release.split(".")[:2])
author = "streamseq developers"
copyright = "2026, streamseq developers"
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "sphinx.ext.viewcode",
    "sphinx.ext.intersphinx",
    "matplotlib.sphinxext.plot_directive",
]
intersphinx_mapping = {}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
html_theme = "alabaster"
html_static_path = ["_static"]
exclude_patterns = ["_build"]
nitpicky = False
# pictures made at build time (``.. plot::``): one PNG each, page width, no links
plot_formats = [("png", 100)]
plot_html_show_formats = False
plot_html_show_source_link = False
