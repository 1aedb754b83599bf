"""faulthandler dumps as a finding quotes them: the user's crashing thread first."""

from ddpdoctor.analysis.load.stacks import _user_threads_first

DUMP = """Fatal Python error: Aborted

Thread 0x00007f53efc146c0 (most recent call first):
  File "/site/ddpdoctor/runtime/fr_dump.py", line 52 in _watch
  File "/usr/lib/python3.11/threading.py", line 982 in run

Thread 0x00007f53efc146c1 (most recent call first):
  File "/home/u/loader.py", line 7 in worker
  File "/usr/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007f5417463b80 (most recent call first):
  File "/home/u/train.py", line 5 in <module>

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)"""


def test_crashing_thread_first_without_ddpdoctor_threads() -> None:
    text = _user_threads_first(DUMP)
    assert text.startswith("Fatal Python error: Aborted\n\nCurrent thread")
    assert "train.py\", line 5" in text and "loader.py" in text
    assert "fr_dump.py" not in text and "Extension modules" not in text
    assert text.index("train.py") < text.index("loader.py")


def test_text_without_thread_blocks_is_kept() -> None:
    assert _user_threads_first("Segmentation fault") == "Segmentation fault"
