"""torch.compile backend "rgpu": each graph is sent once, each call is one record.

    model = torch.compile(model, backend="rgpu")

Dynamo hands the backend an FX graph; aot_autograd (traced with plain fake
tensors on the rgpu device) splits it into a forward and a backward graph of
ATen ops. The first call of each graph runs it once through the ordinary rgpu
dispatch with the client in *capture* mode: the records it makes (the same
records eager mode would send, so the same ops.def ops, decompositions and
kernels) are not sent but kept, with ids local to the capture. Those records,
behind a header naming the ids a call binds (inputs, their storages, the
outputs), are the graph's *template*: a blob named by its hash, sent once
(the server asks for it). Every call, the first included, is one CALL record
binding the template's ids to this call's tensors; the outputs' metadata is
known from the capture, so a call never waits. The template frees each
temporary after its last use, and an argument the call alone holds (a
backward's saved activations, which aot_autograd hands over) too: memory is
reused within a call as PyTorch reuses it (_sole, _Donor).

A graph that can't be shipped runs eagerly (every op recorded as usual) after
one warning naming the reason: an op that needs a wait (its output shape or
value depends on data), an op rgpu can't run, aot_autograd failing on it. A
graph traced with dynamic shapes gets one template per concrete input shape
(a warning at the second, at most MAX_SHAPES). A frame dynamo itself can't
compile (any exception while it traces, fakeifies or calls this backend)
runs eagerly after one warning (install()); fullgraph=True raises instead.
rgpu's own Python is never traced by dynamo (skip_our_frames()).
See FORMAT.md §5.1 for the template layout and the CALL record."""
import collections
import struct
import sys
import warnings
import weakref

import torch

from . import _C
from . import dispatch as _dispatch
from . import random as _random
from . import tensor as _tensor
from .tensor import RemoteTensor, Storage, _TidRef, out_def, record_view, twin, wrap

_MAGIC = 0x50544752         # "RGTP"
_VERSION = 1
_LOCAL = 1 << 62            # ids made while capturing (template-local)

MAX_SHAPES = 64            # templates one dynamic-shape graph may capture (one per input shape)

_counts = {"graphs": 0, "templates": 0, "calls": 0, "eager_graphs": 0, "eager_calls": 0, "eager_frames": 0}


def counts():
    """Compile counters: graphs compiled, templates captured, CALL records, graphs
    run eagerly and their calls, frames dynamo could not compile (run eagerly)."""
    return dict(_counts)


def _warn(what, reason):
    warnings.warn(f"rgpu: {what} runs eagerly (op by op) instead of as one template: {reason}",
                  stacklevel=3)


# --- the dynamo backend -------------------------------------------------------------

def _symbolic(gm):
    """Whether dynamo traced the graph with dynamic shapes (a symbolic input)."""
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            v = n.meta.get("example_value")
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                return True
            if isinstance(v, torch.Tensor) and any(isinstance(x, torch.SymInt) for x in (*v.shape, *v.stride())):
                return True
    return False


def _foreign(example_inputs):
    for e in example_inputs:
        if isinstance(e, torch.Tensor) and e.device.type != "rgpu":
            return f"an input on {e.device}"
    return None


def _lift_attrs(gm):
    """A copy of the graph module whose rgpu tensors (get_attr: parameters,
    buffers, optimizer state dynamo kept as attributes) are leading inputs,
    so aot_autograd sees only plain fake tensors; and those tensors. dynamo's
    own module is left as it is (dynamo reads it after the backend returns)."""
    lifted = {}
    for n in gm.graph.nodes:
        if n.op == "get_attr" and n.target not in lifted:
            v = gm
            for p in n.target.split("."):
                v = getattr(v, p)
            if isinstance(v, RemoteTensor):
                lifted[n.target] = v
    if not lifted:
        return gm, []
    g = torch.fx.Graph()
    env = {}
    for k, target in enumerate(lifted):
        env[target] = g.placeholder(f"rgpu_attr_{k}")
    val = {}
    for n in gm.graph.nodes:
        if n.op == "get_attr" and n.target in lifted:
            val[n] = env[n.target]
            val[n].meta = dict(n.meta)
        else:
            val[n] = g.node_copy(n, lambda x: val[x])
    return torch.fx.GraphModule(gm, g), list(lifted.values())


