from contextfold.tool._docstring import parse_docstring


def test_google_style_args_and_summary_are_split() -> None:
    doc = parse_docstring(
        """Search the notes.

        More detail here.

        Args:
            query (str): Words to look for,
                across two lines.
            limit: Most results.

        Returns:
            The hits.
        """
    )
    assert doc.description == "Search the notes.\n\nMore detail here."
    assert doc.params == {"query": "Words to look for, across two lines.", "limit": "Most results."}


def test_numpy_style_parameters_are_read() -> None:
    doc = parse_docstring(
        """Add numbers.

        Parameters
        ----------
        a : int
            First addend.
        b : int
            Second addend.

        Returns
        -------
        int
            The sum.
        """
    )
    assert doc.description == "Add numbers."
    assert doc.params == {"a": "First addend.", "b": "Second addend."}


def test_sphinx_style_params_are_read() -> None:
    doc = parse_docstring("Do it.\n\n:param x: The x.\n:returns: nothing")
    assert doc.description == "Do it."
    assert doc.params == {"x": "The x."}


def test_missing_docstring_gives_empty_result() -> None:
    doc = parse_docstring(None)
    assert doc.description == ""
    assert doc.params == {}
