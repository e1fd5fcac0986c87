# popagent: `make run` starts the whole stack, `make test` runs the tests.
# Both install what they need from the project's own files on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
UV_VERSION := 0.13.8
UV := $(PYTHON) -m uv
VENV := .venv
VPY := $(VENV)/bin/python
PROTO_FILES := $(shell find protos -name '*.proto')
PROTO_OUT := libs/popagent-protos/src
PROTO_STAMP := libs/popagent-protos/.stamp
SYNC_STAMP := $(VENV)/.synced
# Synapse, the Matrix homeserver of the channel tests, in a venv of its own (its pins are not the project's).
SYNAPSE_VENV := .venv-synapse
SYNAPSE_STAMP := $(SYNAPSE_VENV)/.installed
NODE_TEST_DEPS := tests/ai_sdk/node_modules/.package-lock.json
MCP_CLIENT_TS_DEPS := tests/mcp_client_ts/node_modules/.package-lock.json
LANGUAGE_SERVERS := services/agent-runner/language-servers/node_modules/.package-lock.json
BROWSER_PEER_DEPS := tests/browser_peer/node_modules/.package-lock.json
UI_DEPS := ui/node_modules/.package-lock.json
UI_BUILD := ui/dist/index.html
# The UI is rebuilt when its sources change or when the gateway's API (its types) may have.
UI_SOURCES := $(shell find ui/src ui/scripts -type f -not -name '*.gen.*' 2>/dev/null) ui/index.html ui/vite.config.ts ui/tsconfig.json
GATEWAY_SOURCES := $(shell find services/gateway/src -name '*.py')
MEMBER_PYPROJECTS := pyproject.toml $(wildcard libs/*/pyproject.toml services/*/pyproject.toml)

.PHONY: run test test-fast lint typecheck protos setup system-deps bench bench-smoke constraints compose-config clean ui

run: setup
	$(VPY) -m popagent_dev.launcher

# A crashed worker ends the run (--max-worker-restart=0) and the summary names the test it ran:
# xdist 3.8's loadgroup scheduler puts a replaced worker's finished groups back on the queue as
# empty work, and the run then waits forever at its end (pytest-xdist #1378). popagent_dev.suite
# runs such a run once more, whole; a failed test or a second crash fails. It runs the tests marked
# `slow` (minutes of waiting) beside the workers, in a process of their own.
test: setup
	@npm --prefix ui run --silent size
	$(VPY) -m popagent_dev.suite -n 2 --dist loadgroup --max-worker-restart=0 $(PYTEST_ARGS)

test-fast: setup
	$(VPY) -m pytest -x $(PYTEST_ARGS)

# The import rules are [tool.importlinter] in pyproject.toml; tests/ on the path as under pytest,
# so the contracts can name its `support` package.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pyright
	PYTHONPATH=tests $(VENV)/bin/lint-imports

setup: system-deps $(SYNC_STAMP) $(SYNAPSE_STAMP) $(PROTO_STAMP) $(NODE_TEST_DEPS) $(MCP_CLIENT_TS_DEPS) $(LANGUAGE_SERVERS) $(BROWSER_PEER_DEPS) $(UI_BUILD)
	@# The project's own modules (editable installs) too; only changed files are compiled again.
	@$(VPY) -m compileall -q -j 0 libs services >/dev/null

ui: $(UI_BUILD)

$(UI_DEPS): ui/package.json ui/package-lock.json
	npm ci --prefix ui --no-audit --no-fund --loglevel=error

# Types come from the gateway's OpenAPI document (gen:api), so the build needs the venv.
$(UI_BUILD): $(UI_DEPS) $(SYNC_STAMP) $(PROTO_STAMP) $(UI_SOURCES) $(GATEWAY_SOURCES)
	npm --prefix ui run build

# The real AI SDK client the stream tests drive (pinned by its package-lock.json).
$(NODE_TEST_DEPS): tests/ai_sdk/package.json tests/ai_sdk/package-lock.json
	npm ci --prefix tests/ai_sdk --no-audit --no-fund --loglevel=error

# The official MCP TypeScript SDK client the MCP server tests drive /mcp with (pinned likewise).
$(MCP_CLIENT_TS_DEPS): tests/mcp_client_ts/package.json tests/mcp_client_ts/package-lock.json
	npm ci --prefix tests/mcp_client_ts --no-audit --no-fund --loglevel=error

# typescript-language-server and typescript 6.x, which mastra_workspace_lsp_inspect starts (pinned, never
# fetched at run time; the Python server, basedpyright, is a PyPI dependency of agent-runner).
$(LANGUAGE_SERVERS): services/agent-runner/language-servers/package.json services/agent-runner/language-servers/package-lock.json
	npm ci --prefix services/agent-runner/language-servers --no-audit --no-fund --loglevel=error

# The real MCP browser server (@playwright/mcp, driving Debian's chromium) behind the browser tests' socket.
$(BROWSER_PEER_DEPS): tests/browser_peer/package.json tests/browser_peer/package-lock.json
	npm ci --prefix tests/browser_peer --no-audit --no-fund --loglevel=error

# uv itself comes from PyPI into the machine's Python. Dependencies are installed with their bytecode
# compiled: a process never writes .pyc where PYTHONDONTWRITEBYTECODE is set (it is on the dev and CI
# machines), and then every service process compiled pydantic, grpc, FastAPI... at each start
# (agent-runner's imports: 2.6 s of CPU from source, 1.0 s compiled).
$(SYNC_STAMP): $(MEMBER_PYPROJECTS)
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet "uv==$(UV_VERSION)"
	$(UV) sync --all-packages --python $(PYTHON) --compile-bytecode
	@touch $@

$(SYNAPSE_STAMP): constraints-synapse.txt $(SYNC_STAMP)
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(SYNAPSE_VENV)
	$(UV) pip install --quiet --python $(SYNAPSE_VENV)/bin/python -c constraints-synapse.txt matrix-synapse
	@touch $@

system-deps:
	@bash deploy/install-system-deps.sh

protos: $(PROTO_STAMP)

$(PROTO_STAMP): $(PROTO_FILES) $(SYNC_STAMP)
	rm -rf $(PROTO_OUT)/popagent
	$(VPY) -m grpc_tools.protoc -I protos --python_out=$(PROTO_OUT) --pyi_out=$(PROTO_OUT) \
		--grpc_python_out=$(PROTO_OUT) $(PROTO_FILES)
	@find $(PROTO_OUT)/popagent -type d -exec touch {}/__init__.py \;
	@touch $@

bench: setup
	# -P: the bench folder is not put on sys.path, so no bench script can shadow a module.
	for b in bench/*.py; do echo "== $$b"; $(VPY) -P $$b || exit 1; done

# The chat path against the model's own stream, every target printed; fails past twice a target.
bench-smoke: setup
	$(VPY) -P bench/chat.py --smoke

# The pin list (no hashes, no download addresses) used by deploy/Dockerfile.
constraints: $(SYNC_STAMP)
	$(UV) export --all-packages --no-hashes --no-header --no-emit-workspace --no-annotate -o constraints.txt >/dev/null

COMPOSE := $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
compose-config:
	$(COMPOSE) -f deploy/compose.yaml --env-file $(if $(wildcard deploy/.env),deploy/.env,deploy/.env.example) config -q

clean:
	rm -rf $(VENV) $(SYNAPSE_VENV) $(PROTO_OUT)/popagent $(PROTO_STAMP) ui/node_modules ui/dist tests/ai_sdk/node_modules tests/mcp_client_ts/node_modules services/agent-runner/language-servers/node_modules tests/browser_peer/node_modules
