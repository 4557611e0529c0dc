"""This checkout's programs run as forks of a warmed-up Python instead of fresh interpreters.

`make test` starts several hundred runner processes, and each one paid about 9 s of CPU (an
AVX2-only EPYC) to import TensorFlow, Keras and tensorflow_text before reading its first flag. Here
a server imports them once, the way a program does (`environment.configure()` first), with what the
programs import only once they run, sets up numba's code generator (one compiled call on a few
bytes) and builds the graph tokenizer's character classes (a pure function of Unicode, cached per
process); it touches nothing else: no TensorFlow op or JAX computation runs in it, so it holds no
thread pools or devices. Each program then runs in a fork of it (`start`, `run`): a process of its
own, with its own pid, arguments, environment, working folder and standard streams, that signals
and SIGSTOP reach, whose non-daemon threads and `atexit` functions finish as in `python SCRIPT
ARGS`, and whose exit status (or killing signal) the caller gets, as from `subprocess`.

What still differs from a fresh interpreter: the imports are done (TensorFlow's too, on its
backend: a program that picks its workers' start method by it, create_pretraining_data's pool,
spawns them where a fresh one forks), numba's code generator is set up, the character classes are
built, and the string hash seed is the server's. So there is one server per set of variables read
at import time (a test process has one for TensorFlow, one for JAX without TensorFlow where
test_jax_runners asks for it, and one for JAX with TensorFlow installed but not imported:
tests/backend_step.py, test_jax_training's untouched-TensorFlow run): a request may differ from
its server's environment only in `RUN_TIME_VARIABLES`. This checkout's programs (`python
SCRIPT.py`, `python -m bert_tf2...`) are forked; a test's own helper script or `python -c CODE`
only when the caller asks (`warm=True`: the oracle runs, tests/backend_step.py, ramp_training.py,
serving_harness.py, test_jax_training's untouched-TensorFlow run);
anything else runs as a fresh interpreter, as do the tests that prove a program starts from
scratch (`warm=False`: test_package, test_demo, the fresh-interpreter imports), and everything
when BERT_TEST_WARM_PROCESSES=0 (README, "Tests and benchmarks"). A second kind of server
imports TensorFlow and tensorflow_text and nothing of this project (`imports="tensorflow"`): the
scripts that load an export as a user's script does (conftest's `tensorflow_only`) are forked
from it.

Protocol: a server reads requests (JSON: argv, environment, folder) with four descriptors (stdin,
stdout, stderr, reply) from a SOCK_SEQPACKET socket. For each it forks a monitor, which forks the
program, writes its pid to the reply socket, waits for it and writes its exit status.
"""
from __future__ import annotations

import atexit
import builtins
import functools
import gc
import json
import os
import pathlib
import resource
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

REPO = pathlib.Path(__file__).resolve().parent.parent
# BERT_TEST_WARM_PROCESSES=0 starts every program as a fresh interpreter (to compare, or to rule
# the forking out when a test fails).
WARM_VARIABLE = "BERT_TEST_WARM_PROCESSES"
# Read by the programs while they run, not when a module is imported: a request may set them.
RUN_TIME_VARIABLES = ("BERT_TEST_", "BERT_TRACEBACK", "TF_CONFIG", "PYTEST_")
# Set in every forked program: where its server listens for the programs it starts itself
# (`launch`, through process.child_python: a search's trials and its flag check).
SERVER_VARIABLE = "BERT_TEST_WARM_SERVER"
_listening = None
# What `environment.configure()` sets, as a fresh program would have them from its own call.
CONFIGURED = ("KERAS_BACKEND", "TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL", "BERT_QUIET_TF")


