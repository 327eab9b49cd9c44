"""formats/duration: durations as kubectl and Flux write them, and milliseconds as the user typed them."""

import pytest

from kubectl_triton.formats.duration import milliseconds, parse_duration


@pytest.mark.parametrize("text, bare, seconds", [
    ("90s", True, 90.0),
    ("500ms", False, 0.5),
    ("26ms", False, 0.026),
    ("1h30m", False, 5400.0),
    ("1m0.5s", False, 60.5),
    ("2.5s", True, 2.5),
    ("30", True, 30.0),
    ("30", False, None),  # Flux's interval carries units
    ("10x", True, None),
    ("5m3", False, None),
    ("", False, None),
])
def test_parse_duration(text, bare, seconds):
    assert parse_duration(text, bare_seconds=bare) == seconds


@pytest.mark.parametrize("text, ms", [("26ms", 26), ("1001ms", 1001), ("9ms", 9), ("0.5ms", 0.5), ("1.5s", 1500),
                                      ("250us", None)])
def test_milliseconds_read_as_given(text, ms):
    seconds = parse_duration(text, bare_seconds=False)
    assert (None if seconds is None else milliseconds(seconds)) == ms
