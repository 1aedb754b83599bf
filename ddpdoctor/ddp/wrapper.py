"""DistributedDataParallel: torch's DDP redone in Python, every bucket and ring step in view.

It follows torch's reducer step by step, so that a job trains exactly as it would under
``torch.nn.parallel.DistributedDataParallel``:

- construction: parameters (and buffers) broadcast from rank 0; parameters that require
  grad, in registration order, packed into buckets (one bucket until the first backward
  shows the order gradients arrive in, unless ``find_unused_parameters``);
- each synced forward: buffers broadcast from rank 0, unused parameters found by walking
  the autograd graph from the outputs (``find_unused_parameters``);
- backward: a post-accumulate-grad hook per parameter scales its gradient by 1/world into
  its bucket; a full bucket (in bucket order) goes to the communication thread, which
  sums it over a ring while backward goes on; at the end of backward a queued callback
  waits for every bucket and points each ``.grad`` at its averaged slice of the bucket.

Situations it does not cover (GPUs, other backends, static graphs, mixed precision, ...)
construct torch's own class instead, and ``register_comm_hook`` hands the module over
to torch's class.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.autograd import Variable

import torch.nn.parallel.distributed as _torch_ddp_module
from ddpdoctor.ddp import buckets as B
from ddpdoctor.ddp import ring as R
from ddpdoctor.runtime import recorder
from ddpdoctor.trace import layout as L

# Captured before ddpdoctor.runtime.ddp_swap points torch's name at our class.
TorchDDP: type = getattr(_torch_ddp_module.DistributedDataParallel, "__ddpdoctor_torch__",
                         _torch_ddp_module.DistributedDataParallel)

_MB = 1024 * 1024
_BROADCAST_BUCKET_BYTES = 250 * _MB  # torch's broadcast_bucket_size
_BUCKET_FLAG = int(L.RecordFlag.BUCKET)

_UNUSED_ERROR = (
    "Expected to have finished reduction in the prior iteration before starting a new one. "
    "This error indicates that your module has parameters that were not used in producing "
    "loss. You can enable unused parameter detection by passing the keyword argument "
    "`find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`, and by \n"
    "making sure all `forward` function outputs participate in calculating loss. \n"
    "If you already have done the above, then the distributed data parallel module wasn't "
    "able to locate the output tensors in the return value of your module's `forward` "
    "function. Please include the loss function and the structure of the return value of "
    "`forward` of your module when reporting this issue (e.g. list, dict, iterable).\n"
    "Parameter indices which did not receive grad for rank {rank}: {indices}\n"
    "Parameters which did not receive grad for rank {rank}: {names}"
)


class _DDPMeta(type):
    """Lets ``isinstance(m, DistributedDataParallel)`` accept torch's DDP too (what this
    class constructs when it falls back), since user code checks against one name."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return type.__instancecheck__(cls, obj) or isinstance(obj, TorchDDP)

    def __subclasscheck__(cls, sub: type) -> bool:
        return type.__subclasscheck__(cls, sub) or issubclass(sub, TorchDDP)


class _CommThread:
    """One daemon thread a process that runs bucket all-reduces in submission order."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: list[_Job] = []
        self._thread: threading.Thread | None = None

    def submit(self, job: "_Job") -> None:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="ddpdoctor-comm")
                self._thread.start()
            self._jobs.append(job)
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs:
                    self._cond.wait()
                job = self._jobs.pop(0)
            job.run()


class _Job:
    """A unit of communication; ``wait`` re-raises its error in the waiting thread."""

    __slots__ = ("fn", "args", "done", "error")

    def __init__(self, fn: Any, *args: Any):
        self.fn, self.args = fn, args
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.fn(*self.args)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            self.error = e
        finally:
            self.done.set()

    def wait(self) -> None:
        self.done.wait()
        if self.error is not None:
            raise RuntimeError(f"ddpdoctor DDP: gradient all-reduce failed: "
                               f"{self.error}") from self.error


_comm = _CommThread()


def _unsupported(module: nn.Module, opts: dict[str, Any]) -> str:
    """Why this configuration needs torch's own DDP ('' if ours covers it)."""
    for key in ("device_mesh", "mixed_precision", "delay_all_reduce_named_params",
                "param_to_hook_all_reduce", "bucket_cap_mb_list"):
        if opts.get(key) is not None:
            return key
    if opts.get("static_graph"):
        return "static_graph"
    if opts.get("device_ids") or opts.get("output_device") is not None:
        return "device_ids"
    if not dist.is_available() or not dist.is_initialized():
        return "no default process group"
    if _torch_ddp_module.torch._dynamo.utils.get_optimize_ddp_mode() == "python_reducer":
        return "python_reducer"
    params = list(module.parameters())
    if not any(p.requires_grad for p in params):
        return "no parameter requires grad"
    if any(p.device.type != "cpu" for p in params):
        return "parameters not on the CPU"
    if any(isinstance(p, nn.parameter.UninitializedParameter) for p in params):
        return "uninitialized parameters"
    if any(getattr(m, "sparse", False) for m in module.modules()
           if isinstance(m, (nn.Embedding, nn.EmbeddingBag))):
        return "sparse gradients"
    pg = opts.get("process_group") or dist.distributed_c10d._get_default_group()
    if "gloo" not in str(dist.get_backend(pg)).lower():
        return f"backend {dist.get_backend(pg)}"
    return ""


