"""Control commands are dispatched on their kind in one place
(``processors.rebuild.requests.accept``), and every command is built in one module
(``infra.control``): no database or broker here."""

from __future__ import annotations

import typing
import uuid

import pytest

from infra.control import cancel_command, pause_command, rebuild_command
from processors.rebuild.requests import accept
from schemas import control
from schemas.control import Kind

NOWHERE = "postgresql://nobody@127.0.0.1:1/none"  # a kind that needs no database never connects


@pytest.mark.parametrize("kind", ["pause", "resume"])
def test_a_pause_or_resume_is_the_pause_watchs_and_starts_nothing(kind: str) -> None:
    command = pause_command(kind, uuid.uuid4(), "t", "c", "op", "maintenance")  # type: ignore[arg-type]
    answer = accept(NOWHERE, command, "product-applier", lambda _t, _c: 1)
    assert (answer.status, answer.row) == ("pause_watch", None)


def test_every_kind_has_a_builder_and_round_trips_the_topic_codec() -> None:
    rebuild_id = uuid.uuid4()
    built = {
        "rebuild": rebuild_command("t", "c", "op", "why", consumer="product-applier"),
        "cancel": cancel_command(rebuild_id, "t", "c", "product-applier", "op", "stop"),
        "pause": pause_command("pause", uuid.uuid4(), "t", "c", "op", "restore"),
        "resume": pause_command("resume", uuid.uuid4(), "t", "c", "op", "done"),
    }
    assert set(built) == set(typing.get_args(Kind))
    for kind, command in built.items():
        assert command.kind == kind and command.key() == b"t/c"
        assert control.decode(control.encode(command)) == command
    assert built["cancel"].rebuild_id == rebuild_id
    assert built["rebuild"].consumer == "product-applier"