_SKIPPED = [False]


def skip_our_frames():
    """Tell dynamo never to trace rgpu's own Python (dispatch, __del__, the
    handlers, the view bookkeeping in tensor.py...) nor what it calls: while a
    compiled function runs, dynamo's frame hook sees every Python frame, e.g.
    our __torch_dispatch__ in the eager parts between graphs; tracing
    record_view that way crashed dynamo (GPT-2). Marks each code object once
    (no cost per call), through torch._C only, so `import rgpu` does it before
    the first torch.compile without importing torch._dynamo."""
    if _SKIPPED[0]:
        return
    _SKIPPED[0] = True
    import sys
    import types
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy
    skip = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    seen = set()

    def mark(code):
        if id(code) in seen:
            return
        seen.add(id(code))
        set_code_exec_strategy(code, skip)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                mark(c)

    def visit(obj, depth=0):
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, property):
            for f in (obj.fget, obj.fset, obj.fdel):
                if f is not None:
                    visit(f)
            return
        code = getattr(obj, "__code__", None)
        if isinstance(code, types.CodeType):
            mark(code)
        elif isinstance(obj, type) and depth == 0 and obj.__module__.startswith("rgpu"):
            for v in vars(obj).values():
                visit(v, 1)

    for name, mod in list(sys.modules.items()):
        if name == "rgpu" or name.startswith("rgpu."):
            for v in list(vars(mod).values()):
                visit(v)
    from . import dispatch
    for h in list(dispatch._HANDLERS.values()):     # closures made at run time
        visit(h)


def no_fake_constants():
    """FakeTensorMode propagates constants: an op whose inputs are all small
    constants runs for real and its output becomes a constant fake, which
    needs a plain local tensor. On rgpu the real output is a RemoteTensor (a
    wrapper subclass whose data is on the server), and making it a constant
    failed ("fake_tensor must be a FakeTensor with a constant": Mistral's
    `scalar.to(device)`, torch.tensor(5.0, device="rgpu")). rgpu tensors are
    never fake constants: the op then takes the ordinary fake path. Patched
    once, at import (torch imports fake_tensor itself); other devices are
    unaffected."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    may = FakeTensorMode.may_turn_const
    if getattr(may, "_rgpu", False):
        return
    rgpu_type = _tensor.DEVICE.type

    def may_turn_const(self, t):
        return t.device.type != rgpu_type and may(self, t)
    may_turn_const._rgpu = True
    FakeTensorMode.may_turn_const = may_turn_const


# --- a frame dynamo can't compile runs eagerly ----------------------------------------

_CONSTS = {}                # (metadata key, fill) -> the shared constant bound for seeds and materialized grads

_HOOKED = [False]
_FRAME_FAILURES = {}        # (code, id of its first argument) -> weak reference to that argument


class _Strong:
    """A 'reference' to an object that can't be weakly referenced (None, ints...)."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __call__(self):
        return self.obj


def _frame_key(frame):
    """Which frame failed: its code and, for a method, the object it runs on
    (e.g. the module of a forward), so another model reaching the same code
    is compiled afresh."""
    code = frame.f_code
    first = None                # a function: the code alone
    if code.co_argcount and code.co_varnames[0] == "self":     # a method: the object too
        first = frame.f_locals.get("self")
    try:
        ref = weakref.ref(first)
    except TypeError:
        ref = _Strong(first)
    return (code, id(first)), ref


