"""The logs in: every input file accounted for, every line parsed once by Spark.

A line Spark cannot use becomes a row flagged with why it is bad, never a failure and
never a row the driver collects. A file Spark cannot read to its end (truncated or
wrongly compressed, unreadable, an I/O error part way) is never skipped silently: the
read fails, `find_unreadable` names every such file with its reason, and the caller
either stops (the default) or reads the others (pipeline/README.md, "Inputs").
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StringType, StructField, StructType

from pipeline.evolve import RETYPED
from pipeline.fsio import first_line, hadoop_file
from pipeline.paths import PathError
from pipeline.schema import CORRUPT, JSON_OPTIONS, KNOWN_EVENTS, LINE_SCHEMA

SAMPLE_CHARS = 200
REASON_CHARS = 200
# Files probed at once when a read failed (each probe a Spark job over a group of files).
PROBE_GROUPS = 8
PARALLEL_PROBES = 4


class BadReason:
    """Why a line is bad (the `reason` of the bad_lines table), most basic first."""

    INVALID_JSON = "invalid JSON"
    NOT_AN_OBJECT = "a JSON array, not an object"
    MISSING_EVENT = "missing event"
    MISSING_TS = "missing ts"
    INVALID_TS = "ts is not an ISO-8601 date-time"
    WRONG_TYPE = "field of the wrong type"


class InputError(Exception):
    """The inputs match nothing, or Spark cannot read them: the report must not pass
    for an empty one (exit 0 would read as "all clear" to a cron job)."""


class UnreadableFiles(InputError):
    """Files Spark cannot read to their end, each with why (file -> reason)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = dict(sorted(files.items()))
        named = ", ".join(f"{path} ({why})" for path, why in self.files.items())
        count = len(self.files)
        super().__init__(f"{count} input file{'s' if count > 1 else ''} cannot be read: "
                         f"{named}")


def expand_inputs(spark: SparkSession, inputs: Iterable[str]) -> list[str]:
    """The inputs, each checked to match something through Hadoop's FileSystem (what
    the job's file listing uses). Raises PathError naming those that match nothing
    (local inputs were checked before Spark started: paths.check_inputs)."""
    found: list[str] = []
    missing: list[str] = []
    for raw in inputs:
        try:
            fs, path = hadoop_file(spark, raw)
            matches = fs.globStatus(path)
        except Exception as e:  # noqa: BLE001 - a bad scheme or host: say which input
            raise PathError(f"cannot list {raw}: {first_line(e)}") from e
        (found if matches else missing).append(raw)
    if missing:
        raise PathError("no file matches " + ", ".join(missing))
    return found


def read_logs(spark: SparkSession, paths: list[str], schema: StructType | None = None,
              recursive: bool = True) -> DataFrame:
    """Every non-blank line parsed by Spark's JSON source with the report's schema,
    and the file it came from (`file`); a line Spark cannot parse keeps its text in
    `_corrupt_record` (the JSON source: less CPU than text + from_json, bench/PIPELINE.md,
    "The JSON source against text + from_json").
    Directories are read recursively (hidden names skipped, as Spark does). A file
    Spark cannot read to its end fails the job (`ignoreCorruptFiles` stays off: it
    would drop the rest of the file without a word). `schema` is the report's unless
    given (bench.pipeline.scan_cost measures others)."""
    reader = spark.read.schema(schema or LINE_SCHEMA).options(**JSON_OPTIONS)
    if recursive:
        reader = reader.option("recursiveFileLookup", "true")
    return reader.json(paths).select("*", F.col("_metadata.file_path").alias("file"))


@dataclass(frozen=True)
class ReadFailure:
    """A file a Spark job could not read, and why, from the job's error."""

    path: str
    reason: str


def read_failure(error: BaseException) -> ReadFailure | None:
    """The file and reason of Spark's "cannot read file" error (its FAILED_READ_FILE
    condition names the file; the innermost cause says why), or of a file gone or not
    permitted (FileNotFoundException); None for any other failure."""
    java = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    path: str | None = None
    causes: list[tuple[str, str]] = []
    while java is not None:
        name = str(java.getClass().getName())
        message = str(java.getMessage() or "")
        condition = _condition(java)
        if condition.startswith("FAILED_READ_FILE"):
            path = str(dict(java.getMessageParameters()).get("path") or path or "")
        elif name == "java.io.FileNotFoundException" and path is None:
            path = _missing_path(message)
        causes.append((name, message))
        java = java.getCause()
    if not path:
        return _failure_in_text(str(error))
    return ReadFailure(normal_path(path), describe(*causes[-1]))


