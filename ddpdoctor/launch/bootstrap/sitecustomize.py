"""ddpdoctor's bootstrap: instrument this Python process, then run the user's sitecustomize."""

import os
import sys


def _activate() -> None:
    if not os.environ.get("DDPDOCTOR_RUN_DIR"):
        return
    try:
        try:
            from ddpdoctor.host import apply_clock_shift
        except ImportError:
            parent = os.environ.get("DDPDOCTOR_PACKAGE_PARENT")
            if not parent:
                raise
            sys.path.append(parent)  # last, so it shadows nothing of the user's
            from ddpdoctor.host import apply_clock_shift
        # tests of skewed hosts only: before the runtime's modules keep time.time_ns
        # (the recorder stamps with its own reference to it)
        apply_clock_shift()
        from ddpdoctor.runtime import activate
    except ImportError as e:  # ddpdoctor not importable in this interpreter
        print(f"ddpdoctor: cannot instrument {sys.executable} ({e})", file=sys.stderr)
        return
    try:
        activate()
    except Exception as e:  # noqa: BLE001 - the user's program must start regardless
        print(f"ddpdoctor: instrumentation failed ({type(e).__name__}: {e}); the job "
              "runs without diagnosis", file=sys.stderr)


def _chain_user_sitecustomize() -> None:
    """Import the sitecustomize this one shadows, if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    this = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401  (the user's)
    except ImportError as e:
        if e.name != "sitecustomize":  # the user's sitecustomize itself failed
            print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                  f"{type(e).__name__}: {e}", file=sys.stderr)
        if this is not None:
            sys.modules["sitecustomize"] = this
    finally:
        sys.path[:] = saved


_activate()
_chain_user_sitecustomize()
