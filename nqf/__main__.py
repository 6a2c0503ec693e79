"""``python -m nqf check-config`` and ``python -m nqf verify``: the workflow's config and results.

``check-config`` validates a workflow config before it is handed to Snakemake.

Snakemake reads every ``--configfile`` itself before the Snakefile (and nqf's checks) runs, so a
file it cannot read at all (missing, a directory, not UTF-8, not a mapping, nested 500 deep, a
mapping alias bomb) stops it with its own message, sometimes a Python traceback, or takes it
minutes. This command reads the same files and overrides with nqf's strict loader only, and
says in one sentence what is wrong::

    python -m nqf check-config --configfile config/paper.yaml --config device=cpu

It exits 0 with a line per experiment (kind, runs, estimated peak memory and steps) when the
config is valid on this machine, 2 with the sentence when it is not.

``verify`` opens every results file of the config with the checks its readers make
(nqf.pipeline.verify), whatever its mtime, and moves each wrong one aside so that the next
snakemake call regenerates it; it exits 1 when it found one. Run it from the directory snakemake
runs in (or pass ``--directory``), with the same ``--configfile``/``--config``::

    python -m nqf verify --configfile config/paper.yaml && snakemake --cores all --configfile config/paper.yaml
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config" / "config.yaml"


def _overrides(entries: list[str]) -> dict:
    """``key=value`` pairs typed as Snakemake types them (its own parser)."""
    from snakemake.cli import parse_config

    from nqf.errors import ConfigError

    try:
        return parse_config(entries)
    except ValueError as exc:
        raise ConfigError(f"--config takes key=value pairs (list targets before --config): "
                          f"{' '.join(str(exc).split())[:200]}") from None


def check_config_command(configfiles: list[str], overrides: list[str], default: Path, *,
                         jobs_run_here: bool = True) -> list[str]:
    """Lines describing the valid config (one per experiment); raises ConfigError otherwise."""
    from nqf import experiments
    from nqf.experiments import machine
    from nqf.pipeline.config import load_workflow_config, validate_config

    raw = load_workflow_config(configfiles, _overrides(overrides), default)
    cfg = validate_config(raw)
    experiments.check_config(cfg, jobs_run_here=jobs_run_here)
    lines = []
    for exp_id, exp in cfg["experiments"].items():
        size = machine.estimate(experiments.KINDS[exp["kind"]], exp)
        runs = len(experiments.run_ids(exp))
        lines.append(f"{exp_id} ({exp['kind']}): {runs} run{'s' * (runs != 1)}; largest run about "
                     f"{machine.human_bytes(size['bytes'])} ({size['what']}) and {size['steps']:.3g} steps")
    return lines


def verify_command(configfiles: list[str], overrides: list[str], default: Path, directory: Path, *,
                   dry_run: bool = False) -> tuple[int, list[str]]:
    """(exit status, lines): 0 when every existing results file holds, 1 when one was wrong."""
    import time

    from nqf.pipeline.config import load_workflow_config, validate_config
    from nqf.pipeline.verify import verify_results

    cfg = validate_config(load_workflow_config(configfiles, _overrides(overrides), default))
    start = time.monotonic()

    def progress(i, n, path):
        if i % 25 == 0:
            print(f"verify: {i}/{n} files ({path})", file=sys.stderr, flush=True)

    findings = verify_results(cfg["experiments"], Path(directory) / "results", move_aside=not dry_run,
                              progress=progress)
    wrong = [f for f in findings if f.problem]
    lines = [f"{f.problem} {f.action}".strip() for f in wrong]
    lines.append(f"verified {len(findings)} results files in {time.monotonic() - start:.1f} s: "
                 f"{len(findings) - len(wrong)} hold, {len(wrong)} wrong"
                 + ("; rerun snakemake to regenerate the files moved aside." if wrong and not dry_run else "."))
    return (1 if wrong else 0), lines


def _config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--configfile", nargs="+", default=[], help="config files, merged in order")
    parser.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE", help="overrides")
    parser.add_argument("--default", type=Path, default=DEFAULT_CONFIG,
                        help="config used when no file lists experiments (the Snakefile's default)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nqf", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check-config", help="validate --configfile files and --config overrides")
    _config_options(check)
    check.add_argument("--cluster", action="store_true",
                       help="the jobs run on cluster nodes: skip this machine's device and memory checks")
    verify = sub.add_parser("verify", help="check every results file's content; move wrong ones aside")
    _config_options(verify)
    verify.add_argument("--directory", type=Path, default=Path("."), help="snakemake's working directory")
    verify.add_argument("--dry-run", action="store_true", help="report wrong files, move nothing")
    sub.add_parser("schema", help="print the config schema as one file (workflow/schemas/config.schema.yaml)")
    args = parser.parse_args(argv)

    from nqf.errors import ConfigError

    if args.command == "schema":
        from nqf.pipeline.config_schema_file import standalone_schema_text

        sys.stdout.write(standalone_schema_text())
        return 0

    if args.command == "verify":
        try:
            rc, lines = verify_command(args.configfile, args.config, args.default, args.directory,
                                       dry_run=args.dry_run)
        except ConfigError as exc:
            print(f"Invalid configuration: {exc}", file=sys.stderr)
            return 2
        print("\n".join(lines))
        return rc
    try:
        lines = check_config_command(args.configfile, args.config, args.default, jobs_run_here=not args.cluster)
    except ConfigError as exc:
        print(f"Invalid configuration: {exc}", file=sys.stderr)
        return 2
    print(f"config valid: {len(lines)} experiment{'s' * (len(lines) != 1)}")
    for line in lines:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
