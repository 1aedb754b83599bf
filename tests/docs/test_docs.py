"""The README and the docs site say what the code does: every `ddpdoctor ...` command they
show exists (parsed by the real argument parser, a bug's name found in the catalogue), and
every output they show is what the command prints now.

Conventions of the markdown (docs/testing.md says them to writers):
- each line of a ```bash block that starts with `ddpdoctor` is parsed by ddpdoctor's parser
  (`<...>` placeholders stand for a path); an inline `ddpdoctor ...` span is checked lighter
  (the command and each --option exist, a bug's name is catalogued);
- a ```text block right after `<!-- output of: COMMAND -->` is compared with COMMAND's output
  now, run dirs, pids and torchrun's banner normalised (cheap commands run in-process; the
  README's example job is run once, for real);
- a ```text block right after `<!-- recorded: WHAT -->` is a measurement or a long run, kept
  as recorded; a ```text block with neither marker fails.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddpdoctor.catalogue import CATALOGUE
from ddpdoctor.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BUG_NAMES = {bug.name for bug in CATALOGUE}
EXAMPLE = "ddpdoctor run --hang-timeout 10 --nproc-per-node 2 examples/train_hang.py"
MARKER = re.compile(r"<!--\s*(output of|recorded):\s*(.*?)\s*-->")
FENCE = re.compile(r"^```(\w*)\s*$")
INLINE = re.compile(r"`(ddpdoctor [^`]+)`")


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page: its language, text, line and the marker above it."""

    page: Path
    line: int
    language: str
    text: str
    marker: tuple[str, str] | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, language = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        above = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        marker = MARKER.search(above)
        found.append(Block(page, start + 1, language, "\n".join(lines[start + 1:j]),
                           (marker.group(1), marker.group(2)) if marker else None))
        i = j + 1
    return found


BLOCKS = [b for page in PAGES for b in blocks_of(page)]


def command_lines(block: Block) -> list[list[str]]:
    """The `ddpdoctor ...` commands of a bash block, as argv (comments dropped, && split)."""
    commands = []
    for line in block.text.replace("\\\n", " ").splitlines():
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if words and words[0] == "ddpdoctor":
                commands.append(words)
    return commands


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's sub-commands (`bugs list`, `runs prune`), none when it has none."""
    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)),
                  None)
    return dict(action.choices) if action is not None else {}


def check_light(words: list[str], where: str) -> None:
    """The command, its sub-action and every --option before `--` exist; a named bug exists."""
    commands = subparsers(build_parser())
    assert len(words) > 1 and words[1] in commands, f"{where}: no command {words[1:2]}"
    parser = commands[words[1]]
    rest = words[2:]
    if rest and rest[0] in subparsers(parser):
        parser = subparsers(parser)[rest[0]]
        name = rest[1] if len(rest) > 1 else ""
        if words[1] == "bugs" and re.fullmatch(r"[a-z][a-z0-9_]+", name):
            assert name in BUG_NAMES, f"{where}: no bug named {name!r} in the catalogue"
        rest = rest[1:]
    known = {o for a in parser._actions for o in a.option_strings}
    for word in rest:
        if word == "--" or (not word.startswith("-") and words[1] == "run"):
            break  # the job's own command and options follow
        if word.startswith("--"):
            assert word.split("=")[0] in known, f"{where}: `{' '.join(words)}`: no {word}"


def check_parses(words: list[str], where: str) -> None:
    """The whole command line goes through ddpdoctor's parser (placeholders as paths)."""
    argv = [re.sub(r"<[^>]*>", "RUN", w) for w in words[1:]]
    if "--help" in argv:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
            build_parser().parse_args(argv)
        assert done.value.code == 0 and "Exit status" in out.getvalue(), where
        return
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:  # pragma: no cover - a failure message
        pytest.fail(f"{where}: `{' '.join(words)}` does not parse (exit {e.code})")
    except Exception as e:  # UserError from the parser: one line saying what is wrong
        pytest.fail(f"{where}: `{' '.join(words)}`: {e}")


def bash_commands() -> list[tuple[str, list[str]]]:
    return [(b.where, words) for b in BLOCKS if b.language == "bash"
            for words in command_lines(b)]


