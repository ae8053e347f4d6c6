"""Message ids follow each other in the order they were made, within one millisecond too: a thread
orders its messages of one second by id (several customer messages of one Meta POST are stored in the
same millisecond), and indexes keep them in creation order."""

from __future__ import annotations

import threading

from wagate.core.ids import new_id


def test_ids_made_in_one_millisecond_keep_their_order() -> None:
    ids = [new_id("msg") for _ in range(20_000)]  # thousands share each millisecond
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_ids_made_by_threads_at_once_are_all_different() -> None:
    made: list[list[str]] = [[] for _ in range(4)]

    def make(into: list[str]) -> None:
        into.extend(new_id("msg") for _ in range(5_000))

    threads = [threading.Thread(target=make, args=(into,)) for into in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [one for into in made for one in into]
    assert len(set(every)) == len(every)
    for into in made:
        assert into == sorted(into)
