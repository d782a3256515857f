from lfmserve.engine.stop import StopMatcher


def feed_all(stops: list[str], pieces: list[str]) -> tuple[list[str], str | None, str]:
    matcher = StopMatcher(stops)
    emitted: list[str] = []
    for piece in pieces:
        text, stop = matcher.feed(piece)
        emitted.append(text)
        if stop is not None:
            return emitted, stop, ""
    return emitted, None, matcher.flush()


def test_partial_stop_is_held_back_and_the_stop_is_not_emitted() -> None:
    emitted, stop, rest = feed_all(["\n\n"], ["Hello", "\n", "\nWorld"])
    assert emitted == ["Hello", "", ""] and stop == "\n\n" and rest == ""


def test_held_text_is_released_when_the_match_breaks() -> None:
    emitted, stop, rest = feed_all(["END"], ["a E", "N", "x"])
    assert emitted == ["a ", "", "ENx"] and stop is None and rest == ""


def test_stop_inside_one_piece_cuts_the_text_before_it() -> None:
    emitted, stop, _ = feed_all(["stop", "op"], ["ab stop cd"])
    assert emitted == ["ab "] and stop == "stop"


def test_the_earliest_stop_wins() -> None:
    assert StopMatcher(["b", "a"]).feed("xxab") == ("xx", "a")


def test_flush_releases_a_trailing_partial_match() -> None:
    emitted, stop, rest = feed_all(["</s>"], ["text </"])
    assert emitted == ["text "] and stop is None and rest == "</"


def test_no_stops_passes_text_through() -> None:
    assert StopMatcher([]).feed("abc") == ("abc", None)