def inline_commands() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in INLINE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            words = [w for w in m.group(1).replace("[", " ").replace("]", " ").split()]
            if words[1].isupper():
                continue  # `ddpdoctor COMMAND --help`: a placeholder for every command
            found.append((f"{page.relative_to(ROOT)}:{line}", words))
    return found


@pytest.mark.parametrize("where, words", bash_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_bash_block_commands_parse(where, words):
    check_light(words, where)
    check_parses(words, where)


def test_inline_commands_exist():
    found = inline_commands()
    assert len(found) > 30
    for where, words in found:
        check_light(words, where)


def test_every_text_block_is_checked_or_says_why_not():
    assert not [b.where for b in BLOCKS if not b.language], "a block without a language"
    unmarked = [b.where for b in BLOCKS if b.language == "text" and b.marker is None]
    assert not unmarked, f"text blocks with neither an output nor a recorded marker: {unmarked}"
    outputs = [b for b in BLOCKS if b.marker and b.marker[0] == "output of"]
    assert outputs and all(b.language == "text" for b in outputs)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "python"],
                         ids=lambda b: b.where)
def test_python_blocks_are_python(block):
    ast.parse(block.text)


def test_readme_is_short_and_its_links_exist():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            if not target.startswith("http"):
                assert (page.parent / target).exists(), f"{page.name}: broken link {target}"
    svg = (ROOT / "docs" / "img" / "tui-hang.svg").read_text()
    assert "collective_mismatch" in svg and "Lint" in svg and "train_hang.py:37" in svg


def normalised(text: str) -> str:
    """Output with what changes from run to run made alike: run dirs, pids, the banner of
    torchrun, trailing blanks."""
    lines = []
    in_ranks = False
    for line in text.splitlines():
        line = line.rstrip()
        if re.fullmatch(r"\*+", line) or line.startswith("Setting OMP_NUM_THREADS"):
            continue
        line = re.sub(r"\S*ddpdoctor-runs/\d{8}-\d{6}-[\w-]+", "ddpdoctor-runs/<run>", line)
        if re.match(r"rank\s+state\s+pid\b", line):
            in_ranks = True
            line = " ".join(line.split())
        elif in_ranks and re.match(r"\d+\s+\w+\s+\d+\s", line):
            fields = line.split()
            line = " ".join([fields[0], fields[1], "PID", *fields[3:]])
        else:
            in_ranks = False
        lines.append(line)
    return "\n".join(lines).strip("\n")


def run_in_process(command: str, monkeypatch) -> str:
    """A cheap command's output (stdout and stderr), at 80 columns, from the checkout."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        main(shlex.split(command)[1:])
    return out.getvalue()


CHEAP = [b for b in BLOCKS if b.marker and b.marker[0] == "output of" and b.marker[1] != EXAMPLE]


@pytest.mark.parametrize("block", CHEAP, ids=lambda b: b.where)
def test_shown_output_is_the_commands_output_now(block, monkeypatch):
    command = block.marker[1]
    assert re.match(r"ddpdoctor (bugs (list|show)|lint|[a-z]+ --help)\b", command), \
        f"{block.where}: not a cheap command to check: {command}"
    assert normalised(run_in_process(command, monkeypatch)) == normalised(block.text), block.where


@pytest.mark.slow
def test_readme_example_output_is_the_real_output_now():
    """The README's first hang, run for real (the one job of these tests, 2 ranks)."""
    shown = [b for b in BLOCKS if b.marker == ("output of", EXAMPLE)]
    assert len(shown) == 1 and shown[0].page.name == "README.md"
    where = Path(tempfile.mkdtemp(prefix="dd", dir="/tmp"))  # short: the paths fit 80 columns
    try:
        (where / "examples").mkdir()
        shutil.copy(ROOT / "examples" / "train_hang.py", where / "examples")
        env = dict(os.environ, COLUMNS="80", PYTHONPATH=os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
        done = subprocess.run([sys.executable, "-m", "ddpdoctor.cli", *shlex.split(EXAMPLE)[1:]],
                              cwd=where, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=240)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    assert done.returncode == 124, done.stdout[-3000:]
    assert normalised(done.stdout) == normalised(shown[0].text)
