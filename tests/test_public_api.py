import inspect

import lfmserve


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name for name, value in vars(lfmserve).items() if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert set(lfmserve.__all__) == public
    for name in lfmserve.__all__:
        assert getattr(lfmserve, name).__module__.startswith("lfmserve.")
