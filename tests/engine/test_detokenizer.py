from lfmserve.engine.detokenizer import StreamingDetokenizer


def test_a_character_split_across_tokens_is_emitted_once_complete() -> None:
    pieces = {1: "é".encode()[:1], 2: "é".encode()[1:] + b"!", 3: "🙂".encode()[:2], 4: "🙂".encode()[2:]}
    detok = StreamingDetokenizer(pieces.__getitem__)
    assert [detok.add(t) for t in (1, 2, 3, 4)] == ["", "é!", "", "🙂"]
    assert detok.flush() == ""


def test_an_incomplete_character_at_the_end_becomes_a_replacement_character() -> None:
    detok = StreamingDetokenizer({1: b"ok\xe2\x82"}.__getitem__)
    assert detok.add(1) == "ok"
    assert detok.flush() == "\ufffd"