# ----------------------------------------------------------------------------- the server
def serve(control_fd: int, imports: str = "all") -> None:
    """`imports`: "all" (what this checkout's programs import), or "tensorflow" (TensorFlow and
    tensorflow_text alone: what a user's script that loads an export imports, nothing of ours)."""
    sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != REPO / "tests"]
    if imports == "tensorflow":
        import tensorflow  # noqa: F401
        import tensorflow_text  # noqa: F401
        configured = {}
    else:
        configured = _import_ours()
    # What the server holds stays out of the programs' garbage collections: a collection that
    # visits an object writes to its page, and the kernel then copies that page into the program
    # (copy-on-write); without this every forked program copied most of the server's memory.
    gc.collect()
    gc.freeze()
    global _listening
    folder = tempfile.mkdtemp(prefix="warm-python-")
    _listening = os.path.join(folder, "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(_listening)
    listener.listen(16)
    control = socket.socket(fileno=control_fd)
    control.sendall(b"ready")
    while True:
        readable, _, _ = select.select([control, listener], [], [])
        if listener in readable:  # a program of this server starting one of its own (`launch`)
            connection, _ = listener.accept()
            with connection:
                message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 4)
            if message:
                _fork_monitor(message, fds, configured, control, listener)
        if control in readable:
            try:
                message, fds, _, _ = socket.recv_fds(control, 1 << 20, 4)
            except ConnectionError:
                break
            if not message:
                break
            _fork_monitor(message, fds, configured, control, listener)
        while True:  # reap the monitors that have finished
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not pid:
                break
    shutil.rmtree(folder, ignore_errors=True)
    os._exit(0)


def _import_ours() -> dict:
    """Imports what this checkout's programs import; what `environment.configure()` set."""
    before = dict(os.environ)
    from bert_tf2.process import environment

    environment.configure()
    configured = {k: os.environ[k] for k in CONFIGURED if k in os.environ and k not in before}
    if environment.uses_tensorflow():
        import tensorflow  # noqa: F401
        import tensorflow_text  # noqa: F401
    import keras  # noqa: F401
    import numpy  # noqa: F401
    from absl import app, flags  # noqa: F401

    defined = set(flags.FLAGS)
    import bert_tf2.engine.finetuning  # noqa: F401
    import bert_tf2.engine.pretraining  # noqa: F401
    if environment.uses_tensorflow():
        import bert_tf2.engine.export  # noqa: F401
        _import_lazily_imported()
    # numba's first compiled call in a process sets up its code generator: 0.26 CPU-seconds of
    # each forked program that wrote a record, where a later function's machine code loads from
    # numba's cache in 6 ms. (numba runs no thread of its own.)
    from bert_tf2.modeling import crc32c
    crc32c.masked(b"")
    if environment.uses_tensorflow():
        # The graph tokenizer's character classes, built once per process from a scan of
        # Unicode: 0.13 CPU-seconds of each forked program that exports or serves raw text.
        from bert_tf2.data_gen import graph_tokenizer
        graph_tokenizer._patterns()
    assert set(flags.FLAGS) == defined, "an imported module defined absl flags"
    return configured


# What the runners import only once they run (`import` inside functions), numba among them:
# 0.15-0.18 CPU-seconds of each forked program that imported them itself.
LAZILY_IMPORTED = [
    "bert_tf2.engine.checkpoint_writer", "bert_tf2.engine.training",
    "bert_tf2.data_gen.datasets", "bert_tf2.data_gen.feature_cache",
    "bert_tf2.data_gen.tokenization", "bert_tf2.modeling.checkpoints",
    *(f"bert_tf2.tasks.{task}.{part}" for task in ("classification", "multiple_choice", "ner",
                                                     "squad") for part in ("task", "serving")),
    "bert_tf2.tasks.feature_extraction.serving", "bert_tf2.tasks.pretraining.task",
]


def _import_lazily_imported() -> None:
    import importlib

    for name in LAZILY_IMPORTED:
        importlib.import_module(name)


def _fork_monitor(message, fds, configured, *sockets) -> None:
    request = json.loads(message)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() == 0:
        for sock in sockets:
            sock.close()
        _monitor(request, configured, *fds)
    for fd in fds:
        os.close(fd)


def _monitor(request, configured, stdin, stdout, stderr, reply) -> None:
    """Forks the program, writes its pid and then its exit status to `reply`. With
    `die_with_parent`, a requester that goes away (its end of `reply` closed: it died) takes the
    program with it (SIGKILL)."""
    try:
        pid = os.fork()
        if pid == 0:
            os.close(reply)
            _program(request, configured, stdin, stdout, stderr)
        for fd in (stdin, stdout, stderr):
            os.close(fd)
        os.write(reply, f"{pid}\n".encode())
        if request.get("die_with_parent"):
            _kill_when_abandoned(pid, reply)
        _, status = os.waitpid(pid, 0)
        os.write(reply, f"{os.waitstatus_to_exitcode(status)}\n".encode())
    finally:
        os._exit(0)


