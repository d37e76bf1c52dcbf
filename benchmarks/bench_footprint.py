"""Install size, import time of ``tiered_router`` and the memory a warmed Router adds.

    python benchmarks/bench_footprint.py [--runs 15] [--install-size [--extras cli]
                                         [--compare PYTHON]] [--keep]

1. ``python -c "import tiered_router"`` in fresh interpreters: median and best wall time
   (target < 0.3 s), and what the import pulls in (openai and httpx2 must not be loaded);
   then ``from tiered_router import Router`` (target: median <= 150 ms).
2. In one fresh interpreter: RSS after ``import tiered_router``, then after building a Router
   with two OpenAI-compatible backends, making one call through each tier against the local
   scripted server and warming the gate on a JSON-schema turn and a tool turn (target: adds
   < 30 MB). The server runs in a child process so its memory is not counted.
3. With ``--install-size``: makes two venvs under /tmp (a bare one, and one with this tree
   installed by ``pip install .``, with ``--extras`` if given; needs the package index), and
   prints the size the install adds over the bare venv (target <= 40 MB; apparent size of the
   files, and disk usage in blocks), the largest packages, and the median time of
   ``from tiered_router import Router`` in that clean install (no PYTHONPATH, no dev tree).
   ``--compare PYTHON`` then times the same import alternately in that install and in another
   interpreter (a venv with an older tree installed), which stays fair on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

_MEMORY_PROBE = r"""
import json, resource, sys
def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
before = rss_mb()
import tiered_router
from tiered_router import Router, Turn
after_import = rss_mb()
base_url = sys.argv[1]
policy = {
    "version": 1,
    "backends": {
        "fast": {"type": "openai", "base_url": base_url, "api_key": "k", "model": "fast-model"},
        "frontier": {"type": "openai", "base_url": base_url, "api_key": "k",
                     "model": "frontier-model"},
    },
    "tiers": {"fast": "fast", "frontier": "frontier"},
}
router = Router(policy)
schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
rf = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
tools = [{"type": "function", "function": {"name": "add", "parameters": schema}}]
router.complete(Turn([{"role": "user", "content": "Give the answer."}], response_format=rf))
router.complete(Turn([{"role": "user", "content": "Final."}], final=True))
router.complete(Turn([{"role": "user", "content": "Add."}], tools=tools))
warmed = rss_mb()
print(json.dumps({"before": before, "after_import": after_import, "warmed": warmed,
                  "openai_loaded": "openai" in sys.modules}))
"""

_SERVER = r"""
import sys, time
from tiered_router.testing import Reply, ScriptedServer
with ScriptedServer(default=Reply.json({"answer": 4})) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""


def import_times(runs: int) -> tuple[list[float], list[float], list[str]]:
    """Wall times of ``import tiered_router`` and then of ``from tiered_router import Router``."""
    code = (
        "import time, sys; t = time.perf_counter(); import tiered_router; "
        "dt = time.perf_counter() - t; "
        "t = time.perf_counter(); from tiered_router import Router, Turn; "
        "dr = time.perf_counter() - t; "
        "print(dt, dr, ','.join(m for m in ('openai', 'httpx2', 'jsonschema', 'typer', 'rich', "
        "'yaml', 'orjson', 'jsonschema_rs') if m in sys.modules))"
    )
    times: list[float] = []
    router_times: list[float] = []
    loaded: list[str] = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True
        ).stdout.split()
        times.append(float(out[0]))
        router_times.append(float(out[1]))
        loaded = out[2].split(",") if len(out) > 2 else []
    return times, router_times, loaded


def memory() -> dict[str, float]:
    """RSS figures of a warmed Router, with the scripted server in another process."""
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER],
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        done = subprocess.run(
            [sys.executable, "-c", _MEMORY_PROBE, base_url],
            env=ENV,
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(done.stdout)  # type: ignore[no-any-return]
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=10)


def _tree_size(path: Path) -> tuple[int, int]:
    """Apparent size (bytes of the files) and disk usage (allocated blocks) under ``path``."""
    apparent = disk = 0
    for folder, _, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            apparent += st.st_size
            disk += st.st_blocks * 512
    return apparent, disk


def _site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def router_import_times(python: Path, runs: int, env: dict[str, str]) -> list[float]:
    """Wall times of ``from tiered_router import Router`` in fresh interpreters."""
    code = (
        "import time; t = time.perf_counter(); from tiered_router import Router; "
        "print(time.perf_counter() - t)"
    )
    return [
        float(
            subprocess.run(
                [str(python), "-c", code],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                cwd=tempfile.gettempdir(),  # not the checkout: `-c` puts the cwd on sys.path
            ).stdout
        )
        for _ in range(runs)
    ]


