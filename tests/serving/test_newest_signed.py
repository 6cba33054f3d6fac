"""A router (and any reader of the active set) takes no signed set older than one it took: an old
set put back into the registry's database, which a registry restarted since would serve."""

from __future__ import annotations

from serving.registry_client import ActiveSet, NewestSigned
from tests.serving.agent.signing import sign_set


def offered(body_generation: int, signed_generation: int | None) -> ActiveSet:
    signed = sign_set("chat", [], signed_generation) if signed_generation is not None else None
    return ActiveSet(body_generation, [], f'"{body_generation}"', None, signed)


def test_an_older_signed_generation_is_refused_whatever_the_body_says():
    newest = NewestSigned()

    assert newest.admits(offered(7, 7))
    assert newest.admits(offered(8, 7))  # the same signed set under a bumped generation
    assert not newest.admits(offered(9, 5))  # an old set put back
    assert newest.generation == 7
    assert newest.admits(offered(10, 8)) and newest.generation == 8


def test_a_set_without_a_readable_signed_generation_changes_nothing_it_remembers():
    newest = NewestSigned()
    assert newest.admits(offered(3, 3))

    assert newest.admits(offered(4, None))  # a registry of an earlier release sends none
    assert newest.admits(ActiveSet(5, [], '"5"', None, {"payload": "not base64!"}))
    assert newest.generation == 3 and not newest.admits(offered(6, 2))
