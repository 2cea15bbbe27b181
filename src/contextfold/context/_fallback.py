"""What takes the summary's place when every summary attempt failed."""

from __future__ import annotations

__all__ = ["truncation_note"]


def truncation_note(
    *, removed: int, ref: str | None, error: BaseException, previous: str | None
) -> str:
    """A note that ``removed`` older messages were dropped unsummarized.

    The previous summary, if any, is still true of the history before it, so it is kept
    below the note rather than lost with the failed attempt.
    """
    where = (
        f" They were saved to '{ref}'; read them from there if you need details."
        if ref
        else " They were discarded."
    )
    note = (
        f"<system-info>The context was shortened: {removed} earlier message(s) were removed "
        f"because a summary of them could not be generated ({type(error).__name__}).{where}"
        "</system-info>"
    )
    if previous:
        note += f"\n\nThe summary of the history before them was:\n{previous}"
    return note
