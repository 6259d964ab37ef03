"""Drive the real ``forethought`` console script and check how it fails on bad input.

``expect_clean_failure`` asserts what every bad input must give: exit status 2, exactly one line on stderr
that names the problem, no traceback, and no new, changed or removed files under the watched folder.

A mistake the config catches as it loads (a typo, a value out of range) is run in this process
(``in_process=True``): ``forethought.cli.main`` with the call's working directory, environment and its own
stdout / stderr, the command itself replaced by one that fails the test — a case that gets past loading its
config cannot pass this way. The configs import no torch, so this is the path of ``--help`` and of most bad
input; ``tests/test_cli.py`` checks that in fresh interpreters. Everything else (a missing file, a corrupt
checkpoint, a model that does not fit) runs as its own process: where ``os.fork`` exists, forked from a server
process that has already imported forethought, torch and transformers (the import is most of a failing call's
time): the child gets the call's working directory, environment, argv and its own stdout/stderr files, runs
``forethought.cli.main`` as the console script does, and exits with its status; an uncaught exception prints its
traceback and exits 1, as Python would. ``FORETHOUGHT_TEST_FORK=0`` runs every such call as a fresh
``python -m forethought.cli`` instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from unittest import mock

# Tracebacks print this header; warnings from libraries would add lines too, so they are silenced.
_TRACEBACK = "Traceback (most recent call last)"


def snapshot(folder: Path) -> dict[str, str]:
    """Path -> SHA-256 of every file under ``folder`` (empty when it does not exist)."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


_BASE_ENV = {"HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false",
             "TQDM_DISABLE": "1"}


def cli(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300,
        fresh: bool = False) -> subprocess.CompletedProcess:
    """Run ``python -m forethought.cli ARGS`` (the console script's entry point) in ``cwd``, in its own process
    (``fresh``: a new interpreter, never a fork of the server)."""
    full_env = {**os.environ, **_BASE_ENV, **(env or {})}
    if not fresh and hasattr(os, "fork") and os.environ.get("FORETHOUGHT_TEST_FORK", "1") != "0":
        return _server().run(list(args), Path(cwd), full_env, timeout)
    return subprocess.run([sys.executable, "-m", "forethought.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


class GotPastConfig(AssertionError):
    """Raised by an in-process call whose config loaded: the case belongs in a subprocess."""


def cli_in_process(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``forethought.cli.main(ARGS)`` in this process, in ``cwd`` with ``env`` added to the environment and
    stdout / stderr captured, for a call that must stop while its config loads: ``Command.run`` (which imports
    the command's module and runs it) raises :class:`GotPastConfig` instead. Warnings are silenced, as in the
    subprocesses. The working directory and environment are restored afterwards."""
    from forethought import cli as cli_module

    def refuse(cmd: cli_module.Command, cfg: object, resume: str | None) -> None:
        raise GotPastConfig(f"'{cmd.system} {cmd.verb}' loaded its config: {args} fails later than config loading")

    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_env = os.getcwd(), dict(os.environ)
    try:
        os.chdir(cwd)
        os.environ.update({**_BASE_ENV, **(env or {})})
        with (mock.patch.object(cli_module.Command, "run", refuse), warnings.catch_warnings(),
              contextlib.redirect_stdout(out), contextlib.redirect_stderr(err)):
            warnings.simplefilter("ignore")
            try:
                code = cli_module.main(list(args))
            except SystemExit as e:  # as the interpreter maps it (argparse's --help, its own errors)
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:
                    print(e.code, file=sys.stderr)
                    code = 1
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
    return subprocess.CompletedProcess(["forethought", *args], code, out.getvalue(), err.getvalue())


class _ForkServer:
    """The client side: one request line (JSON) per call; the server answers the child's pid, then its status."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env={**os.environ, **_BASE_ENV}, cwd=Path(__file__).parent)
        self.tmp = Path(tempfile.mkdtemp(prefix="cli-harness-"))
        self.calls = 0

    def _line(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError
        line = self.proc.stdout.readline().decode()
        if not line:
            raise RuntimeError("the CLI fork server stopped")
        return line.strip()

    def run(self, args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        self.calls += 1
        out, err = self.tmp / f"{self.calls}.out", self.tmp / f"{self.calls}.err"
        request = {"args": args, "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        pid = int(self._line(60))
        try:
            code = int(self._line(timeout))
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._line(60)
            raise subprocess.TimeoutExpired(["forethought", *args], timeout) from None
        result = subprocess.CompletedProcess(["forethought", *args], code, out.read_text(errors="replace"),
                                             err.read_text(errors="replace"))
        out.unlink()
        err.unlink()
        return result


_SERVER: list[_ForkServer] = []


def _server() -> _ForkServer:
    if not _SERVER or _SERVER[0].proc.poll() is not None:
        _SERVER[:] = [_ForkServer()]
    return _SERVER[0]


def _serve() -> None:
    """The server: import once, then fork one child per request; it never runs torch itself (a fork after
    OpenMP has started its threads could hang the child)."""
    import atexit
    import traceback
    import warnings

    warnings.simplefilter("ignore")
    import peft  # noqa: F401  (imported here so that each child does not)
    import transformers  # noqa: F401

    import forethought.cli

    proto = os.dup(1)  # the answers; the children's fd 1 and 2 are their own files
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code: int = 1
            try:
                os.dup2(devnull, 0)
                os.dup2(os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
                os.dup2(os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
                os.chdir(req["cwd"])
                os.environ.clear()
                os.environ.update(req["env"])
                sys.argv = ["forethought", *req["args"]]
                try:
                    code = forethought.cli.main(req["args"])
                except SystemExit as e:  # as the interpreter maps it
                    if e.code is None or isinstance(e.code, int):
                        code = e.code or 0
                    else:
                        print(e.code, file=sys.stderr)
                        code = 1
                atexit._run_exitfuncs()
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code if isinstance(code, int) else 1)
        os.write(proto, f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        os.write(proto, f"{os.waitstatus_to_exitcode(status)}\n".encode())


def expect_clean_failure(args: list[str], cwd: Path, watch: Path, names: list[str],
                         env: dict[str, str] | None = None, *, in_process: bool = False) -> str:
    """Run the CLI on a bad input; assert exit 2, one stderr line containing every string in ``names``
    (case-insensitive), no traceback, and ``watch`` left exactly as it was. Returns the line. ``in_process``:
    the input must be refused while the config loads (:func:`cli_in_process`); else a process of its own."""
    before = snapshot(watch)
    out = cli_in_process(args, cwd, env) if in_process else cli(args, cwd, env)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2, (out.returncode, out.stderr[-3000:])
    assert _TRACEBACK not in out.stderr, out.stderr[-3000:]
    assert len(lines) == 1, out.stderr[-3000:]
    assert lines[0].startswith("forethought: error: "), lines
    for name in names:
        assert name.lower() in lines[0].lower(), (name, lines[0])
    assert snapshot(watch) == before, "the run folder changed"
    return lines[0]


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    _serve()
