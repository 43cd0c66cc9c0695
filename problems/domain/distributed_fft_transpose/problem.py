"""Slab-decomposed 2-D FFT: local real FFT along one axis, all-to-all transpose, FFT along the other.

Pattern from the distributed spectral layers of PhysicsNeMo (``DistributedAFNO``'s distributed
2-D real FFT for FourCastNet-style weather models on the 0.25 degree ERA5 grid) and from pencil
/ slab FFT libraries (heFFTe, P3DFFT, jax's sharded FFT): a batch of fields [channels, N, M] is
split by rows, rank r holding rows r*N/W..(r+1)*N/W-1 of every channel. Each rank takes the real
FFT of its rows along M and keeps the first M/2 frequencies (dropping the Nyquist mode, as
spectral layers truncate modes), then an all-to-all transposes the decomposition: rank r sends
frequency block j (M/(2W) columns) of its rows to rank j and receives its own frequency block
from every rank, so it now holds every row of M/(2W) frequencies; a complex FFT along N
finishes the 2-D transform. Rank r returns its [channels, N, M/(2W)] block of the spectrum as a
real view (last dim: real, imaginary). The all-to-all moves nearly the whole field; a fast
version fuses the FFTs with the packing and overlaps the exchange with the first FFT, channel by
channel. fp32 throughout (FFTs are not done in bf16); judged against an fp64 run.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="distributed_fft_transpose",
    category="domain",
    pattern="local rFFT along columns, all-to-all transpose (complex), FFT along rows",
    origin="PhysicsNeMo DistributedAFNO distributed rfft2 (FourCastNet); slab/pencil FFTs (heFFTe, P3DFFT)",
    dtype="float32",
    atol=1e-3,
    rtol=1e-5,
    shapes={"default": {"channels": 64, "n": 720, "m": 1440}, "small": {"channels": 2, "n": 16, "m": 32}},
    description="Rank r holds rows r*n/world..(r+1)*n/world-1 of a real field batch F ([channels, n/world, m]). With "
                "S = fft(rfft(F_full, dim=-1)[..., :m/2], dim=-2) (the 2-D spectrum without the Nyquist column), rank r "
                "returns view_as_real(S[:, :, r*m/(2*world):(r+1)*m/(2*world)]), shape [channels, n, m/(2*world), 2].",
)


def make_inputs(rank, world, generator, device, dtype, *, channels, n, m):
    import torch

    own = rank_generator(generator, rank)
    # smooth large-scale structure plus noise, like an atmospheric field's energy spectrum
    rows = torch.arange(rank * (n // world), (rank + 1) * (n // world), device=device, dtype=torch.float32)
    cols = torch.arange(m, device=device, dtype=torch.float32)
    phase = torch.rand((channels, 1, 1), generator=generator, device=device) * 6.2832  # shared, the field is continuous
    wave = torch.sin(2 * 3.14159265 * (3 * rows[:, None] / n + 5 * cols[None, :] / m) + phase)
    return (randn((channels, n // world, m), own, device, torch.float32).add_(4 * wave).to(dtype),)


def cost(world, dtype_bytes, *, channels, n, m):
    import math

    local = channels * (n // world) * m
    spectrum = local // 2 * 2 * dtype_bytes  # complex values of the kept half
    flops = 2.5 * local * math.log2(m) + 5 * local // 2 * math.log2(n)
    return Cost(comm_bytes=(world - 1) / world * spectrum, flops=flops, hbm_bytes=local * dtype_bytes + 4 * spectrum)
