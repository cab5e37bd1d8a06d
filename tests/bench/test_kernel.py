"""The kernel layer holds on its own: known escapes run as plain Python (the AST allow-list and the
restricted runtime switched off, a test-only switch) and seccomp + Landlock still stop them. A control
with the kernel layer off too shows each escape really works, so the test can fail."""

import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from bench.sandbox.kernel import Hardening, landlock_abi
from bench.sandbox.pool import SandboxPool

ABI = landlock_abi()
try:
    import pyseccomp  # noqa: F401  (finds the system's libseccomp on import)

    SECCOMP = True
except (ImportError, RuntimeError):
    SECCOMP = False
needs_seccomp = pytest.mark.skipif(not SECCOMP, reason="libseccomp is not installed (apt-get install libseccomp2)")
CONFIGS = {
    "kernel": Hardening(python_layers=False),
    "seccomp-only": Hardening(python_layers=False, landlock=False),
    "landlock-only": Hardening(python_layers=False, seccomp=False),
    "control-no-layers": Hardening(python_layers=False, seccomp=False, landlock=False, drop_capabilities=False),
}
#: escape -> the layers that stop it on their own (Landlock: by the ABI it needs)
STOPPED_BY = {
    "write_file": {"seccomp": True, "landlock": 1},
    "shell_command": {"seccomp": True, "landlock": 1},
    "subprocess": {"seccomp": True, "landlock": 1},
    "fork": {"seccomp": True, "landlock": None},
    "delete_file": {"seccomp": True, "landlock": 1},
    "make_dir": {"seccomp": True, "landlock": 1},
    "connect": {"seccomp": True, "landlock": 4},
    "read_secret": {"seccomp": False, "landlock": 1},
    "kill_other": {"seccomp": True, "landlock": 6},
}


class Target:
    """The things an escape would touch, and how to tell whether it did."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.mark = tmp / "mark"
        self.victim = tmp / "victim"
        self.victim.write_text("keep me")
        self.secret = tmp / "secret"
        self.secret.write_text("s3cr3t-token")
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.port = self.listener.getsockname()[1]
        self.connected = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()
        self.sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])

    def _accept(self):
        try:
            self.listener.accept()
            self.connected.set()
        except OSError:
            pass

    def program(self, escape):
        m, v, s = str(self.mark), str(self.victim), str(self.secret)
        return {
            "write_file": f"open({m!r}, 'w')",
            "shell_command": f"import os\nos.system('touch {m}')",
            "subprocess": f"import subprocess\nsubprocess.run(['/bin/sh', '-c', 'touch {m}'])",
            "fork": f"import os\npid = os.fork()\nif pid == 0:\n    os.open({m!r}, os.O_CREAT | os.O_WRONLY)\n    os._exit(0)\nos.waitpid(pid, 0)",
            "delete_file": f"import os\nos.unlink({v!r})",
            "make_dir": f"import os\nos.mkdir({m!r})",
            "connect": f"import socket\nsocket.create_connection(('127.0.0.1', {self.port}), timeout=5).sendall(b'hi')",
            "read_secret": f"assert False, open({s!r}).read()",
            "kill_other": f"import os\nos.kill({self.sleeper.pid}, 9)",
        }[escape]

    def escaped(self, escape, result):
        if escape in ("write_file", "shell_command", "subprocess", "fork", "make_dir"):
            return self.mark.exists()
        if escape == "delete_file":
            return not self.victim.exists()
        if escape == "connect":
            return self.connected.wait(2)
        if escape == "read_secret":
            return "s3cr3t-token" in result.reason
        if escape == "kill_other":
            try:
                self.sleeper.wait(timeout=2)
            except subprocess.TimeoutExpired:
                return False
            return True
        raise AssertionError(escape)

    def close(self):
        self.listener.close()
        if self.sleeper.poll() is None:
            self.sleeper.kill()
        self.sleeper.wait()


def expected_stop(config, escape):
    h = CONFIGS[config]
    rule = STOPPED_BY[escape]
    by_seccomp = h.seccomp and rule["seccomp"]
    by_landlock = h.landlock and rule["landlock"] is not None and ABI >= rule["landlock"]
    return bool(by_seccomp or by_landlock)


@pytest.fixture(scope="module")
def pools():
    out = {name: SandboxPool(workers=1, hardening=h) for name, h in CONFIGS.items()}
    yield out
    for p in out.values():
        p.close()


@needs_seccomp
@pytest.mark.parametrize("escape", sorted(STOPPED_BY))
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_escape_with_python_layers_off(pools, tmp_path, config, escape):
    if config == "landlock-only" and ABI < 1:
        pytest.skip("this kernel offers no Landlock")
    target = Target(tmp_path)
    try:
        result = pools[config].run([target.program(escape)])[0]
        escaped = target.escaped(escape, result)
    finally:
        target.close()
    if expected_stop(config, escape):
        assert not escaped, (config, escape, result.outcome, result.reason)
    elif config == "control-no-layers":
        assert escaped, (escape, result.outcome, result.reason)  # the escape is real: the test can fail
    assert pools[config].run(["fill('red')"])[0].valid  # the pool goes on after every attempt


def test_the_kernel_layer_alone_covers_every_escape_here():
    # the table above, read for this machine: with Landlock present nothing is left to the Python layers
    uncovered = [e for e in STOPPED_BY if not expected_stop("kernel", e)]
    assert uncovered == ([] if ABI >= 1 else ["read_secret"])  # without Landlock, reads are not confined


@needs_seccomp
def test_kernel_report_and_python_layers_on_by_default():
    with SandboxPool(workers=1) as pool:
        report = pool.kernel_report()
        assert report["seccomp"] == "on" and report["capabilities"] == "dropped"
        assert report["landlock"] == (f"abi {ABI}" if ABI else report["landlock"])
        # with the Python layers on (the default) the same escape never reaches the kernel
        assert pool.run(["import os\nos.system('id')"])[0].outcome == "forbidden"


def test_a_compromised_worker_cannot_hurt_the_host(tmp_path):
    """A worker that escaped every layer can still write to its own pipe: garbage, a giant frame, a segfault
    each cost one attempt (`crash`), and the pool goes on."""
    programs = [
        "import os, sys\nos.write(int(sys.argv[1]), b'\\xff' * 64)",  # a frame claiming 4 GB
        "import os, sys, struct\nos.write(int(sys.argv[1]), struct.pack('>i', 9) + b'Rgarbage!')",
        "import ctypes\nctypes.string_at(0)",  # SIGSEGV
        "import os\nos.abort()",
    ]
    with SandboxPool(workers=1, hardening=Hardening(python_layers=False)) as pool:
        results = pool.run(programs + ["fill('red')"])
    assert [r.outcome for r in results] == ["crash"] * 4 + ["ok"], [r.reason for r in results]
    assert "SIGSEGV" in results[2].reason and "SIGABRT" in results[3].reason


def test_missing_landlock_is_a_logged_fallback(monkeypatch, caplog):
    from bench.sandbox import kernel

    monkeypatch.setattr(kernel, "landlock_abi", lambda: 0)
    status, roots = kernel._install_landlock(["/usr"])  # returns before any restriction when there is no ABI
    assert status.startswith("unavailable") and roots == []
    pool = SandboxPool(workers=1)
    with caplog.at_level("WARNING", logger="ambench.sandbox"):
        pool._greeting(b'{"seccomp": "on", "landlock": "unavailable: the kernel offers no Landlock", "capabilities": "dropped"}')
    assert pool.kernel["landlock"].startswith("unavailable")
    assert "without landlock" in caplog.text
