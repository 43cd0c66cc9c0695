"""Where a call's time goes: classifying device activity, busy time, and what bounds a call."""

from types import SimpleNamespace

import pytest

from prompts import render
from sandbox.rank.server import device_activities
from sandbox.performance import DeviceActivity, analyse, busy_us, classify, summarize_activities
from sandbox.report import Roofline, Timing


@pytest.mark.parametrize("name,kind", [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("Memcpy PtoP (Device -> Device)", "communication"),
    ("void c10d::symmetric_memory::barrier_kernel(unsigned int**, unsigned long, int, int)", "communication"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "compute"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "compute"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)", "compute"),
    ("Memcpy DtoD (Device -> Device)", "copy"),
    ("Memset (Device)", "copy"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, ...)", "other"),
    ("one_shot_all_reduce", "custom"),
    ("fused_gemv_push", "custom"),
])
def test_classify(name, kind):
    assert classify(name) == kind


def act(name, start, end):
    return DeviceActivity(name, float(start), float(end))


def test_busy_time_counts_overlap_once():
    assert busy_us([act("a", 0, 10), act("b", 5, 15), act("c", 20, 25), act("d", 21, 22)]) == 20.0
    assert busy_us([]) == 0.0


def test_summary_per_call_and_by_kind():
    activities = []
    for call in range(4):
        base = 100.0 * call
        activities += [act("gemm_kernel_xmma", base, base + 40), act("ncclDevKernel_AllGather", base + 30, base + 60),
                       act("my_pack", base + 60, base + 65)]
    summary = summarize_activities(activities, iterations=4, wall_us_per_call=90.0, rank=3)
    assert summary.rank == 3 and summary.iterations == 4 and summary.wall_us_per_call == 90.0
    assert summary.compute_us_per_call == 40.0 and summary.communication_us_per_call == 30.0 and summary.custom_us_per_call == 5.0
    assert summary.busy_us_per_call == 65.0  # 40 + 30 + 5 with 10 overlapping
    assert [k.name for k in summary.kernels] == ["gemm_kernel_xmma", "ncclDevKernel_AllGather", "my_pack"]
    assert summary.kernels[0].kind == "compute" and summary.kernels[0].calls == 4 and summary.kernels[0].share == pytest.approx(0.5333, abs=1e-3)


def roof(comm=0.0, hbm=0.0, flops=0.0, link=400.0, hbm_rate=4000.0, tflops=1000.0) -> Roofline:
    times = {"interconnect": comm / (link * 1e9), "hbm": hbm / (hbm_rate * 1e9), "compute": flops / (tflops * 1e12)}
    limiter = max(times, key=times.get)
    return Roofline(bound_ms=times[limiter] * 1e3, limiter=limiter, comm_bytes_per_rank=comm, flops_per_rank=flops, hbm_bytes_per_rank=hbm,
                    link_gbps=link, hbm_gbps=hbm_rate, tflops=tflops, link_measured=True)


def timing(ms):
    return Timing(median_ms=ms, iqr_ms=0.0, min_ms=ms, per_rank_median_ms=[ms], iterations=10, warmup=2, input_sets=2)


def profile(*activities, iterations=1):
    return summarize_activities(list(activities), iterations)


def test_interconnect_bound_call_reports_rate_and_fraction():
    # 100 MB in 0.625 ms = 160 GB/s of a 400 GB/s link; the device is busy almost the whole call
    analysis = analyse(timing(0.625), roof(comm=100e6, hbm=200e6), profile(act("one_shot", 0, 615)))
    assert analysis.achieved_comm_gbps == 160.0 and analysis.link_fraction == 0.4 and analysis.roofline_fraction == 0.4
    assert analysis.achieved_hbm_gbps == 320.0 and analysis.hbm_fraction == 0.08
    assert analysis.busiest_resource == "interconnect" and analysis.bottleneck == "interconnect"
    assert analysis.custom_ms == 0.615 and analysis.idle_ms == pytest.approx(0.01) and analysis.idle_fraction == pytest.approx(0.016)
    line = render("feedback/bottleneck", a=analysis)
    assert line.startswith("interconnect: 100 MB per rank at 160 GB/s is 40% of the 400 GB/s link; the link is far from full")
    near_full = analyse(timing(0.3), roof(comm=100e6), profile(act("one_shot", 0, 295)))
    assert near_full.bottleneck == "interconnect" and render("feedback/bottleneck", a=near_full).strip().endswith("is 83% of the 400 GB/s link.")


