"""One option vocabulary (docs/CONTRACTS.md): deprecated spellings keep working with a one-line warning,
every console script is the ``main`` of an ``mmst`` module, and ``eval/`` / ``data_prep/`` scripts are thin
wrappers around the same ``main``."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
from pathlib import Path

import pytest
import tomllib

from mmst.cli_help import ArgumentParser

REPO = Path(__file__).resolve().parents[1]


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"wrapped_{path.parent.name}_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_deprecated_alias_rewrites_and_warns_once(capsys):
    p = ArgumentParser(prog="tool")
    p.add_argument("--mustc-root", required=True, help="root")
    p.add_argument("rest", nargs="*")
    p.add_deprecated_alias("--root", "--mustc-root")
    assert p.parse_args(["--root", "R"]).mustc_root == "R"  # satisfies the required new option
    assert capsys.readouterr().err == "tool: warning: --root is deprecated; use --mustc-root\n"
    assert p.parse_args(["--root=S"]).mustc_root == "S"
    assert capsys.readouterr().err.count("\n") == 1
    args = p.parse_args(["--mustc-root", "T", "--", "--root"])  # after '--': left alone
    assert args.mustc_root == "T" and args.rest == ["--root"] and capsys.readouterr().err == ""
    assert "--root" not in p.format_help()
    with pytest.raises(ValueError):
        p.add_deprecated_alias("--mustc-root", "--root")  # the new spelling cannot become an alias


@pytest.mark.parametrize("module,argv,dest,value,new", [
    ("mmst.cli.prep_multiway", ["--root", "RAW", "--out", "D"], "mmst_root", "RAW", "--mustc-root"),
    ("mmst.cli.prep_multiway", ["--raw", "RAW", "--out", "D"], "mmst_root", "RAW", "--mustc-root"),
    ("mmst.cli.synthesize_corpus", ["--out", "O", "--grammar", "--vocab-size", "30"], "num_content_words", 30,
     "--num-content-words"),
    ("mmst.cli.synthesize_corpus", ["--out", "O", "--text-dir", "T", "--tgt", "deu:de"], "tgt_file_codes", "deu:de",
     "--tgt-file-codes"),
    ("mmst.cli.score", ["--instances", "I", "--tgt-lang", "de"], "tgt_langs", "de", "--tgt-langs"),
    ("mmst.cli.policy_results", ["--root", "E", "--ks", "3"], "waitk_lagging", "3", "--waitk-lagging"),
    ("mmst.cli.unseen_gap", ["--evals-dir", "E", "--systems", "a", "--out", "O", "--k", "5"], "waitk_lagging", "5",
     "--waitk-lagging"),
    ("mmst.training.average", ["--dir", "D", "--last", "2", "--output", "o.pt"], "save_dir", "D", "--save-dir"),
    ("mmst.cli.policy_results", ["--evals-dir", "E", "--checkpoint", "m=c.pt"], "checkpoint_of", ["m=c.pt"],
     "--checkpoint-of"),
    ("mmst.cli.compare_systems", ["--system", "a=D", "--out", "O", "--checkpoint", "a=c.pt"], "checkpoint_of",
     ["a=c.pt"], "--checkpoint-of"),
])
def test_renamed_options_of_the_clis(capsys, module, argv, dest, value, new):
    args = importlib.import_module(module).build_parser().parse_args(argv)
    assert getattr(args, dest.replace("mmst_root", "mustc_root")) == value
    err = capsys.readouterr().err
    assert f"is deprecated; use {new}" in err and "Traceback" not in err


def test_synthesizer_dither_is_in_16_bit_units(monkeypatch, tmp_path, capsys):
    """``--dither`` means the same everywhere: std in 16-bit units (1.0 = one LSB). The synthesizer's library
    takes full scale, so 16384 LSB reach it as 0.5; without the option its own default (2e-4) applies."""
    import mmst.cli.synthesize_corpus as cli

    seen = []
    monkeypatch.setattr(cli, "synthesize_grammar_corpus", lambda *a, **kw: seen.append(kw) or {})
    assert cli.main(["--out", str(tmp_path), "--grammar", "--dither", "16384"]) == 0
    assert cli.main(["--out", str(tmp_path), "--grammar", "--num-content-words", "12"]) == 0
    assert seen[0]["dither"] == 0.5 and "dither" not in seen[1] and seen[1]["vocab_size"] == 12
    assert "16-bit units" in cli.build_parser().format_help()


def test_score_takes_one_language(capsys):
    from mmst.cli.score import main

    with pytest.raises(SystemExit) as e:
        main(["--instances", "x.log", "--tgt-langs", "de,ja"])
    assert e.value.code == 2 and "give one language" in capsys.readouterr().err


def test_recipe_old_spellings_warn_and_still_work():
    """Underscores and renamed recipe options (RECIPE_RENAMED in recipes/lib/stages.sh) print one warning each
    and set the new variable (``--help`` prints the values after parsing the options before it)."""
    p = subprocess.run(["bash", "recipes/synthetic/run.sh", "--exp_dir", "exp/x", "--eval-k", "1,3", "--help"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [
        "recipes/synthetic/run.sh: warning: --exp_dir is deprecated; use --exp-dir",
        "recipes/synthetic/run.sh: warning: --eval-k is deprecated; use --eval-waitk-lagging"]
    values = dict(line.split() for line in p.stdout.splitlines()[2:] if len(line.split()) == 2)
    assert values["--exp-dir"] == "exp/x" and values["--eval-waitk-lagging"] == "1,3"
    p = subprocess.run(["bash", "recipes/synthetic/run.sh", "--eval-kk", "1"], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "unknown option '--eval-kk'" in p.stderr


@pytest.mark.parametrize("recipe,old,new", [
    ("recipes/synthetic/run_backbones.sh", "--asr-updates", "--asr-max-update"),
    ("recipes/synthetic/run_backbones.sh", "--st-updates", "--st-max-update"),
    ("recipes/synthetic/run_backbones.sh", "--results", "--copy-to"),
    ("recipes/synthetic/run_backbones.sh", "--seed", "--seeds"),
    ("recipes/synthetic/run_augment.sh", "--results", "--copy-to"),
    ("recipes/ted_mmst/run.sh", "--asr-checkpoint", "--pretrained-encoder"),
    ("recipes/synthetic/run_policies_hard.sh", "--results-json", "--out-json"),
    ("recipes/synthetic/run_policies_hard.sh", "--results-md", "--out-md"),
    ("recipes/synthetic/run_policies_hard.sh", "--checkpoint", "--checkpoint-name"),
])
def test_recipe_option_one_name_per_concept(recipe, old, new):
    """The recipes share one name per concept (docs/CONTRACTS.md): the old spelling warns and sets the new one."""
    p = subprocess.run(["bash", recipe, old, "X7", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [f"{recipe}: warning: {old} is deprecated; use {new}"]
    values = dict(line.split() for line in p.stdout.splitlines()[2:] if len(line.split()) == 2)
    assert values[new] == "X7" and old not in values


@pytest.mark.parametrize("recipe,argv,message", [
    ("recipes/synthetic/run.sh", ["--stage", "x3"], "--stage needs a whole number, got 'x3'"),
    ("recipes/synthetic/run.sh", ["--stop-stage", ""], "--stop-stage needs a whole number, got ''"),
    ("recipes/synthetic/run.sh", ["--force", "yes"], "--force needs true or false, got 'yes'"),
    ("recipes/synthetic/run_backbones.sh", ["--nproc", "2x"], "--nproc needs a whole number, got '2x'"),
])
def test_recipe_option_values_are_checked(recipe, argv, message):
    """A value that cannot be right stops the recipe before any stage (exit 2, one line naming the option)."""
    p = subprocess.run(["bash", recipe, *argv], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr == f"{recipe}: {message}\n" and p.stdout == ""


def test_console_scripts_and_thin_wrappers():
    """Every console script is ``main`` of an ``mmst`` module that has ``build_parser()``; each script in
    ``eval/`` and ``data_prep/`` runs the ``main`` of one console script (nothing else)."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    mains = {}
    for name, target in scripts.items():
        module, func = target.split(":")
        mod = importlib.import_module(module)
        assert module.startswith("mmst.") and callable(getattr(mod, func)) and callable(mod.build_parser), name
        assert mod.build_parser().prog == name
        mains[getattr(mod, func)] = name
    wrappers = sorted((REPO / "eval").glob("*.py")) + sorted((REPO / "data_prep").glob("*.py"))
    assert len(wrappers) == 15
    for path in wrappers:
        main = _load(path).main
        assert main in mains, f"{path}: its main is no console script's"
        assert len(path.read_text().splitlines()) <= 10, f"{path}: a wrapper only imports and calls main"