def _kill_when_abandoned(pid: int, reply: int) -> None:
    """Until the program ends: if the requester's end of `reply` closes first, kill it."""
    ended = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(ended, select.POLLIN)
    poller.register(reply, select.POLLIN | select.POLLHUP)
    while True:
        for fd, _ in poller.poll():
            if fd == ended:
                return
            if not os.read(reply, 64):
                os.kill(pid, signal.SIGKILL)
                return


def _limit_file_size(limit: int) -> None:
    """RLIMIT_FSIZE of this process: a write past `limit` bytes fails as on a full disk."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _program(request, configured, stdin, stdout, stderr) -> None:
    """Become `python ARGV` (or `python -m MODULE ARGS`): never returns."""
    code = 1
    try:
        for number in (signal.SIGTERM, signal.SIGCHLD, signal.SIGQUIT, signal.SIGHUP):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        if request.get("new_session"):
            os.setsid()
        if request.get("file_size_limit") is not None:
            _limit_file_size(request["file_size_limit"])
        os.environ.clear()
        os.environ.update({**configured, **request["env"], SERVER_VARIABLE: _listening})
        argv = request["argv"]
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[0] = ""
            code = _run(lambda: exec(compile(argv[1], "<string>", "exec"),
                                     {"__name__": "__main__", "__builtins__": builtins}))
        elif argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            code = _run(lambda: runpy.run_module(argv[1], run_name="__main__", alter_sys=True))
        else:
            script = os.path.abspath(argv[0])
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(script)
            code = _run(lambda: runpy.run_path(script, run_name="__main__"))
    except BaseException:  # noqa: BLE001 - a failure to start is the program's failure
        traceback.print_exc()
    _exit(code)


def _log_program(code: int) -> None:
    """With BERT_TEST_PROGRAM_LOG set, one line per forked program: its CPU seconds, status,
    the test that started it and its command (to see where a test run's time goes)."""
    log = os.environ.get("BERT_TEST_PROGRAM_LOG")
    if log:
        times = os.times()
        with open(log, "a") as out:
            out.write(f"{sum(times[:4]):.2f}\t{code}\t"
                      f"{os.environ.get('PYTEST_CURRENT_TEST', '?')}\t{' '.join(sys.argv)[:300]}\n")


def _run(main) -> int:
    """What the interpreter does with a program's end: its exit status."""
    try:
        main()
        return 0
    except SystemExit as end:
        if end.code is None:
            return 0
        if isinstance(end.code, int):
            return end.code
        print(end.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return -signal.SIGINT
    except BaseException:  # noqa: BLE001
        sys.excepthook(*sys.exc_info())
        return 1


def _exit(code: int) -> None:
    """The interpreter's shutdown (non-daemon threads joined, `atexit` functions, flushed
    streams), then the status; an uncaught Ctrl-C ends by SIGINT, as in Python."""
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        code = code or 1
    _log_program(code)
    if code == -signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


# ----------------------------------------------------------------------------- the client
class Program:
    """A forked program, as much of `subprocess.Popen` as the tests use."""

    def __init__(self, args, reply: socket.socket, stdout, stderr, stdin=None):
        """`reply`: the monitor's socket, which gives the pid, then the exit status, a line
        each."""
        self.args, self._reply, self._pending = args, reply, b""
        self.stdin, self.stdout, self.stderr, self.returncode = stdin, stdout, stderr, None
        self.pid = self._line(None)
        if self.pid is None:
            raise RuntimeError(f"the warm Python did not start {args}")

    def _line(self, timeout) -> int | None:
        """The next number the monitor writes, or None if it has not come within `timeout`."""
        self._reply.settimeout(timeout)
        try:
            while b"\n" not in self._pending:
                chunk = self._reply.recv(64)
                if not chunk:
                    raise RuntimeError(f"the warm Python lost program {self.args}")
                self._pending += chunk
        except (socket.timeout, BlockingIOError):
            return None
        line, self._pending = self._pending.split(b"\n", 1)
        return int(line)

    def _read_status(self, timeout) -> None:
        self.returncode = self._line(timeout)
        if self.returncode is not None:
            self._reply.close()

    def poll(self):
        if self.returncode is None:
            self._read_status(0)
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            self._read_status(timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, number) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, number)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input=None, timeout=None):
        results = {}
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()

        def drain(name, stream):
            results[name] = stream.read()
            stream.close()

        readers = [threading.Thread(target=drain, args=(name, stream), daemon=True)
                   for name, stream in (("stdout", self.stdout), ("stderr", self.stderr))
                   if stream is not None]
        for reader in readers:
            reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return results.get("stdout"), results.get("stderr")


