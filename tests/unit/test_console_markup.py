"""A rank's error text printed on the console is text, never rich markup."""

from __future__ import annotations

import io
from rich.console import Console

from ddpdoctor.supervisor.events import Voice

GLOO = "Read error [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] x"


def test_say_prints_a_gloo_message_with_a_closing_tag_shape_as_is():
    out = io.StringIO()
    voice = Voice(Console(file=out, width=300))
    voice.say(f"rank 1 failed: {GLOO}", "red")  # raised MarkupError before
    assert GLOO in out.getvalue()
