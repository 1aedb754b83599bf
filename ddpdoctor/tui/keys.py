"""The terminal UI's keys and what each does: one list for the help screen and `ui --help`.

No Textual import here: the command line's help reads it without loading the UI."""

import textwrap

KEYS = (
    ("r t f p l", "show the Ranks, Timeline, Findings, Profile or Log tab (or click a tab)"),
    ("w", "show who waits for whom (the Waits tab, when the report has a wait-for graph)"),
    ("↑ ↓ / mouse", "move in a table or the timeline"),
    ("enter / click", "open the selected rank: its stack and last collectives"),
    ("[  ]", "previous / next rank (on a rank's screen)"),
    ("/", "filter ranks: 3  0-7  1,5  hung  broadcast  gpu-node-02 (words combine)"),
    ("escape", "clear the filter, or go back"),
    ("g", "timeline: next process group"),
    ("d", "timeline: scroll to the divergent seq"),
    ("?", "this help"),
    ("q", "quit (the job, if any, is not affected by leaving the UI)"),
    ("ctrl+c", "quit with status 130; under `run --ui` the run stops, as Ctrl-C does"),
)


def keys_help(columns: int = 76) -> str:
    """The keys as plain lines for `ddpdoctor ui --help`, wrapped to ``columns``."""
    width = max(len(key) for key, _ in KEYS)
    indent = " " * (width + 4)
    return "\n".join(textwrap.fill(meaning, columns - 1, initial_indent=f"  {key:<{width}}  ",
                                   subsequent_indent=indent) for key, meaning in KEYS)
