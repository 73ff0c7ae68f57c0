"""``OwnNewest``: what a process remembers of its own newest commits stays bounded."""

from __future__ import annotations

import pytest

from s3ddb.commit import own_newest
from s3ddb.commit.own_newest import OwnNewest


def test_the_least_recently_committed_dataset_goes_first() -> None:
    own: OwnNewest[str] = OwnNewest(max_datasets=3)
    for name in ("a", "b", "c"):
        own.won(name, 1, f"{name}1")
    own.won("a", 2, "a2")  # a is now the most recently committed
    own.won("d", 1, "d1")  # b goes
    assert [own.presumed(n) for n in ("a", "b", "c", "d")] == ["a2", None, "c1", "d1"]
    assert len(own) == 3


def test_an_older_version_never_replaces_a_newer_one() -> None:
    own: OwnNewest[str] = OwnNewest()
    own.won("a", 5, "a5")
    own.won("a", 4, "a4")
    assert own.presumed("a") == "a5"


def test_many_datasets_keep_the_record_bounded() -> None:
    own: OwnNewest[int] = OwnNewest(max_datasets=50)
    for i in range(5_000):
        own.won(f"s3://bucket/t{i}", 1, i)
        if i % 2:
            own.lost(f"s3://bucket/t{i}")
    assert len(own) <= 100  # at most 50 committed and 50 quiet
    assert own.presumed("s3://bucket/t4998") == 4998


def test_a_quiet_period_ends_and_is_then_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(own_newest.time, "monotonic", lambda: now[0])
    own: OwnNewest[str] = OwnNewest(max_datasets=10)
    own.won("a", 1, "a1")
    own.lost("a")
    own.won("a", 2, "a2")
    assert own.presumed("a") is None  # another writer was seen lately
    now[0] += OwnNewest.QUIET_SECONDS + 1
    assert own.presumed("a") == "a2"
    own.lost("b")  # a's ended quiet period is dropped when another begins
    assert len(own) == 2  # a (committed) and b (quiet)
    own.won("a", 3, "a3")
    now[0] += OwnNewest.QUIET_SECONDS + 1
    own.lost("c")
    assert own.presumed("b") is None and len(own) == 2  # b forgotten: a and c remain


def test_a_bound_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        OwnNewest(max_datasets=0)