def _ours(fn):
    """Whether a dynamo compiler callable wraps the rgpu backend."""
    for _ in range(16):
        if fn is _backend:
            return True
        nxt = getattr(fn, "_torchdynamo_orig_backend", None)
        if nxt is None:                             # torch._TorchCompileWrapper
            nxt = getattr(fn, "compiler_fn", None)
        if nxt is None or nxt is fn:
            return False
        fn = nxt
    return False


def _cause(e):
    """One line naming why dynamo failed: the exception, and the innermost one
    of its chain when that is another (dynamo wraps the real error)."""
    chain = [e]
    while len(chain) < 16:
        x = chain[-1]
        n = x.__cause__ or x.__context__ or getattr(x, "inner_exception", None)
        if n is None or any(n is c for c in chain):
            break
        chain.append(n)

    def line(x):
        msg = str(x).strip().splitlines()
        return f"{type(x).__name__}: {msg[0] if msg else ''}"
    inner = chain[-1]
    if inner is e or line(inner) in line(e):
        return line(e)
    return f"{line(e)} (from {line(inner)})"


def _reset_after_failure():
    """Undo what a failed trace may have left set: the tangent flag of
    tensor.py, an error deferred from a backward that never ran, a capture
    left open."""
    _tensor._HIDE_UNFLATTEN[0] = False
    _dispatch._DEFERRED.clear()
    _C.capture_abort()          # no-op without a capture


def _fullgraph():
    """Whether the frame being compiled must be one graph (fullgraph=True)."""
    try:
        from torch._dynamo.symbolic_convert import _get_error_on_graph_break
        return bool(_get_error_on_graph_break())
    except Exception:       # noqa: BLE001  (another torch: treat as not fullgraph)
        return False


_EAGER_ONLY = {}            # OpOverload -> why a graph holding it runs eagerly


def _register_storage_resize():
    """dynamo turns `t.untyped_storage().resize_(n)` into inductor.resize_storage_bytes_:
    run eagerly (resize.py) as the graph's only way: it rebinds its argument."""
    op = getattr(getattr(torch.ops, "inductor", None), "resize_storage_bytes_", None)
    op = getattr(op, "default", None)
    if op is None:
        return
    from . import resize

    def handler(func, args, kwargs):
        resize.resize_storage(args[0].untyped_storage(), args[1])
    _dispatch.register([op], handler)
    _EAGER_ONLY[op] = "it resizes a storage (untyped_storage().resize_), which rebinds its tensor"


