"""The "rgpu" device: PrivateUse1 renamed, and this module registered as `torch.rgpu`,
mirroring the parts of `torch.cuda` that torch itself calls (manual_seed,
fork_rng, autocast, device_lazy_init) and that users reach for."""
import torch

from . import _C, server
from .waits import wait

_registered = False


def _register():
    """Rename PrivateUse1 to "rgpu" and install this module as torch.rgpu. Once per process."""
    global _registered
    if _registered:
        return
    import sys
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
    name = torch._C._get_privateuse1_backend_name()
    if name == "rgpu":          # an earlier import of this package under another name did it
        _registered = True
        return
    _setup_privateuseone_for_python_backend("rgpu", backend_module=sys.modules[__name__])
    _registered = True


# --- the torch.rgpu API ----------------------------------------------------------

def is_available():
    return True


def is_initialized():
    return server.is_connected()


def _lazy_init():
    server.ensure()


def init():
    server.ensure()


def device_count():
    return 1


def current_device():
    return 0


def set_device(device):
    idx = torch.device(device).index if not isinstance(device, int) else device
    if idx not in (None, 0):
        raise ValueError(f"rgpu: only device 0 exists, got {device}")


def get_device_name(device=None):
    return server.info()["backend"]   # e.g. "cuda (NVIDIA H200)", "cpu"


def _is_in_bad_fork():
    return False


def synchronize(device=None):
    """Block until the server has executed every op recorded so far; raises
    rgpu.RemoteError for an op that failed since the last wait."""
    server.ensure()
    from . import tensor            # (imported after the device is registered)
    if tensor.PENDING:              # tensors whose record waits for their first use
        tensor.flush_pending()
    wait(_C.record(_C.OP_SYNC, (), (), ()))


# --- RNG: one (seed, offset) generator per process, kept in random.py -------------

def manual_seed(seed):
    """Seed the rgpu generator (offset back to 0). torch.manual_seed calls manual_seed_all."""
    from . import random
    random.manual_seed(seed)


def manual_seed_all(seed):
    manual_seed(seed)


def seed():
    """Seed the rgpu generator with a non-deterministic seed; returns nothing, like torch.cuda.seed."""
    import random as _stdlib_random
    manual_seed(_stdlib_random.getrandbits(64))


def seed_all():
    seed()


def initial_seed():
    """The seed last set by manual_seed/seed (torch's CUDA default before that)."""
    from . import random
    return random.initial_seed()


def get_rng_state(device="rgpu"):
    """The generator state: a 16-byte uint8 CPU tensor (seed, offset; u64 little-endian)."""
    _check_device(device)
    from . import random
    return random.get_rng_state()


def set_rng_state(new_state, device="rgpu"):
    """Restore a state that get_rng_state() returned."""
    _check_device(device)
    from . import random
    random.set_rng_state(new_state)


def get_rng_state_all():
    return [get_rng_state()]


def set_rng_state_all(new_states):
    for s in new_states:
        set_rng_state(s)


def _check_device(device):
    if isinstance(device, int):
        idx = device
    elif isinstance(device, str) and device.isdigit():
        idx = int(device)
    else:
        d = torch.device(device)
        if d.type != "rgpu":
            raise ValueError(f"rgpu: not an rgpu device: {device}")
        idx = d.index
    if idx not in (None, 0):
        raise ValueError(f"rgpu: only device 0 exists, got {device}")


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation=True):
    return True


# --- memory: the server's numbers for this session (memory.py; one wait each) ---------

def memory_allocated(device=None):
    from . import memory
    return memory.memory_allocated(device)


def max_memory_allocated(device=None):
    from . import memory
    return memory.max_memory_allocated(device)


def memory_reserved(device=None):
    return memory_allocated(device)


def max_memory_reserved(device=None):
    return max_memory_allocated(device)


def reset_peak_memory_stats(device=None):
    from . import memory
    memory.reset_peak_memory_stats(device)


def reset_max_memory_allocated(device=None):
    reset_peak_memory_stats(device)


def memory_stats(device=None):
    from . import memory
    return memory.memory_stats(device)


def empty_cache():
    """Nothing is cached: the server frees a storage when its last tensor goes."""
