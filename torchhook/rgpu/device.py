"""The "rgpu" device: PrivateUse1 renamed, and this module registered as `torch.rgpu`,
mirroring the parts of `torch.cuda` that torch itself calls (manual_seed,
fork_rng, autocast, device_lazy_init) and that users reach for."""
import torch

from . import _C, server

_registered = False
_seed = 0                # what manual_seed set; random ops will carry (seed, offset)
_seed_offset = 0


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
    return "rgpu (" + server.info()["backend"] + ")"


def _is_in_bad_fork():
    return False


def synchronize(device=None):
    """Block until the server has executed every op recorded so far; raises
    rgpu.RemoteError for an op that failed since the last wait."""
    server.ensure()
    _C.wait(_C.record(_C.OP_SYNC, (), (), ()))


def manual_seed(seed):
    global _seed, _seed_offset
    _seed, _seed_offset = int(seed) & 0xFFFF_FFFF_FFFF_FFFF, 0


def manual_seed_all(seed):
    manual_seed(seed)


def seed():
    import random
    manual_seed(random.getrandbits(63))


def seed_all():
    seed()


def initial_seed():
    return _seed


def get_rng_state(device="rgpu"):
    raise NotImplementedError("rgpu: get_rng_state is not supported yet")


def set_rng_state(new_state, device="rgpu"):
    raise NotImplementedError("rgpu: set_rng_state is not supported yet")


def get_rng_state_all():
    return [get_rng_state()]


def set_rng_state_all(new_states):
    for s in new_states:
        set_rng_state(s)


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation=True):
    return True
