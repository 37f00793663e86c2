"""The command line as its users expect it, run as they run it (the real `kafkalens`
in a subprocess): --version, a mistyped flag or name answered with the nearest one,
`decode` saying what a file is, printing only what was asked, showing progress on a
terminal."""

from __future__ import annotations

import json
import os
import pty
import struct
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from support.capture import SyntheticCapture
from support.paths import REPO

from codec import ApiKey, Request, Response, encode_request, encode_response

README = REPO / "README.md"


def kafkalens(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", *args],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=120, **kwargs,  # type: ignore[call-overload]
    )  # fmt: skip


def test_version_is_the_packages_and_build_infos() -> None:
    from proxy.metrics import Metrics

    done = kafkalens("--version")
    assert (done.returncode, done.stderr) == (0, "")
    words = done.stdout.split()
    assert words[:2] == ["kafkalens", version("kafkalens")], done.stdout
    assert f'kafkalens_build_info{{version="{words[1]}"}} 1.0' in Metrics().render().decode()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("proxy", "--lisen", "127.0.0.1:9"), "unrecognized arguments: --lisen 127.0.0.1:9 (did you mean --listen?)"),
        (("proxy", "--log-format", "jsn"), "argument --log-format: invalid choice: 'jsn' (choose from 'auto', 'json', 'console') (did you mean json?)"),
        (("proxxy",), "argument COMMAND: invalid choice: 'proxxy' (choose from 'proxy', 'check-config', 'demo', 'fetch-kafka', 'completion', 'decode', 'top', 'report', 'watch', 'ingest') (did you mean proxy?)"),
        (("demo", "--brokr", "tansu"), "unrecognized arguments: --brokr tansu (did you mean --broker?)"),
        (("decode", "x.pcap", "--filtr", "Produce"), "unrecognized arguments: --filtr Produce (did you mean --filter?)"),
        (("decode", "x.pcap", "--filter", "Prodce"), "--filter: unknown api 'Prodce' (did you mean Produce?)"),
        (("decode", "x.pcap", "--filter", "fetch"), "--filter: unknown api 'fetch' (did you mean Fetch?)"),
        (("fetch-kafka", "--dri", "x"), "unrecognized arguments: --dri x (did you mean --dir?)"),
    ],
)
def test_a_mistyped_flag_or_name_is_one_line_with_the_nearest(args: tuple[str, ...], line: str) -> None:
    """Exit 2 and one line, before any work (x.pcap does not exist: never opened)."""
    done = kafkalens(*args)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"kafkalens: error: {line}\n")


def test_decode_says_what_a_file_that_is_no_capture_is(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    for path, what in ((README, "it begins b'# kafkalens\\n\\nA K'"), (empty, "it is empty")):
        done = kafkalens("decode", str(path))
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == (
            f"kafkalens: error: {path}: not a pcap or pcapng capture, nor length-prefixed"
            f" Kafka frames ({what})\n"
        )
    frames = tmp_path / "frames"
    frames.write_bytes(metadata_exchange(1)[0])
    flags = kafkalens("decode", str(frames), "--filter", "Metadata")
    assert flags.returncode == 2 and flags.stderr == (
        f"kafkalens: error: --filter, --port and --record-detail read captures; {frames} holds"
        " bare frames\n"
    )
    assert json.loads(kafkalens("decode", str(frames)).stdout)["api"] == "Metadata"


def metadata_exchange(corr: int) -> tuple[bytes, bytes]:
    request = encode_request(Request(ApiKey.METADATA, 1, {"correlation_id": corr, "client_id": "c"},
                                     {"topics": [{"name": "orders"}]}))  # fmt: skip
    response = encode_response(Response(ApiKey.METADATA, 1, {"correlation_id": corr}, {
        "brokers": [{"node_id": 1, "host": "b", "port": 9092, "rack": None}], "controller_id": 1,
        "topics": [{"error_code": 0, "name": "orders", "is_internal": False, "partitions": []}],
    }))  # fmt: skip
    return struct.pack(">i", len(request)) + request, struct.pack(">i", len(response)) + response


def api_versions_exchange(corr: int) -> tuple[bytes, bytes]:
    request = encode_request(Request(ApiKey.API_VERSIONS, 0, {"correlation_id": corr, "client_id": "c"}, {}))
    response = encode_response(Response(ApiKey.API_VERSIONS, 0, {"correlation_id": corr},
                                        {"error_code": 0, "api_keys": []}))  # fmt: skip
    return struct.pack(">i", len(request)) + request, struct.pack(">i", len(response)) + response


def capture(path: Path, metadata: int) -> Path:
    """One connection: an ApiVersions exchange, then `metadata` Metadata exchanges."""
    pcap = SyntheticCapture(path)
    pcap.connect(40000, 9092)
    for corr in range(metadata + 1):
        request, response = api_versions_exchange(corr) if corr == 0 else metadata_exchange(corr)
        pcap.packet(40000, 9092, request)
        pcap.packet(9092, 40000, response)
    pcap.close(40000, 9092)
    return pcap.done()


def test_decode_filter_prints_only_what_was_asked(tmp_path: Path) -> None:
    """`--filter Metadata`: stdout holds the Metadata lines alone (no connection or
    ApiVersions lines), and the capture_summary, which says what the capture lacked,
    goes to stderr; without it, everything."""
    path = capture(tmp_path / "c.pcap", 5)
    everything = kafkalens("decode", str(path), "--port", "9092")
    events = [json.loads(line)["event"] for line in everything.stdout.splitlines()]
    assert events[0] == "connection_open" and events[-1] == "capture_summary"
    done = kafkalens("decode", str(path), "--port", "9092", "--filter", "Metadata")
    assert done.returncode == 0
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(line["event"], line["api"]) for line in lines] == [("request", "Metadata")] * 5
    [summary] = [json.loads(line) for line in done.stderr.splitlines()]
    assert summary["event"] == "capture_summary" and summary["exchanges"] == 6
    by_key = kafkalens("decode", str(path), "--port", "9092", "--filter", "3")
    assert by_key.stdout == done.stdout


