"""The shell commands shown in README.md and docs/*.md work as written, as far as they can be checked without
running them: every fenced ``bash``/``sh`` block is split into commands (line continuations, ``&&``, ``;``,
pipes, ``VAR=value`` prefixes, ``nice``), the program must exist (a console script of pyproject.toml, a
``python`` file or ``-m`` module of the repository, a recipe, a make target, ``torchrun -m``, ``simuleval``,
``omnisteval``)
and its options must parse: Python programs through their ``build_parser()`` (no run), recipes against their
``RECIPE_OPTIONS``, SimulEval against its own parser plus the agent's options. A deprecated spelling is an
error too. ``[--opt V]`` marks options as optional and is checked like ``--opt V``. A command that cannot be
checked carries ``# docs-test: skip (reason)`` on its line. Commands written inline in prose (a backtick span
that starts with a program) are checked the same way, except that they may leave out required options and
values. Also: ``--help`` texts name only files that exist."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.M | re.S)
SHELL = {"bash", "sh", "shell", "console"}
SKIP = re.compile(r"#\s*docs-test:\s*skip\s*\(([^)]+)\)")
ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SEPARATORS = {"&&", "||", ";", "|", "&"}
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


@dataclass
class Command:
    """One command of a doc: ``where`` is ``file:line``; ``skip`` the reason of a skip marker."""

    where: str
    argv: list[str]
    skip: str | None = None


def doc_commands(text: str, name: str) -> list[Command]:
    """Every command of the fenced shell blocks of a Markdown text."""
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) not in SHELL:
            continue
        first = text[:m.start(2)].count("\n") + 1
        logical, start = "", None
        for i, line in enumerate(m.group(2).splitlines()):
            start = first + i if start is None else start
            if line.rstrip().endswith("\\"):
                logical += line.rstrip()[:-1] + " "
                continue
            out += split_commands(logical + line, f"{name}:{start}")
            logical, start = "", None
    return out


def split_commands(line: str, where: str) -> list[Command]:
    """Split one logical shell line into commands, without env assignments and ``nice``/``time`` prefixes."""
    skip = SKIP.search(line)
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    tokens, cmds = list(lex), [[]]
    for t in tokens:
        if t in SEPARATORS:
            cmds.append([])
        else:
            cmds[-1].append(t)
    out = []
    for argv in cmds:
        while argv and ENV.match(argv[0]):
            argv = argv[1:]
        while argv and argv[0] in ("nice", "time"):
            argv = argv[3:] if argv[0] == "nice" and argv[1:2] == ["-n"] else argv[1:]
        if argv:
            out.append(Command(where, argv, skip.group(1).strip() if skip else None))
    return out


def _strip_optional(args: list[str]) -> list[str]:
    """``[--opt V]`` -> ``--opt V`` (optional options in the docs' usage lines)."""
    out, depth = [], 0
    for a in args:
        if a.startswith("[-"):
            a, depth = a[1:], depth + 1
        if depth and a.endswith("]"):
            a, depth = a[:-1], depth - 1
        out.append(a)
    return out


def _nothing_required(parser) -> None:
    """Make every option, exclusive group and subcommand's option of an argparse parser optional."""
    for group in parser._mutually_exclusive_groups:
        group.required = False
    for action in parser._actions:
        action.required = False
        for sub in (action.choices or {}).values() if isinstance(action.choices, dict) else ():
            _nothing_required(sub)


def _parse(parser, args: list[str], prose: bool = False) -> str | None:
    if prose:  # prose leaves required options out
        _nothing_required(parser)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser.parse_args(args)
        except SystemExit as e:
            if e.code:
                return err.getvalue().strip().splitlines()[-1]
    warned = [line for line in err.getvalue().splitlines() if "deprecated" in line]
    return warned[0] if warned else None


def _load_file(path: Path):
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"doc_{path.parent.name}_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(path.parent))
    return mod


def _check_module(mod, args: list[str], what: str, prose: bool = False) -> str | None:
    if not hasattr(mod, "build_parser"):
        return f"{what} has no build_parser(): its options cannot be checked"
    return _parse(mod.build_parser(), args, prose)


def _check_recipe(path: Path, args: list[str]) -> str | None:
    if not path.is_file():
        return f"{path.relative_to(REPO)}: no such recipe"
    m = re.search(r"RECIPE_OPTIONS=\(([^)]*)\)", path.read_text())
    if not m:
        return f"{path.relative_to(REPO)}: no RECIPE_OPTIONS"
    known = set(m.group(1).split())
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--help", "-h"):
            return None
        if not a.startswith("--"):
            return f"unexpected argument {a!r} (recipe options look like --name value)"
        name, eq, _ = a[2:].partition("=")
        if "_" in name:
            return f"--{name}: recipe options are kebab-case (--{name.replace('_', '-')})"
        if name.replace("-", "_") not in known:
            return f"--{name}: not an option of {path.relative_to(REPO)}"
        value = a.partition("=")[2] if eq else (args[i + 1] if i + 1 < len(args) else "")
        if name in RECIPE_WHOLE_NUMBERS and not (value.isdigit() or _placeholder(value)):
            return f"--{name} needs a whole number, got {value!r} (recipes/lib/stages.sh check_option_values)"
        if name == "force" and value not in ("true", "false") and not _placeholder(value):
            return f"--force needs true or false, got {value!r}"
        i += 1 if eq else 2
    return None


#: recipe options whose value is a whole number (recipes/lib/stages.sh check_option_values)
RECIPE_WHOLE_NUMBERS = ("stage", "stop-stage", "nproc", "jobs")


def _placeholder(value: str) -> bool:
    """A documented value that stands for the user's own (``N``, ``$nproc``, ``<K>``)."""
    return value.isupper() or value.startswith(("$", "<"))


def _check_make(targets: list[str]) -> str | None:
    defined = set(re.findall(r"^([\w.-]+):", (REPO / "Makefile").read_text(), re.M))
    missing = [t for t in targets if not t.startswith("-") and "=" not in t and t not in defined]
    return f"make: no target {missing}" if missing else None


def _check_simuleval(args: list[str]) -> str | None:
    from simuleval import options

    if "--agent-class" not in args:
        return "simuleval without --agent-class"
    module, _, cls = args[args.index("--agent-class") + 1].rpartition(".")
    agent = getattr(importlib.import_module(module), cls)
    argv, sys.argv = sys.argv, ["simuleval", *args]  # SimulEval's parser reads sys.argv while it is built
    try:
        parser = options.general_parser()
        options.add_evaluator_args(parser)
        options.add_scorer_args(parser, args)
        options.add_slurm_args(parser)
        options.add_dataloader_args(parser, args)
        agent.add_args(parser)
    finally:
        sys.argv = argv
    return _parse(parser, args)


def check(argv: list[str], prose: bool = False) -> str | None:
    """None when the command's program exists and its options parse, else what is wrong (``prose``: required
    options may be left out)."""
    if "..." in argv or any(a.endswith(" ...") for a in argv):
        return "a literal '...' (write the command in full)"
    prog, args = argv[0], _strip_optional(argv[1:])
    if prog == "make":
        return _check_make(args)
    if prog in ("source", "."):  # the environment make setup creates
        return None if args == [".venv/bin/activate"] else f"{prog} {shlex.join(args)}: only .venv/bin/activate"
    if prog in ("python", "python3"):
        if args[:1] == ["-m"]:
            return _check_module(importlib.import_module(args[1]), args[2:], f"python -m {args[1]}", prose)
        path = REPO / args[0]
        if not path.is_file():
            return f"{args[0]}: no such file"
        return _check_module(_load_file(path), args[1:], args[0], prose)
    if prog == "bash" or prog.endswith(".sh"):
        path, rest = (args[0], args[1:]) if prog == "bash" else (prog, args)
        return _check_recipe(REPO / path, rest)
    if prog in SCRIPTS:
        module = SCRIPTS[prog].split(":")[0]
        return _check_module(importlib.import_module(module), args, prog, prose)
    if prog == "torchrun":
        if "-m" not in args:
            return "torchrun without -m MODULE"
        i = args.index("-m")
        return _check_module(importlib.import_module(args[i + 1]), args[i + 2:], f"torchrun -m {args[i + 1]}", prose)
    if prog == "simuleval":
        return _check_simuleval(args)
    if prog == "omnisteval":  # a dependency (IWSLT scoring); its parser has subcommands
        return _check_module(importlib.import_module("omnisteval.cli"), args, "omnisteval", prose)
    return f"{prog}: not a program of this repository (mark the command '# docs-test: skip (reason)')"


ALL = [c for doc in DOCS for c in doc_commands(doc.read_text(encoding="utf-8"), str(doc.relative_to(REPO)))]


def assert_parses(cmd: Command) -> None:
    """Skip a command marked to skip; otherwise fail with the problem :func:`check` finds."""
    if cmd.skip:
        pytest.skip(cmd.skip)
    problem = check(cmd.argv)
    assert problem is None, f"{cmd.where}: {shlex.join(cmd.argv)}\n  -> {problem}"


@pytest.mark.parametrize("cmd", ALL, ids=[f"{c.where}:{c.argv[0]}" for c in ALL])
def test_documented_command(cmd):
    assert_parses(cmd)


def test_every_doc_has_its_commands_found():
    assert len(ALL) > 60
    assert {c.argv[0] for c in ALL} >= {"make", "mmst-train", "mmst-eval", "bash", "python", "simuleval"}


INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
RESULTS_BLOCK = re.compile(r"<!-- (results|generated):([A-Za-z0-9_.-]+) -->.*?<!-- /\1:\2 -->", re.S)
PROSE_PROGRAM = re.compile(r"^(python3? (eval|bench|tools|data_prep)/\S+\.py|bash recipes/[\w/]+\.sh|make [a-z])")
#: what a command in prose may leave out besides required options: an option's value, or a placeholder value (N)
PROSE_OMISSIONS = re.compile(r"expected one argument|invalid \w+ value: '([A-Z][A-Z_]*|<[^>]*>)'")


def prose_commands(text: str, name: str) -> list[Command]:
    """The commands written inline in a Markdown text's prose (`` `mmst-eval --jobs 2` ``): a backtick span that
    starts with a console script, ``python eval|bench|tools|data_prep/...py``, ``bash recipes/...sh`` or ``make``,
    outside fenced blocks and rendered results (their commands are records of past runs). ``...`` stands for
    options left out; of ``a | b`` (alternatives) the first is the command."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    text = RESULTS_BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    out = []
    for m in INLINE.finditer(text):
        code = m.group(1).replace("...", " ").strip()
        words = code.split()
        if not words or not (words[0] in SCRIPTS or PROSE_PROGRAM.match(code)) or re.search(r"[<*]", words[:2][-1]):
            continue
        if words[0] == "make" and not all(re.fullmatch(r"[a-z][\w-]*", w) for w in words[1:]):
            continue  # make's output quoted in prose, not a command
        where = f"{name}:{text[:m.start()].count(chr(10)) + 1}"
        try:
            cmds = split_commands(code, where)
        except ValueError:  # an unbalanced quote: a fragment, not a command
            continue
        out += cmds[:1]
    return out


PROSE = [c for doc in DOCS for c in prose_commands(doc.read_text(encoding="utf-8"), str(doc.relative_to(REPO)))]


def test_commands_in_prose_use_existing_options():
    """A command written inline in the docs' prose names a program that exists and options it has, in their
    current spelling; it may leave out required options and values, as prose does."""
    assert len(PROSE) > 100, "the prose commands were not found"
    problems = []
    for cmd in PROSE:
        found = check(cmd.argv, prose=True)
        if found and not PROSE_OMISSIONS.search(found):
            problems.append(f"{cmd.where}: `{shlex.join(cmd.argv)}`: {found}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("snippet,problem", [
    ("Run `mmst-eval --waitk-laging 3` first.", "unrecognized arguments: --waitk-laging"),
    ("Use `mmst-eval --checkpoint C`.", "--checkpoint is deprecated"),
    ("Use `bash recipes/synthetic/run.sh --stage x3`.", "--stage needs a whole number"),
    ("Run `mmst-eval --jobs N` (required options left out).", None),
    ("See `mmst-train --distributed ddp | dropcompute` and `make test: pytest took S s`.", None),
])
def test_the_prose_checker_reports_what_it_should(snippet, problem):
    """The prose checker itself: a misspelled, deprecated or malformed option is reported; omissions are not."""
    found = [check(c.argv, prose=True) for c in prose_commands(snippet, "x.md")]
    found = [f for f in found if f and not PROSE_OMISSIONS.search(f)]
    assert found == [] if problem is None else (len(found) == 1 and problem in found[0]), found


RECIPE_CALL = re.compile(r"(?:^|\s)((?:python3? (?:eval|bench|tools|data_prep)/\S+\.py|torchrun|"
                         + "|".join(map(re.escape, sorted(SCRIPTS, key=len, reverse=True))) + r")(?=\s|$).*)")


def recipe_commands(path: Path) -> list[Command]:
    """The commands a recipe runs of this repository (console scripts, ``python eval|bench|tools|data_prep/...``,
    ``torchrun``), continuation lines joined, with the shell's expansions made plain: ``${x:+--opt "$x"}`` is
    ``--opt "$x"``, an array of extra options and ``$(...)`` are dropped or one word."""
    out, lines = [], path.read_text().splitlines()
    name = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    i = 0
    while i < len(lines):
        start, logical = i, lines[i]
        while logical.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            logical = logical.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        m = RECIPE_CALL.search(logical.split(" #")[0])
        if not m or logical.lstrip().startswith(("#", "echo")):
            continue
        cmd = re.sub(r'"?\$\{[^}]*\[@\]\}"?', "", m.group(1))     # "${extra[@]}"
        cmd = re.sub(r"\$\{\w+:\+([^}]*)\}", r"\1", cmd)           # ${x:+--opt "$x"}
        cmd = re.sub(r"\$\((?:[^()]|\([^()]*\))*\)", "$X", cmd)       # $(...)
        cmd = re.split(r"\s(?:[12]?>|<|;;)(?:\s|$)", cmd)[0]
        out += split_commands(cmd, f"{name}:{start + 1}")[:1]
    return out


RECIPE_COMMANDS = [c for p in sorted((REPO / "recipes").rglob("*.sh")) for c in recipe_commands(p)]


def test_recipes_call_the_tools_with_current_options():
    """Every command a recipe runs names a program of the repository and options it has, in their current
    spelling (a deprecated one still works, with a warning, so only this test notices it); values that are shell
    variables are not checked."""
    assert len(RECIPE_COMMANDS) > 40, "the recipes' commands were not found"
    problems = []
    for cmd in RECIPE_COMMANDS:
        found = check(cmd.argv, prose=True)
        if found and not re.search(r"expected one argument|invalid (\w+ value|choice): '\$", found):
            problems.append(f"{cmd.where}: `{shlex.join(cmd.argv)[:160]}`: {found}")
    assert not problems, "\n".join(problems)


def test_the_recipe_checker_finds_an_old_spelling(tmp_path):
    """The recipes' checker itself: a deprecated option behind a continuation line and a shell expansion is found."""
    sh = tmp_path / "run.sh"
    sh.write_text('x() {\n  nice -n 2 python eval/simultaneous_eval.py --model "$m" \\\n    --out "$o" '
                  '${k:+--waitk-lagging "$k"} --checkpoint "$c" "${extra[@]}" > log\n}\n')
    [cmd] = recipe_commands(sh)
    assert cmd.where == "run.sh:2" and "--checkpoint is deprecated" in check(cmd.argv, prose=True)


def test_readme_activates_the_environment_before_the_first_console_script():
    readme = [c.argv[0] for c in doc_commands((REPO / "README.md").read_text(encoding="utf-8"), "README.md")]
    first = min(i for i, prog in enumerate(readme) if prog in SCRIPTS)
    assert readme.count("source") == 1 and readme.index("source") < first


@pytest.mark.parametrize("snippet,problem", [
    ("mmst-eval --model CKPT --out OUT --waitk-laging 3", "unrecognized arguments: --waitk-laging"),
    ("mmst-eval --checkpoint CKPT --out OUT --waitk-lagging 3", "--checkpoint is deprecated"),
    ("mmst-eval --model CKPT --out OUT --waitk-lagging 3", None),
    ("python eval/score.py --instances I --tgt-lang de", "--tgt-lang is deprecated"),
    ("OMP_NUM_THREADS=1 python data_prep/prep_multiway.py --mustc-root R --out D && make tset", "make: no target"),
    ("bash recipes/synthetic/run.sh --stage 3 --stop_stage 3", "recipe options are kebab-case"),
    ("bash recipes/synthetic/run.sh --stage 3 \\\n    --eval-waitk-lag 1,3", "not an option of"),
    ("bash recipes/synthetic/run.sh --stage x3", "--stage needs a whole number"),
    ("bash recipes/synthetic/run.sh --force yes", "--force needs true or false"),
    ("bash recipes/synthetic/run.sh --stage 3 --stop-stage 3 --force true", None),
    ("mmst-train --config C --data D --save-dir S model.arch=unified ...", "a literal '...'"),
    ("mmst-frobnicate --x", "not a program of this repository"),
    ("pip install foo   # docs-test: skip (pip's own options)", "skip"),
])
def test_a_misspelled_documented_option_fails(snippet, problem):
    """The checker itself: a typo in an option, an old spelling, a missing make target or a literal '...'
    is reported; the same command spelled right passes."""
    cmds = doc_commands(f"```bash\n{snippet}\n```\n", "x.md")
    if problem == "skip":
        assert [c.skip for c in cmds] == ["pip's own options"]
        return
    found = [check(c.argv) for c in cmds]
    if problem is None:
        assert found == [None]
    else:
        assert any(f and problem in f for f in found), found


PATH_IN_HELP = re.compile(r"(?<![\w/.$-])((?:docs|mmst|eval|data_prep|recipes|tools|bench)/[\w./<>-]*\w)")


def _help_texts():
    for name, target in sorted(SCRIPTS.items()):
        yield name, importlib.import_module(target.split(":")[0]).build_parser().format_help()
    for path in sorted((REPO / "tools").glob("*.py")):
        mod = _load_file(path)
        if hasattr(mod, "build_parser"):
            yield str(path.relative_to(REPO)), mod.build_parser().format_help()
    for path in sorted((REPO / "recipes").glob("*/run*.sh")):
        p = subprocess.run(["bash", str(path), "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
        yield str(path.relative_to(REPO)), p.stdout + path.read_text().split("RECIPE_OPTIONS=")[0]


def test_help_texts_name_only_existing_files():
    missing = []
    for name, text in _help_texts():
        for ref in PATH_IN_HELP.findall(text):
            if "<" in ref or "*" in ref or ref.endswith("/"):
                continue
            if not (REPO / ref).exists() and not list(REPO.glob(ref + ".*")):  # a prefix: OUT.json, OUT.md
                missing.append(f"{name}: {ref}")
    assert not missing, missing


USAGE = re.compile(r"^Usage::[ \t]*\n\n((?:[ \t]+\S.*\n|[ \t]*\n)+)", re.M)


def _usage_sources():
    """(name, docstring) of every console script's module and every bench and tools script."""
    for name, target in sorted(SCRIPTS.items()):
        yield name, importlib.import_module(target.split(":")[0]).__doc__ or ""
    for folder in ("bench", "tools"):
        for path in sorted((REPO / folder).glob("*.py")):
            yield str(path.relative_to(REPO)), _load_file(path).__doc__ or ""


def usage_commands(name: str, doc: str) -> list[Command]:
    """The commands of a docstring's ``Usage::`` blocks; in ``PROG ... --opt``, the ``...`` stands for the
    options of that block's first example of ``PROG`` (``PROG`` = the words before the ``...``)."""
    import textwrap

    out = []
    for m in USAGE.finditer(doc):
        block: list[Command] = []
        for c in doc_commands(f"```bash\n{textwrap.dedent(m.group(1))}```\n", f"{name} usage"):
            if "..." in c.argv:
                i = c.argv.index("...")
                base = next((b.argv for b in block if b.argv[:i] == c.argv[:i] and "..." not in b.argv), None)
                if base is not None:
                    c.argv = c.argv[:i] + base[i:] + c.argv[i + 1:]
            block.append(c)
        out += block
    return out


USAGES = [c for name, doc in _usage_sources() for c in usage_commands(name, doc)]


@pytest.mark.parametrize("cmd", USAGES, ids=[f"{c.where}:{c.argv[0]}" for c in USAGES])
def test_usage_example_in_help(cmd):
    """The ``Usage::`` examples that ``--help`` prints parse like the docs' commands."""
    assert_parses(cmd)


def test_usage_examples_are_found():
    assert len(USAGES) > 30
    assert {c.argv[0] for c in USAGES} >= {"mmst-eval", "mmst-eval-longform", "mmst-transcribe-stream", "python"}
