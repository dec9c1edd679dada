"""`benchmarks/attention.py`'s command line: `--image` arms."""

from __future__ import annotations

import pytest

from benchmarks import attention

pytestmark = pytest.mark.backend_independent


def test_image_never_asks_a_child_for_selfattention(monkeypatch):
    # SelfAttention takes sequences: with it among the default arms, one
    # child timed all three and every arm was "skipped" with its error.
    calls = []
    monkeypatch.setattr(attention, "_SHAPE_ARGS", [])
    monkeypatch.setattr(
        attention, "_spawn", lambda args, timeout=None: calls.append(args) or {}
    )
    argv = ["--image", "--lengths", "8", "--dim", "32", "--no-search", "--no-memory"]
    attention.main(argv)
    timed = [args for args in calls if args[:2] == ["--child", "time"]]
    assert timed
    assert all(args[args.index("--impls") + 1] == "mha,keras" for args in timed)


@pytest.mark.parametrize(
    "argv",
    [
        ["--image", "--impls", "selfattention"],
        ["--image", "--search-impls", "selfattention,keras"],
        ["--image", "--sweep", "--sweep-impl", "selfattention"],
    ],
    ids=["impls", "search_impls", "sweep_impl"],
)
def test_image_with_selfattention_is_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        attention.main(argv)
    assert exit_.value.code == 2
    assert "--image: SelfAttention takes sequences" in capsys.readouterr().err
