"""What the main snakemake process does to results/ before Snakemake plans a run.

The checks of :mod:`nqf.pipeline.results_tree`, :mod:`nqf.pipeline.results_record` and
:mod:`nqf.pipeline.verify` find files no job would ever see as wrong (not NetCDF at all, cut
short, changed behind their mtime, made for another config, copied in). A run moves each aside so
that it is regenerated. Moving is only safe when this call is the one that will run jobs on
results/, so :func:`before_planning` changes nothing (it only says what a run would do) when

* the call runs no job: ``-n``/``--dry-run``, ``--summary``, ``--lint``, ``--list-*``, ``--dag``,
  ``--report``, ``--unlock``, ``--touch`` and the other such options (:func:`calls_no_job`);
* another snakemake process works on the same results folder: a run holds nqf's lock
  (``results/.nqf.lock``, an advisory ``flock`` taken here and held until the process exits,
  released by the kernel even when the process is killed), so a second run, a run Snakemake
  will refuse, and a clone sharing the folder through a link all see it;
* Snakemake's own lock files are present while nqf's lock is free (left by a killed run):
  Snakemake will refuse this call unless ``--unlock``/``--nolock`` is given.
"""
from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

LOCK_NAME = ".nqf.lock"

# long options of a call that plans or reports but runs no job (Snakemake's CLI)
NO_JOB_OPTIONS = (
    "--dry-run", "--dryrun", "--summary", "--detailed-summary", "--lint", "--list-rules", "--list",
    "--list-target-rules", "--lt", "--dag", "--rulegraph", "--filegraph", "--d3dag", "--unlock",
    "--cleanup-metadata", "--cm", "--cleanup-shadow", "--list-changes", "--lc", "--list-input-changes",
    "--li", "--list-params-changes", "--lp", "--list-untracked", "--lu", "--list-conda-envs", "--report",
    "--containerize", "--archive", "--print-compilation", "--generate-unit-tests", "--export-cwl",
    "--delete-all-output", "--delete-temp-output", "--touch", "--version", "--help", "--debug-dag-only",
    "--conda-create-envs-only", "--draft-notebook", "--edit-notebook",
)
# their short forms (may be combined: -np)
NO_JOB_SHORT = {"n": "-n", "S": "--summary", "D": "--detailed-summary", "l": "--list-rules", "t": "--touch",
                "h": "--help", "v": "--version"}
# short options that take a value, so that the letters after them are not flags (-j4, -c2)
_SHORT_WITH_VALUE = set("jcdsR")


def calls_no_job(argv) -> str | None:
    """The option of ``argv`` (a snakemake command line) that makes it run no job, or None."""
    args = list(argv)[1:]
    if "--report-after-run" in args:
        args = [a for a in args if a not in ("--report", "--report-after-run")]
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg.startswith("--"):
            name = arg.split("=", 1)[0]
            if name in NO_JOB_OPTIONS:
                return name
            if name == "--executor":
                value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
                if value in ("dryrun", "touch"):
                    return f"--executor {value}"
        elif arg.startswith("-") and len(arg) > 1 and arg[1].isalpha():
            for letter in arg[1:]:
                if letter in NO_JOB_SHORT:
                    return NO_JOB_SHORT[letter]
                if letter in _SHORT_WITH_VALUE or not letter.isalpha():
                    break
    return None


_held: list = []  # the open lock file of this process (kept open: closing it releases the lock)


def take_results_lock(results: str | os.PathLike = "results", *, keep: bool = True) -> str | None:
    """Take nqf's lock on ``results`` for the rest of this process; None when taken (or when the
    file system has no locks: then nothing is excluded), else a sentence naming the holder. With
    ``keep`` False (a call that runs no job) only test it: nothing is created, the lock is
    released at once."""
    import fcntl

    if _held:
        return None
    root = Path(results)
    try:
        if keep:
            root.mkdir(parents=True, exist_ok=True)
            fh = open(root / LOCK_NAME, "a+")
        else:
            fh = open(root / LOCK_NAME)
    except OSError:
        return None
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno not in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
            fh.close()
            return None  # no locks on this file system (e.g. ENOLCK)
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        return (f"nqf: another snakemake run works on {root.resolve()} ({holder}); this call changes "
                f"nothing there before planning.")
    if not keep:
        fh.close()  # closing releases it
        return None
    try:  # who holds it, for another run's message; on a full disk the lock holds without it
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {os.uname().nodename}, in {Path.cwd()}\n")
        fh.flush()
    except OSError:
        pass
    _held.append(fh)
    return None


