"""Fingerprints the data probes take: a batch's sample indices and contents, the global
RNG states (copied, never advanced), and the framework that seeds every rank alike."""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from typing import Any

from ddpdoctor.frameworks import known

_MASK = (1 << 64) - 1


def indices_fingerprint(indices: Any) -> int | None:
    """A process-independent hash of a batch's sample indices (ints only), else None."""
    if type(indices) is int:
        return hash((indices,)) & _MASK
    if type(indices) in (list, tuple) and indices and type(indices[0]) is int:
        return hash(tuple(indices)) & _MASK
    return None


def _first_tensor(data: Any, depth: int = 0) -> Any:
    tensor = _tensor_type()
    if type(data) is tensor or isinstance(data, tensor):
        return data
    if depth > 2:
        return None
    if isinstance(data, (list, tuple)):
        for item in data[:4]:
            t = _first_tensor(item, depth + 1)
            if t is not None:
                return t
    elif isinstance(data, dict):
        for item in list(data.values())[:4]:
            t = _first_tensor(item, depth + 1)
            if t is not None:
                return t
    return None


@functools.lru_cache(maxsize=None)
def _tensor_type() -> type:
    import torch

    return torch.Tensor


def tensor_fingerprint(data: Any) -> tuple[int | None, int]:
    """(hash of the shape and 16 strided elements of the batch's first tensor, its
    leading dimension); (None, 0) when the batch holds no tensor.  Reads the elements
    through numpy where it can (a torch op costs more than the whole fingerprint)."""
    t = _first_tensor(data)
    if t is None:
        return None, 0
    size = int(t.shape[0]) if t.dim() else 1
    n = t.numel()
    if n == 0:
        return hash(tuple(t.shape)) & _MASK, 0
    step = max(1, n // 16)
    t = t.detach()
    try:
        values = tuple(t.numpy().flat[::step][:16].tolist())
    except (TypeError, RuntimeError):  # not on the CPU, or a dtype numpy lacks
        values = tuple(t.reshape(-1)[::step][:16].float().cpu().tolist())
    return hash((tuple(t.shape), t.element_size(), values)) & _MASK, size


def batch_size(data: Any) -> int:
    t = _first_tensor(data)
    return 0 if t is None else (int(t.shape[0]) if t.dim() else 1)


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def rng_fingerprints() -> dict[str, Any]:
    """Fingerprints of the global RNG states (copies: no generator is advanced)."""
    import torch

    out: dict[str, Any] = {"torch": _digest(torch.random.get_rng_state().numpy().tobytes()),
                           "torch_seed": torch.initial_seed()}
    random = sys.modules.get("random")
    if random is not None:
        state = random.getstate()
        out["python"] = f"{hash(state[1]) & _MASK:016x}"
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            st = np.random.get_state()
            out["numpy"] = _digest(st[1].tobytes() + int(st[2]).to_bytes(8, "little"))
        except (AttributeError, TypeError, ValueError):
            pass
    return out


def seeding_framework() -> str | None:
    """The framework that seeds every rank alike on purpose (same initial model), if one
    drives this process: transformers' Trainer (``set_seed(args.seed)``), Lightning
    (``seed_everything``), accelerate (``set_seed``): ddpdoctor/frameworks/."""
    return known.seeding_framework(sys.modules, os.environ)
