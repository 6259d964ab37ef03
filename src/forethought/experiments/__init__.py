"""Experiments: run a command over seeds, collect the finished runs, compare them seed by seed.

- :mod:`~forethought.experiments.jobs`: a resumable job queue of subprocesses (``forethought ...`` commands, one
  per seed or setting), a few at a time, each with its own log; when one job fails every other running job is
  stopped (its whole process group) and every log is closed before the failure is reported.
- :mod:`~forethought.experiments.archive`: a finished run folder read into one JSON record and kept in a committed
  archive (``benchmarks/results/runs/<benchmark>/<run>.json``), so a later session without the run folders
  collects the same numbers.
A comparison over seeds, end to end::

    jobs = [*seed_jobs("a", [sys.executable, "-m", "forethought.cli", ...], seeds, name_flag="--run.name"), ...]
    run_queue(jobs, parallel=2, log_dir=runs, done=lambda n: finished_run(runs / n, archive) is not None,
              on_done=lambda n: finished_run(runs / n, archive))
    records = collect_runs(runs, [j.name for j in jobs], archive)
    seed_paired(by_seed(records, "a", metric), by_seed(records, "b", metric))

- :mod:`~forethought.experiments.myopia`, :mod:`~forethought.experiments.psf_codes`,
  :mod:`~forethought.experiments.predgen_mc`: one benchmark's aggregation each (pure functions of run JSON).
- :mod:`~forethought.experiments.stats`: statistics over seeds (mean, std, Student-t interval), seed-paired
  differences, late-training medians of a metrics log; the arithmetic is :mod:`forethought.eval.stats`'s.

Layering: ``core <- eval <- experiments``; experiments import no system. A job runs a system through the CLI in a
subprocess (the same code path a user runs), so the systems never import this package and it never imports
them; ``cli`` and the benchmark scripts sit on top of both.
"""

from forethought.experiments.archive import (
    collect_runs,
    finished_run,
    finished_runs,
    invocations,
    run_started,
    span_s,
    training_log,
)
from forethought.experiments.jobs import Job, JobFailed, run_queue, seed_jobs, subprocess_env
from forethought.experiments.stats import by_seed, gradient_summary, over_seeds, seed_paired

__all__ = ["Job", "JobFailed", "by_seed", "collect_runs", "finished_run", "finished_runs", "gradient_summary",
           "invocations", "over_seeds", "run_queue", "run_started", "seed_jobs", "seed_paired", "span_s",
           "subprocess_env", "training_log"]
