# vidforge — the two set-up commands: `make serve` and `make test` (both create .venv and install on first use:
# `make serve` the runtime dependencies only, `make test` and the other targets the test extras besides).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test
# `make serve HOST=… PORT=…`: where to serve, passed on as vidforge serve's flags. Only from make's command line: a
# HOST or PORT that the shell happens to export (some set HOST to the machine's name) is not taken for one.
SERVE_FLAGS := $(if $(filter command line,$(origin HOST)),--host $(HOST)) $(if $(filter command line,$(origin PORT)),--port $(PORT))
# Clients nobody here wrote, each in its own environment: the suite drives vidforge with them.
CLIENTS := .clients
NODE_DIR := tests/clients/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed
HOSTS_DIR := tests/clients/inspector
HOSTS_STAMP := $(HOSTS_DIR)/node_modules/.installed
APPS_HOST_DIR := tests/clients/apps_host
APPS_HOST_STAMP := $(APPS_HOST_DIR)/dist/.built
PY_CLIENT_STAMPS := $(CLIENTS)/mcp1/.installed $(CLIENTS)/fastmcp-tasks/.installed
# pytest with compiled code cached in __pycache__ even where the environment sets PYTHONDONTWRITEBYTECODE: without the
# cache every pytest process rewrites and compiles each test module again at collection (9 CPU-s a process, 8 s of the
# fast lane's minute), and every server and Ray worker the tests start compiles vidforge's modules it imports.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

.PHONY: serve test test-fast lint clients bench chaos fuzz docs-screenshot player app-view clean

