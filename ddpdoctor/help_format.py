"""The --help layout of every ddpdoctor command: prose wrapped to the terminal, examples and
keys kept on their own lines."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs wrapped to the terminal (80 columns in a pipe): prose lines
    join into paragraphs, "Exit status:" starts its own, and indented lines (examples, keys)
    and headers ("examples:") keep their own line, so no --help line runs past the width."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        blocks: list[tuple[str, str]] = []  # (text, lead of its wrapped lines)
        for line in text.splitlines():
            prose = line.strip() and not line[0].isspace() and not line.endswith(":")
            if prose and blocks and blocks[-1][1] == "" and blocks[-1][0] \
                    and not blocks[-1][0].endswith(":") and not line.startswith("Exit status"):
                blocks[-1] = (blocks[-1][0] + " " + line.strip(), "")
            else:
                lead = "" if prose else " " * (len(line) - len(line.lstrip()) + 2)
                blocks.append((line, lead))
        return "\n".join(textwrap.fill(block, width, initial_indent=indent,
                                       subsequent_indent=indent + lead) if block.strip()
                         else "" for block, lead in blocks)