#: bench scripts that are libraries of the others, not commands
BENCH_LIBRARIES = {"provenance.py", "summarize.py"}


def test_every_bench_script_has_its_own_parser():
    """Every benchmark command exposes ``build_parser()`` returning the project's parser (so its documented
    commands can be checked without running it), defined in the script itself, not imported from mmst."""
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    try:
        for path in sorted((REPO / "bench").glob("bench_*.py")):
            mod = _load(path)
            assert hasattr(mod, "build_parser"), f"{path.name} has no build_parser()"
            assert mod.build_parser.__module__ == mod.__name__, f"{path.name}: build_parser is imported"
            assert isinstance(mod.build_parser(), ArgumentParser), path.name
    finally:
        sys.path.remove(str(REPO / "bench"))
    assert {p.name for p in (REPO / "bench").glob("*.py") if not p.name.startswith("bench_")} <= BENCH_LIBRARIES


@pytest.mark.parametrize("script,old,new,dest,value", [
    ("bench_vs_fairseq.py", "--lang", "--tgt-langs", "lang", "fr"),
    ("bench_train.py", "--langs", "--num-langs", "langs", 2),
    ("bench_alignment.py", "--langs", "--num-langs", "langs", 3),
])
def test_bench_options_use_the_shared_names(script, old, new, dest, value, capsys):
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    try:
        p = _load(REPO / "bench" / script).build_parser()
    finally:
        sys.path.remove(str(REPO / "bench"))
    assert getattr(p.parse_args([new, str(value)]), dest) == value
    assert capsys.readouterr().err == ""
    assert getattr(p.parse_args([old, str(value)]), dest) == value
    assert f"warning: {old} is deprecated; use {new}" in capsys.readouterr().err
    assert old + " " not in p.format_help()
