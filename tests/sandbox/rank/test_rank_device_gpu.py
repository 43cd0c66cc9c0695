"""The flush before a timed call on a GPU (marker gpu): it keeps the device busy for about the
warm-up asked (WARM_UP_MS by default: the GPU is not idle, its clocks down, when the call starts),
and it evicts the L2."""

import pytest

pytestmark = pytest.mark.gpu


def test_the_flush_keeps_the_gpu_busy_for_the_warm_up(tmp_path):
    import torch

    from sandbox.rank.device import WARM_UP_MS, RankDevice, flushes_for

    device = RankDevice(0, 1, "cuda", str(tmp_path / "store"), collectives=True)
    try:
        assert device.flushes == flushes_for(WARM_UP_MS, device.flush_ms) > 1
        for warm_up_ms in (WARM_UP_MS, 2.0):  # the judge's default, and a config's longer one (HarnessConfig.warm_up_ms)
            count = flushes_for(warm_up_ms, device.flush_ms)
            busy = []
            for _ in range(10):
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                device.flush_l2(count)
                end.record()
                end.synchronize()
                busy.append(start.elapsed_time(end))
            busy.sort()
            median = busy[len(busy) // 2]
            print(f"flush before a timed call: {count} flushes of 256 MiB ({device.flush_ms:.4f} ms each), GPU busy "
                  f"{median:.2f} ms (goal {warm_up_ms} ms; min {busy[0]:.2f}, max {busy[-1]:.2f})")
            assert 0.5 * warm_up_ms <= median <= 3.0 * warm_up_ms

        data = torch.ones(16 * 2**20, dtype=torch.float32, device="cuda")  # 64 MiB, larger than the H200's L2
        reads = {}
        for flushed in (False, True):
            times = []
            for _ in range(10):
                data.sum()
                if flushed:
                    device.flush_l2(device.flushes)
                _, ms = device.timed(lambda: data[: 2 * 2**20].sum())  # 8 MiB: fits in L2 unless evicted
                times.append(ms)
            reads[flushed] = sorted(times)[len(times) // 2]
        print(f"an 8 MiB read after a read of it: {reads[False]:.4f} ms warm, {reads[True]:.4f} ms after the flush")
        assert reads[True] > reads[False]
    finally:
        torch.distributed.destroy_process_group()


def test_a_call_timed_ahead_holds_its_device_time_without_the_launch(tmp_path):
    """``timed_ahead`` queues the call behind the flushes: a call of many tiny kernels, whose
    timed interval is mostly the host launching them, reads far shorter ahead; a call of one large
    copy reads no longer ahead, and no shorter than its bytes take at the HBM's rate."""
    import torch

    from sandbox.rank.device import RankDevice

    device = RankDevice(0, 1, "cuda", str(tmp_path / "store"), collectives=True)
    try:
        tiny = torch.zeros(1, device="cuda")
        big = torch.empty(32 * 2**20, dtype=torch.bfloat16, device="cuda")  # 64 MiB

        def many_launches():
            for _ in range(200):
                tiny.add_(1)

        reads = {}
        for name, body in (("200 tiny kernels", many_launches), ("one 64 MiB copy", big.clone)):
            for how, timer in (("timed", lambda b=body: device.timed(b)), ("ahead", lambda b=body: device.timed_ahead(b, device.flushes))):
                times = []
                for _ in range(12):
                    device.flush_l2(device.flushes)
                    times.append(timer()[1])
                reads[name, how] = sorted(times)[len(times) // 2]
        print("timed vs ahead (median ms): " + ", ".join(f"{name} {how} {ms:.4f}" for (name, how), ms in reads.items()))
        assert reads["200 tiny kernels", "ahead"] < 0.7 * reads["200 tiny kernels", "timed"]
        assert reads["one 64 MiB copy", "ahead"] <= reads["one 64 MiB copy", "timed"] * 1.05
        # it still holds the copy's device time: 64 MiB read and 64 MiB written take this long at 5 TB/s, above
        # the HBM of any of these GPUs (a ratio to the timed read failed on an H100 on 2026-12-07, whose timed
        # read carried 0.07 ms of launch: ahead 0.0496 ms, timed 0.1192 ms)
        assert reads["one 64 MiB copy", "ahead"] >= 2 * 64 * 2**20 / 5e12 * 1e3
    finally:
        torch.distributed.destroy_process_group()