def install():
    """Hook dynamo for the rgpu backend, once (needs torch._dynamo): rgpu's
    package is a skipped directory (dynamo never inlines into it), and a frame
    whose compile fails for any reason (dynamo's tracing, fake tensors,
    aot_autograd, our backend) runs eagerly after one warning naming the
    cause, instead of raising. With fullgraph=True (error_on_graph_break) the
    error is raised as dynamo raises it. Other backends are left alone."""
    if _HOOKED[0]:
        return
    _HOOKED[0] = True
    skip_our_frames()
    from torch._dynamo import convert_frame, trace_rules
    from torch._dynamo.types import ConvertFrameReturn
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy
    trace_rules.add("rgpu")
    _register_storage_resize()
    orig = convert_frame.ConvertFrame.__call__
    resume_error = getattr(convert_frame, "ResumePrologueTracingError", ())

    def __call_(self, frame, cache_entry, hooks, frame_state, skip=0):
        if not _ours(getattr(self, "_torchdynamo_orig_backend", None)):
            return orig(self, frame, cache_entry, hooks, frame_state, skip=skip + 1)
        # a backward that stopped between aot's tangent check and our compiled
        # backward (an exception) leaves the flag set: never trace with it set
        _tensor._HIDE_UNFLATTEN[0] = False
        try:
            # nn.LSTM/GRU/RNN traced into the graph (dynamo's default breaks the
            # graph there and runs them op by op, ~100 records a step each)
            with torch._dynamo.config.patch(allow_rnn=True):
                return orig(self, frame, cache_entry, hooks, frame_state, skip=skip + 1)
        except Exception as e:      # noqa: BLE001  (any failure: this frame runs eagerly, say why)
            _reset_after_failure()
            box = getattr(getattr(self, "_inner_convert", None), "_box", None)
            if (getattr(box, "error_on_graph_break", False) or _fullgraph()
                    or (resume_error and isinstance(e, resume_error))):
                raise                       # fullgraph=True: the error is the answer
            key, owner = _frame_key(frame)
            if key not in _FRAME_FAILURES:
                _FRAME_FAILURES[key] = owner
                _counts["eager_frames"] += 1
                code = frame.f_code
                warnings.warn(f"rgpu: torch.compile could not compile {code.co_name} "
                              f"({code.co_filename}:{code.co_firstlineno}); it runs eagerly: {_cause(e)}",
                              stacklevel=2)
            return _EAGER()

    def _EAGER():
        # this call of the frame and everything it calls run eagerly (not one
        # warning per nested function dynamo would try next); only this call:
        # the code (e.g. transformers' forward wrapper) is shared by every
        # model, and the next model must compile normally
        return ConvertFrameReturn(frame_exec_strategy=_FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP),
                                  apply_to_code=False, skip_reason="rgpu: compile failed")

    def __call__(self, frame, cache_entry, hooks, frame_state, skip=0):
        if _FRAME_FAILURES and _ours(getattr(self, "_torchdynamo_orig_backend", None)):
            key, owner = _frame_key(frame)
            if key in _FRAME_FAILURES and _FRAME_FAILURES[key]() is owner():
                return _EAGER()         # failed before for this object: don't trace it again
        return __call_(self, frame, cache_entry, hooks, frame_state, skip=skip + 1)

    convert_frame.ConvertFrame.__call__ = __call__

    dynamo_reset = torch._dynamo.reset

    def reset():
        dynamo_reset()
        _FRAME_FAILURES.clear()     # "as if a fresh process": failed frames are tried again
    reset.__doc__ = dynamo_reset.__doc__
    torch._dynamo.reset = reset


def _backend(gm, example_inputs, **options):
    """The "rgpu" backend for torch.compile (see the module docstring).
    torch.compile's mode= and options= (inductor's) have no meaning here."""
    from torch._functorch.aot_autograd import aot_module_simplified

    install()
    _counts["graphs"] += 1
    reason = _foreign(example_inputs)
    if reason:
        _counts["eager_graphs"] += 1
        _warn("a graph", reason)
        return gm.forward
    orig_forward = gm.forward
    dynamic = _symbolic(gm)
    # what dynamo traced each input as: symbolic sizes and ints under dynamic
    # shapes (the example inputs themselves are the concrete tensors)
    traced = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    gm, lifted = _lift_attrs(gm)
    example_inputs = list(example_inputs)
    if len(traced) == len(example_inputs):
        example_inputs = [v if isinstance(v, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)) else e
                          for v, e in zip(traced, example_inputs)]
    example_inputs = lifted + example_inputs
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    plain = []
    with fake_mode:
        for e in example_inputs:
            if isinstance(e, torch.Tensor):
                # plain fakes on the rgpu device: aot_autograd then traces ATen
                # ops, not the RemoteTensor subclass
                e = torch.empty_strided(e.shape, e.stride(), dtype=e.dtype, device=_tensor.DEVICE,
                                        requires_grad=e.requires_grad)
            plain.append(e)
    kinds = ("forward", "backward") if not dynamic else ("forward (dynamic shapes)", "backward (dynamic shapes)")
    try:
        compiled = aot_module_simplified(gm, plain, fw_compiler=_compiler(kinds[0], dynamic),
                                         bw_compiler=_compiler(kinds[1], dynamic),
                                         decompositions={}, keep_inference_input_mutations=True)
    except Exception as e:      # noqa: BLE001  (aot_autograd failed: this graph runs eagerly, say why)
        _reset_after_failure()
        if _fullgraph():
            raise
        _counts["eager_graphs"] += 1
        _warn("a graph", f"aot_autograd failed: {_cause(e)}")
        return orig_forward
    if not lifted:
        return compiled

    def run(*args):
        return compiled(*lifted, *args)
    return run


