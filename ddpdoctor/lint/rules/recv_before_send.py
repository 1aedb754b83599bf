"""Every rank posts a blocking recv before its send to the same peer: a deadlock."""

from __future__ import annotations

import ast

from ddpdoctor.lint.findings import Severity
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.rules import Draft

KIND = "recv_before_send"
MESSAGE = ("every rank blocks in recv (line {line}) before it sends (line {send}): each waits "
           "for a message its peer has not sent yet")
FIX = ("order the pair by rank (the lower rank sends first, the other receives first) or use "
       "dist.batch_isend_irecv")


def _p2p(stmt: ast.stmt, module: ParsedModule, op: str) -> ast.Call | None:
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        name = module.qualified(stmt.value.func) or ""
        if name in (f"torch.distributed.{op}", f"torch.distributed.distributed_c10d.{op}"):
            return stmt.value
    return None


def _peer(call: ast.Call, key: str) -> str:
    for k in call.keywords:
        if k.arg == key:
            return ast.unparse(k.value)
    return ast.unparse(call.args[1]) if len(call.args) > 1 else ""


def check(stmts: list[ast.stmt], module: ParsedModule) -> Draft | None:
    """Rule: in a block every rank runs, a blocking ``recv`` from a peer followed by a ``send``
    to the same peer deadlocks (both sides wait in recv)."""
    for i, stmt in enumerate(stmts):
        recv = _p2p(stmt, module, "recv")
        if recv is None:
            continue
        for later in stmts[i + 1:]:
            send = _p2p(later, module, "send")
            if send is not None and _peer(send, "dst") == _peer(recv, "src"):
                return Draft(KIND, Severity.ERROR, recv.lineno, "recv", None,
                             MESSAGE.format(line=recv.lineno, send=send.lineno), FIX)
    return None
