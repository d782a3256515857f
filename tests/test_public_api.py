import lfmserve


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in dir(lfmserve) if not name.startswith("_")}
    modules = {"chat", "errors", "settings", "engine", "native", "records", "sampling", "scheduler", "stream",
               "detokenizer", "stop", "chat_template", "loader", "serving", "protocol", "server", "hub", "cli", "testing"}
    assert set(lfmserve.__all__) == public - modules
    for name in lfmserve.__all__:
        assert getattr(lfmserve, name).__module__.startswith("lfmserve.")