class _Server:
    """One warm Python, started with `environment` (what the programs forked from it import
    under)."""

    def __init__(self, environment: dict, imports: str):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(REPO / 'tests')!r}); "
             f"import warm_python; warm_python.serve({theirs.fileno()}, {imports!r})"],
            pass_fds=[theirs.fileno()], cwd=REPO, stdin=subprocess.DEVNULL, env=environment)
        theirs.close()
        self.control = ours
        self.control.settimeout(300)
        if self.control.recv(16) != b"ready":
            self.process.kill()
            raise RuntimeError("the warm Python did not start")
        self.control.settimeout(None)
        self.lock = threading.Lock()

    def start(self, argv, cwd, env, stdout, stderr, text, options) -> Program:
        with self.lock:
            return _send(self.control, argv, cwd, env, None, stdout, stderr, text, options)


def _send(connection, argv, cwd, env, stdin, stdout, stderr, text, options) -> Program:
    """Asks the server at the other end of `connection` to start `argv` (`options`: what
    `_monitor` and `_program` read beyond argv, folder and environment); its Program."""
    pipes, theirs = {}, []
    if stdin == subprocess.PIPE:
        read, write = os.pipe()
        pipes["stdin"] = os.fdopen(write, "w" if text else "wb")
        theirs.append(read)
    elif stdin is None or stdin == subprocess.DEVNULL:
        theirs.append(os.open(os.devnull, os.O_RDONLY))
    else:
        theirs.append(os.dup(stdin if isinstance(stdin, int) else stdin.fileno()))
    for name, choice in (("stdout", stdout), ("stderr", stderr)):
        if choice == subprocess.PIPE:
            read, write = os.pipe()
            pipes[name] = os.fdopen(read, "r" if text else "rb")
            theirs.append(write)
        elif choice == subprocess.STDOUT:
            theirs.append(os.dup(theirs[-1]))
        elif choice == subprocess.DEVNULL:
            theirs.append(os.open(os.devnull, os.O_WRONLY))
        elif choice is None:
            theirs.append(os.dup(1 if name == "stdout" else 2))
        else:
            theirs.append(os.dup(choice if isinstance(choice, int) else choice.fileno()))
    reply, their_reply = socket.socketpair()
    theirs.append(their_reply.fileno())
    request = json.dumps({"argv": argv, "cwd": os.fspath(cwd), "env": env, **options}).encode()
    socket.send_fds(connection, [request], theirs)
    for fd in theirs[:-1]:
        os.close(fd)
    their_reply.close()
    return Program(argv, reply, pipes.get("stdout"), pipes.get("stderr"), pipes.get("stdin"))


# One server per environment a test process asks for (TensorFlow; JAX without TensorFlow;
# TensorFlow alone, for `imports="tensorflow"`), the variables the programs read as they run left
# out.
MAX_SERVERS = 5
_servers: dict = {}
_servers_lock = threading.Lock()


def _import_time(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if not k.startswith(RUN_TIME_VARIABLES)))


