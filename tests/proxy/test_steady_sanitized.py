"""The C parts (proxy/_steady.c, codec/_accel.c) built with AddressSanitizer and UBSan,
and run over hostile and real input: the C path's hostile peers and its parity with the
Python path over real clients' captured sessions, the codec's C interpreter against the
Python one, its golden frames and hostile bytes, its picking of answers, the hostile client and broker tests,
and a short codec fuzzing run. Any out-of-bounds read or write, use after free or
undefined behaviour aborts the run with the sanitizer's report.

How: both extensions are compiled with `-fsanitize=address,undefined` into a folder that
mirrors the repository (links to every other file of codec/, proxy/ and bench/, and to
tests/ and pyproject.toml), and a child pytest runs there (that folder its root, first
on sys.path), with the ASan runtime
preloaded (the interpreter is not instrumented) and PYTHONMALLOC=malloc, so that Python
objects the C code reads and writes come from the sanitized allocator too. Leak
detection is off: the interpreter keeps what it allocates until exit. A few minutes
(the sanitized run is 2-3x slower than a plain one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Set in the child run, to the folder it runs in: these tests do not run again there,
# and tests/proxy/test_steady.py checks that the extensions it runs are that folder's.
INNER = "KAFKALENS_SANITIZED"
TESTS = [
    "tests/proxy/test_steady.py",
    "tests/proxy/test_steady_hostile.py",
    "tests/observe/test_line_pieces.py",
    "tests/codec/test_codec_accel.py",
    "tests/codec/test_codec_pick.py",
    "tests/codec/test_codec_golden.py",
    "tests/codec/test_codec_hostile.py",
    "tests/codec/test_records_accel.py",
    "tests/codec/test_entities_accel.py",
    "tests/codec/test_records_hostile.py",
    "tests/proxy/test_hostile_client.py",
    "tests/proxy/test_hostile_broker.py",
]
FUZZ_RUNS = 5000
EXTENSIONS = {"proxy": "_steady", "codec": "_accel"}

pytestmark = [pytest.mark.skipif(bool(os.environ.get(INNER)), reason="the sanitized run itself"), pytest.mark.slow]


def compiler() -> str | None:
    return shutil.which("gcc") or shutil.which("cc")


def runtime(cc: str, name: str) -> str | None:
    """The sanitizer runtime the compiler links against (e.g. libasan.so), or None."""
    found = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return found if found and os.path.isabs(found) and os.path.exists(found) else None


def mirror(package: str, into: Path, built: Path | None) -> None:
    """`into/package`: links to every entry of the package but its C extension, which
    is `built` (if any)."""
    target = into / package
    target.mkdir()
    for entry in (REPO / package).iterdir():
        if entry.name.endswith((".so", ".pyd")) or entry.name == "__pycache__":
            continue
        (target / entry.name).symlink_to(entry)
    if built is not None:
        shutil.copy(built, target / built.name)


def build(cc: str, package: str, module: str, out: Path) -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    target = out / f"{module}{suffix}"
    command = [
        cc, "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer",
        "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
        f"-I{sysconfig.get_paths()['include']}", str(REPO / package / f"{module}.c"), "-o", str(target),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return target


def test_the_c_parts_under_address_and_undefined_behaviour_sanitizers(tmp_path: Path) -> None:
    required = os.environ.get("KAFKALENS_REQUIRE_ACCEL") == "1"  # CI: fail rather than skip
    cc = compiler()
    if cc is None:
        assert not required, "no C compiler"
        pytest.skip("no C compiler")
    asan, ubsan = runtime(cc, "libasan.so"), runtime(cc, "libubsan.so")
    if asan is None or ubsan is None:
        assert not required, f"{cc} has no ASan/UBSan runtime"
        pytest.skip(f"{cc} has no ASan/UBSan runtime (Debian: libasan8, libubsan1, with gcc)")
    built = tmp_path / "built"
    built.mkdir()
    tree = tmp_path / "tree"
    tree.mkdir()
    for package, module in EXTENSIONS.items():
        mirror(package, tree, build(cc, package, module, built))
    mirror("bench", tree, None)
    for name in ("tests", "pyproject.toml"):
        (tree / name).symlink_to(REPO / name)
    env = dict(
        os.environ,
        LD_PRELOAD=f"{asan}:{ubsan}",
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:strict_string_checks=1:quarantine_size_mb=4:thread_local_quarantine_size_kb=64",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        PYTHONMALLOC="malloc",
        KAFKALENS_REQUIRE_ACCEL="1",
        **{INNER: str(tree)},
    )
    env.pop("KAFKALENS_PURE_CODEC", None)
    probe = subprocess.run(
        [sys.executable, "-c", "import codec.accel, proxy.steady, proxy._steady as s; "
         "assert codec.accel.ACTIVE and proxy.steady.ACTIVE; print(s.__file__)"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.strip().startswith(str(tree)), probe.stdout  # the sanitized build
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-c", str(tree / "pyproject.toml"), "--rootdir", str(tree), *TESTS],
        cwd=tree, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    output = run.stdout + run.stderr
    assert run.returncode == 0, report(output)
    assert "Sanitizer" not in output and "runtime error" not in output, report(output)
    fuzz = subprocess.run(
        [sys.executable, "-m", "bench.codec.fuzz", "--seed", "1", "--runs", str(FUZZ_RUNS), "--seconds", "300",
         "--json", "--findings", str(tmp_path / "findings")],
        cwd=tree, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = fuzz.stdout + fuzz.stderr
    assert fuzz.returncode == 0, report(output)
    assert "Sanitizer" not in output and "runtime error" not in output, report(output)


def report(output: str) -> str:
    """The sanitizer's report if there is one (it comes before the abort's), else the end."""
    for mark in ("ERROR: AddressSanitizer", "runtime error"):
        at = output.find(mark)
        if at >= 0:
            return output[max(0, at - 200) : at + 6000]
    return output[-6000:]
