"""Fixed inputs for prompt snapshots: a fake measured 8 x H200 host, an example solution and a
correct report with a profile, so the rendered prompts never depend on the machine."""

from sandbox import topology
from sandbox.performance import DeviceActivity, analyse, summarize_activities
from sandbox.report import EvalReport, RankVerdict, Timing
from sandbox.topology_measure import HostMeasurement, MeasuredGpu, PeerLink
from tests.fixtures.candidates import source

WORLD = 8


def fake_measurement() -> HostMeasurement:
    gpus = [MeasuredGpu(ordinal=i, name="NVIDIA H200", uuid=f"GPU-fake-{i}", memory_mib=143771, sm_count=132, nvlinks_active=18,
                        hbm_copy_gbps=4010.0 + i) for i in range(WORLD)]
    pairs = [PeerLink(src=a, dst=b, peer_access=True, copy_engine_gbps=362.0 + (a + b) % 3, sm_write_gbps=381.0 + (a * b) % 4,
                      sm_read_gbps=348.0 + a % 2) for a in range(WORLD) for b in range(WORLD) if a != b]
    return HostMeasurement(host="fake-h200-host", key="fake", driver="580.159.04", torch="2.11.0+cu130", cuda="13.0", gpus=gpus,
                           link="NVLink", pairs=pairs, sm_write_gbps_by_blocks={1: 21.0, 4: 80.0, 16: 290.0, 32: 372.0, 132: 383.0, 528: 384.0},
                           all_peers_write_gbps=366.0, transfer_mib=256, measured_at="2026-11-29T00:00:00+00:00", wall_s=12.5)


def fake_topology(world: int = WORLD) -> topology.Topology:
    return topology.with_measurement(topology.datasheet_topology("NVIDIA H200", world), fake_measurement())


def fake_datasheet_topology(world: int = WORLD) -> topology.Topology:
    return topology.datasheet_topology("NVIDIA H200", world)


def example_solutions() -> list[dict]:
    return [{"title": "all_reduce (all-reduce (sum))", "note": "One-shot all-reduce over symmetric memory with epoch flags.",
             "source": source("all_reduce_symm").strip()}]


def _timing(median_ms: float, world: int = WORLD) -> Timing:
    return Timing(median_ms=median_ms, iqr_ms=median_ms / 50, min_ms=median_ms * 0.97,
                  per_rank_median_ms=[round(median_ms * (1 - 0.01 * r), 4) for r in range(world)], iterations=50, warmup=10, input_sets=8)


def correct_report() -> EvalReport:
    """A correct one-shot all-reduce at 32M bf16 elements on 8 fake H200s, with profiles."""
    hardware = fake_topology()
    bound = topology.roofline(hardware, comm_bytes=2 * 7 / 8 * 64 * 2**20, flops=0.0, hbm_bytes=9 * 64 * 2**20)
    candidate, reference = _timing(0.62), _timing(0.41)
    ours = [DeviceActivity("one_shot_all_reduce", 10.0 + 700 * i, 10.0 + 700 * i + 540.0) for i in range(5)]
    ours += [DeviceActivity("Memcpy DtoD (Device -> Device)", 560.0 + 700 * i, 560.0 + 700 * i + 12.0) for i in range(5)]
    nccl = [DeviceActivity("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 5.0 + 500 * i, 5.0 + 500 * i + 370.0)
            for i in range(5)]
    nccl += [DeviceActivity("Memcpy DtoD (Device -> Device)", 400.0 + 500 * i, 400.0 + 500 * i + 25.0) for i in range(5)]
    profile = summarize_activities(ours, 5, wall_us_per_call=640.0, rank=0)
    reference_profile = summarize_activities(nccl, 5, wall_us_per_call=430.0, rank=0)
    speedup = round(reference.median_ms / candidate.median_ms, 4)
    fraction = round(bound.bound_ms / candidate.median_ms, 4)
    return EvalReport(
        status="correct", message=f"correct on all 8 ranks over 6 trials, {speedup:.2f}x the reference, {100 * fraction:.0f}% of the roofline",
        stage="done",
        problem="all_reduce", world=WORLD, device="cuda", dtype="bfloat16", size="default", trials=5,
        ranks=[RankVerdict(rank=r, ok=True) for r in range(WORLD)], reference_timing=reference, candidate_timing=candidate,
        speedup=speedup, roofline=bound, roofline_fraction=fraction, profile=profile, reference_profile=reference_profile,
        analysis=analyse(candidate, bound, profile), reference_analysis=analyse(reference, bound, reference_profile),
    )