def _warm_argv(args, cwd, warm):
    """`args` (`[sys.executable, SCRIPT, -m MODULE or -c CODE, ...]`) as a server's argv, or None
    when it runs fresh: `warm` False, or None and the command not one of this checkout's programs
    (with `warm` True, any script, module or code)."""
    if warm is False or os.environ.get(WARM_VARIABLE) == "0":
        return None
    args = [os.fspath(a) for a in args]
    if len(args) < 2 or args[0] != sys.executable:
        return None
    if args[1] == "-c":
        if not warm or len(args) < 3:
            return None
    elif args[1] == "-m":
        if len(args) < 3 or not (warm or args[2].startswith("bert_tf2.")):
            return None
    else:
        script = pathlib.Path(cwd, args[1]).resolve()
        if script.suffix != ".py" or not (warm or REPO in script.parents
                                          and "tests" not in script.parts):
            return None
    return args[1:]


def _server(env: dict, imports: str = "all"):
    """The running server for `env`'s import-time variables and `imports` (`serve`), started if
    need be, or None: a backend the runners do not train on, a server that could not start, or
    too many."""
    if imports == "all" and (env.get("KERAS_BACKEND") or "tensorflow") not in ("tensorflow",
                                                                                "jax"):
        return None
    key = (imports, _import_time(env))
    with _servers_lock:
        if key in _servers:
            server = _servers[key]
            if server is None or server.process.poll() is None:
                return server
        elif len(_servers) >= MAX_SERVERS:
            return None
        try:
            server = _Server(dict(key[1]), imports)
        except (RuntimeError, OSError):
            server = None
        _servers[key] = server
        return server


@atexit.register
def _stop_servers() -> None:
    """Each server ends when its control socket closes: close them and wait, so that no server
    outlives the test process (nor is left to the garbage collector, still running)."""
    for server in filter(None, _servers.values()):
        server.control.close()
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
    _servers.clear()


def start(args, *, cwd=REPO, env=None, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
          text=True, warm=None, imports="all", file_size_limit=None):
    """`subprocess.Popen(args, ...)`, forked from a warm Python where the command allows
    (`_warm_argv`). With `imports="tensorflow"`, any command, from a Python that imported only
    TensorFlow and tensorflow_text (`tensorflow_only`). `file_size_limit`: the program's
    RLIMIT_FSIZE in bytes (a write past it fails as on a full disk)."""
    env = dict(os.environ) if env is None else dict(env)
    argv = _warm_argv(args, cwd, warm if imports == "all" else True)
    server = _server(env, imports) if argv else None
    if server is None:
        limit = None if file_size_limit is None else functools.partial(_limit_file_size,
                                                                       file_size_limit)
        return subprocess.Popen([os.fspath(a) for a in args], cwd=cwd, env=env, stdout=stdout,
                                stderr=stderr, text=text, preexec_fn=limit)
    return server.start(argv, cwd, env, stdout, stderr, text,
                        {"file_size_limit": file_size_limit})


def launch(args, *, die_with_parent=False, cwd=None, env=None, stdin=None, stdout=None,
           stderr=None, text=False, start_new_session=False):
    """process.child_python's test launcher (BERT_TEST_PYTHON_LAUNCHER): `args` started by a
    forked program (a search: its trials and its flag check) as a fork of its own server, or None
    (started as usual) where the program is not a fork or the command not forkable. With
    `die_with_parent`, the program is killed when the one that started it dies (where Linux's
    parent-death signal would send SIGTERM: the program is not its child)."""
    cwd = os.getcwd() if cwd is None else cwd
    path, argv = os.environ.get(SERVER_VARIABLE), _warm_argv(args, cwd, True)
    if not path or argv is None:
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as connection:
        connection.connect(path)
        return _send(connection, argv, cwd, dict(os.environ) if env is None else env, stdin,
                     stdout, stderr, text, {"die_with_parent": die_with_parent,
                                            "new_session": start_new_session})


def run(args, *, cwd=REPO, env=None, timeout=None, check=False, text=True,
        capture_output=True, warm=None, imports="all",
        file_size_limit=None) -> subprocess.CompletedProcess:
    """`subprocess.run(args, capture_output=True, ...)`, forked from a warm Python where the
    command allows (`start`)."""
    pipe = subprocess.PIPE if capture_output else None
    process = start(args, cwd=cwd, env=env, stdout=pipe, stderr=pipe, text=text, warm=warm,
                    imports=imports, file_size_limit=file_size_limit)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    result = subprocess.CompletedProcess(args, process.returncode, out, err)
    if check:
        result.check_returncode()
    return result