# A failure inside a foreachBatch function (the watch's) reaches the query's error only as
# the text of the Python traceback, with the Java one in it: the chain of causes is cut
# at the Python boundary, so the file and the innermost cause are read from that text.
_FAILED_READ = re.compile(r"\[FAILED_READ_FILE[.\w]*\] Encountered error while reading file "
                          r"(\S+?)\.?\s")
_CAUSED_BY = re.compile(r"^Caused by: ([\w.$]+)(?:: (.*))?$", re.M)


def _failure_in_text(text: str) -> ReadFailure | None:
    found = _FAILED_READ.search(text)
    if not found:
        return None
    causes = _CAUSED_BY.findall(text[found.end():])
    java_class, message = causes[-1] if causes else ("org.apache.spark.SparkException", "")
    return ReadFailure(normal_path(found.group(1)), describe(java_class, message))


def _condition(java: Any) -> str:
    try:
        return str(java.getCondition() or "")
    except Exception:  # noqa: BLE001 - not a SparkThrowable
        return ""


def _missing_path(message: str) -> str | None:
    # "File file:/x/requests.log does not exist" / "/x/requests.log (Permission denied)"
    text = message.strip().splitlines()[0] if message.strip() else ""
    if text.startswith("File ") and " does not exist" in text:
        return text[5:text.index(" does not exist")]
    if text.endswith(")") and " (" in text:
        return text[:text.rindex(" (")]
    return None


def describe(java_class: str, message: str) -> str:
    """A cause in a few words a user acts on, with Hadoop's own message."""
    text = (message.strip().splitlines() or [""])[0][:REASON_CHARS]
    short = java_class.rsplit(".", 1)[-1]
    if text == "not a gzip file":
        return "not gzip data, though its name says .gz"
    if short == "EOFException":
        return f"truncated: {text or 'unexpected end of file'}"
    if short in ("FileNotFoundException", "AccessDeniedException", "AccessControlException"):
        return f"cannot be opened: {text}"
    return f"read error: {short}: {text}"


def normal_path(path: str) -> str:
    """Spark names a local file file:/x, file:///x or /x depending on where: one form."""
    if path.startswith("file:///"):
        return "file:/" + path[len("file:///"):]
    if path.startswith("/"):
        return "file:" + path
    return path


def find_unreadable(spark: SparkSession, files: list[str], known: ReadFailure | None = None
                    ) -> dict[str, str]:
    """Every file of `files` Spark cannot read to its end -> why. Spark's text source
    reads them (no parsing: the cost is the I/O and decompression), in PROBE_GROUPS
    groups, PARALLEL_PROBES jobs at a time; a failed job names one file, which leaves
    its group, and the rest of the group is read again. Only run after a read failed."""
    bad: dict[str, str] = {}
    if known is not None:
        bad[known.path] = known.reason
    lock = threading.Lock()
    todo = [f for f in files if normal_path(f) not in bad]
    groups = [todo[i::PROBE_GROUPS] for i in range(min(PROBE_GROUPS, len(todo)))]

    def probe(group: list[str]) -> None:
        pending = list(group)
        while pending:
            try:
                spark.read.text(pending).write.format("noop").mode("overwrite").save()
                return
            except Exception as e:  # noqa: BLE001 - which file, or not a file's fault
                failure = read_failure(e)
                index = {normal_path(p): p for p in pending}
                if failure is None or failure.path not in index:
                    gone = _vanished(spark, pending)
                    if not gone:
                        raise InputError(f"cannot read the inputs: {first_line(e)}") from e
                    failure = gone
                with lock:
                    bad[failure.path] = failure.reason
                pending.remove(index[failure.path])

    with ThreadPoolExecutor(PARALLEL_PROBES) as pool:
        list(pool.map(probe, groups))
    return bad


