"""forethought.experiments: the job queue's failure cleanup and resumability, seed statistics against hand
computations, the run archive."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from forethought.experiments import (
    Job,
    JobFailed,
    by_seed,
    collect_runs,
    finished_run,
    finished_runs,
    invocations,
    over_seeds,
    run_queue,
    seed_jobs,
    seed_paired,
)

PY = sys.executable
T_975_DF2 = 4.302652729911275  # Student t, 0.975 quantile, 2 degrees of freedom (tables)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a parent that never reaps counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    if stat.is_file():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    return True


def _open_logs(folder: Path) -> list[str]:
    fds = Path("/proc/self/fd")
    out = []
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(folder)):
            out.append(target)
    return out


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_a_failure_stops_the_other_jobs_and_closes_their_logs(tmp_path: Path) -> None:
    """A job fails while another sleeps (and has launched a child of its own): the sleeper and its child are
    killed, no log stays open, the failure names its exit status and the stopped job."""
    pids = tmp_path / "pids"
    sleeper = ("import os, subprocess, sys, time; c = subprocess.Popen(['sleep', '60']); "
               f"open({str(pids)!r} + '.tmp', 'w').write(f'{{os.getpid()}} {{c.pid}}'); "
               f"os.replace({str(pids)!r} + '.tmp', {str(pids)!r}); print('sleeping', flush=True); time.sleep(60)")
    failer = (f"import os, sys, time\nwhile not os.path.exists({str(pids)!r}): time.sleep(0.02)\n"
              "print('giving up'); sys.exit(3)")
    logs = tmp_path / "logs"
    t0 = time.monotonic()
    with pytest.raises(JobFailed) as info:
        run_queue([Job("sleeper", (PY, "-c", sleeper)), Job("bad", (PY, "-c", failer)),
                   Job("never", (PY, "-c", "pass"))], 2, logs, tmp_path, poll_s=0.05, grace_s=2.0)
    assert time.monotonic() - t0 < 30  # not the sleeper's 60 s
    err = info.value
    assert (err.name, err.returncode, err.stopped) == ("bad", 3, ["sleeper"])
    assert "bad failed (exit 3)" in str(err) and "sleeper" in str(err) and str(logs / "bad.log") in str(err)
    parent, child = (int(x) for x in pids.read_text().split())
    deadline = time.monotonic() + 5
    while (_alive(parent) or _alive(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(parent) and not _alive(child)
    assert _open_logs(logs) == []
    assert (logs / "bad.log").read_text().strip() == "giving up"
    assert not (logs / "never.log").exists()  # queued behind the failure: never started
    assert not any(logs.glob("*.done"))  # nothing counts as finished


def test_a_callback_error_also_stops_the_running_jobs(tmp_path: Path) -> None:
    jobs = [Job("quick", (PY, "-c", "pass")), Job("slow", (PY, "-c", "import time; time.sleep(60)"))]

    def on_done(name: str) -> None:
        raise RuntimeError(f"archiving {name} failed")

    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="archiving quick failed"):
        run_queue(jobs, 2, tmp_path, tmp_path, on_done=on_done, poll_s=0.05, grace_s=2.0)
    assert time.monotonic() - t0 < 30
    if Path("/proc/self/fd").is_dir():
        assert _open_logs(tmp_path) == []


def test_finished_jobs_are_skipped_on_resume(tmp_path: Path) -> None:
    count = tmp_path / "count"
    append = f"open({str(count)!r}, 'a').write('x')"
    jobs = [Job("a", (PY, "-c", append)), Job("b", (PY, "-c", append + "; print('b ran')"))]
    first = run_queue(jobs, 1, tmp_path / "logs", tmp_path, resume=True, poll_s=0.02)
    assert [(r.name, r.status) for r in first] == [("a", "ok"), ("b", "ok")] and count.read_text() == "xx"
    again = run_queue(jobs, 1, tmp_path / "logs", tmp_path, resume=True, poll_s=0.02)
    assert [(r.name, r.status) for r in again] == [("a", "skipped"), ("b", "skipped")] and count.read_text() == "xx"
    # a job whose command changed is not the job that finished: it runs again
    changed = [jobs[0], Job("b", (*jobs[1].argv, "--other"))]
    third = run_queue(changed, 1, tmp_path / "logs", tmp_path, resume=True, poll_s=0.02)
    assert [(r.name, r.status) for r in third] == [("a", "skipped"), ("b", "ok")] and count.read_text() == "xxx"
    # without resume everything runs; a done() predicate (e.g. the run folder holds results) skips too
    run_queue(jobs, 1, tmp_path / "logs", tmp_path, done=lambda n: n == "a", poll_s=0.02)
    assert count.read_text() == "xxxx"


def test_failed_job_leaves_no_marker_and_runs_again(tmp_path: Path) -> None:
    flag = tmp_path / "ok"
    job = Job("j", (PY, "-c", f"import os, sys; sys.exit(0 if os.path.exists({str(flag)!r}) else 5)"))
    with pytest.raises(JobFailed, match=r"j failed \(exit 5\)"):
        run_queue([job], 1, tmp_path, tmp_path, resume=True, poll_s=0.02)
    assert not (tmp_path / "j.done").exists()
    flag.write_text("")
    assert [r.status for r in run_queue([job], 1, tmp_path, tmp_path, resume=True, poll_s=0.02)] == ["ok"]
    assert json.loads((tmp_path / "j.done").read_text())["argv"] == list(job.argv)


def test_jobs_get_threads_and_this_package_first(tmp_path: Path) -> None:
    probe = "import os, forethought; print(os.environ['OMP_NUM_THREADS'], forethought.__file__)"
    run_queue([("t", [PY, "-c", probe])], 1, tmp_path, tmp_path, threads=3, poll_s=0.02)
    threads, where = (tmp_path / "t.log").read_text().split()
    import forethought

    assert threads == "3" and Path(where).resolve() == Path(forethought.__file__).resolve()


def test_bad_queues_are_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unique"):
        run_queue([("a", ["true"]), ("a", ["true"])], 1, tmp_path / "q")
    with pytest.raises(ValueError, match="plain file name"):
        Job("../x", ("true",))
    with pytest.raises(ValueError, match="empty command"):
        Job("x", ())
    with pytest.raises(ValueError, match="parallel"):
        run_queue([("a", ["true"])], 0, tmp_path / "q")
    assert not (tmp_path / "q").exists()
    with pytest.raises(JobFailed, match="could not start"):
        run_queue([("a", [str(tmp_path / "no-such-program")])], 1, tmp_path / "q2", poll_s=0.02)


def test_seed_jobs_name_each_seed_and_its_run_folder() -> None:
    jobs = seed_jobs("sst2-predgen", ["forethought", "predgen", "train"], [0, 2])
    assert [j.name for j in jobs] == ["sst2-predgen-s0", "sst2-predgen-s2"]
    assert jobs[1].argv == ("forethought", "predgen", "train", "--run.seed", "2", "--run.name", "sst2-predgen-s2")
    assert seed_jobs("x", ["a"], [1], name_flag=None)[0].argv == ("a", "--run.seed", "1")


# ------------------------------------------------------------------------------------------- statistics


def test_over_seeds_by_hand() -> None:
    r = over_seeds({2: 4.0, 0: 1.0, 1: 2.0})
    assert r["seeds"] == [0, 1, 2] and r["per_seed"] == [1.0, 2.0, 4.0]
    assert r["mean"] == pytest.approx(7 / 3)
    std = math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2)  # sqrt(7/3)
    assert r["std"] == pytest.approx(std) and std == pytest.approx(math.sqrt(7 / 3))
    half = T_975_DF2 * std / math.sqrt(3)
    assert r["ci95_of_mean"] == pytest.approx([7 / 3 - half, 7 / 3 + half])
    one = over_seeds({5: 0.25})
    assert one == {"seeds": [5], "per_seed": [0.25], "mean": 0.25, "std": None, "ci95_of_mean": None}
    with pytest.raises(ValueError):
        over_seeds({})


def test_seed_paired_uses_only_shared_seeds_by_hand() -> None:
    a = {0: 3.0, 1: 5.0, 2: 4.0, 3: 9.0}  # seed 3 has no B yet
    b = {0: 1.0, 1: 2.0, 2: 4.0}
    r = seed_paired(a, b)
    assert r["seeds"] == [0, 1, 2] and r["per_seed"] == [2.0, 3.0, 0.0]
    assert r["mean"] == pytest.approx(5 / 3) and r["std"] == pytest.approx(math.sqrt(7 / 3))
    half = T_975_DF2 * math.sqrt(7 / 3) / math.sqrt(3)
    assert r["ci95_of_mean"] == pytest.approx([5 / 3 - half, 5 / 3 + half])
    # pairing matters: the same values unpaired would give a far wider spread of A's seeds than of the differences
    shifted = seed_paired({0: 10.0, 1: 20.0, 2: 30.0}, {0: 9.0, 1: 19.0, 2: 29.0})
    assert shifted["std"] == 0.0 and shifted["ci95_of_mean"] == pytest.approx([1.0, 1.0])
    assert seed_paired({0: 1.0}, {0: 0.5})["ci95_of_mean"] is None
    with pytest.raises(ValueError, match="no seed in common"):
        seed_paired({0: 1.0}, {1: 1.0})


# ------------------------------------------------------------------------------------------- archive


def _fake_run(folder: Path, with_predictions: bool = True) -> None:
    folder.mkdir(parents=True)
    (folder / "env.json").write_text(json.dumps({"command": "forethought x", "started": "2026-01-02T03:04:05+0000",
                                                 "machine": {"torch_threads": 1},
                                                 "models": [{"name": "m", "sha256": "ab"}]}))
    (folder / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 1, "eval": true, "acc": 0.5}\n{"st')
    if with_predictions:
        (folder / "predictions.jsonl").write_text('{"id": 1, "prediction": 0, "target": 0}\n')
    (folder / "results.json").write_text(json.dumps({"accuracy": 0.5}))


def test_finished_runs_are_archived_and_read_back_without_their_folders(tmp_path: Path) -> None:
    runs, archive = tmp_path / "runs", tmp_path / "archive"
    _fake_run(runs / "a-s0")
    _fake_run(runs / "b-s0", with_predictions=False)
    (runs / "c-s0").mkdir()  # started, not finished
    got = collect_runs(runs, ["a-s0", "b-s0", "c-s0", "d-s0"], archive)
    assert sorted(got) == ["a-s0", "b-s0"]
    a = got["a-s0"]
    assert a["results"] == {"accuracy": 0.5} and a["predictions"] == [{"id": 1, "prediction": 0, "target": 0}]
    assert a["train_log"] == [{"step": 1, "loss": 2.0}]  # eval rows and the torn last line left out
    assert a["command"] == "forethought x" and a["torch_threads"] == 1 and a["models"][0]["sha256"] == "ab"
    assert "predictions" not in got["b-s0"]
    assert sorted(p.name for p in archive.iterdir()) == ["a-s0.json", "b-s0.json"]
    mtime = (archive / "a-s0.json").stat().st_mtime_ns
    time.sleep(0.01)
    assert finished_run(runs / "a-s0", archive) == a and (archive / "a-s0.json").stat().st_mtime_ns == mtime
    shutil.rmtree(runs)  # a fresh machine: only the committed archive
    assert collect_runs(runs, ["a-s0", "b-s0", "c-s0"], archive) == got


def test_finished_runs_are_found_in_the_folder_or_the_archive_alone(tmp_path: Path) -> None:
    runs, archive = tmp_path / "runs", tmp_path / "archive"
    _fake_run(runs / "p=1-vanilla-s0")
    (runs / "p=1-vanilla-s0" / "config.yaml").write_text("model: {n_layer: 2}\n")
    _fake_run(runs / "p=1-myopic-s0")
    (runs / "p=1-myopic-s1").mkdir()  # unfinished: left out
    _fake_run(runs / "other-s0")  # does not match the pattern
    first = finished_runs(runs, archive, "p=*-s*")
    assert list(first) == ["p=1-myopic-s0", "p=1-vanilla-s0"]
    assert first["p=1-vanilla-s0"]["config"] == {"model": {"n_layer": 2}} and "config" not in first["p=1-myopic-s0"]
    shutil.rmtree(runs / "p=1-vanilla-s0")  # its folder gone (a fresh machine): the archive answers
    _fake_run(runs / "p=0.3-vanilla-s0")  # a new run beside it
    again = finished_runs(runs, archive, "p=*-s*")
    assert list(again) == ["p=0.3-vanilla-s0", "p=1-myopic-s0", "p=1-vanilla-s0"]
    assert again["p=1-vanilla-s0"] == first["p=1-vanilla-s0"]


def test_invocations_are_listed_once_each(tmp_path: Path) -> None:
    assert invocations(tmp_path / "r", "python b.py") == ["python b.py"]
    assert invocations(tmp_path / "r", "python b.py --collect") == ["python b.py", "python b.py --collect"]
    assert invocations(tmp_path / "r", "python b.py") == ["python b.py", "python b.py --collect"]


def test_a_comparison_over_seeds_end_to_end(tmp_path: Path) -> None:
    """Two 'methods' run over three seeds through the queue, archived as they finish, collected (from the
    archive alone after the run folders are gone) and compared seed by seed."""
    runs, archive = tmp_path / "runs", tmp_path / "archive"
    writer = ("import json, os, sys; a = sys.argv; seed = int(a[a.index('--run.seed') + 1]); "
              "name = a[a.index('--run.name') + 1]; bonus = float(a[1]); d = os.path.join(a[2], name); "
              "os.makedirs(d); json.dump({'command': ' '.join(a), 'started': '2026-01-01T00:00:00+0000'}, "
              "open(os.path.join(d, 'env.json'), 'w')); "
              "json.dump({'score': seed + bonus}, open(os.path.join(d, 'results.json'), 'w'))")
    jobs = [*seed_jobs("a", [PY, "-c", writer, "0.5", str(runs)], [0, 1, 2]),
            *seed_jobs("b", [PY, "-c", writer, "0.0", str(runs)], [0, 1])]
    done = run_queue(jobs, 2, tmp_path / "logs", tmp_path, poll_s=0.02,
                     done=lambda n: finished_run(runs / n, archive) is not None,
                     on_done=lambda n: finished_run(runs / n, archive))
    assert sorted(r.name for r in done if r.status == "ok") == ["a-s0", "a-s1", "a-s2", "b-s0", "b-s1"]
    shutil.rmtree(runs)
    records = collect_runs(runs, [j.name for j in jobs], archive)
    a = by_seed(records, "a", lambda r: r["results"]["score"])
    assert a == {0: 0.5, 1: 1.5, 2: 2.5} and by_seed(records, "a-s", lambda r: 0.0) == {}
    diff = seed_paired(a, by_seed(records, "b", lambda r: r["results"]["score"]))
    assert diff["seeds"] == [0, 1] and diff["per_seed"] == [0.5, 0.5] and diff["std"] == 0.0
    # a second queue skips what the archive holds: nothing runs again
    again = run_queue(jobs, 2, tmp_path / "logs", tmp_path, poll_s=0.02,
                      done=lambda n: finished_run(runs / n, archive) is not None)
    assert {r.status for r in again} == {"skipped"} and not runs.exists()


def test_on_done_follows_each_success_and_never_a_failure(tmp_path: Path) -> None:
    """on_done (e.g. archive the run) runs once per job that succeeded, in order; a failed job gets none."""
    done: list[str] = []
    run_queue([(n, [PY, "-c", "pass"]) for n in ("a", "b")], 1, tmp_path, tmp_path, on_done=done.append,
              poll_s=0.02)
    assert done == ["a", "b"]
    with pytest.raises(JobFailed, match=r"^c failed \(exit 4\); see "):
        run_queue([("c", [PY, "-c", "raise SystemExit(4)"])], 1, tmp_path, tmp_path, on_done=done.append,
                  poll_s=0.02)
    assert done == ["a", "b"]


def test_lm_summary_pairs_by_seed_with_the_papers_bonus() -> None:
    from forethought.experiments.myopia import lm_summary

    loss = {"vanilla": {0: 4.0, 1: 4.2}, "detach_hidden": {0: 4.3, 1: 4.4}, "local": {0: 3.9},
            "zero_past": {0: 5.0, 1: 5.2}}
    s = lm_summary(loss)
    assert s["gap_paired"]["per_seed"] == pytest.approx([0.3, 0.2]) and s["gap"] == pytest.approx(0.25)
    assert s["local_myopic_bonus"] == pytest.approx(0.1)  # vanilla − local, seed 0 only
    assert s["myopic_minus_local"] == pytest.approx(0.4)
    assert s["gap_over_context"] == pytest.approx(0.25 / 1.0)
    assert s["gap_over_context_per_seed"] == {"0": pytest.approx(0.3), "1": pytest.approx(0.2)}
    assert lm_summary({"vanilla": {0: 4.0}})["gap_paired"] is None  # nothing to pair yet
    from forethought.experiments.myopia import variant_stats

    stats = variant_stats(loss)
    assert stats["vanilla_mean"] == pytest.approx(4.1) and stats["vanilla_std"] == pytest.approx(0.1414213562)
    assert stats["local_mean"] == pytest.approx(3.9) and stats["local_std"] is None  # one seed: no spread


def test_span_is_first_start_to_last_finish() -> None:
    from forethought.experiments import span_s

    records = {"a": {"started": 100.0, "finished": 160.0}, "b": {"started": 130.0, "finished": 250.0},
               "c": {"started": None, "finished": 300.0}}  # a run folder without env.json has no start
    assert span_s(records) == 200.0 and span_s({}) == 0.0
