"""How one task-result event becomes a line and a host's result (provision.pipeline.events.task_line).

The Mitogen messages are the ones a `docker kill` of a stock host mid-play produced on 2026-11-23 (ansible-mitogen
0.3, ansible-core 2.x): Mitogen reports some lost connections as failed tasks, and a lost host must count as
unreachable (exit 3, retried by `apply --failed`), not as a role's failure.
"""

from __future__ import annotations

import pytest

from provision.pipeline.events import connection_lost, task_line


def event(kind: str, msg: str, **res) -> dict:
    return {"event": kind, "event_data": {"host": "gpu1", "task": "venv | Create the account", "res": {"msg": msg, **res}}}


LOST = [
    "Task failed: Channel was disconnected while connection attempt was in progress; this may be caused by an "
    "abnormal Ansible exit, or due to an unreliable target.",
    "Task failed: Mitogen was disconnected from the remote environment while a call was in-progress. If you feel "
    "this is in error, please file a bug. Original error was: the respondent Context has disconnected",
    "Task failed: builtins.AttributeError: 'NoneType' object has no attribute 'protocol'\n  File \"/venv/lib/"
    "python3.11/site-packages/mitogen/service.py\", line 619, in _on_service_call",
    "Task failed: EOF on stream; last 100 lines received:\nkex_exchange_identification: read: Connection reset by peer",
]


@pytest.mark.parametrize("msg", LOST)
def test_a_connection_lost_mid_task_is_unreachable_not_failed(msg: str) -> None:
    host, task, state, line = task_line(event("runner_on_failed", msg))
    assert (host, task, state) == ("gpu1", "venv | Create the account", "unreachable")
    assert line.startswith("the connection to the host was lost during this step")


@pytest.mark.parametrize("msg", [
    "Failed to create user u1: useradd: group 'ml' does not exist",
    # A module's own AttributeError is its failure, not a lost host.
    "Task failed: builtins.AttributeError: 'NoneType' object has no attribute 'protocol'\n  File \"/tmp/ansible_mod"
    "/mymodule.py\", line 3",
    "non-zero return code",
])
def test_a_task_that_failed_on_a_reachable_host_stays_failed(msg: str) -> None:
    assert not connection_lost({"msg": msg})
    assert task_line(event("runner_on_failed", msg, rc=1))[2] == "failed"


def test_escape_sequences_a_host_printed_never_reach_the_terminal_raw() -> None:
    """A failed step's message can carry what the notebook account's interpreter printed."""
    _, _, state, line = task_line(event("runner_on_failed", "wheel check: \x1b]0;owned\x07\x1b[2J done"))
    assert state == "failed"
    assert "\x1b" not in line and "\x07" not in line and "\\x1b" in line, line


def test_a_roles_own_failure_is_kept_whole_with_its_advice_at_the_end() -> None:
    """Found by the Secure Boot VM test: nvidia_driver's refusal was cut at 300 characters, before the command that
    enrols the key. A role's own words (a fail or assert task of one of the roles) are kept whole; anything else is
    still one short line."""
    advice = "Enrol the key: `sudo mokutil --import /var/lib/dkms/mok.pub`, reboot, then apply again."
    msg = "nvidia_driver: gpu1 boots with Secure Boot on and its firmware does not trust the key; " + "x" * 500 + advice
    own = event("runner_on_failed", msg)
    own["event_data"] |= {"role": "nvidia_driver", "task_action": "ansible.builtin.assert",
                          "resolved_action": "ansible.builtin.assert"}
    _, _, state, line = task_line(own)
    assert state == "failed" and line.endswith(advice)
    _, _, _, other = task_line(event("runner_on_failed", "some module: " + "y" * 500 + advice))
    assert len(other) < 400 and advice not in other
    _, _, _, same_words = task_line(event("runner_on_failed", msg))  # the words alone, from no role's fail or assert
    assert len(same_words) < 400 and advice not in same_words


def test_a_task_of_a_collection_role_reads_as_before():
    """site.yml names the roles provision.gpu.<role>; Ansible puts that before each task's name. Lines and timings
    keep the role's short name, as they read before the roles became a collection."""
    kind = {"event": "runner_on_ok", "event_data": {"host": "gpu1", "task": "provision.gpu.cuda : Install the wheels",
                                                    "res": {"changed": True}}}
    assert task_line(kind) == ("gpu1", "cuda : Install the wheels", "changed", "")
    kind["event_data"]["task"] = "Gathering Facts"
    assert task_line(kind)[1] == "Gathering Facts"
