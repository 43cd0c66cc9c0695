"""The reference's ``make`` (sandbox/harness/reference_rank.py), in a real reference rank on the CPU:
every call's inputs are made before any expectation, so the order in which it keeps the machine
busy says how many of a round's calls are checked, never which; the reply still carries each
call's descriptors in the call's order."""

from tests.support.reference_rank import run

BODY = """
    from sandbox.harness.calls import Expected

    order = []
    for name in ("_input_blob", "_expected"):
        def recording(*args, _name=name, _real=getattr(server, name)):
            order.append(_name)
            return _real(*args)
        setattr(server, name, recording)
    expect = [False, True, False, True]
    reply, fds = server.make({"type": "make", "calls": [{"key": 100 + i, "regime": 0, "rng": 7, "expect": e, "native": False,
                                                         "perturb": None} for i, e in enumerate(expect)]}, [])
    read = []
    for summary in reply["calls"]:
        os.close(fds.pop(0))  # the call's input blob (a memfd on the CPU)
        read.append(Expected.read(summary, fds).expected[0].shape[0] if summary["expect"] else None)
    print(json.dumps({"order": order, "expect": [c["expect"] for c in reply["calls"]], "read": read, "left": len(fds)}))
"""


def test_a_make_makes_every_input_before_any_expectation(tmp_path):
    result = run(BODY, "cpu", tmp_path)
    assert result["order"] == ["_input_blob"] * 4 + ["_expected"] * 2  # call by call, it was input, input+expected, input, ...
    assert result["expect"] == [False, True, False, True] and result["left"] == 0
    assert result["read"][0] is None and result["read"][1] == result["read"][3] == 12_288  # each expectation after its own inputs


def test_how_inputs_are_handed_over_comes_from_the_environment(monkeypatch):
    """``KLOOP_INPUT_BLOBS``: device memory by default, memory files when asked (the path of a driver
    without VMM, checked on one that has it: tests/sandbox/harness/test_hostile_gpu.py), and a
    value that is neither is ignored."""
    from sandbox.harness.reference_rank import input_blobs

    monkeypatch.delenv("KLOOP_INPUT_BLOBS", raising=False)
    assert input_blobs() == "device"
    monkeypatch.setenv("KLOOP_INPUT_BLOBS", "memfd")
    assert input_blobs() == "memfd"
    monkeypatch.setenv("KLOOP_INPUT_BLOBS", "ram")
    assert input_blobs() == "device"
