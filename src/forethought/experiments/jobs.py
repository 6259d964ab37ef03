"""A resumable queue of subprocess jobs (``forethought ...`` commands over seeds or settings).

Jobs run in order, ``parallel`` at a time, each in its own process group (so stopping a job stops what it
launched, e.g. ``accelerate launch`` workers) with its output appended to ``<log_dir>/<name>.log``. A job that
succeeds leaves ``<name>.done`` (its argv, exit status and wall time); with ``resume`` a later queue skips the jobs
whose marker holds the same argv. When a job fails (or a callback raises, or the caller is interrupted) every
other running job is stopped — SIGTERM to its group, SIGKILL after ``grace_s`` — and every log is closed before
:class:`JobFailed` is raised, so nothing keeps running or writing behind the caller's back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from forethought.core.io import atomic_write_json

# The package's own source folder: subprocesses import the same forethought as the queue that launched them.
PACKAGE_SRC = Path(__file__).resolve().parents[2]  # .../src/forethought/experiments/jobs.py -> .../src


@dataclass(frozen=True)
class Job:
    """One command: ``name`` (its log and marker file names; no path separators) and ``argv``."""

    name: str
    argv: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or os.sep in self.name or self.name.startswith("."):
            raise ValueError(f"a job name must be a plain file name, got {self.name!r}")
        if not self.argv:
            raise ValueError(f"job {self.name!r} has an empty command")
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))


@dataclass
class JobResult:
    name: str
    status: Literal["ok", "skipped"]
    log: Path
    wall_s: float = 0.0


class JobFailed(RuntimeError):
    """A job exited non-zero (or could not start); ``stopped`` names the running jobs stopped because of it."""

    def __init__(self, name: str, returncode: int | None, log: Path, stopped: list[str], why: str = "") -> None:
        self.name, self.returncode, self.log, self.stopped = name, returncode, log, stopped
        if why:
            status = why
        elif returncode is not None and returncode < 0:
            status = f"killed by signal {-returncode}"
        else:
            status = f"exit {returncode}"
        msg = f"{name} failed ({status}); see {log}"
        if stopped:
            msg += f"; stopped the other running job(s): {', '.join(stopped)}"
        super().__init__(msg)


@dataclass
class _Running:
    job: Job
    proc: subprocess.Popen
    log: IO[str]
    started: float = field(default_factory=time.monotonic)


def subprocess_env(threads: int, src: Path | None = None) -> dict[str, str]:
    """The environment of every job: ``threads`` torch / BLAS threads, ``src`` (default: this package's source
    folder) first on PYTHONPATH, the offline hub unless HF_HUB_OFFLINE is set."""
    path = os.environ.get("PYTHONPATH", "")
    first = str(src or PACKAGE_SRC)
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": first + (os.pathsep + path if path else ""),
            "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}


def seed_jobs(name: str, argv: Sequence[str], seeds: Iterable[int], seed_flag: str = "--run.seed",
              name_flag: str | None = "--run.name") -> list[Job]:
    """One job per seed: ``argv`` plus ``seed_flag <seed>`` (and ``name_flag <name>-s<seed>``, so each seed has
    its own run folder), named ``<name>-s<seed>``."""
    jobs = []
    for s in seeds:
        run = f"{name}-s{int(s)}"
        jobs.append(Job(run, (*argv, seed_flag, str(int(s)), *((name_flag, run) if name_flag else ()))))
    return jobs


def _as_job(job: Job | tuple[str, Sequence[str]]) -> Job:
    return job if isinstance(job, Job) else Job(job[0], tuple(job[1]))


def _marker(log_dir: Path, name: str) -> Path:
    return log_dir / f"{name}.done"


def finished_before(log_dir: Path, job: Job) -> bool:
    """Whether ``job`` (the same argv) succeeded in an earlier queue that logged to ``log_dir``."""
    try:
        return json.loads(_marker(log_dir, job.name).read_text())["argv"] == list(job.argv)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, sig)  # the job's own group (start_new_session): it and what it launched
        else:  # pragma: no cover - Windows: no process groups
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def stop_jobs(running: Sequence[_Running], grace_s: float) -> None:
    """SIGTERM every job's group, SIGKILL what is left after ``grace_s``, reap them and close their logs."""
    for r in running:
        _signal_group(r.proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for r in running:
        try:
            r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        _signal_group(r.proc, signal.SIGKILL)  # also children that outlived their leader or ignored SIGTERM
        r.proc.wait()
        r.log.close()


def run_queue(jobs: Iterable[Job | tuple[str, Sequence[str]]], parallel: int, log_dir: Path,
              cwd: Path | None = None, threads: int = 1, on_done: Callable[[str], object] | None = None,
              done: Callable[[str], bool] | None = None, resume: bool = False, poll_s: float = 1.0,
              grace_s: float = 10.0, src: Path | None = None) -> list[JobResult]:
    """Run ``jobs`` in order, ``parallel`` at a time, each with ``threads`` threads (:func:`subprocess_env`) and
    its output appended to ``log_dir/<name>.log``.

    Skipped: jobs for which ``done(name)`` is true (e.g. their run folder holds results), and with ``resume`` jobs
    that finished in an earlier queue with the same argv (their ``<name>.done`` marker). ``on_done(name)`` runs
    after each job that succeeds (e.g. archive its run at once, so a queue killed later keeps it). On a failure
    the other running jobs are stopped, every log closed, and :class:`JobFailed` raised. Returns one
    :class:`JobResult` per job, in order of completion (skipped ones first)."""
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, got {parallel}")
    queue = [_as_job(j) for j in jobs]
    names = [j.name for j in queue]
    if len(set(names)) != len(names):
        raise ValueError(f"job names must be unique: {sorted({n for n in names if names.count(n) > 1})}")
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    env = subprocess_env(threads, src)
    results: list[JobResult] = []
    pending: list[Job] = []
    for job in queue:
        if (done is not None and done(job.name)) or (resume and finished_before(log_dir, job)):
            results.append(JobResult(job.name, "skipped", log_dir / f"{job.name}.log"))
        else:
            pending.append(job)
    running: list[_Running] = []
    try:
        while pending or running:
            while pending and len(running) < parallel:
                job = pending.pop(0)
                log_path = log_dir / f"{job.name}.log"
                _marker(log_dir, job.name).unlink(missing_ok=True)  # a rerun is not done until it succeeds
                log = open(log_path, "a")
                try:
                    proc = subprocess.Popen(list(job.argv), env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                            start_new_session=True)
                except OSError as e:
                    log.close()
                    raise JobFailed(job.name, None, log_path, [r.job.name for r in running],
                                    why=f"could not start: {e}") from None
                running.append(_Running(job, proc, log))
            time.sleep(poll_s)
            for r in list(running):
                rc = r.proc.poll()
                if rc is None:
                    continue
                running.remove(r)
                r.log.close()
                log_path = log_dir / f"{r.job.name}.log"
                if rc != 0:
                    _signal_group(r.proc, signal.SIGKILL)  # what the failed job launched and left behind
                    raise JobFailed(r.job.name, rc, log_path, [x.job.name for x in running])
                wall = time.monotonic() - r.started
                atomic_write_json(_marker(log_dir, r.job.name), {"argv": list(r.job.argv), "returncode": 0,
                                                                 "wall_s": round(wall, 3)})
                results.append(JobResult(r.job.name, "ok", log_path, wall))
                if on_done is not None:
                    on_done(r.job.name)
    except BaseException:
        stop_jobs(running, grace_s)  # a failure, a callback's error or Ctrl-C: leave nothing running
        raise
    return results

