"""The handler tables dispatch.py reads, owned here so that the op-family
modules (random, datadep, amp, cells, ctc, fused_optim) register into them
without importing dispatch.py, which imports some of them (opmap -> datadep).

  REGISTERED  OpOverload -> handler(func, args, kwargs), from register()
  HANDLERS    id(OpOverload) -> the handler dispatch built for it (its
              per-op cache; register() drops an overload's built one)
register_autograd() puts a Python kernel on an ATen op at AutogradPrivateUse1
(attention, rmsnorm, crossentropy: CompositeImplicitAutograd ops that would
otherwise decompose above rgpu's dispatch)."""

HANDLERS = {}
REGISTERED = {}


def register(funcs, handler):
    """Install handler(func, args, kwargs) for each OpOverload in funcs. Modules
    with a family of ops (random, data-dependent shapes, ...) register here
    at import; a handler returns what the ATen op returns."""
    for f in funcs:
        REGISTERED[f] = handler
        HANDLERS.pop(id(f), None)


_LIBS = []      # the torch.library.Library objects of register_autograd, kept alive for the process


def register_autograd(name, kernel):
    """Install kernel as aten::name's AutogradPrivateUse1 kernel (it takes the
    op's arguments; it handles autograd itself)."""
    import torch
    lib = torch.library.Library("aten", "IMPL")
    lib.impl(name, kernel, "AutogradPrivateUse1")
    _LIBS.append(lib)