def _compiler(kind, dynamic):
    def compile_graph(g, example_inputs):
        return _Graph(g, kind, dynamic)
    return compile_graph


def register():
    from torch._dynamo import register_backend
    from torch._dynamo.backends.registry import _BACKENDS
    if "rgpu" not in _BACKENDS:
        register_backend(name="rgpu")(_backend)
    install()


def __getattr__(name):
    # The entry point "rgpu = rgpu.compile:rgpu_backend" is loaded when
    # torch.compile first looks the backend up, before dynamo traces anything:
    # the moment to hook dynamo (install) when rgpu was imported before it.
    if name == "rgpu_backend":
        install()
        return _backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- one aot graph ------------------------------------------------------------------

def _layout(args):
    """What a template depends on besides the graph: each argument's kind and
    metadata, and which arguments are the same tensor or share a storage."""
    out = []
    seen, storages = {}, {}
    for i, a in enumerate(args):
        if type(a) is RemoteTensor:
            out.append((a._key, seen.setdefault(id(a), i), storages.setdefault(id(a._st), i), a._st.nbytes))
        elif isinstance(a, torch.Tensor):
            return None
        else:
            out.append(("v", a))
    return tuple(out)


def _sole(args, i):
    """Whether the call's own argument list holds the only reference to
    args[i], a recorded RemoteTensor: no other Python reference, no C++ owner
    (autograd, a .grad), no other wrapper over its server id. Such an argument
    dies with the call (the boxed convention hands the list over: aot
    autograd's backward passes the saved activations so), so the template may
    free it after its last use, as the graph frees its own temporaries."""
    a = args[i]
    if type(a) is not RemoteTensor or a._use_count() != 1 or a._tid in _tensor.PENDING:
        return False
    ref = a.__dict__.get("_ref")
    # the references counted: args, a, getrefcount's own argument
    return sys.getrefcount(a) == 3 and (ref is None or sys.getrefcount(ref) == 3)


def _hand_over(a):
    """a's server id now belongs to a template that frees it: a frees nothing."""
    ref = a.__dict__.get("_ref")
    if ref is not None:
        ref.tid = 0
    else:
        a._tid = 0


class _Handed:
    """The arguments a capture frees: ids whose _Donor fired while it was open."""
    __slots__ = ("open", "tids")

    def __init__(self):
        self.open = True
        self.tids = set()


class _Donor(_TidRef):
    """Owns the capture's wrapper over an argument only the call holds (and
    its same-metadata views): when the last of them dies during the capture,
    the template frees the argument there; later (an output, a cycle), never."""
    __slots__ = ("handed",)

    def __init__(self, tid, handed):
        super().__init__(tid)
        self.handed = handed

    def __del__(self):
        if self.handed.open and _C.capture_free(self.tid):
            self.handed.tids.add(self.tid)


class _NodeFailed(Exception):
    pass


class _Capture(torch.fx.Interpreter):
    """Runs a graph node by node (the capture run), naming the node that fails."""

    def run_node(self, n):
        try:
            return super().run_node(n)
        except Exception as e:      # noqa: BLE001
            what = n.target if n.op == "call_function" else f"{n.op} {n.target}"
            raise _NodeFailed(f"{what} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from e


def _on_cpu(n):
    """A node computing a CPU tensor (a lifted torch.tensor constant): runs on the CPU."""
    v = n.meta.get("val")
    return isinstance(v, torch.Tensor) and v.device.type == "cpu"


def _unsupported_node(gm):
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in _EAGER_ONLY:
            return f"{n.target}: {_EAGER_ONLY[n.target]}"
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) \
                and not _on_cpu(n) and not _dispatch.supports(n.target):
            return f"{n.target} has no rgpu kernel or decomposition"
    return None