def compare_import(python: Path, other: str, runs: int, env: dict[str, str]) -> None:
    """Time the Router import in ``python`` and ``other`` alternately (fair under load)."""
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(runs):
        ours += router_import_times(python, 1, env)
        theirs += router_import_times(Path(other), 1, env)
    for label, times in (("this tree", ours), (other, theirs)):
        print(
            f"  interleaved, {label}: median {statistics.median(times) * 1000:.0f} ms, "
            f"best {min(times) * 1000:.0f} ms"
        )


def install_size(extras: str, runs: int, keep: bool, compare: str | None = None) -> None:
    """Install this tree into a fresh venv and compare it with a bare one."""
    work = Path(tempfile.mkdtemp(prefix="tiered-router-footprint-"))
    try:
        bare, full = work / "bare", work / "full"
        for venv in (bare, full):
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        target = f"{ROOT}[{extras}]" if extras else str(ROOT)
        subprocess.run(
            [str(full / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", target],
            check=True,
        )
        (bare_apparent, bare_disk), (full_apparent, full_disk) = map(_tree_size, (bare, full))
        added = (full_apparent - bare_apparent) / 1e6
        what = f".[{extras}]" if extras else "."
        print(f"install size of 'pip install {what}' over a bare venv")
        print(
            f"  {added:.1f} MB apparent size   (target <= 40 MB); "
            f"{(full_disk - bare_disk) / 1e6:.1f} MB on disk"
        )
        site, bare_site = _site_packages(full), _site_packages(bare)
        sizes = []
        for entry in site.iterdir():
            if (bare_site / entry.name).exists() or entry.name.endswith(".dist-info"):
                continue
            size = _tree_size(entry)[0] if entry.is_dir() else entry.stat().st_size
            sizes.append((size, entry.name))
        sizes.sort(reverse=True)
        print("  largest: " + ", ".join(f"{n} {b / 1e6:.1f}" for b, n in sizes[:10]) + " (MB)")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        times = router_import_times(full / "bin" / "python", runs, env)
        print(
            f"  'from tiered_router import Router' in the clean install ({runs} runs): median "
            f"{statistics.median(times) * 1000:.0f} ms, best {min(times) * 1000:.0f} ms   "
            "(target <= 150 ms)"
        )
        if compare:
            compare_import(full / "bin" / "python", compare, runs, env)
    finally:
        if keep:
            print(f"  venvs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--install-size", action="store_true", help="measure pip install . in a /tmp venv"
    )
    parser.add_argument("--extras", default="", help="extras to install, e.g. cli,server")
    parser.add_argument("--keep", action="store_true", help="keep the /tmp venvs")
    parser.add_argument(
        "--compare",
        metavar="PYTHON",
        help="with --install-size: also time the Router import alternately in this "
        "interpreter (e.g. a venv with an older release installed)",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    if args.install_size:
        install_size(args.extras, args.runs, args.keep, args.compare)
    times, router_times, loaded = import_times(args.runs)
    print(f"import tiered_router ({args.runs} fresh interpreters, Python {sys.version.split()[0]})")
    print(
        f"  median {statistics.median(times) * 1000:.0f} ms, best {min(times) * 1000:.0f} ms, "
        f"worst {max(times) * 1000:.0f} ms   (target < 300 ms)"
    )
    print(f"  modules loaded by both imports: {', '.join(loaded) or 'none'}")
    print(
        f"  then 'from tiered_router import Router, Turn': median "
        f"{statistics.median(router_times) * 1000:.0f} ms, best {min(router_times) * 1000:.0f} ms"
        "   (target <= 150 ms)"
    )
    m = memory()
    added = m["warmed"] - m["after_import"]
    print("RSS of one interpreter")
    print(
        f"  after importing Router and Turn: {m['after_import']:.1f} MB "
        f"(interpreter alone {m['before']:.1f} MB)"
    )
    print(f"  Router with two backends, 3 routed calls, gate warmed: {m['warmed']:.1f} MB")
    sdk = "openai SDK imported" if m["openai_loaded"] else "openai SDK not imported"
    print(f"  added by the warmed Router ({sdk}): {added:.1f} MB   (target < 30 MB)")
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
