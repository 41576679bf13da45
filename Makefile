# The README's two commands. Both create .venv with pip when it is missing (pip, not uv/poetry: torch==2.13.0
# must come from the local CPU wheel) and reuse it otherwise.
VENV ?= .venv
PY := $(VENV)/bin/python
# Test processes: one per core of CI's 2-core machine (each pinned to 1 torch thread by tests/conftest.py); whole
# files go to one process (--dist loadfile), so a file's module fixtures (compiled bundles) are built once.
TEST_WORKERS ?= 2
STAMP := $(VENV)/.ditskip-installed

.PHONY: demo test venv clean

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m examples.demo

test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile tests

clean:
	rm -rf demo_out .pytest_cache
