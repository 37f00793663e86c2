"""This package, shipped to the executors' Python workers.

The report's Python pass (partials.fold_text, run by mapInArrow) is pickled by
reference: a worker imports pipeline.partials. A worker's sys.path is not the
driver's, so `spark-submit pipeline/report.py` from a source tree would fail there
(on a cluster, and locally too); the package is zipped and added to the job instead,
so executors need only Python with its libraries (pipeline/README.md).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

PACKAGE = Path(__file__).resolve().parent
_shipped: set[str] = set()  # application ids: a file name can be added once per app


def ship_package(spark: SparkSession) -> None:
    """Add a zip of this package (its modules and data) to the job's Python path."""
    app = spark.sparkContext.applicationId
    if app in _shipped:
        return
    _shipped.add(app)
    target = Path(tempfile.mkdtemp(prefix="kafkalens-")) / "kafkalens_pipeline.zip"
    # Tasks fetch it while the application runs: removed when the driver exits.
    atexit.register(shutil.rmtree, target.parent, True)
    with zipfile.ZipFile(target, "w") as archive:
        for path in sorted(PACKAGE.rglob("*")):
            if path.suffix in (".py", ".json", ".csv") and "__pycache__" not in path.parts:
                archive.write(path, Path(PACKAGE.name) / path.relative_to(PACKAGE))
    spark.sparkContext.addPyFile(str(target))