def snakemake_locks(workdir: str | os.PathLike = ".") -> int:
    """How many lock files Snakemake has in ``workdir/.snakemake/locks``."""
    try:
        return sum(1 for p in (Path(workdir) / ".snakemake" / "locks").iterdir() if p.is_file())
    except OSError:
        return 0


def sweep_mode(argv, results: str | os.PathLike = "results", workdir: str | os.PathLike = ".") -> tuple[bool, str]:
    """(whether this call may move files under ``results``, the sentence saying why not or "")."""
    flag = calls_no_job(argv)
    held = take_results_lock(results, keep=flag is None)
    if held:
        return False, held
    if flag is not None:
        return False, ""
    args = list(argv)
    if snakemake_locks(workdir) and "--unlock" not in args and "--nolock" not in args:
        return False, ("nqf: Snakemake's lock files are present, so this call changes nothing under results/ "
                       "before Snakemake decides whether it may run.")
    return True, ""


def before_planning(workflow, experiments, argv=None, results: str | os.PathLike = "results",
                    workdir: str | os.PathLike = ".") -> list[str]:
    """Every check of the module docstring; the sentences to print (stderr). Files a run moves
    aside are handed to Snakemake as forced, so that this call remakes them."""
    from nqf.pipeline import results_record, results_tree, verify

    argv = sys.argv if argv is None else argv
    move, why = sweep_mode(argv, results, workdir)
    out = [why] if why else []
    if why and "another snakemake run" in why:
        return out  # its files are being written: do not even read them
    results = Path(results)
    if os.path.lexists(results) and not results.is_dir():
        out.append(results_tree.move_aside(results, "is not a folder, and every job writes into it",
                                            move=move)[1])
        return out
    before = set(results_record.files(results))
    made_by = verify.made_by(experiments, results)
    for folder in results_tree.blocked_folders(made_by, results):
        out.append(results_tree.move_aside(folder, "is not a folder, and jobs write into it", move=move)[1])
    out += results_tree.remove_outward_links(results_tree.outward_links(results), move=move)
    out += results_tree.scan(results, move=move)
    others = [(p, rule) for p, rule in made_by.items() if p.suffix != ".nc"]
    out += results_tree.set_aside_outputs(others, move=move)
    tables = [(p, rule) for p, rule in others if p.suffix == ".csv"]
    out += results_tree.set_aside_outputs(tables, lambda p: verify.table_problem(p, experiments, results),
                                           move=move)
    out += results_record.set_aside_changed(results_record.changed_behind_mtime(results), move=move)
    new = results_record.new_to_record([p for p in made_by if p.suffix in (".nc", ".csv") and p.is_file()])
    for finding in verify.verify_results(experiments, results, only=new, move_aside=move,
                                         regenerated_by="this run"):
        if finding.problem:
            out.append(f"nqf: {finding.problem} {finding.action}")
    if not move:
        return out
    for path in results_tree.remove_stale_temporaries(results):
        out.append(f"nqf: removed {path}, the temporary file of a write that was killed.")
    ours = {str(p) for p in made_by}
    gone = sorted(str(p) for p in before - set(results_record.files(results)) if str(p) in ours)
    results_record.force_regeneration(workflow, gone)
    results_record.update(results)
    return out


def before_run(workflow, experiments, argv=None, results: str | os.PathLike = "results",
               workdir: str | os.PathLike = ".") -> None:
    """What workflow/rules/housekeeping.smk does when the Snakefile is parsed: in the main
    snakemake process only (a cluster job parses the Snakefile again on its node and must not
    sweep the tree), :func:`before_planning`, its sentences on stderr; then a hint where
    Snakemake's lock files are present (nqf.pipeline.results_tree.lock_hint), unless this call
    is ``--unlock``.

    Snakemake does not remake a missing intermediate file whose products are present and newer
    than their other inputs, so each file moved aside is handed to Snakemake as forced (as with
    ``--forcerun FILE``): this call remakes it, whichever target was asked for, and then
    everything made from it (nqf.pipeline.results_record.force_regeneration)."""
    from nqf.pipeline import results_tree

    if not workflow.is_main_process:
        return
    argv = sys.argv if argv is None else argv
    for message in before_planning(workflow, experiments, argv, results, workdir):
        print(message, file=sys.stderr)
    hint = results_tree.lock_hint(workdir)
    if hint and "--unlock" not in argv:
        print(hint, file=sys.stderr)
