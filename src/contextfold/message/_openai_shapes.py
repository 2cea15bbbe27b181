"""What the OpenAI decoder and encoder agree on.

Whatever ``Msg`` does not express (content given as parts rather than a string,
``content: null``, image ``detail``, unknown keys) is kept in ``Msg.metadata["openai"]``
so that converting back reproduces the original exactly. A content shape is recorded only
where it differs from the default the encoder would choose, defined here once.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._blocks import ContentBlock, HintBlock, TextBlock

__all__ = ["AUDIO_FORMATS", "AUDIO_MEDIA", "KEY", "assistant_default_shape", "default_shape"]

KEY = "openai"
"""The ``Msg.metadata`` key (and ``Msg.cache_wire`` form) of the OpenAI format."""
AUDIO_FORMATS = {"mp3": "audio/mpeg", "wav": "audio/wav"}
AUDIO_MEDIA = {v: k for k, v in AUDIO_FORMATS.items()}


def default_shape(blocks: Sequence[ContentBlock]) -> str:
    """How user/system content is sent by default: one text block as a string."""
    if not blocks:
        return "string"
    if len(blocks) == 1 and isinstance(blocks[0], TextBlock | HintBlock):
        return "string"
    return "parts"


def assistant_default_shape(texts: list[TextBlock], *, has_calls: bool) -> str:
    if not texts:
        return "null" if has_calls else "string"
    return "string" if len(texts) == 1 else "parts"
