import pytest

from contextfold._exceptions import MessageFormatError
from contextfold.agent import check_requests_valid
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock


def test_a_call_without_its_result_is_reported_with_the_request_index() -> None:
    good = [Msg("user", "hi", "user")]
    call = ToolCallBlock(id="c1", name="t", input={})
    bad = [Msg("user", "hi", "user"), Msg("a", [call], "assistant"), Msg("user", "next", "user")]
    with pytest.raises(MessageFormatError, match="request 1 is not openai-valid"):
        check_requests_valid([good, bad])


def test_paired_call_and_result_pass() -> None:
    call = ToolCallBlock(id="c1", name="t", input={})
    result = ToolResultBlock(id="c1", name="t", output="x")
    msgs = [Msg("user", "hi", "user"), Msg("a", [call], "assistant"), Msg("tool", [result], "user")]
    check_requests_valid([msgs])
