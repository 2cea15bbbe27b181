"""Hypothesis strategies for random messages of every shape (valid blocks, any mix)."""

from hypothesis import strategies as st

from contextfold.message import (
    Base64Source,
    DataBlock,
    HintBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    URLSource,
)

text = st.text(max_size=12)
ids = st.text(alphabet="abcXYZ019_-.:", min_size=1, max_size=8)
json_scalar = st.none() | st.booleans() | st.integers(-1000, 1000) | text
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
media = st.sampled_from(
    ["image/png", "image/jpeg", "audio/wav", "audio/mpeg", "application/pdf", "video/mp4"]
)
source = st.builds(
    Base64Source, media_type=media, data=st.sampled_from(["", "AAAA", "iVBORw0KGgo="])
) | st.builds(
    URLSource,
    url=st.sampled_from(["https://x.org/a.png", "https://x.org/doc", "data:image/png;base64,AA=="]),
    media_type=st.none() | media,
)
data_block = st.builds(DataBlock, source=source, name=st.none() | text)
text_block = st.builds(TextBlock, text=text)
call_block = st.builds(
    ToolCallBlock,
    id=ids,
    name=text,
    input=st.dictionaries(text, json_value, max_size=3),
    raw_input=st.none() | st.sampled_from(["", "{}", '{"a": 1}', "not json", "[1]"]),
    input_error=st.none() | text,
)
result_block = st.builds(
    ToolResultBlock,
    id=ids,
    name=text,
    output=text | st.lists(text_block | data_block, max_size=3),
    is_error=st.booleans(),
    metadata=st.dictionaries(text, json_value, max_size=2),
)
thinking_block = st.builds(
    ThinkingBlock, thinking=text, signature=st.none() | text, redacted=st.none() | text
)
hint_block = st.builds(HintBlock, hint=text)
any_block = text_block | data_block | call_block | result_block | thinking_block | hint_block
msg = st.builds(
    Msg,
    name=text,
    content=text | st.lists(any_block, max_size=4),
    role=st.sampled_from(["user", "assistant", "system"]),
    metadata=st.dictionaries(text, json_value, max_size=2),
)
msgs = st.lists(msg, max_size=6)
