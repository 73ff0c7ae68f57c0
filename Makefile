# Two entry points do all the set-up on a fresh machine (Python >= 3.10; Java 17 for Spark):
#   make demo   - the main job: concurrent writers on an embedded local AWS endpoint
#   make test   - lint, type checks and the whole test suite
# Each creates .venv and installs what it needs the first time.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.s3ddb-installed
BENCH_STAMP := $(VENV)/.s3ddb-bench-installed
NODE_STAMP := $(VENV)/node/.installed
PYTEST_ARGS ?=
PEERS_ARGS ?=
SCALE_ARGS ?=
READ_ARGS ?=
SPARK_MERGE_ARGS ?=

.PHONY: demo test test-fast test-durations lint typecheck protos bench bench-groups bench-index bench-stream bench-peers bench-round-trips bench-scale bench-telemetry bench-open-formats bench-read bench-spark-merge bench-catalog bench-changes clean

# uv (from PyPI, into the venv) installs the same packages pip would, in about a third
# of the time on a fresh machine. It resolves from its cache first (--offline: 3 s
# here against 31 s asking the index about every dependency again), and from the
# index when the cache lacks anything (a fresh machine, a changed dependency).
UV_INSTALL = $(VENV)/bin/uv pip install --quiet --python $(PY)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv
	$(UV_INSTALL) --offline -e ".[dev]" 2>/dev/null || $(UV_INSTALL) -e ".[dev]"
	touch $(STAMP)

# Second implementations of DynamoDB and S3 (dynalite, s3rver) that some tests also run
# against, from npm, into the venv.
$(NODE_STAMP): tests/node/package.json
	mkdir -p $(VENV)/node
	cp tests/node/package.json $(VENV)/node/package.json
	npm install --prefix $(VENV)/node --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

demo: $(STAMP)
	$(PY) -m s3ddb.cli.main demo

# ruff, then the structure figures (import cycles and layers, private names across
# packages, module sizes, __all__, exported exceptions; scripts/structure.py).
lint: $(STAMP)
	$(PY) -m ruff check s3ddb pyspark_s3ddb tests benchmarks scripts
	$(PY) scripts/structure.py

typecheck: $(STAMP)
	$(PY) -m mypy

# Two workers, each taking the next test when it has almost none left, the longest
# first (tests/conftest.py, from tests/durations.txt; `make test-durations` rewrites it
# from a run's times), so that the run ends with both workers busy. The tests of a
# module that share a fixture go to one worker together (--dist loadscope: the
# conftest's scheduler makes such a module one scope and every other test a scope of
# its own, handed out in that order by --no-loadscope-reorder), so a costly fixture
# starts once. Each worker that
# runs a Spark test starts its own local SparkSession. The bench extra (pylance,
# deltalake) is installed too: a test runs the read benchmark's quick mode. Bytecode
# caches are written even where the environment says not to: the suite starts hundreds
# of Python processes (writers, crashes, the CLI, Spark's workers), and each would
# compile the package from source again (__pycache__ is ignored by git).
test: lint typecheck $(NODE_STAMP) $(BENCH_STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -n 2 --dist loadscope --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

# The quick subset for iteration: no multi-process, crash, Spark or Terraform tests.
test-fast: $(STAMP) $(NODE_STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -n 2 --maxschedchunk 1 -m "not slow and not terraform and not spark" $(PYTEST_ARGS)

# Rewrite tests/durations.txt (the order tests are handed out) from a run's times:
#   S3DDB_TEST_TIMES=/tmp/times.txt make test; make test-durations TIMES=/tmp/times.txt
test-durations: $(STAMP)
	$(PY) scripts/test_durations.py $(TIMES)

protos: $(STAMP)
	$(PY) scripts/gen_protos.py

bench: $(STAMP)
	$(PY) benchmarks/commit_latency.py
	$(PY) benchmarks/row_changes.py

# Group commits (s3ddb.atomic) and snapshots against single appends, on the local endpoint.
bench-groups: $(STAMP)
	$(PY) benchmarks/groups.py

# A scalar index against a scan: 3M rows in 10 appends on a local path.
bench-index: $(STAMP)
	$(PY) benchmarks/scalar_index.py

# Memory of Arrow streams (DuckDB, RecordBatchReader) against to_table on a local path.
bench-stream: $(STAMP)
	$(PY) benchmarks/stream_memory.py

# The peers (pylance, deltalake) come with the bench extra, installed on first use.
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(UV_INSTALL) --offline -e ".[dev,bench]" 2>/dev/null || $(UV_INSTALL) -e ".[dev,bench]"
	touch $(BENCH_STAMP)

# s3ddb beside pylance and deltalake on one local endpoint; PEERS_ARGS=--quick for a smoke run.
bench-peers: $(BENCH_STAMP)
	$(PY) benchmarks/peers.py $(PEERS_ARGS)

# Round trips each call (create, append, open, read, delete, update, merge, tags...) waits
# for: direct and through a link with a 10 ms round trip; ROUND_TRIPS_ARGS=--plain-s3.
bench-round-trips: $(STAMP)
	$(PY) benchmarks/round_trips.py $(ROUND_TRIPS_ARGS)

# Commits, opens and point queries as fragments pile up, beside pylance; the run in
# docs/performance.md: SCALE_ARGS="--fragments 1000,10000,100000,1000000 --endpoint
# 1000,100000,1000000 --series 4224 --versions '' --repeat 5".
bench-scale: $(BENCH_STAMP)
	$(PY) benchmarks/metadata_scale.py $(SCALE_ARGS)

# What OpenTelemetry costs the sequential append: without it, the API alone, and the SDK
# with an in-memory exporter, paired round by round (docs/performance.md).
bench-telemetry: $(BENCH_STAMP)
	$(PY) benchmarks/telemetry_overhead.py

# What publishing Iceberg and Delta metadata costs the sequential append, and how many
# requests it adds per commit, on the local endpoint and a local path (docs/performance.md).
bench-open-formats: $(STAMP)
	$(PY) benchmarks/open_formats.py

# The Iceberg REST catalog's loadTable (s3ddb catalog serve) on s3+ddb:// on the local
# endpoint: requests to the store per load and latency, beside a plain GET of the
# metadata file.
bench-catalog: $(STAMP)
	$(PY) benchmarks/catalog.py

# Scans (full, projection, k < 10, point lookup) beside pyarrow on the same files, pylance
# and deltalake, local and on one local endpoint, plus streaming memory;
# READ_ARGS="--quick" for a smoke run, or sizes: READ_ARGS="--endpoint-rows 2000000".
bench-read: $(BENCH_STAMP)
	$(PY) benchmarks/read_path.py $(READ_ARGS)

# Spark's distributed upsert (s3ddb.spark_ext.merge_insert) beside Spark's own rewrite of
# the same Parquet files, local[2]: 20M target rows, sources of 1%, 10% and 100%, keys
# spread or clustered; SPARK_MERGE_ARGS=--quick for a smoke run, or
# SPARK_MERGE_ARGS="--target-rows 2000000".
# The change feed of a k-row update in a 10M-row table, beside a full scan and a full diff.
bench-changes: $(STAMP)
	$(PY) benchmarks/changes.py $(CHANGES_ARGS)

bench-spark-merge: $(STAMP)
	$(PY) benchmarks/spark_merge.py $(SPARK_MERGE_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