def _vanished(spark: SparkSession, paths: list[str]) -> ReadFailure | None:
    """A listed file that is no longer there (Spark then fails while listing, before
    reading, with an error that names no file by condition)."""
    for path in paths:
        fs, hadoop_path = hadoop_file(spark, path)
        if not fs.exists(hadoop_path):
            return ReadFailure(normal_path(path), "cannot be opened: no longer exists")
    return None


def _valid_ts(text: Column) -> Column:
    """An ISO-8601 date and time of day (2025-03-01T12:00:00[.ffffff][Z|+02:00]; a space
    may stand for the T), which Spark's cast then reads; a number, a date alone or a
    year alone is not one (Spark's cast would take "2025" for 2025-01-01)."""
    return ((F.length(text) >= 19) & (F.substring(text, 5, 1) == "-")
            & F.substring(text, 11, 1).isin("T", " "))


def bad_reason(j: Column, ts: Column, retyped: Column | None = None) -> Column:
    """Why a parsed line is bad, or null when it is good (or of an event we ignore).
    `ts` is the line's timestamp as read (null when absent or invalid); `retyped` the
    line's fields of another type (parse_lines' `retype`): a line with such fields and
    no other fault is good."""
    corrupt = j[CORRUPT].isNotNull()
    if retyped is not None:
        corrupt = corrupt & retyped.isNull()
    unparsed = corrupt & j["event"].isNull()
    return (
        F.when(unparsed & F.ltrim(j[CORRUPT]).startswith("["), F.lit(BadReason.NOT_AN_OBJECT))
        .when(unparsed, F.lit(BadReason.INVALID_JSON))
        .when(j["event"].isNull(), F.lit(BadReason.MISSING_EVENT))
        .when(j["ts"].isNull(), F.lit(BadReason.MISSING_TS))
        .when(ts.isNull(), F.lit(BadReason.INVALID_TS))
        .when(corrupt & j["event"].isin(*KNOWN_EVENTS), F.lit(BadReason.WRONG_TYPE))
    )


# parse_lines' columns: the lines' fields as the pipeline uses them (the ingested
# table's, pipeline/ingest.py), in this order.
PARSED_FIELDS = [name for name in LINE_SCHEMA.fieldNames() if name not in (CORRUPT, "record_stats")]
PARSED_EXTRA = ["per_topic", "bad_reason", "line", "file"]
_PARSED_TS = "_parsed_ts"  # the timestamp as read, before it takes the name `ts`
_AS_TEXT = "_as_text"  # a corrupt line's fields, each as text (retyped_fields)
_INVALID = "_invalid"  # from_json's corrupt column: the text is not JSON at all
_TEXT_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _INVALID}
_NESTED = (ArrayType, MapType, StructType)


def parsed_columns(table: DataFrame) -> list[Column]:
    """parse_lines' columns (with `retyped`) of an ingested table's rows; `retyped` null
    where the table has no such column (a table an older kafkalens made)."""
    retyped = (F.col(RETYPED) if RETYPED in table.columns
               else F.lit(None).cast("map<string,string>").alias(RETYPED))
    return [*map(F.col, PARSED_FIELDS + PARSED_EXTRA), retyped]


def retype_candidates(schema: StructType) -> list[StructField]:
    """The fields of a read schema whose value can have another type than the schema's
    (a string field takes any value: Spark's reader keeps its JSON text)."""
    return [f for f in schema.fields
            if f.name != CORRUPT and not isinstance(f.dataType, StringType)]


def _as_text(schema: StructType) -> Column:
    """A corrupt line's candidate fields, each as the text Spark reads into a string
    (a string's characters, any other value's JSON text), and `_invalid` when the
    line is no JSON object at all (cut short, say)."""
    text = StructType([*(StructField(f.name, StringType()) for f in retype_candidates(schema)),
                       StructField(_INVALID, StringType())])
    return F.from_json(F.col(CORRUPT), text, _TEXT_OPTIONS)