class _Graph:
    """A forward or backward graph from aot_autograd: templates by layout."""
    _boxed_call = True

    def __init__(self, gm, kind, dynamic=False):
        self.gm = gm
        self.kind = kind
        self.dynamic = dynamic      # traced with symbolic shapes: one template per concrete layout
        self.templates = {}
        self.eager = None           # reason, once the graph can't be shipped
        reason = _unsupported_node(gm)
        if reason:
            self._give_up(reason)

    def _give_up(self, reason):
        """From now on this graph runs eagerly; say why, once."""
        self.eager = reason
        _counts["eager_graphs"] += 1
        _warn(f"the {self.kind} graph", reason)

    def __call__(self, args):
        _tensor._HIDE_UNFLATTEN[0] = False
        boxed, args = args, list(args)
        if type(boxed) is list:
            boxed.clear()       # the boxed convention: the callee owns the arguments (see _sole)
        if _tensor.PENDING:
            subst = self._bind_constants(args)
            if subst:
                return self._unshare(self._call(args), subst)
        return self._call(args)

    @staticmethod
    def _unshare(outs, subst):
        """A graph that returns a tangent as it is (the gradient of an identity)
        would hand the shared constant to autograd, which may keep it as a
        .grad and write it: return the tensor it replaced instead."""
        for i, o in enumerate(outs):
            orig = subst.get(id(o))
            if orig:
                outs[i] = orig.pop()
        return outs

    def _call(self, args):
        if self.eager is None:
            lay = _layout(args)
            if lay is None:
                return self._run_eager(args, "an argument that is not an rgpu tensor")
            t = self.templates.get(lay)
            if t is None:
                if self.dynamic and self.templates:
                    n = len(self.templates)
                    if n >= MAX_SHAPES:
                        return self._run_eager(args, f"dynamic shapes: more than {MAX_SHAPES} input shapes")
                    if n == 1:
                        warnings.warn(f"rgpu: the {self.kind} graph is captured once per input shape (a template "
                                      f"each, at most {MAX_SHAPES}, then it runs eagerly)", stacklevel=2)
                t = self._capture(args)
                if t is None:
                    return self._run_eager(args)
                self.templates[lay] = t
            _counts["calls"] += 1
            return t.call(args)
        return self._run_eager(args)

    def _bind_constants(self, args):
        """Arguments of a backward graph that are constant tensors not recorded
        yet (tensor.PENDING FULLs: autograd's seed gradient, the zeros it
        materializes for outputs without a gradient) are replaced by one shared
        tensor per metadata and value, made once and never handed out: the
        graph only reads its tangents (aot_autograd never writes them), and the
        pending ones die unrecorded. Any other graph records them first.
        Returns {id(shared constant): the arguments it replaced}, or None."""
        pending = _tensor.PENDING
        todo = []
        for i, a in enumerate(args):
            if type(a) is RemoteTensor and a._tid in pending:
                op, odef, fill = pending[a._tid]
                if not self.kind.startswith("backward") or "_ref" in a.__dict__ or op != _C.OP_FULL:
                    _tensor.flush_pending()     # a graph that may write it, or shared: record them now
                    return None
                todo.append((i, a, odef, fill))
        subst = {}
        for i, a, odef, fill in todo:
            ck = (a._key, type(fill[0]), fill[0])
            z = _CONSTS.get(ck)
            if z is None:
                z = _CONSTS[ck] = _tensor.record_new(_C.OP_FULL, a._key, odef[2:], (), fill)
            subst.setdefault(id(z), []).append(a)
            args[i] = z
        # constants the graph does not take stay pending: they die unrecorded
        # after backward, or are recorded when something uses them
        return subst

    def _run_eager(self, args, reason=None):
        if reason is not None and self.eager is None:
            self._give_up(reason)
        _counts["eager_calls"] += 1
        return list(self.gm(*args))

    def _capture(self, args):
        state = _random.get_state()
        consts = [getattr(self.gm, n.target) for n in self.gm.graph.nodes if n.op == "get_attr"]
        consts = [c for c in consts if type(c) is RemoteTensor]
        if _tensor.PENDING:
            _tensor.flush_pending()     # recorded now, not into the template by the first op
        handed, twins = _Handed(), {}
        try:
            _C.capture_begin()
            outs = list(_Capture(self.gm).run(initial_env=self._capture_env(args, handed, twins)))
            if _dispatch._DEFERRED:          # an op failed inside backward
                raise _dispatch._DEFERRED.pop()
            if _tensor.PENDING:             # made inside: their records belong to the template
                _tensor.flush_pending()
        except Exception as e:          # noqa: BLE001  (any failure: run eagerly, say why)
            handed.open = False
            _C.capture_abort()
            for tid in [t for t in _tensor.PENDING if t & _LOCAL]:
                _tensor.PENDING.pop(tid, None)  # made by the dropped capture: its ids mean nothing now
            _random.set_state(*state)
            self._give_up(str(e) if isinstance(e, _NodeFailed) else f"{type(e).__name__}: {e}".splitlines()[0])
            return None
        raw = _C.capture_end()
        handed.open = False
        # an argument the graph returns is returned as itself, not as its twin
        outs = [args[twins[id(o)][1]] if id(o) in twins and twins[id(o)][0]() is o else o for o in outs]
        n_random = (_random.get_state()[1] - state[1]) & ((1 << 64) - 1)
        _random.set_state(*state)
        pos = [i for i, a in enumerate(args) if type(a) is RemoteTensor and a._tid in handed.tids]
        return _Template(args, consts, outs, raw, state[1], n_random, pos)

    def _capture_env(self, args, handed, twins):
        """The placeholders' values for the capture run. An argument only this
        call holds (_sole) is seen through a twin wrapper owned by a _Donor,
        which the run drops after its last use, so that its free lands in the
        template there (handed.tids); twins maps id(twin) to (a weak reference
        to it, its position). The other arguments are passed as they are."""
        uses = collections.Counter(a._tid for a in args if type(a) is RemoteTensor)
        env = {}
        for i, ph in enumerate(n for n in self.gm.graph.nodes if n.op == "placeholder"):
            if _sole(args, i) and uses[args[i]._tid] == 1:
                t = twin(args[i], _Donor(args[i]._tid, handed))
                twins[id(t)] = (weakref.ref(t), i)
                env[ph] = t
            else:
                env[ph] = args[i]
        return env