def _find_tensors(obj: Any) -> list[torch.Tensor]:
    return list(_torch_ddp_module._find_tensors(obj))


def _reachable_params(outputs: list[torch.Tensor], index_of: dict[int, int]) -> set[int]:
    """Indices of the parameters the autograd graph of ``outputs`` leads to."""
    used: set[int] = set()
    seen: set[Any] = set()
    stack = []
    for t in outputs:
        if t.grad_fn is not None:
            stack.append(t.grad_fn)
        elif t.requires_grad and id(t) in index_of:
            used.add(index_of[id(t)])
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        var = getattr(fn, "variable", None)
        if var is not None and id(var) in index_of:
            used.add(index_of[id(var)])
        for nxt, _ in fn.next_functions:
            if nxt is not None and nxt not in seen:
                stack.append(nxt)
    return used


class DistributedDataParallel(nn.Module, metaclass=_DDPMeta):
    """Data parallel training with a Python bucketed ring all-reduce that ddpdoctor can
    watch.  Takes torch's arguments; see ``torch.nn.parallel.DistributedDataParallel``."""

    # torch's DDP code reads these through the module-level name, which is ours after
    # the swap: keep them here for the torch DDPs that still run (fallbacks, comm hooks).
    _active_ddp_module: Any = None
    _set_params_and_buffers_to_ignore_for_model = staticmethod(
        TorchDDP._set_params_and_buffers_to_ignore_for_model)

    @classmethod
    def _get_active_ddp_module(cls) -> Any:
        return cls._active_ddp_module

    def __new__(cls, module: nn.Module | None = None, *args: Any, **kwargs: Any) -> Any:
        if module is None:  # copy/pickle protocols
            return super().__new__(cls)
        try:
            bound = _SIGNATURE.bind(None, module, *args, **kwargs)
        except TypeError:
            return TorchDDP(module, *args, **kwargs)  # torch says what is wrong
        reason = _unsupported(module, bound.arguments)
        if reason:
            rec = recorder.active()
            if rec is not None:
                rec.meta("ddp_fallback", reason=reason)
            return TorchDDP(module, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, module: nn.Module, device_ids: Any = None, output_device: Any = None,
                 dim: int = 0, broadcast_buffers: bool | None = None, init_sync: bool = True,
                 process_group: Any = None, bucket_cap_mb: float | None = None,
                 find_unused_parameters: bool = False, check_reduction: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False,
                 delay_all_reduce_named_params: Any = None,
                 param_to_hook_all_reduce: Any = None, mixed_precision: Any = None,
                 device_mesh: Any = None, skip_all_reduce_unused_params: bool = False,
                 bucket_cap_mb_list: list[int] | None = None, batched_grad_copy: bool = False,
                 forward_sync_buffers: bool | None = None):
        super().__init__()
        self.module = module
        self.process_group = process_group or dist.distributed_c10d._get_default_group()
        self._group_arg = process_group  # what the recorder sees (None = default group)
        self.device_ids = None
        self.output_device = None
        self.dim = dim
        self.static_graph = False
        self.device = next(iter(module.parameters())).device
        self.device_type = self.device.type
        if forward_sync_buffers is not None:
            self.forward_sync_buffers, init_sync_buffers = forward_sync_buffers, True
        else:
            self.forward_sync_buffers = True if broadcast_buffers is None else broadcast_buffers
            init_sync_buffers = self.forward_sync_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        self.parameters_to_ignore = set(getattr(module, "_ddp_params_and_buffers_to_ignore",
                                                ()))
        self.bucket_bytes_cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * _MB)
        self._first_bucket_bytes = (dist._DEFAULT_FIRST_BUCKET_BYTES if bucket_cap_mb is None
                                    else self.bucket_bytes_cap)
        self._world = self.process_group.size()
        self._inv_world = 1.0 / self._world
        named = [(n, p) for n, p in module.named_parameters()
                 if p.requires_grad and n not in self.parameters_to_ignore]
        self._param_names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._index_of = {id(p): i for i, p in enumerate(self._params)}
        self._aliasable = [p.is_contiguous() for p in self._params]
        if init_sync:
            self._verify_params()
            self._broadcast_states(self._init_states(init_sync_buffers))
        limits = B.initial_limits(find_unused_parameters, self._first_bucket_bytes,
                                  self.bucket_bytes_cap)
        specs = [B.ParamSpec.of(p) for p in self._params]
        self._set_buckets(list(reversed(B.assign_buckets(specs, limits))))
        self._rebuild_pending = not find_unused_parameters  # torch rebuilds only then
        self._ready_order: list[int] = []
        self._reset_iteration()
        self._require_finalize = False
        self._unused: list[int] = []
        self._used = [False] * len(self._params)
        self._hooks = self._register_hooks()
        object.__setattr__(self, "_delegate", None)  # torch's DDP after register_comm_hook

    # -- construction --------------------------------------------------------------------
    def _init_states(self, with_buffers: bool) -> list[torch.Tensor]:
        states = [p.detach() for n, p in self.module.named_parameters()
                  if n not in self.parameters_to_ignore]
        if with_buffers:
            states += [b.detach() for n, b in self.module.named_buffers()
                       if n not in self.parameters_to_ignore]
        return states

    def _verify_params(self) -> None:
        rec = recorder.active()
        h = rec.begin("all_gather", self._group_arg, ins=[],
                      callsite=recorder.user_callsite()) if rec is not None else -1
        try:
            dist._verify_params_across_processes(self.process_group, self._params)
        except BaseException:
            if rec is not None:
                rec.end(h, failed=True)
            raise
        if rec is not None:
            rec.end(h)

    def _broadcast_states(self, states: list[torch.Tensor]) -> None:
        """Broadcast ``states`` in place from the group's rank 0 (one recorded broadcast)."""
        if not states:
            return
        rec = recorder.active()
        h = -1
        if rec is not None:
            h = rec.begin("broadcast", self._group_arg, ins=states,
                          peer=R.global_rank(self.process_group, 0),
                          callsite=recorder.user_callsite())
        try:
            dist._broadcast_coalesced(self.process_group, states, _BROADCAST_BUCKET_BYTES, 0)
        except BaseException:
            if rec is not None:
                rec.end(h, failed=True)
            raise
        if rec is not None:
            rec.end(h)

    def _set_buckets(self, groups: list[list[int]]) -> None:
        self._buckets, self._slots = B.build_buckets(groups, self._params)

    def _register_hooks(self) -> list[Any]:
        ref = weakref.ref(self)

        def make(i: int) -> Any:
            def hook(param: torch.Tensor) -> None:
                ddp = ref()
                if ddp is not None:
                    ddp._on_grad(i)
            return hook

        return [p.register_post_accumulate_grad_hook(make(i))
                for i, p in enumerate(self._params)]

    # -- forward ---------------------------------------------------------------------------
    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if self._delegate is not None:
            return self._delegate(*inputs, **kwargs)
        grad = torch.is_grad_enabled()
        if grad:
            self._check_prior_reduction()
            if self._rebuild_pending and len(self._ready_order) == len(self._params):
                self._rebuild_buckets()
        if self.require_forward_param_sync and self.forward_sync_buffers:
            self._sync_buffers()
        output = self.module(*inputs, **kwargs)
        if grad and self.require_backward_grad_sync:
            self.require_forward_param_sync = True
            self._prepare_for_backward(output)
        else:
            self.require_forward_param_sync = False
        return output

    def _sync_buffers(self) -> None:
        bufs = [b for n, b in self.module.named_buffers() if n not in self.parameters_to_ignore]
        if not bufs:
            return
        with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(tuple(bufs)):
            self._broadcast_states([b.detach() for b in bufs])

    def _check_prior_reduction(self) -> None:
        if not self._require_finalize:
            return
        missing = [i for i, r in enumerate(self._ready) if not r]
        rank = dist.get_rank(self.process_group)
        raise RuntimeError(_UNUSED_ERROR.format(
            rank=rank, indices=" ".join(map(str, missing)),
            names=", ".join(self._param_names[i] for i in missing)))

    def _rebuild_buckets(self) -> None:
        """Re-bucket in the order gradients arrived in the first backward (rank 0's)."""
        order = torch.tensor(self._ready_order, dtype=torch.int64)
        self._broadcast_states([order])
        ready = order.tolist()
        specs = [B.ParamSpec.of(self._params[i]) for i in ready]
        limits = [self._first_bucket_bytes, self.bucket_bytes_cap]
        self._set_buckets(B.assign_buckets(specs, limits, indices=ready))
        self._rebuild_pending = False
        self._ready_order = []
        self._reset_iteration()

    def _prepare_for_backward(self, output: Any) -> None:
        self._reset_iteration()
        if self._rebuild_pending:
            self._ready_order = []
        self._expect_hooks = True
        self._require_finalize = True
        if self.find_unused_parameters:
            used = _reachable_params(_find_tensors(output), self._index_of)
            self._unused = [i for i in range(len(self._params)) if i not in used]

    def _reset_iteration(self) -> None:
        self._expect_hooks = False
        self._ready = [False] * len(self._params)
        for b in self._buckets:
            b.reset()
        self._next_bucket = 0
        self._jobs: list[_Job] = []
        self._finalize_queued = False
        self._marked_unused = False
        self._callsite = ""

    # -- backward: hooks, buckets, end of backward -----------------------------------------
    def _on_grad(self, i: int) -> None:
        if self.find_unused_parameters and self._params[i].grad is not None:
            self._used[i] = True
        if not self._expect_hooks:
            return
        if not self._callsite and recorder.active() is not None:
            self._callsite = recorder.user_callsite()
        if self.find_unused_parameters and not self._marked_unused:
            self._marked_unused = True
            self._queue_finalize()
            for j in self._unused:
                self._mark_ready(j)
        if self._rebuild_pending:
            self._ready_order.append(i)
        self._mark_ready(i)

    def _mark_ready(self, i: int) -> None:
        if self._ready[i]:
            raise RuntimeError(
                f"Expected to mark a variable ready only once. Parameter {i} "
                f"({self._param_names[i]}) was marked ready twice in one backward: it may "
                "be used in a reentrant backward pass or shared between modules that "
                "run backward separately.")
        self._ready[i] = True
        slot = self._slots[i]
        bucket = self._buckets[slot.bucket]
        view = bucket.views[slot.position]
        p = self._params[i]
        g = p.grad
        if g is None:
            view.zero_()
        elif g.data_ptr() == view.data_ptr() and g.shape == view.shape:
            if self.find_unused_parameters and not self._used[i]:
                p.grad = g.clone()  # torch leaves the grad of an unused parameter alone
            if self.gradient_as_bucket_view:
                view.div_(self._world)
            else:
                view.mul_(self._inv_world)
        elif g.requires_grad:
            view.copy_(g.detach().mul(self._inv_world))
        else:
            torch.mul(g, self._inv_world, out=view)
        bucket.pending -= 1
        if bucket.pending == 0:
            self._launch_ready_buckets()

    def _launch_ready_buckets(self) -> None:
        buckets = self._buckets
        while self._next_bucket < len(buckets) and buckets[self._next_bucket].pending == 0:
            self._submit(_Job(self._all_reduce_bucket, buckets[self._next_bucket],
                              self._callsite))
            self._next_bucket += 1
        if self._next_bucket == len(buckets):
            if self.find_unused_parameters:
                used = torch.tensor(self._used, dtype=torch.int32)
                self._submit(_Job(self._all_reduce_used, used, self._callsite))
            self._queue_finalize()

    def _submit(self, job: _Job) -> None:
        self._jobs.append(job)
        if self._world == 1:
            job.run()
        else:
            _comm.submit(job)

    def _queue_finalize(self) -> None:
        if not self._finalize_queued:
            self._finalize_queued = True
            Variable._execution_engine.queue_callback(self._finalize_backward)

    def _all_reduce_bucket(self, bucket: B.Bucket, callsite: str) -> None:
        rec = recorder.active()
        if rec is None:
            R.ring_all_reduce_flat(bucket.flat, self.process_group, "sum")
            return
        h = rec.begin("all_reduce", self._group_arg, ins=[bucket.flat], reduce_op="avg",
                      flags=_BUCKET_FLAG, aux=bucket.index, callsite=callsite or "?")
        trace = R.ring_trace(rec, self._group_arg, self.process_group, h, bucket.index)
        try:
            R.ring_all_reduce_flat(bucket.flat, self.process_group, "sum", trace)
        except BaseException:
            rec.end(h, failed=True)
            raise
        rec.end(h)

    def _all_reduce_used(self, used: torch.Tensor, callsite: str) -> None:
        rec = recorder.active()
        h = -1
        if rec is not None:
            h = rec.begin("all_reduce", self._group_arg, ins=[used], reduce_op="sum",
                          callsite=callsite or "?")
        try:
            R.ring_all_reduce_flat(used, self.process_group, "sum",
                                   R.ring_trace(rec, self._group_arg, self.process_group, h,
                                                -1) if rec is not None else None)
        except BaseException:
            if rec is not None:
                rec.end(h, failed=True)
            raise
        if rec is not None:
            rec.end(h)
        self._used_global = used

    def _finalize_backward(self) -> None:
        if self.find_unused_parameters:  # parameters the graph reached but gave no grad
            for i, r in enumerate(self._ready):
                if not r:
                    self._mark_ready(i)
        jobs = self._jobs
        self._jobs = []
        try:
            for job in jobs:
                job.wait()
        finally:
            self._expect_hooks = False
            self._require_finalize = False
        used = self._used_global.tolist() if self.find_unused_parameters else None
        for i, p in enumerate(self._params):
            if used is not None and not used[i]:
                continue  # unused on every rank: its grad stays as it was
            slot = self._slots[i]
            view = self._buckets[slot.bucket].views[slot.position]
            if self._aliasable[i]:
                if p.grad is None or p.grad.data_ptr() != view.data_ptr():
                    p.grad = view
            elif p.grad is None:
                p.grad = torch.empty_like(p).copy_(view)
            else:
                p.grad.copy_(view)
        self._used = [False] * len(self._params)
        self._require_finalize = False

    # -- torch DDP's API -----------------------------------------------------------------
    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally inside this block (torch's ``no_sync``)."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def will_sync_module_buffers(self) -> bool:
        return self.require_forward_param_sync and self.forward_sync_buffers and any(
            True for _ in self.module.buffers())

    def register_comm_hook(self, state: object, hook: Any) -> None:
        """Gradients go through a user hook: hand the module over to torch's DDP."""
        self._to_torch().register_comm_hook(state, hook)

    def _register_builtin_comm_hook(self, comm_hook_type: Any) -> None:
        self._to_torch()._register_builtin_comm_hook(comm_hook_type)

    def _to_torch(self) -> Any:
        if self._delegate is None:
            for h in self._hooks:
                h.remove()
            self._hooks = []
            rec = recorder.active()
            if rec is not None:
                rec.meta("ddp_fallback", reason="register_comm_hook")
            object.__setattr__(self, "_delegate", TorchDDP(
                self.module, process_group=self._group_arg, init_sync=False,
                bucket_cap_mb=None if self._first_bucket_bytes < self.bucket_bytes_cap
                else self.bucket_bytes_cap / _MB,
                find_unused_parameters=self.find_unused_parameters,
                gradient_as_bucket_view=self.gradient_as_bucket_view,
                forward_sync_buffers=self.forward_sync_buffers))
        return self._delegate


_SIGNATURE = inspect.signature(DistributedDataParallel.__init__)
DistributedDataParallel.__ddpdoctor_torch__ = TorchDDP  # type: ignore[attr-defined]
