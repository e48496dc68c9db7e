"""`tenant fetch` decodes base64 with `binascii.a2b_base64(..., strict_mode=True)` where it had
`base64.b64decode(..., validate=True)`: for every text, the same bytes or the same error
(class and message), so the tampering messages built from them do not change."""

from __future__ import annotations

import base64
import binascii

from hypothesis import example, given
from hypothesis import strategies as st

from attestation.tenant.fetch import decode_base64

#: Characters around which strict base64 decoding has rules: padding, whitespace, the
#: URL-safe alphabet, NUL, and text that is not ASCII.
AWKWARD = "=\n\r\t -_.:*\x00\x7féÿ€\U0001f600"


def _outcome(decode: object, text: str) -> tuple[str, object]:
    try:
        return "bytes", decode(text)  # type: ignore[operator]
    except (binascii.Error, ValueError) as exc:
        return type(exc).__name__, str(exc)


def _reference(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


@st.composite
def mutated_base64(draw: st.DrawFn) -> str:
    """The base64 of some bytes, then a few insertions, deletions or replacements."""
    text = list(base64.b64encode(draw(st.binary(max_size=64))).decode())
    for _ in range(draw(st.integers(0, 3))):
        position = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        char = draw(st.sampled_from(AWKWARD + "A+/"))
        if action == "insert" or not text:
            text.insert(position, char)
        elif action == "delete":
            del text[min(position, len(text) - 1)]
        else:
            text[min(position, len(text) - 1)] = char
    return "".join(text)


@given(st.binary(max_size=256))
def test_valid_base64_decodes_to_the_same_bytes(data: bytes) -> None:
    text = base64.b64encode(data).decode()
    assert decode_base64(text) == data == _reference(text)


@given(mutated_base64())
@example("")
@example("QQ")  # missing padding
@example("QQ===")  # excess padding
@example("QQ==QQ==")  # data after padding
@example("=QQ=")  # padding first
@example("QQ==\n")  # trailing newline
@example("Q Q==")  # inner space
@example("QQ-_")  # URL-safe alphabet
@example("QUJD\x00")  # NUL
@example("QUJDé")  # not ASCII
@example("Q")  # one character: not a whole quantum
def test_mutated_base64_gives_the_same_bytes_or_error(text: str) -> None:
    assert _outcome(decode_base64, text) == _outcome(_reference, text)


@given(st.text(alphabet=st.sampled_from(AWKWARD + "ABCxyz019+/"), max_size=24) | st.text())
def test_any_text_gives_the_same_bytes_or_error(text: str) -> None:
    assert _outcome(decode_base64, text) == _outcome(_reference, text)
