import torch
import torch.distributed as dist


@torch.no_grad()
def solution(field: torch.Tensor) -> torch.Tensor:
    """2-D FFT of a row-decomposed batch of real fields ([channels, n/world, m] on each rank):
    returns this rank's columns of the spectrum (Nyquist column dropped) as a real view,
    [channels, n, m/(2*world), 2]."""
    world = dist.get_world_size()
    channels, rows, m = field.shape
    cols = m // 2 // world

    # 1. real FFT along the local axis, keep modes 0..m/2-1
    spectrum = torch.fft.rfft(field, dim=-1)[..., : m // 2]  # complex [channels, rows, m/2]

    # 2. transpose the decomposition: frequency block j of every rank's rows goes to rank j
    send = spectrum.reshape(channels, rows, world, cols).permute(2, 0, 1, 3).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)  # recv[s] = rank s's rows of this rank's frequencies

    # 3. FFT along the now-complete row axis
    columns = recv.permute(1, 0, 2, 3).reshape(channels, world * rows, cols)
    return torch.view_as_real(torch.fft.fft(columns, dim=1))
