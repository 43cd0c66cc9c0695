"""What a rank may say to the parent: replies are validated strictly, yet what a rank sends as JSON
(lists where the schema has tuples) still parses."""

from __future__ import annotations

import json

import pytest

from sandbox.harness.messages import Profiled, ProtocolViolation, parse_reply


def _profiled(activities) -> dict:
    # what a rank's profile reply looks like after the JSON wire: tuples arrive as lists
    return json.loads(json.dumps({"type": "profiled", "round": 0, "calls": 2, "wall_ms": [0.5, 0.4], "activities": activities}))


def test_a_profile_reply_with_device_activities_parses():
    reply = parse_reply(_profiled([["ncclKernel_AllReduce", 10.0, 25.5], ["Memcpy DtoD", 30, 31]]))
    assert isinstance(reply, Profiled)
    assert reply.activities == [("ncclKernel_AllReduce", 10.0, 25.5), ("Memcpy DtoD", 30.0, 31.0)]


@pytest.mark.parametrize("activity", [["k", 1.0], ["k", 1.0, 2.0, 3.0], ["k", "1.0", 2.0], [7, 1.0, 2.0], "k,1,2"])
def test_a_malformed_activity_is_a_protocol_violation(activity):
    with pytest.raises(ProtocolViolation, match="Profiled"):
        parse_reply(_profiled([activity]))


def test_every_reply_a_rank_can_send_is_one_the_parent_parses():
    """A reply type defined but not registered reads as a protocol violation of a trusted rank
    (a reference's new reply did, on the H200, before this test): every Reply model in messages
    is in REPLIES."""
    from sandbox.harness import messages

    models = {obj for obj in vars(messages).values()
              if isinstance(obj, type) and issubclass(obj, messages.Reply) and obj is not messages.Reply}
    assert models == set(messages.REPLIES.values())
