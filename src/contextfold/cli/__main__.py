"""``python -m contextfold.cli``: the same as the ``contextfold`` command."""

from ._app import main

main()
