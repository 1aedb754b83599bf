"""Call sites point at the user's line and at the framework frame that made the call."""

from __future__ import annotations

import functools
import sys
import types
from typing import Callable

from ddpdoctor.analysis.model import Call
from ddpdoctor.runtime import callsites
from ddpdoctor.runtime.record_text import record_text
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.origin import Origin
from ddpdoctor.trace.reader import decode_fields, decode_text

SITE = "/usr/lib/python3.11/site-packages"


def _frames(*files: str) -> types.FrameType:
    """Run nested functions compiled under ``files`` (outermost first; ``path::name``
    names the function, else ``f``); return the innermost frame."""
    captured: list[types.FrameType] = []

    def make(i: int) -> Callable[[], None]:
        if i == len(files):
            return lambda: captured.append(sys._getframe(1))
        path, _, name = files[i].partition("::")
        name = name or "f"
        code = compile(f"def {name}(inner):\n    inner()\n", path, "exec")
        ns: dict = {}
        exec(code, ns)  # noqa: S102 - builds test frames with chosen file names
        return functools.partial(ns[name], make(i + 1))  # no frame of its own

    make(0)()
    return captured[0]  # the innermost of the files


def test_user_called_torch_directly_has_no_framework_site() -> None:
    frame = _frames("/home/u/train.py", f"{SITE}/torch/distributed/distributed_c10d.py")
    assert callsites.sites_text(frame) == "/home/u/train.py:2|"


def test_framework_frame_is_named_with_the_user_line_above_it() -> None:
    frame = _frames("/home/u/train.py",
                    f"{SITE}/lightning/pytorch/loops/training_epoch_loop.py",
                    f"{SITE}/lightning/fabric/utilities/distributed.py",
                    f"{SITE}/torch/distributed/distributed_c10d.py")
    text = callsites.sites_text(frame)
    assert text == "/home/u/train.py:2|lightning/fabric/utilities/distributed.py:2|W"
    assert callsites.user_site(frame) == "/home/u/train.py:2"


def test_torch_ddp_is_a_framework_and_other_libraries_are_not_the_user() -> None:
    frame = _frames("/home/u/train.py", f"{SITE}/tqdm/std.py",
                    f"{SITE}/torch/nn/parallel/distributed.py::_sync_buffers")
    assert callsites.sites_text(frame) == \
        "/home/u/train.py:2|torch/nn/parallel/distributed.py:2|F"


def test_record_text_round_trips_and_keeps_sites_when_long() -> None:
    raw = record_text("4", "", "float32", "/home/u/train.py:30|lightning/x/distributed.py:247")
    assert decode_text(raw) == (((4,),), (), ("float32",), "/home/u/train.py:30",
                                "lightning/x/distributed.py:247")
    long_user = "/home/u/" + "d" * 120 + "/train.py:30"
    raw = record_text(";".join(["1024x1024"] * 8), "", "float32",
                      long_user + "|lightning/fabric/utilities/distributed.py:247")
    assert len(raw) <= L.TEXT_SIZE
    _, _, dtypes, user, fw = decode_text(raw.ljust(L.TEXT_SIZE, b"\0"))
    assert dtypes == ("float32",) and user.endswith("/train.py:30")
    assert fw in ("", "utilities/distributed.py:247")


def _call(callsite: str, framework_site: str = "") -> Call:
    return Call(rank=0, group="0", seq=3, op="all_gather", in_shapes=((4,),),
                dtypes=("float32",), callsite=callsite, t_start=1, t_end=0,
                kind=L.RecordKind.COLLECTIVE, framework_site=framework_site)


def test_where_names_framework_and_user_line() -> None:
    call = _call("/home/u/train.py:30", "lightning/fabric/utilities/distributed.py:247")
    assert call.where() == \
        "all_gather at lightning/.../distributed.py:247, called from train.py:30"
    assert _call("/home/u/train.py:30").where() == "all_gather at train.py:30"


DDP = f"{SITE}/torch/nn/parallel/distributed.py"
C10D = f"{SITE}/torch/distributed/distributed_c10d.py"


def _origin(*files: str) -> Origin:
    text = callsites.sites_text(_frames("/home/u/origin_train.py", *files))
    raw = record_text("4", "", "float32", text)
    return Origin.of(decode_fields(raw)[5], "all_reduce", 0)


def test_origin_names_the_api_that_issued_the_collective() -> None:
    assert _origin(C10D) == Origin.USER
    assert _origin(f"{DDP}::forward", f"{DDP}::_pre_forward",
                   f"{DDP}::_distributed_broadcast_coalesced") == Origin.DDP_FORWARD
    assert _origin(f"{DDP}::__init__", f"{SITE}/torch/distributed/utils.py::"
                   "_sync_module_states", f"{SITE}/torch/distributed/utils.py::"
                   "_sync_params_and_buffers") == Origin.DDP_INIT
    assert _origin(f"{DDP}::forward", f"{SITE}/torch/nn/modules/batchnorm.py::forward",
                   f"{SITE}/torch/nn/modules/_functions.py::forward") == Origin.SYNC_BN
    assert _origin(f"{SITE}/torch/distributed/optim/zero_redundancy_optimizer.py::"
                   "consolidate_state_dict") == Origin.ZERO
    assert _origin(f"{DDP}::forward", f"{DDP}::_check_global_requires_backward_grad_sync") \
        == Origin.JOIN
    assert _origin(f"{SITE}/torch/distributed/algorithms/join.py::__exit__") == Origin.JOIN
    assert _origin(f"{C10D}::broadcast_object_list") == Origin.OBJECT
    assert _origin(f"{SITE}/accelerate/accelerator.py::gather") == Origin.FRAMEWORK
    assert _origin(f"{SITE}/lightning/pytorch/core/module.py::all_gather", f"{DDP}::forward") \
        == Origin.DDP_FORWARD


def test_origin_of_buckets_and_object_ops_comes_from_the_record() -> None:
    assert Origin.of("", "all_reduce", int(L.RecordFlag.BUCKET)) == Origin.DDP_BACKWARD
    assert Origin.of("", "broadcast_object_list", 0) == Origin.OBJECT
    assert Origin.of("", "all_reduce", 0) == Origin.USER
    assert Origin.of("F", "broadcast", 0) == Origin.DDP_FORWARD


def test_origin_letter_survives_a_long_record_text() -> None:
    long_user = "/home/u/" + "d" * 150 + "/train.py:30"
    raw = record_text(";".join(["1024x1024"] * 8), "", "float32",
                      long_user + "|torch/nn/parallel/distributed.py:2380|F")
    assert len(raw) <= L.TEXT_SIZE
    assert decode_fields(raw.ljust(L.TEXT_SIZE, b"\0"))[5] == "F"
