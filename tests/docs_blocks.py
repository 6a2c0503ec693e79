"""The fenced code blocks of README.md and docs/**/*.md, each with the test marker on the line
before it (docs/development.md, "Documentation and its tests"), and the checks the markers ask for
that do not run the block. Used by tests/package/test_docs_code.py and
tests/workflow/test_docs_results.py; importable as ``docs_blocks`` (tests/ is on the path)."""
from __future__ import annotations

import functools
import importlib.util
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from helpers import time_limit

ROOT = Path(__file__).resolve().parent.parent

# treatment -> the fence languages it may mark
TREATMENTS = {
    "library": {"python"},   # run in a fresh interpreter, a page's blocks in order in one namespace
    "results": {"python"},   # the same, in the directory of a finished config/test.yaml run (workflow tier)
    "run": {"bash"},         # run as written from the repository root
    "dry-run": {"bash"},     # snakemake commands, run with -n in an empty folder (workflow tier)
    "names": {"bash"},       # not run: every file, option, module and extra it names must exist
    "paths": {"text", ""},   # not run: every path at the start of a line must exist
}
MARKER = re.compile(r"^\s*<!-- test: ([\w-]+)(.*?)-->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
SEPARATORS = {"&&", "||", ";", "|"}


@dataclass
class Block:
    page: str            # relative to the repository root
    line: int            # of the opening fence, 1-based
    lang: str
    treatment: str | None
    subs: dict = field(default_factory=dict)   # placeholder -> what the test uses in its place
    code: str = ""

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"

    def substituted(self) -> str:
        code = self.code
        for word, value in self.subs.items():
            code = re.sub(rf"(?<![\w./-]){re.escape(word)}(?![\w/-])", value, code)
        return code


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, lang = fence.groups()
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        body = [line[len(indent):] if line.startswith(indent) else line for line in lines[i + 1:j]]
        marker = MARKER.match(lines[i - 1]) if i else None
        treatment, args = (marker.group(1), marker.group(2)) if marker else (None, "")
        subs = dict(word.split("=", 1) for word in args.split() if "=" in word)
        found.append(Block(str(path.relative_to(ROOT)), i + 1, lang, treatment, subs, "\n".join(body) + "\n"))
        i = j + 1
    return found


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks_of(page)]


# -- shell commands ----------------------------------------------------------------------------

def commands(code: str) -> list[list[str]]:
    """The simple commands of a shell block: continuation lines joined, comments dropped, split at
    &&, ||, ; and |."""
    text = code.replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        current = []
        for word in words:
            if word in SEPARATORS:
                found.append(current)
                current = []
            else:
                current.append(word)
        found.append(current)
    return [c for c in found if c]


def program(words: list[str]) -> tuple[list[str], str, list[str]]:
    """(environment assignments, the program, its arguments); ``.venv/bin/x`` is ``x``, and
    ``python -m snakemake`` is ``snakemake``."""
    env = []
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        env.append(words[0].split("=", 1)[0])
        words = words[1:]
    prog, args = Path(words[0]).name, words[1:]
    if prog in ("python", "python3") and args[:1] == ["-m"] and args[1:2] == ["snakemake"]:
        prog, args = "snakemake", args[2:]
    return env, prog, args


def placeholder(word: str) -> bool:
    return "<" in word and ">" in word


@functools.cache
def options_of(*cmd: str) -> frozenset[str]:
    """The options a command's --help lists."""
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=time_limit(120), cwd=ROOT).stdout
    return frozenset(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))


def bin_of(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _option_problems(args: list[str], known: frozenset[str], what: str) -> list[str]:
    return [f"{what} has no option {a.split('=', 1)[0]}" for a in args
            if a.startswith("-") and a != "-" and a.split("=", 1)[0] not in known]


def path_problems(word: str) -> list[str]:
    """A word that names a file of the repository (has a '/' or a file suffix) must exist; outputs
    under results/, .venv and placeholders are not checked."""
    if placeholder(word) or word.startswith(("results/", ".venv", "-", "~", "$")) or "=" in word:
        return []
    if "/" not in word and not re.search(r"\.(ya?ml|py|sh|toml|cfg|txt|md)$", word):
        return []
    if word.startswith(("http:", "https:")):
        return []
    pattern = word.rstrip("/")
    hits = list(ROOT.glob(pattern)) if any(c in pattern for c in "*?[") else [ROOT / pattern]
    return [] if any(p.exists() for p in hits) else [f"{word} does not exist in the repository"]


def extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project.get("optional-dependencies", {}))


def env_names() -> str:
    """The text of the repository's code and tests, where an environment variable must be read."""
    return "\n".join(p.read_text(errors="replace") for d in ("nqf", "tests", "workflow")
                     for p in (ROOT / d).rglob("*.py"))


def name_problems(block: Block) -> list[str]:
    """What a block names that does not exist: files, configs, profiles, extras, modules,
    environment variables and options (snakemake's against `snakemake --help`, pip's against
    `pip install --help`, pytest's against `pytest --help`)."""
    problems = []
    for words in commands(block.substituted()):
        env, prog, args = program(words)
        source = env_names() if env else ""
        problems += [f"nothing in nqf, tests or workflow reads ${name}" for name in env if name not in source]
        if prog == "snakemake":
            problems += _option_problems(args, options_of(bin_of("snakemake"), "--help"), "snakemake")
            for flag, value in zip(args, args[1:]):
                if flag in ("--configfile", "--workflow-profile", "--profile", "-s", "--snakefile"):
                    if not placeholder(value) and not (ROOT / value).exists():
                        problems.append(f"{flag} {value} does not exist")
            problems += [p for a in args for p in path_problems(a)]
        elif prog == "pip":
            assert args and args[0] == "install", f"{block.name}: only `pip install` is checked"
            problems += _option_problems(args[1:], options_of(bin_of("pip"), "install", "--help"), "pip install")
            for a in args[1:]:
                extra = re.fullmatch(r"\.\[([\w,-]+)\]", a)
                if extra:
                    problems += [f"pyproject.toml has no extra [{e}]" for e in extra.group(1).split(",")
                                 if e not in extras()]
                elif not a.startswith("-"):
                    problems += path_problems(a)
        elif prog in ("python", "python3"):
            if args[:1] == ["-m"]:
                module, rest = args[1], args[2:]
                if importlib.util.find_spec(module) is None:
                    problems.append(f"no module {module}")
                if module == "pytest":
                    problems += _option_problems(rest, options_of(sys.executable, "-m", "pytest", "--help"), "pytest")
                if module != "venv":
                    problems += [p for a in rest for p in path_problems(a)]
            else:
                problems += [p for a in args for p in path_problems(a)]
        elif prog == "conda":
            for flag, value in zip(args, args[1:]):
                if flag == "-f":
                    problems += path_problems(value)
        else:
            problems.append(f"{prog}: no check is written for this program")
    return problems


def path_lines_problems(block: Block) -> list[str]:
    """Every path a `paths` block names at the start of a line (before the description; several
    separated by commas) exists; a placeholder in angle brackets stands for any name
    (`nqf/experiments/<kind>/`: some folder of nqf/experiments)."""
    problems = []
    for line in block.code.splitlines():
        if not line or line[0].isspace():
            continue
        head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        for word in (w.strip() for w in head.split(",")):
            hits = list(ROOT.glob(re.sub(r"<[^>]*>", "*", word).rstrip("/")))
            if not hits:
                problems.append(f"{word} does not exist")
    return problems