class _Template:
    """A captured graph: its blob's hash and how to bind a call and build the outputs."""

    def __init__(self, args, consts, outs, raw, base_offset, n_random, handed=()):
        self.n_random = n_random
        self.handed = frozenset(handed)     # argument positions the template frees (_sole)
        bind, index = [], {}

        def slot(x):
            if x not in index:
                index[x] = len(bind)
                bind.append(x)

        # inputs: tensor ids, then storage ids (in first-seen order; _layout
        # fixes which arguments coincide, so every call dedupes alike)
        self.in_pos = []            # argument positions whose tid is bound
        arg_of, arg_tid, st_arg = {}, {}, {}    # argument position by object, tid, sid
        for i, a in enumerate(args):
            if type(a) is RemoteTensor:
                arg_of.setdefault(id(a), i)
                arg_tid.setdefault(a._tid, i)
                st_arg.setdefault(a._st.sid, i)
                if a._tid not in index:
                    self.in_pos.append(i)
                    slot(a._tid)
        self.st_pos = []            # argument positions whose sid is bound
        for i, a in enumerate(args):
            if type(a) is RemoteTensor and a._st.sid not in index:
                self.st_pos.append(i)
                slot(a._st.sid)
        self.consts = []
        for c in consts:            # tensors the graph holds (get_attr): bound as they are
            if c._tid not in index:
                self.consts.append(c._tid)
                slot(c._tid)
            if c._st.sid not in index:
                self.consts.append(c._st.sid)
                slot(c._st.sid)
        # outputs: ("in", i) argument i itself; ("new", key, storage, slot) a
        # tensor the template defines, bound at out slot `slot`, over storage
        # ("st", slot) a new storage bound at that out slot or ("arg", i)
        # argument i's storage; ("val", v) anything else
        self.n_fixed = len(bind)
        self.outs = []
        self.st_bytes = {}          # out slot of a new storage -> its nbytes
        for o in outs:
            if type(o) is not RemoteTensor:
                self.outs.append(("val", o))
            elif id(o) in arg_of:
                self.outs.append(("in", arg_of[id(o)]))
            elif o._tid in arg_tid:         # another wrapper over an argument (detach)
                self.outs.append(("share", arg_tid[o._tid]))
            elif not o._tid & _LOCAL:
                raise RuntimeError("rgpu: a compiled graph returned a tensor it neither made nor took")
            else:
                sid = o._st.sid
                if sid & _LOCAL:
                    slot(sid)
                    self.st_bytes[index[sid] - self.n_fixed] = o._st.nbytes
                    where = ("st", index[sid] - self.n_fixed)
                elif sid in st_arg:
                    where = ("arg", st_arg[sid])
                else:
                    raise RuntimeError("rgpu: a compiled graph returned a view of a tensor it did not take")
                slot(o._tid)
                self.outs.append(("new", o._key, where, index[o._tid] - self.n_fixed))
        self.n_out_ids = len(bind) - self.n_fixed
        blob = struct.pack("<IIIIQ", _MAGIC, _VERSION, len(bind), 0, base_offset)
        blob += struct.pack(f"<{len(bind)}Q", *bind) + bytes(raw)
        self.hash = _C.put_blob(blob)
        _counts["templates"] += 1

    @staticmethod
    def _alias(a):
        """A new server id over a's tensor (an ALIAS record), for the template to free."""
        tid = _C.new_id()
        _C.record(_C.OP_ALIAS, ((tid, a._st.sid) + out_def(a._key, -1),), (a._tid,), ())
        return tid

    def call(self, args):
        new_id = _C.new_id
        fresh = [new_id() for _ in range(self.n_out_ids)]
        binds, gone = [], []
        for i in self.in_pos:
            if i not in self.handed:
                binds.append(args[i]._tid)
            elif _sole(args, i):
                binds.append(args[i]._tid)
                gone.append(i)
            else:                       # held elsewhere this time: the template frees an alias of it
                binds.append(self._alias(args[i]))
        binds += [args[i]._st.sid for i in self.st_pos]
        binds += self.consts
        binds += fresh
        seed, offset = _random.take(self.n_random) if self.n_random else (0, 0)
        _C.record(_C.OP_CALL, (), (), (self.hash, tuple(binds), seed, offset))
        for i in gone:
            _hand_over(args[i])
        storages = {k: Storage(fresh[k], n) for k, n in self.st_bytes.items()}
        made = {}
        res = []
        for o in self.outs:
            kind = o[0]
            if kind == "new":
                t = made.get(o[3])
                if t is None:
                    where = o[2]
                    st = storages[where[1]] if where[0] == "st" else args[where[1]]._st
                    t = made[o[3]] = wrap(o[1], st, fresh[o[3]])
                else:                       # the same tensor again: another wrapper over it
                    t = record_view(t, t._key, None)
                res.append(t)
            elif kind == "in":
                res.append(args[o[1]])
            elif kind == "share":
                a = args[o[1]]
                res.append(record_view(a, a._key, None))
            else:
                res.append(o[1])
        return res