$(RUNTIME_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# Newer than the runtime stamp, so a change to pyproject.toml installs both again.
$(TEST_STAMP): $(RUNTIME_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

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

# The MCP Apps host harness for tests/test_mcp_app_live.py: the official ext-apps AppBridge and SDK client, bundled
# with the esbuild that $(NODE_DIR) pins (the sources sit outside that folder, so NODE_PATH tells it where to look).
$(APPS_HOST_STAMP): $(APPS_HOST_DIR)/host.ts $(APPS_HOST_DIR)/host.html $(NODE_STAMP)
	NODE_PATH=$(abspath $(NODE_DIR)/node_modules) $(NODE_DIR)/node_modules/.bin/esbuild $(APPS_HOST_DIR)/host.ts \
		--bundle --minify --format=iife --platform=browser --target=es2020 --log-level=warning \
		--outfile=$(APPS_HOST_DIR)/dist/host.js
	touch $@

clients: $(PY_CLIENT_STAMPS) $(NODE_STAMP) $(HOSTS_STAMP) $(APPS_HOST_STAMP)

serve: $(RUNTIME_STAMP)
	$(BIN)/vidforge serve $(SERVE_FLAGS)

# Two workers, each taking whole test files (their module-scoped servers and clusters stay shared within a file):
# most of a test's time is a server starting or a render's wait, so two files at once finish sooner on 2 cores.
# tests/conftest.py hands the files out longest first and the modules on the session's shared servers to one worker
# together. The tests marked `solo` run after them, one at a time (see tests/conftest.py).
test: $(TEST_STAMP) clients
	$(PYTEST) -n 2 --dist loadfile -m "not solo"
	$(PYTEST) -m solo

# The fast lane: every test not marked `slow` or `ray` (in-process: no Ray, no server process, no long encode; a test
# that starts one unmarked fails, see tests/conftest.py), under a minute. On three workers (xdist's `load`: tests, not
# files, go to whichever is free), though the machine has two cores: a tenth of its time is tests waiting on
# receivers and timeouts, which a third worker fills (about 44 s instead of 52 on 2 cores), for ~4 CPU-s more (one
# more collection).
test-fast: $(TEST_STAMP)
	$(PYTEST) -n 3 -m "not slow and not ray"

# Lint, format, types and the rooms' import contracts, as configured in pyproject.toml (mypy: strict flags on every package).
lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# Render speed against ffmpeg (the driver alone; one render through MCP, with the stage breakdown and the memory of
# 4k renders of 30, 60 and 120 s; the source matrix through MCP and the encodes' BD-rate; a batch of 8 renders), the
# server's memory over an hour of mixed load (a census by process), the control plane, then the reliability runs
# (ingress isolation, chaos, 10 000-request fuzz) as docs/performance.md's table; `benchmarks/reliability.py
# --write-docs` rewrites that table from a fresh run. Run it on an otherwise idle machine: every figure is a wall time.
bench: $(TEST_STAMP)
	$(BIN)/python benchmarks/render_throughput.py
	$(BIN)/python benchmarks/render_throughput.py --mcp --seconds 30 --memory 30,60,120
	$(BIN)/python benchmarks/qc_cost.py --seconds 30 --rounds 5
	$(BIN)/python benchmarks/qc_cost.py --seconds 30 --rounds 5 --format webm
	$(BIN)/python benchmarks/qc_cost.py --seconds 30 --rounds 5 --fidelity
	$(BIN)/python benchmarks/ladder_speed.py --seconds 30 --repeat 3
	$(BIN)/python benchmarks/render_matrix.py
	$(BIN)/python benchmarks/rate_distortion.py
	$(BIN)/python benchmarks/batch_throughput.py --rounds 3
	$(BIN)/python benchmarks/batch_throughput.py --rounds 3 --approvals --seconds 10
	$(BIN)/python benchmarks/batch_throughput.py --rounds 3 --approvals --seconds 20
	$(BIN)/python benchmarks/memory_soak.py
	$(BIN)/python benchmarks/control_plane.py
	$(BIN)/python benchmarks/registry_scale.py
	$(BIN)/python benchmarks/registry_scale.py --postgresql
	$(BIN)/python benchmarks/transfer_cpu.py
	$(BIN)/python benchmarks/reliability.py
	$(BIN)/python benchmarks/autoscale.py --plot docs/autoscale.png

# The review page's and the watch page's pictures in the README and docs/operating.md, from the real browser of
# tests/test_review_page.py and tests/test_watch_page.py (a test run leaves them alone).
docs-screenshot: $(TEST_STAMP)
	VIDFORGE_DOCS_SCREENSHOT=1 $(PYTEST) tests/test_review_page.py -k approve_on_the_page -q
	VIDFORGE_DOCS_SCREENSHOT=1 $(PYTEST) tests/test_watch_page.py -k plays_the_video -q
	VIDFORGE_DOCS_SCREENSHOT=1 $(PYTEST) tests/test_mcp_app_live.py -k plays_the_video -q

# The watch page's player, hls.js, ships built inside the package (serve_app/ingress/review/static/), so `pip install`
# needs neither Node nor a CDN. web/package-lock.json pins it; this installs exactly that and copies the build in.
PLAYER_STATIC := serve_app/ingress/review/static
player:
	cd web && npm ci --no-audit --no-fund --loglevel=error
	cp web/node_modules/hls.js/dist/hls.min.js $(PLAYER_STATIC)/hls.min.js
	cp web/node_modules/hls.js/LICENSE $(PLAYER_STATIC)/hls.js.LICENSE

# The MCP App view (web/render-view/, served as ui://vidforge/render): one self-contained HTML document, its script
# (the ext-apps App API, hls.js) and styles inlined and minified by esbuild, loading nothing from a CDN, shipped in the
# package so `pip install` needs no Node; beside it the licence notices of the third-party code it bundles.
APP_VIEW := mcp_protocol/app_view
app-view:
	cd web && npm ci --no-audit --no-fund --loglevel=error
	cd web && node render-view/build.mjs ../$(APP_VIEW)/render.html ../$(APP_VIEW)/THIRD_PARTY_LICENSES.txt

fuzz: $(TEST_STAMP)
	$(BIN)/python benchmarks/fuzz.py

# Processes killed under load, then the task state's PostgreSQL stopped and started again, round after round.
chaos: $(TEST_STAMP)
	$(BIN)/python benchmarks/chaos.py
	$(BIN)/python benchmarks/database_chaos.py

clean:
	rm -rf $(VENV) $(CLIENTS) $(NODE_DIR)/node_modules $(HOSTS_DIR)/node_modules .vidforge .pytest_cache
