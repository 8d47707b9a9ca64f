"""The formatters, registry and freshness check behind ``tools/render_docs.py`` (one module per page or
results family)."""