def _mismatched(field: StructField, typed: Column, text: Column) -> Column:
    """The line has a value for `field` that is not of its type: Spark's reader left
    the column null, or (a nested type: the reader nulls only the nested value that
    did not fit) the value's text does not parse as the type."""
    wrong = text.isNotNull() & typed.isNull()
    if isinstance(field.dataType, _NESTED):
        wrapped = StructType([StructField("v", field.dataType), StructField(_INVALID, StringType())])
        reparsed = F.from_json(F.concat(F.lit('{"v":'), text, F.lit("}")), wrapped, _TEXT_OPTIONS)
        wrong = wrong | (text.isNotNull() & reparsed[_INVALID].isNotNull())
    return wrong


def retyped_fields(schema: StructType) -> Column:
    """The fields of a line whose value has another type than `schema` says: field ->
    the value's text, or null (a line that is not corrupt, or is not JSON). Reads the
    `_as_text` column (computed only for corrupt lines of the known events)."""
    text = F.col(_AS_TEXT)
    pairs: list[Column] = []
    for field in retype_candidates(schema):
        pairs += [F.lit(field.name),
                  F.when(_mismatched(field, F.col(field.name), text[field.name]),
                         text[field.name])]
    found = F.map_filter(F.create_map(*pairs), lambda _, v: v.isNotNull())
    # A branch's value is computed only on the lines it takes: the map is never built
    # for a line that is not corrupt (parse_lines then turns an empty one to null).
    return F.when(text.isNotNull() & text[_INVALID].isNull(), found)


def parse_lines(logs: DataFrame, keep: Sequence[str] = (),
                retype: StructType | None = None) -> DataFrame:
    """The report's fields of each line (read_logs), `ts` as a timestamp (UTC; an
    offset converted), plus `bad_reason`, `line` (a bad line's first characters: the
    text Spark could not parse, else the fields it read), `file`, and the columns of
    `logs` named in `keep`.

    With `retype` (the schema `logs` was read with: the ingest's), a line of a known
    event whose field has another type than the schema's is a line, not a bad line:
    that field's column is null and `retyped` (a column after `file`) maps the field
    to its value's text (evolve.py)."""
    # In steps, each value computed once: written as one select, the timestamp's cast
    # was made three times a line and the reason twice (in `bad_reason` and in `line`'s
    # condition); Spark keeps the steps apart rather than repeat a cast (CollapseProject).
    # Never slower, the report and the ingest (bench/PIPELINE.md, "The parse computing
    # each value once").
    ts_text = F.col("ts")
    timed = logs.select("*", F.when(_valid_ts(ts_text), ts_text.try_cast("timestamp"))
                        .alias(_PARSED_TS))
    retyped: Column | None = None
    added: list[str] = []
    if retype is not None:
        # Only a corrupt line of a known event with a valid ts is read again.
        again = (F.col(CORRUPT).isNotNull() & F.col("event").isin(*KNOWN_EVENTS)
                 & F.col(_PARSED_TS).isNotNull())
        timed = timed.select("*", F.when(again, _as_text(retype)).alias(_AS_TEXT))
        timed = timed.select("*", retyped_fields(retype).alias("_retyped_all"))
        timed = timed.select("*", F.when(F.size("_retyped_all") > 0, F.col("_retyped_all"))
                             .alias(RETYPED))
        retyped = F.col(RETYPED)
        added = [RETYPED]
    reason = bad_reason(F.struct(*LINE_SCHEMA.fieldNames()), F.col(_PARSED_TS), retyped)
    checked = timed.select("*", reason.alias("bad_reason"))
    read = [_typed(name, retyped).alias(name) for name in PARSED_FIELDS if name != "ts"]
    text = F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*PARSED_FIELDS)))
    per_topic = _typed("record_stats", retyped)["per_topic"]
    return checked.select(
        F.col(_PARSED_TS).alias("ts"), *read,
        per_topic.alias("per_topic"),
        "bad_reason",
        F.when(F.col("bad_reason").isNotNull(), F.substring(text, 1, SAMPLE_CHARS))
        .alias("line"),
        F.col("file"), *added, *keep,
    ).select(*PARSED_FIELDS, *PARSED_EXTRA, *added, *keep)


def _typed(name: str, retyped: Column | None) -> Column:
    """A field's column; null on a line where it is retyped (a nested value Spark's
    reader kept in part)."""
    if retyped is None or not isinstance(LINE_SCHEMA[name].dataType, _NESTED):
        return F.col(name)
    return F.when(retyped[name].isNull(), F.col(name))
