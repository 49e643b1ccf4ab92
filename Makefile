# vidforge — the two set-up commands: `make serve` and `make test` (both create .venv and install on first use).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Clients nobody here wrote, each in its own environment: the suite drives vidforge with them.
CLIENTS := .clients
NODE_DIR := tests/clients/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed
HOSTS_DIR := tests/clients/inspector
HOSTS_STAMP := $(HOSTS_DIR)/node_modules/.installed
PY_CLIENT_STAMPS := $(CLIENTS)/mcp1/.installed $(CLIENTS)/fastmcp-tasks/.installed

.PHONY: serve test test-fast lint clients bench chaos fuzz docs-screenshot clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(CLIENTS)/%/.installed: tests/clients/python/%.txt
	test -x $(CLIENTS)/$*/bin/python || $(PYTHON) -m venv $(CLIENTS)/$*
	$(CLIENTS)/$*/bin/python -m pip install --quiet -r $<
	touch $@

$(NODE_STAMP): $(NODE_DIR)/package.json
	cd $(NODE_DIR) && npm install --no-audit --no-fund --loglevel=error
	touch $@

# MCP Inspector and Claude Code, for tests/test_connect.py (the Inspector runs on the Node 22 from $(NODE_DIR)).
$(HOSTS_STAMP): $(HOSTS_DIR)/package.json $(NODE_STAMP)
	cd $(HOSTS_DIR) && npm install --no-audit --no-fund --loglevel=error
	touch $@

clients: $(PY_CLIENT_STAMPS) $(NODE_STAMP) $(HOSTS_STAMP)

serve: $(STAMP)
	$(BIN)/vidforge serve

# Two workers, each taking whole test files (their module-scoped servers and clusters stay shared within a file):
# most of a test's time is a server starting or a render's wait, so two files at once finish sooner on 2 cores.
# tests/conftest.py hands the files out longest first and the modules on the session's shared servers to one worker
# together. The tests marked `solo` run after them, one at a time (see tests/conftest.py).
test: $(STAMP) clients
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not solo"
	$(BIN)/python -m pytest -m solo

# The fast lane: the tests marked `fast` (in-process: no Ray, no server process, no encode), under a minute.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "fast and not ray"

# Lint, format, types and the rooms' import contracts, as configured in pyproject.toml (mypy: strict flags on mcp_protocol/ and render_kernels/).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# Render speed against ffmpeg (the driver alone; one render through MCP, with the stage breakdown and the memory of
# 4k renders of 30, 60 and 120 s; the source matrix through MCP and the encodes' BD-rate; a batch of 8 renders), the
# control plane, then the reliability runs (ingress isolation, chaos, 10 000-request fuzz) as the README's table;
# `benchmarks/reliability.py --write-readme` rewrites that table from a fresh run. Run it on an otherwise idle
# machine: every figure is a wall time.
bench: $(STAMP)
	$(BIN)/python benchmarks/render_throughput.py
	$(BIN)/python benchmarks/render_throughput.py --mcp --seconds 30 --memory 30,60,120
	$(BIN)/python benchmarks/render_matrix.py
	$(BIN)/python benchmarks/rate_distortion.py
	$(BIN)/python benchmarks/batch_throughput.py --rounds 3
	$(BIN)/python benchmarks/control_plane.py
	$(BIN)/python benchmarks/reliability.py
	$(BIN)/python benchmarks/autoscale.py --plot docs/autoscale.png

# The README's picture of the review page, from tests/test_review_page.py's real browser (a test run leaves it alone).
docs-screenshot: $(STAMP)
	VIDFORGE_DOCS_SCREENSHOT=1 $(BIN)/python -m pytest tests/test_review_page.py -k approve_on_the_page -q

fuzz: $(STAMP)
	$(BIN)/python benchmarks/fuzz.py

chaos: $(STAMP)
	$(BIN)/python benchmarks/chaos.py

clean:
	rm -rf $(VENV) $(CLIENTS) $(NODE_DIR)/node_modules $(HOSTS_DIR)/node_modules .vidforge .pytest_cache
