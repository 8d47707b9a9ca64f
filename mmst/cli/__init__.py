"""The command-line programs of data preparation and evaluation, one module per console script
(``pyproject.toml``; ``data_prep/<name>.py`` and ``eval/<name>.py`` are thin wrappers that call the same
``main``). Each module has ``build_parser()`` (its options) and ``main(argv) -> exit status``; it parses,
calls the library and reports. ``mmst-train`` is :mod:`mmst.training.cli`, ``mmst-average-checkpoints``
:mod:`mmst.training.average`, ``mmst-serve`` :mod:`mmst.serve.cli`. Option names follow the vocabulary
of ``docs/CONTRACTS.md``."""
