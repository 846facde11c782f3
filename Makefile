# specdeck: `make demo` to see it, `make test` to check it.
VENV    := .venv
PY      := $(VENV)/bin/python
PYTHON  ?= python3
STAMP   := $(VENV)/.installed
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup demo test test-fast test-stress test-deps bench lint typecheck screenshots clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: setup
	$(VENV)/bin/specdeck demo

# Tests run in a loopback-only network namespace where the machine allows one: nothing can leave this host.
# Parallel workers (tests/conftest.py picks how many and gives each a loopback of its own); PARALLEL= for one.
PARALLEL ?= -n auto --dist loadgroup
test: test-deps typecheck
	@scripts/netns-run $(PY) -m pytest $(PARALLEL) $(PYTEST_ARGS)

# The inner loop: the suite less the tests marked slow (each 1 s of CPU or more), in parallel workers.
test-fast: test-deps
	@scripts/netns-run $(PY) -m pytest $(PARALLEL) -m "not slow" $(PYTEST_ARGS)

# The whole suite three times in a row beside a CPU hog, zero failures: flakes show here, not in CI.
test-stress: test-deps
	@scripts/test-stress $(PY) $(PARALLEL) $(PYTEST_ARGS)

test-deps: setup
	@test -x /usr/sbin/sshd || { echo "installing openssh-server (for the real-sshd tests)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; }
	@test -x /usr/bin/chromium || { echo "installing chromium (for the web demo test)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# vllm-htop is the idle row's peer (bench/bench_idle.py); installed here, outside the loopback-only namespace.
bench: setup
	@$(PY) -m pip install --quiet vllm-htop==0.5.0 || echo "vllm-htop not installed: the idle row measures a 1 Hz poller"
	@scripts/netns-run $(PY) -m bench

# Commit subjects after scripts/commit_subjects.py's cutoff are at most 72 characters (tests/ run it too).
lint: setup typecheck
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/commit_subjects.py

# Types ([tool.mypy] in pyproject.toml), before the suite and in lint; incremental through .mypy_cache. What runs
# on the GPU host's Python (the agent, the SIMULATED SGLang and SpecForge, the flag tables they read) is checked
# again as Python 3.10, the oldest mypy targets: no newer stdlib name slips in (3.8's own rules: ruff and
# test_agent's run on 3.8).
HOST_CODE := backend/agent/host backend/sglang backend/sandbox/sglang_sim backend/sandbox/specforge_sim.py
typecheck: setup
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --python-version 3.10 --cache-dir .mypy_cache/host $(HOST_CODE)

screenshots: setup
	@scripts/netns-run $(PY) -m tui.screenshots

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
