"""A call's inputs made by a reference rank on a GPU (marker gpu), in both forms they travel in:
device blobs, and memfd blobs where the driver refuses device blobs (no VMM). Either way the bytes
a rank stages are masked (sandbox/rank/input_mask.py) and only the call's key gives the inputs
back; a memfd staged without the parent's ``masked`` word stays garbage (the control: the flag is
what makes the rank unmask). One real reference rank (rank 0 of 1, cuda) in a process of its own.

    python -m pytest -m gpu tests/sandbox/harness/test_reference_make_gpu.py -s
"""

import pytest

from tests.support.reference_rank import run

pytestmark = pytest.mark.gpu

BODY = """
    key, mask, round_id, result = 4242, 987654321, 0, {}

    def staged(device_blobs, flag):
        global round_id
        server.on_device = device_blobs
        reply, fds = server.make({"type": "make", "calls": [{"key": key, "regime": 0, "rng": 7, "expect": False,
                                                             "mask": mask}]}, [])
        lent = fds[:2] if reply["calls"][0]["device"] else fds[:1]  # the header and the lent copy (the kept one is alike)
        round_id += 1
        server.stage({"type": "stage", "round": round_id, "masked": flag}, lent)
        for fd in fds:
            os.close(fd)
        return reply["calls"][0]["device"], server.rounds[round_id]["calls"][0]

    clear = server._inputs(key, 0)[0]
    for name, device_blobs, flag in (("device", True, True), ("memfd", False, True), ("memfd_unflagged", False, False)):
        device, entry = staged(device_blobs, flag)
        as_staged = entry["leaves"][0].clone()
        inputs = server._unmasked(entry, mask)[0]
        result[name] = {"device_blob": device, "staged_is_clear": bool(torch.equal(as_staged, clear)),
                        "call_sees_clear": bool(torch.equal(inputs, clear)), "on": inputs.device.type}
    print(json.dumps(result))
"""


def test_inputs_made_on_a_gpu_stay_masked_until_the_call_through_device_or_memfd_blobs(tmp_path):
    result = run(BODY, "cuda", tmp_path)
    print(f"reference inputs on a GPU: {result}")
    assert result["device"] == {"device_blob": True, "staged_is_clear": False, "call_sees_clear": True, "on": "cuda"}
    assert result["memfd"] == {"device_blob": False, "staged_is_clear": False, "call_sees_clear": True, "on": "cuda"}
    # control: a memfd the parent does not call masked is taken as it is, and its bytes are the masked ones
    assert result["memfd_unflagged"] == {"device_blob": False, "staged_is_clear": False, "call_sees_clear": False, "on": "cuda"}