@pytest.mark.slow  # a capture that takes seconds to decode, for the progress line to show
def test_decode_shows_its_progress_on_a_terminal(tmp_path: Path) -> None:
    """stderr a terminal, stdout a file (`kafkalens decode big.pcap > out.jsonl`): a line
    rewritten twice a second, how far into the file and how many exchanges, cleared at
    the end; the output itself untouched. Not when stderr is no terminal."""
    path = capture(tmp_path / "big.pcap", 12_000)  # a couple of seconds of decoding
    out = tmp_path / "out.jsonl"
    main, terminal = pty.openpty()
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "proxy.cli", "decode", str(path), "--port", "9092"],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=sink, stderr=terminal,
        )  # fmt: skip
        os.close(terminal)
        said = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the terminal's other end closed
                break
            if not chunk:
                break
            said += chunk
        assert proc.wait(120) == 0
    os.close(main)
    text = said.decode()
    shown = [part for part in text.split("\r") if part.startswith("kafkalens decode:")]
    assert shown, text
    assert all(" % (" in part and " exchanges, " in part and "/s" in part for part in shown), shown
    assert text.endswith("\r\x1b[K"), repr(text[-40:])
    assert len(out.read_text().splitlines()) == 12_001 + 3  # open, close, summary
    quiet = kafkalens("decode", str(path), "--port", "9092")
    assert quiet.stderr == ""


def test_completion_in_bash_completes_commands_flags_and_choices(tmp_path: Path) -> None:
    """docs/configuration.md's `eval "$(kafkalens completion bash)"` in a real bash, Tab simulated as
    bash's completion calls the function: subcommands, each one's flags (those of the
    subcommands that parse their own arguments too), their choices, files."""
    script = kafkalens("completion", "bash")
    assert script.returncode == 0 and script.stderr == ""
    (tmp_path / "requests.log").write_text("")
    driver = tmp_path / "complete.sh"
    driver.write_text(
        'eval "$(cat completion.bash)"\n'
        "tab() { COMP_WORDS=(\"$@\"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMP_LINE=\"$*\";"
        " COMP_POINT=${#COMP_LINE}; COMPREPLY=(); _shtab_kafkalens; echo \"${COMPREPLY[*]}\"; }\n"
        "tab kafkalens pr\ntab kafkalens proxy --li\ntab kafkalens proxy --log-format ''\n"
        "tab kafkalens decode --filt\ntab kafkalens demo --broker ''\ntab kafkalens fet\n"
        "tab kafkalens proxy --config req\ntab kafkalens --vers\n"
    )
    (tmp_path / "completion.bash").write_text(script.stdout)
    done = subprocess.run(["bash", str(driver)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert done.stdout.splitlines() == [
        "proxy", "--listen", "auto json console", "--filter", "tansu apache-kafka", "fetch-kafka",
        "requests.log", "--version",
    ], done.stderr  # fmt: skip
    for shell, first in (("zsh", "#compdef kafkalens"), ("tcsh", "# AUTOMATICALLY GENERATED by")):
        other = kafkalens("completion", shell)
        assert other.returncode == 0 and other.stdout.startswith(first), other.stdout[:80]
    guide = (REPO / "docs" / "configuration.md").read_text()
    assert 'eval "$(kafkalens completion bash)"' in guide