def test_idle_gpu_is_host_overhead():
    analysis = analyse(timing(0.1), roof(comm=4e6), profile(act("k1", 0, 20), act("k2", 30, 40)))
    assert analysis.idle_fraction == pytest.approx(0.7) and analysis.bottleneck == "host_overhead"
    assert render("feedback/bottleneck", a=analysis).startswith("launch/host overhead: the GPU is idle 70% of the call (0.07 of 0.1 ms)")


def test_a_slow_kernel_is_named_before_a_smaller_idle_time():
    # busy 0.335 ms against a 0.032 ms roofline, idle 0.127 ms: the kernel is the bigger loss
    slow = analyse(timing(0.462), roof(comm=0.0, hbm=134e6, hbm_rate=4194.0), profile(act("one_shot", 0, 335)))
    assert slow.idle_fraction == pytest.approx(0.2749, abs=1e-3) and slow.bottleneck == "hbm"
    # busy close to the roofline, idle 40%: host overhead is the bigger loss
    lean = analyse(timing(0.1), roof(comm=16e6), profile(act("one_shot", 0, 60)))
    assert lean.bottleneck == "host_overhead"


def test_gemm_then_nccl_without_overlap_is_serialised():
    analysis = analyse(timing(1.0), roof(comm=100e6, flops=200e9),
                       profile(act("sm90_xmma_gemm_bf16", 0, 500), act("ncclDevKernel_ReduceScatter", 500, 950)))
    assert analysis.bottleneck == "serialised" and analysis.overlap_ms == 0.0
    assert "could hide up to 0.45 ms" in render("feedback/bottleneck", a=analysis)


def test_overlapped_gemm_and_communication_is_not_serialised():
    analysis = analyse(timing(0.6), roof(comm=100e6, flops=200e9),
                       profile(act("sm90_xmma_gemm_bf16", 0, 550), act("ncclDevKernel_ReduceScatter", 20, 470)))
    assert analysis.overlap_ms == 0.45 and analysis.bottleneck != "serialised"


def test_tiny_call_is_latency_bound():
    analysis = analyse(timing(0.02), roof(comm=131072), profile(act("one_shot", 0, 16)))
    assert analysis.bottleneck == "latency"
    assert render("feedback/bottleneck", a=analysis).startswith("latency: a call takes 20 us and moving its bytes at full rate would take 0.328 us")


def test_near_full_hbm_is_hbm_bound_and_unprofiled_analysis_still_has_rates():
    analysis = analyse(timing(1.0), roof(comm=1e6, hbm=3.6e9))
    assert analysis.bottleneck == "hbm" and analysis.hbm_fraction == 0.9 and analysis.busy_ms is None
    assert render("feedback/bottleneck", a=analysis).startswith("HBM: 3.6 GB of memory traffic per rank at 3600 GB/s is 90% of 4000 GB/s.")


def test_device_activities_reads_the_profilers_device_events():
    import torch

    cuda = torch.autograd.DeviceType.CUDA
    events = [SimpleNamespace(name="k", device_type=cuda, time_range=SimpleNamespace(start=1.0, end=3.0)),
              SimpleNamespace(name="cpu_op", device_type=torch.autograd.DeviceType.CPU, time_range=SimpleNamespace(start=0.0, end=9.0)),
              SimpleNamespace(name="empty", device_type=cuda, time_range=SimpleNamespace(start=5.0, end=5.0))]
    found = device_activities(torch, SimpleNamespace(events=lambda: events))
    assert found == [["k", 1.0, 3.0]]
